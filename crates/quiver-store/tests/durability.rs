//! A durable store over a real data directory: what one store writes, the next
//! one opened over the directory reads back, whatever a crash left behind.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, DictionaryArray, Int64Array, StringArray};
use arrow::datatypes::Int32Type;
use arrow::record_batch::RecordBatch;
use quiver_store::{DurableOptions, Fsync, StoreError, TableStore, TableVersion, WriteMode};

const MEMORY: u64 = 1 << 30;

fn options(dir: &Path) -> DurableOptions {
    DurableOptions {
        dir: dir.to_path_buf(),
        fsync: Fsync::Always,
    }
}

fn open(dir: &Path) -> TableStore {
    TableStore::open(&options(dir), MEMORY).unwrap()
}

fn batch(values: &[i64]) -> RecordBatch {
    let strings: StringArray = values.iter().map(|v| Some(format!("s{v}"))).collect();
    RecordBatch::try_from_iter([
        ("x", Arc::new(Int64Array::from(values.to_vec())) as ArrayRef),
        ("s", Arc::new(strings) as ArrayRef),
    ])
    .unwrap()
}

fn values(version: &TableVersion) -> Vec<i64> {
    version
        .batches()
        .flat_map(|b| {
            let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            col.values().to_vec()
        })
        .collect()
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn segments(dir: &Path) -> Vec<String> {
    files(dir)
        .into_iter()
        .filter(|n| n.starts_with("seg-"))
        .collect()
}

#[test]
fn many_tables_removed_at_once_stay_removed_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(&[1, 2, 3]);
    {
        let store = open(dir.path());
        for name in ["a", "b", "c", "d"] {
            store
                .put(name, WriteMode::Replace, b.schema(), [b.clone()])
                .unwrap();
        }
        let gone = ["a", "c", "missing"].map(String::from);
        // The two it holds, in one commit; a name it does not hold is skipped.
        assert_eq!(store.remove_all(&gone).unwrap(), 2);
        assert_eq!(store.remove_all(&gone).unwrap(), 0);
    }
    let store = open(dir.path());
    let names: Vec<String> = store
        .list("")
        .iter()
        .map(|t| t.name().to_string())
        .collect();
    assert_eq!(names, ["b", "d"]);
    assert_eq!(values(&store.get("d").unwrap()), [1, 2, 3]);
}

#[test]
fn every_kind_of_write_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(&[1, 2, 3]);
    let (kept_version, renamed_version);
    {
        let store = open(dir.path());
        assert!(store.is_durable());
        let mut writer = store
            .writer("kept", WriteMode::Replace, b.schema(), Some(3))
            .unwrap();
        writer.push(b.clone()).unwrap();
        writer.push(batch(&[4])).unwrap();
        writer.commit().unwrap();
        store
            .put("kept", WriteMode::Append, b.schema(), [batch(&[5, 6])])
            .unwrap();
        kept_version = store.get("kept").unwrap().version();
        store
            .put("gone", WriteMode::Create, b.schema(), [b.clone()])
            .unwrap();
        store.remove("gone").unwrap();
        store
            .put("old", WriteMode::Replace, b.schema(), [batch(&[7])])
            .unwrap();
        renamed_version = store.rename("old", "new", false).unwrap().version();
        store
            .put("replaced", WriteMode::Replace, b.schema(), [batch(&[8])])
            .unwrap();
        store
            .put("replaced", WriteMode::Replace, b.schema(), [batch(&[9])])
            .unwrap();
        store
            .put("empty", WriteMode::Replace, b.schema(), Vec::new())
            .unwrap();
    }
    let store = open(dir.path());
    let names: Vec<String> = store
        .list("")
        .iter()
        .map(|t| t.name().to_string())
        .collect();
    assert_eq!(names, ["empty", "kept", "new", "replaced"]);
    let kept = store.get("kept").unwrap();
    assert_eq!(values(&kept), [1, 2, 3, 4, 5, 6]);
    assert_eq!(kept.version(), kept_version);
    assert_eq!(kept.partitions(), Some(3));
    let expected: Vec<RecordBatch> = vec![b.clone(), batch(&[4]), batch(&[5, 6])];
    assert_eq!(kept.batches().cloned().collect::<Vec<_>>(), expected);
    assert_eq!(kept.schema(), &b.schema());
    assert_eq!(store.get("new").unwrap().version(), renamed_version);
    assert_eq!(values(&store.get("new").unwrap()), [7]);
    assert_eq!(values(&store.get("replaced").unwrap()), [9]);
    assert_eq!(store.get("empty").unwrap().num_rows(), 0);
    assert_eq!(store.get("empty").unwrap().schema(), &b.schema());
    // One file per live segment: kept's three writes... two segments, new,
    // replaced (its first version's file removed), empty.
    assert_eq!(segments(dir.path()).len(), 5, "{:?}", files(dir.path()));
    // Versions go on from where they were.
    let v = store
        .put("kept", WriteMode::Replace, b.schema(), [batch(&[1])])
        .unwrap();
    assert!(v.version() > renamed_version);
    // Mapped tables are not charged to the memory limit.
    assert_eq!(store.memory().used(), 0);
    assert_eq!(store.stats().tables, 4);
}

#[test]
fn dictionaries_replaced_between_batches_survive() {
    let dir = tempfile::tempdir().unwrap();
    let dict = |values: Vec<&str>| {
        let d: DictionaryArray<Int32Type> = values.into_iter().collect();
        RecordBatch::try_from_iter([("d", Arc::new(d) as ArrayRef)]).unwrap()
    };
    let batches = vec![dict(vec!["a", "b"]), dict(vec!["z", "z", "y"])];
    open(dir.path())
        .put(
            "d",
            WriteMode::Replace,
            batches[0].schema(),
            batches.clone(),
        )
        .unwrap();
    let back = open(dir.path()).get("d").unwrap();
    assert_eq!(back.batches().cloned().collect::<Vec<_>>(), batches);
}

#[test]
fn a_second_server_cannot_open_the_same_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _first = open(dir.path());
    let err = TableStore::open(&options(dir.path()), MEMORY).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, StoreError::Io(_)), "{err}");
    assert!(message.contains("LOCK"), "{message}");
    assert!(message.contains("another quiver server"), "{message}");
}

#[test]
fn orphans_and_a_half_written_manifest_are_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(&[1, 2]);
    open(dir.path())
        .put("t", WriteMode::Replace, b.schema(), [b.clone()])
        .unwrap();
    let live = segments(dir.path());
    assert_eq!(live.len(), 1);
    // What a crash mid-write leaves: a segment file no manifest names (whole
    // or torn) and a manifest that was never renamed into place.
    let whole = std::fs::read(dir.path().join(&live[0])).unwrap();
    std::fs::write(dir.path().join("seg-00000000000000f0.arrows"), &whole).unwrap();
    std::fs::write(
        dir.path().join("seg-00000000000000f1.arrows"),
        &whole[..whole.len() / 3],
    )
    .unwrap();
    std::fs::write(dir.path().join("MANIFEST.tmp"), b"{\"format\":1,\"ne").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"not ours").unwrap();

    let store = open(dir.path());
    assert_eq!(values(&store.get("t").unwrap()), [1, 2]);
    assert_eq!(
        files(dir.path()),
        ["LOCK", "MANIFEST", "notes.txt", live[0].as_str()],
        "orphans removed, unknown files left alone"
    );
    // New segment ids do not reuse the orphans' (0xf1 was the largest seen).
    store.put("u", WriteMode::Replace, b.schema(), [b]).unwrap();
    assert!(segments(dir.path()).contains(&"seg-00000000000000f2.arrows".to_string()));
}

#[test]
fn a_damaged_segment_file_sets_its_table_aside_and_keeps_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(&[1, 2]);
    {
        let store = open(dir.path());
        store
            .put("good", WriteMode::Replace, b.schema(), [b.clone()])
            .unwrap();
        store
            .put("bad", WriteMode::Replace, b.schema(), [batch(&[3])])
            .unwrap();
        store
            .put("bad", WriteMode::Append, b.schema(), [batch(&[4])])
            .unwrap();
    }
    // The last segment written (bad's append) loses its tail, as it could
    // under --fsync never after a power loss.
    let last = segments(dir.path()).pop().unwrap();
    let path = dir.path().join(&last);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 20]).unwrap();

    let store = open(dir.path());
    assert_eq!(values(&store.get("good").unwrap()), [1, 2]);
    assert!(matches!(store.get("bad"), Err(StoreError::NotFound { .. })));
    let damaged = files(&dir.path().join("damaged"));
    assert_eq!(
        damaged.len(),
        2,
        "both of bad's files set aside: {damaged:?}"
    );
    assert!(damaged.contains(&last));
    drop(store);
    // The manifest was rewritten without it: the next open is clean.
    let store = open(dir.path());
    assert_eq!(store.stats().tables, 1);
}

#[test]
fn a_damaged_manifest_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(&[1]);
    open(dir.path())
        .put("t", WriteMode::Replace, b.schema(), [b])
        .unwrap();
    std::fs::write(dir.path().join("MANIFEST"), b"{\"format\":1,\"tab").unwrap();
    let err = TableStore::open(&options(dir.path()), MEMORY).unwrap_err();
    assert!(err.to_string().contains("MANIFEST"), "{err}");
    assert!(err.to_string().contains("move it aside"), "{err}");
    // Nothing was removed: the segment files are still there to rescue.
    assert_eq!(segments(dir.path()).len(), 1);
}

#[test]
fn readers_keep_their_version_while_its_files_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let b = batch(&[1, 2, 3]);
    store
        .put("t", WriteMode::Replace, b.schema(), [b.clone()])
        .unwrap();
    store
        .put("t", WriteMode::Append, b.schema(), [batch(&[4])])
        .unwrap();
    let held = store.get("t").unwrap();
    let before = segments(dir.path());
    assert_eq!(before.len(), 2);

    store
        .put("t", WriteMode::Replace, b.schema(), [batch(&[9])])
        .unwrap();
    let after = segments(dir.path());
    assert_eq!(after.len(), 1, "the replaced version's files are removed");
    assert!(before.iter().all(|f| !after.contains(f)));
    // Overwrite the freed space with other data, then read the held version.
    for i in 0..20 {
        store
            .put(
                &format!("filler{i}"),
                WriteMode::Replace,
                b.schema(),
                [batch(&[i; 4096])],
            )
            .unwrap();
    }
    store.remove("t").unwrap();
    assert_eq!(values(&held), [1, 2, 3, 4]);
    let strings = held.batches().next().unwrap().column(1).clone();
    let strings = strings.as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(strings.value(2), "s3");
    drop(store);
    assert_eq!(values(&held), [1, 2, 3, 4], "and after the store is gone");
    let store = open(dir.path());
    assert!(store.get("t").is_err());
    assert_eq!(store.stats().tables, 20);
}

#[test]
fn fsync_never_keeps_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(&[5]);
    let never = DurableOptions {
        dir: dir.path().to_path_buf(),
        fsync: Fsync::Never,
    };
    TableStore::open(&never, MEMORY)
        .unwrap()
        .put("t", WriteMode::Replace, b.schema(), [b])
        .unwrap();
    assert_eq!(values(&open(dir.path()).get("t").unwrap()), [5]);
}
