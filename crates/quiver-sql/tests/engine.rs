//! The SQL engine over a real store: queries, DDL and DML, limits, files.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::parquet::arrow::ArrowWriter;
use futures::StreamExt;
use quiver_sql::{EngineOptions, Outcome, SETTINGS_ROW, Setting, SqlEngine, SqlError, TableKind};
use quiver_store::{StoreError, TableStore, WriteMode};

fn trips(ids: std::ops::Range<i64>) -> RecordBatch {
    let names: Vec<String> = ids.clone().map(|i| format!("n{i}")).collect();
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(ids)) as ArrayRef,
        ),
        ("Name", Arc::new(StringArray::from(names)) as ArrayRef),
    ])
    .unwrap()
}

fn engine_with(options: EngineOptions) -> (Arc<TableStore>, SqlEngine) {
    let store = Arc::new(TableStore::new(1 << 30));
    let batch = trips(0..1000);
    store
        .put(
            "Trips",
            WriteMode::Replace,
            batch.schema(),
            [batch.slice(0, 600), batch.slice(600, 400)],
        )
        .unwrap();
    let engine = SqlEngine::new(Arc::clone(&store), options);
    (store, engine)
}

fn engine() -> (Arc<TableStore>, SqlEngine) {
    engine_with(EngineOptions::default())
}

/// Runs a query and gathers every partition's batches.
async fn query(engine: &SqlEngine, sql: &str) -> Result<RecordBatch, SqlError> {
    let Outcome::Query(query) = engine.run(sql, None).await? else {
        panic!("{sql} is not a query");
    };
    let mut batches = Vec::new();
    for partition in 0..query.partitions() {
        let mut stream = query.execute(partition)?;
        while let Some(batch) = stream.next().await {
            batches.push(batch?);
        }
    }
    Ok(concat_batches(&query.schema(), &batches).unwrap())
}

async fn changed(engine: &SqlEngine, sql: &str) -> Result<u64, SqlError> {
    match engine.run(sql, None).await? {
        Outcome::Changed(rows) => Ok(rows),
        Outcome::Query(_) => panic!("{sql} is a query"),
    }
}

fn int(batch: &RecordBatch, column: usize, row: usize) -> i64 {
    let array = batch.column(column);
    if let Some(a) = array.as_any().downcast_ref::<Int64Array>() {
        return a.value(row);
    }
    array
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap()
        .value(row) as i64
}

#[tokio::test]
async fn stored_tables_are_sql_tables_with_names_as_stored() {
    let (_, engine) = engine();
    let result = query(&engine, "SELECT count(*), sum(id) FROM Trips")
        .await
        .unwrap();
    assert_eq!(int(&result, 0, 0), 1000);
    assert_eq!(int(&result, 1, 0), 999 * 1000 / 2);
    let result = query(&engine, "SELECT \"Name\" FROM \"Trips\" WHERE id = 7")
        .await
        .unwrap();
    let names = result
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(names.value(0), "n7");
    // Unquoted names match in any case; quoted ones only as stored.
    let result = query(&engine, "SELECT NAME FROM trips WHERE ID = 7")
        .await
        .unwrap();
    assert_eq!(result.schema().field(0).name(), "Name");
    let err = query(&engine, "SELECT * FROM \"trips\"").await.unwrap_err();
    assert!(
        matches!(&err, SqlError::Invalid(m) if m.contains("trips")),
        "{err}"
    );
}

#[tokio::test]
async fn results_come_in_partitions_and_see_the_planned_version() {
    let (store, engine) = engine_with(EngineOptions {
        target_partitions: 4,
        ..Default::default()
    });
    let Outcome::Query(planned) = engine.run("SELECT id FROM Trips", None).await.unwrap() else {
        panic!()
    };
    assert_eq!(planned.partitions(), 4);
    // Replaced after planning: the query reads the version it planned against.
    let small = trips(0..3);
    store
        .put("Trips", WriteMode::Replace, small.schema(), [small])
        .unwrap();
    let mut rows = 0;
    for p in 0..4 {
        let mut s = planned.execute(p).unwrap();
        while let Some(b) = s.next().await {
            rows += b.unwrap().num_rows();
        }
    }
    assert_eq!(rows, 1000);
    assert!(planned.execute(4).is_err());
}

#[tokio::test]
async fn stored_tables_are_scanned_as_stored_with_limits_and_counts_exact() {
    let (_, engine) = engine_with(EngineOptions {
        target_partitions: 4,
        ..Default::default()
    });
    // The scan limits each of the 4 partitions; the query's limit cuts the total.
    let limited = query(&engine, "SELECT \"Name\" FROM Trips LIMIT 7")
        .await
        .unwrap();
    assert_eq!(limited.num_rows(), 7);
    assert_eq!(limited.num_columns(), 1);
    let counted = query(&engine, "SELECT count(*) FROM Trips").await.unwrap();
    assert_eq!(int(&counted, 0, 0), 1000);
    // A stored batch larger than DataFusion's batch size (8,192 rows) comes out
    // whole: its own memory scan re-cut it into 8,192-row pieces.
    let store = Arc::new(TableStore::new(1 << 30));
    let big = trips(0..20_000);
    store
        .put("Big", WriteMode::Replace, big.schema(), [big])
        .unwrap();
    let engine = SqlEngine::new(
        store,
        EngineOptions {
            target_partitions: 1,
            ..Default::default()
        },
    );
    let Outcome::Query(all) = engine.run("SELECT * FROM Big", None).await.unwrap() else {
        panic!()
    };
    let mut sizes = Vec::new();
    let mut stream = all.execute(0).unwrap();
    while let Some(batch) = stream.next().await {
        sizes.push(batch.unwrap().num_rows());
    }
    assert_eq!(sizes, [20_000]);
}

#[tokio::test]
async fn create_insert_drop_write_the_store_with_true_counts() {
    let (store, engine) = engine();
    let rows = changed(
        &engine,
        "CREATE TABLE big AS SELECT * FROM Trips WHERE id >= 900",
    )
    .await;
    assert_eq!(rows.unwrap(), 100);
    assert_eq!(store.get("big").unwrap().num_rows(), 100);
    // A name taken: refused, the table untouched.
    let err = changed(&engine, "CREATE TABLE big AS SELECT * FROM Trips")
        .await
        .unwrap_err();
    assert!(
        matches!(err, SqlError::Store(StoreError::AlreadyExists { .. })),
        "{err}"
    );
    assert_eq!(
        changed(&engine, "CREATE TABLE IF NOT EXISTS big AS SELECT 1")
            .await
            .unwrap(),
        0
    );
    assert_eq!(store.get("big").unwrap().num_rows(), 100);
    let rows = changed(&engine, "INSERT INTO big VALUES (5000, 'x'), (5001, 'y')").await;
    assert_eq!(rows.unwrap(), 2);
    let result = query(&engine, "SELECT count(*), max(id) FROM big")
        .await
        .unwrap();
    assert_eq!((int(&result, 0, 0), int(&result, 1, 0)), (102, 5001));
    let rows = changed(
        &engine,
        "CREATE OR REPLACE TABLE big AS SELECT id FROM Trips LIMIT 3",
    )
    .await;
    assert_eq!(rows.unwrap(), 3);
    assert_eq!(store.get("big").unwrap().schema().fields().len(), 1);
    // An empty table with declared columns.
    assert_eq!(
        changed(&engine, "CREATE TABLE empty (a BIGINT, b VARCHAR)")
            .await
            .unwrap(),
        0
    );
    assert_eq!(store.get("empty").unwrap().schema().fields().len(), 2);
    assert_eq!(changed(&engine, "DROP TABLE big").await.unwrap(), 0);
    assert!(store.get("big").is_err());
    let err = changed(&engine, "DROP TABLE big").await.unwrap_err();
    assert!(
        matches!(err, SqlError::Store(StoreError::NotFound { .. })),
        "{err}"
    );
    assert_eq!(
        changed(&engine, "DROP TABLE IF EXISTS big").await.unwrap(),
        0
    );
}

#[tokio::test]
async fn insert_of_the_wrong_shape_changes_nothing() {
    let (store, engine) = engine();
    let before = store.get("Trips").unwrap().version();
    let err = changed(&engine, "INSERT INTO Trips VALUES ('not a number', 'x')")
        .await
        .unwrap_err();
    assert!(matches!(err, SqlError::Invalid(_)), "{err}");
    let err = changed(&engine, "INSERT INTO Trips VALUES (1)")
        .await
        .unwrap_err();
    assert!(matches!(err, SqlError::Invalid(_)), "{err}");
    assert_eq!(store.get("Trips").unwrap().version(), before);
}

#[tokio::test]
async fn unsupported_statements_say_so() {
    let (_, engine) = engine();
    for sql in [
        "DELETE FROM Trips WHERE id = 1",
        "UPDATE Trips SET id = 1",
        "BEGIN TRANSACTION",
        "SET datafusion.execution.batch_size = 1",
        "CREATE SCHEMA other",
    ] {
        let err = engine.run(sql, None).await.unwrap_err();
        assert!(
            matches!(err, SqlError::Unsupported(_) | SqlError::Invalid(_)),
            "{sql}: {err:?}"
        );
    }
    let err = engine.run("SELEC 1", None).await.unwrap_err();
    assert!(matches!(err, SqlError::Invalid(_)), "{err}");
}

#[tokio::test]
async fn parameters_bind_by_position() {
    let (_, engine) = engine();
    let prepared = engine
        .prepare("SELECT id FROM Trips WHERE id > ? AND id < ?")
        .await
        .unwrap();
    assert!(prepared.is_query);
    assert_eq!(prepared.parameters.fields().len(), 2);
    assert_eq!(
        prepared.parameters.field(0).data_type(),
        &arrow::datatypes::DataType::Int64
    );
    let params = datafusion::common::ParamValues::from(vec![
        datafusion::scalar::ScalarValue::Int64(Some(10)),
        datafusion::scalar::ScalarValue::Int64(Some(13)),
    ]);
    let Outcome::Query(q) = engine.run(&prepared.sql, Some(params)).await.unwrap() else {
        panic!()
    };
    let mut ids = Vec::new();
    for p in 0..q.partitions() {
        let mut s = q.execute(p).unwrap();
        while let Some(b) = s.next().await {
            let b = b.unwrap();
            ids.extend(
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .iter()
                    .copied(),
            );
        }
    }
    ids.sort();
    assert_eq!(ids, vec![11, 12]);
}

#[tokio::test]
async fn memory_limit_fails_the_query_not_the_engine() {
    let (_, engine) = engine_with(EngineOptions {
        query_memory_limit: 64 << 10,
        ..Default::default()
    });
    let err = query(
        &engine,
        "SELECT \"Name\", id FROM Trips ORDER BY \"Name\" DESC, id",
    )
    .await;
    let err = err.unwrap_err();
    assert!(matches!(err, SqlError::ResourcesExhausted(_)), "{err:?}");
    assert!(err.to_string().contains("--query-memory-limit"), "{err}");
    let result = query(&engine, "SELECT count(*) FROM Trips").await.unwrap();
    assert_eq!(int(&result, 0, 0), 1000);
}

#[tokio::test]
async fn timeout_and_cancel_end_the_stream_with_an_error() {
    let (_, limited) = engine_with(EngineOptions {
        query_timeout: Duration::from_millis(1),
        ..Default::default()
    });
    // A cross join of 10^9 rows: far longer than a millisecond.
    let sql = "SELECT count(*) FROM Trips a, Trips b, Trips c WHERE a.id + b.id + c.id < 0";
    let err = query(&limited, sql).await.unwrap_err();
    assert!(matches!(err, SqlError::Timeout(_)), "{err:?}");

    let (_, unlimited) = engine();
    let Outcome::Query(q) = unlimited.run(sql, None).await.unwrap() else {
        panic!()
    };
    q.cancel();
    assert!(matches!(q.execute(0), Err(SqlError::Cancelled)));
}

#[tokio::test]
async fn files_register_in_place_and_list_with_their_kind() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("cities.csv");
    std::fs::write(&csv, "city,population\nLyon,520000\nGhent,265000\n").unwrap();
    let (_, engine) = engine();
    engine
        .register_location("cities", csv.to_str().unwrap())
        .await
        .unwrap();
    let result = query(&engine, "SELECT sum(population) FROM cities")
        .await
        .unwrap();
    assert_eq!(int(&result, 0, 0), 785_000);
    let kinds: Vec<_> = engine
        .tables()
        .into_iter()
        .map(|t| (t.name, t.kind))
        .collect();
    assert!(kinds.contains(&("cities".into(), TableKind::External)));
    assert!(kinds.contains(&("Trips".into(), TableKind::Stored)));
    // A stored table's name cannot be taken by a file, nor the reverse.
    assert!(
        engine
            .register_location("Trips", csv.to_str().unwrap())
            .await
            .is_err()
    );
    let err = changed(&engine, "CREATE TABLE cities AS SELECT 1")
        .await
        .unwrap_err();
    assert!(matches!(err, SqlError::Invalid(_)), "{err}");
    // Unknown formats and missing paths are refused with the path named.
    let err = engine
        .register_location("x", dir.path().join("nope.parquet").to_str().unwrap())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nope.parquet"), "{err}");
    std::fs::write(dir.path().join("notes.txt"), "hi").unwrap();
    let err = engine
        .register_location("x", dir.path().join("notes.txt").to_str().unwrap())
        .await
        .unwrap_err();
    assert!(err.to_string().contains(".txt"), "{err}");
    assert_eq!(changed(&engine, "DROP TABLE cities").await.unwrap(), 0);
    assert!(query(&engine, "SELECT * FROM cities").await.is_err());
}

#[tokio::test]
async fn statements_beyond_what_is_allowed_are_refused_before_they_run() {
    use quiver_sql::Effect;
    let (store, engine) = engine();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.csv");
    std::fs::write(&file, "a\n1\n").unwrap();
    let external = format!(
        "CREATE EXTERNAL TABLE ext STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
        file.display()
    );
    let cases = [
        ("SELECT count(*) FROM Trips", Effect::Read),
        ("CREATE TABLE t2 AS SELECT * FROM Trips", Effect::Write),
        ("INSERT INTO Trips VALUES (5, 'x')", Effect::Write),
        (
            "EXPLAIN ANALYZE INSERT INTO Trips VALUES (5, 'x')",
            Effect::Write,
        ),
        ("DROP TABLE Trips", Effect::Write),
        ("CREATE VIEW v AS SELECT 1", Effect::Write),
        (external.as_str(), Effect::ServerFiles),
    ];
    for (sql, effect) in cases {
        for allowed in [Effect::Read, Effect::Write, Effect::ServerFiles] {
            if effect <= allowed {
                continue;
            }
            match engine.run_allowed(sql, None, allowed).await {
                Err(SqlError::Denied(e)) => assert_eq!(e, effect, "{sql}"),
                other => panic!("{sql} allowed {allowed:?}: {other:?}"),
            }
        }
    }
    // Nor for an admin: EXPLAIN ANALYZE runs queries only.
    let analyzed = engine
        .run_allowed(
            "EXPLAIN ANALYZE INSERT INTO Trips VALUES (5, 'x')",
            None,
            Effect::ServerFiles,
        )
        .await;
    assert!(
        matches!(analyzed, Err(SqlError::Unsupported(_))),
        "{analyzed:?}"
    );
    // Nothing ran: the table is as it was, nothing was created.
    assert_eq!(store.get("Trips").unwrap().num_rows(), 1000);
    assert!(store.get("t2").is_err());
    assert!(
        engine
            .tables()
            .iter()
            .all(|t| t.name != "ext" && t.name != "v")
    );
    // Allowed, they run.
    engine
        .run_allowed(&external, None, Effect::ServerFiles)
        .await
        .unwrap();
    let Outcome::Changed(rows) = engine
        .run_allowed("INSERT INTO Trips VALUES (5, 'x')", None, Effect::Write)
        .await
        .unwrap()
    else {
        panic!("INSERT is not a query");
    };
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn filters_that_prune_stored_batches_still_give_every_matching_row() {
    // Trips is stored as two batches: ids 0..600 and 600..1000.
    let (_, engine) = engine();
    for (sql, expected) in [
        ("SELECT count(*) FROM Trips WHERE id >= 700", 300),
        ("SELECT count(*) FROM Trips WHERE id < 600", 600),
        (
            "SELECT count(*) FROM Trips WHERE id BETWEEN 590 AND 610",
            21,
        ),
        ("SELECT count(*) FROM Trips WHERE id > 5000", 0),
        ("SELECT count(*) FROM Trips WHERE \"Name\" = 'n999'", 1),
        ("SELECT count(*) FROM Trips WHERE id >= 700 OR id = 3", 301),
    ] {
        let counted = query(&engine, sql).await.unwrap();
        assert_eq!(int(&counted, 0, 0), expected, "{sql}");
    }
    let explained = query(&engine, "EXPLAIN SELECT * FROM Trips WHERE id >= 700")
        .await
        .unwrap();
    let physical = explained_row(&explained, "physical_plan");
    assert!(physical.contains("pruned_batches=1"), "{physical}");
}

/// Stores the table Keys: its column `k`, not nullable, holds `keys`.
fn put_keys(store: &TableStore, keys: Vec<i64>) {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    let keys = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys))]).unwrap();
    store
        .put("Keys", WriteMode::Replace, keys.schema(), [keys])
        .unwrap();
}

#[tokio::test]
async fn a_join_filters_the_scan_of_its_probe_side_by_its_build_side() {
    // Three keys of Trips' 1000 ids: the join's build side. Its keys, known before the
    // probe side runs, are pushed into the scan of Trips as a dynamic filter, so the scan
    // yields 3 rows, not 1000, and the answer is the same.
    let (store, engine) = engine();
    put_keys(&store, vec![5, 500, 995]);
    let sql = "SELECT count(*), sum(id) FROM Trips WHERE id IN (SELECT k FROM Keys)";
    let counted = query(&engine, sql).await.unwrap();
    assert_eq!((int(&counted, 0, 0), int(&counted, 1, 0)), (3, 1500));
    let scan = analyzed_scan(&engine, sql, 1000).await;
    assert!(scan.contains("filters=[DynamicFilter"), "{scan}");
    assert!(scan.contains("output_rows=3,"), "{scan}");
    // Tested against a bitmap of the build side's keys, not the join's hash table.
    assert!(counted_in(&scan, "build_key_batches") > 0, "{scan}");
}

#[tokio::test]
async fn not_exists_filters_the_scan_of_its_probe_side_by_its_build_side() {
    // TPC-H q21's `NOT EXISTS`: an anti join of the three keys (the build side) and
    // Trips' 1000 ids. A Trips row whose id is not a key matches none of them, so the
    // scan yields the 2 rows whose ids are keys (5 and 500), tested against a bitmap of
    // the keys, and the answer is the key 5000 that has no trip.
    let (store, engine) = engine();
    put_keys(&store, vec![5, 500, 5000]);
    let sql = "SELECT count(*), sum(k) FROM Keys \
               WHERE NOT EXISTS (SELECT 1 FROM Trips WHERE Trips.id = Keys.k)";
    let counted = query(&engine, sql).await.unwrap();
    assert_eq!((int(&counted, 0, 0), int(&counted, 1, 0)), (1, 5000));
    let plan = analyzed(&engine, sql).await;
    assert!(plan.contains("join_type=LeftAnti"), "{plan}");
    let scan = scan_of(&plan, 1000);
    assert!(scan.contains("output_rows=2,"), "{scan}");
    assert!(counted_in(scan, "build_key_batches") > 0, "{scan}");
}

#[tokio::test]
async fn not_in_sees_a_null_among_the_rows_no_key_matches() {
    // `NOT IN` is a null-aware anti join: one null among the subquery's values makes
    // every row's answer unknown. DataFusion pushes the join's filter to the scan of the
    // subquery's rows, in a form that keeps nulls; the null matches no key, so a scan
    // that tested those rows against the build side's keys would lose it and answer 1.
    let (store, engine) = engine();
    // Not nullable: DataFusion pushes a null-aware join's filter only then.
    put_keys(&store, vec![5, 500, 5000]);
    let ids: Vec<Option<i64>> = (0..1000).map(|i| (i != 700).then_some(i)).collect();
    let ids =
        RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(ids)) as ArrayRef)]).unwrap();
    store
        .put("Ids", WriteMode::Replace, ids.schema(), [ids])
        .unwrap();
    let sql = "SELECT count(*) FROM Keys WHERE k NOT IN (SELECT id FROM Ids)";
    let counted = query(&engine, sql).await.unwrap();
    assert_eq!(int(&counted, 0, 0), 0);
    let plan = analyzed(&engine, sql).await;
    assert!(plan.contains("null_aware"), "{plan}");
    // The filter is there to be tested against the keys, and is not.
    let scan = scan_of(&plan, 1000);
    assert!(scan.contains("filters=[DynamicFilter"), "{scan}");
    assert_eq!(counted_in(scan, "build_key_batches"), 0, "{scan}");
}

/// The value of the metric `name` shown in `line`, a plan's line with its metrics.
fn counted_in(line: &str, name: &str) -> usize {
    line.split(&format!("{name}="))
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

#[tokio::test]
async fn a_join_filter_that_keeps_every_row_is_set_aside() {
    // Every one of Many's 80,000 rows has its id among Ids' 10,000: the join's dynamic
    // filter keeps them all, so once the scan has judged it on its first rows it stops
    // evaluating it, and the answer is the same.
    let (store, engine) = engine();
    let ids = || Arc::new(Int64Array::from_iter_values(0..10_000)) as ArrayRef;
    let many: Vec<RecordBatch> = (0..8)
        .map(|_| RecordBatch::try_from_iter([("id", ids())]).unwrap())
        .collect();
    store
        .put("Many", WriteMode::Replace, many[0].schema(), many)
        .unwrap();
    let keys = RecordBatch::try_from_iter([("k", ids())]).unwrap();
    store
        .put("Ids", WriteMode::Replace, keys.schema(), [keys])
        .unwrap();
    let sql = "SELECT count(*), sum(id) FROM Many WHERE id IN (SELECT k FROM Ids)";
    let counted = query(&engine, sql).await.unwrap();
    assert_eq!(
        (int(&counted, 0, 0), int(&counted, 1, 0)),
        (80_000, 8 * 49_995_000)
    );
    let scan = analyzed_scan(&engine, sql, 80_000).await;
    assert!(scan.contains("filters=[DynamicFilter"), "{scan}");
    assert!(counted_in(&scan, "skipped_filter_batches") > 0, "{scan}");
}

/// TPC-H q21's shape: the FROM clause names the 60,000 facts first and the nation
/// whose name filter keeps 1 of 25 last. Joined in that order, the first join is of
/// facts and supplier; by the tables' sizes, supplier and nation are joined first
/// (4 rows), then the facts (2,400 rows before the condition across facts and
/// supplier). The tables, by name.
fn facts_suppliers_nations() -> [(&'static str, RecordBatch); 3] {
    let facts = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(0..60_000)) as ArrayRef,
        ),
        (
            "supp",
            Arc::new(Int64Array::from_iter_values((0..60_000).map(|i| i % 100))) as ArrayRef,
        ),
    ])
    .unwrap();
    let supp = RecordBatch::try_from_iter([
        (
            "supp",
            Arc::new(Int64Array::from_iter_values(0..100)) as ArrayRef,
        ),
        (
            "nation",
            Arc::new(Int64Array::from_iter_values((0..100).map(|i| i % 25))) as ArrayRef,
        ),
    ])
    .unwrap();
    let names: Vec<String> = (0..25).map(|i| format!("nation {i}")).collect();
    let nation = RecordBatch::try_from_iter([
        (
            "nation",
            Arc::new(Int64Array::from_iter_values(0..25)) as ArrayRef,
        ),
        ("name", Arc::new(StringArray::from(names)) as ArrayRef),
    ])
    .unwrap();
    [("Facts", facts), ("Supp", supp), ("Nation", nation)]
}

/// Runs the q21-shaped query over the tables of [`facts_suppliers_nations`], checks
/// its answer, and that supplier and nation are joined first.
async fn joins_supplier_and_nation_first(engine: &SqlEngine) {
    let sql = "SELECT count(*), sum(f.id) FROM Facts f, Supp s, Nation n \
               WHERE f.supp = s.supp AND s.nation = n.nation AND n.name = 'nation 7' \
               AND f.id % 3 <> s.supp % 3";
    let kept: Vec<i64> = (0..60_000)
        .filter(|id| id % 100 % 25 == 7 && id % 3 != id % 100 % 3)
        .collect();
    let counted = query(engine, sql).await.unwrap();
    assert_eq!(
        (int(&counted, 0, 0), int(&counted, 1, 0)),
        (kept.len() as i64, kept.iter().sum::<i64>())
    );
    let explained = query(engine, &format!("EXPLAIN {sql}")).await.unwrap();
    let logical = explained_row(&explained, "logical_plan");
    let joins: Vec<&str> = logical
        .lines()
        .filter(|line| line.trim_start().starts_with("Inner Join:"))
        .collect();
    assert_eq!(joins.len(), 2, "{logical}");
    // The innermost join, the most indented, is the first made.
    let first = joins
        .iter()
        .max_by_key(|line| line.len() - line.trim_start().len())
        .unwrap();
    assert!(
        first.contains("s.nation = n.nation") || first.contains("n.nation = s.nation"),
        "{logical}"
    );
}

#[tokio::test]
async fn joins_start_from_the_inputs_their_filters_make_small() {
    let (store, engine) = engine();
    for (name, batch) in facts_suppliers_nations() {
        store
            .put(name, WriteMode::Replace, batch.schema(), [batch])
            .unwrap();
    }
    joins_supplier_and_nation_first(&engine).await;
}

#[tokio::test]
async fn joins_of_parquet_files_in_place_are_ordered_by_their_footers() {
    // The same tables as Parquet files queried in place: their rows and ranges come
    // from the footers, the distinct keys from a pass over the joined columns.
    let dir = tempfile::tempdir().unwrap();
    let (_, engine) = engine();
    for (name, batch) in facts_suppliers_nations() {
        let path = write_parquet(dir.path(), name, &batch);
        engine
            .register_location(name, path.to_str().unwrap())
            .await
            .unwrap();
    }
    joins_supplier_and_nation_first(&engine).await;
}

/// `batch` as the Parquet file `name`.parquet in `dir`.
fn write_parquet(dir: &std::path::Path, name: &str, batch: &RecordBatch) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.parquet"));
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    path
}

#[tokio::test]
async fn a_join_filters_the_rows_of_a_parquet_file_by_its_build_side() {
    // Three keys of the file's 1000 ids: the join's build side. DataFusion's Parquet
    // scan only prunes row groups by the keys; the rows it reads are filtered by them
    // above it, so 3 rows reach the join, not 1000, and the answer is the same.
    let dir = tempfile::tempdir().unwrap();
    let (store, engine) = engine();
    let path = write_parquet(dir.path(), "ids", &trips(0..1000));
    engine
        .register_location("Ids", path.to_str().unwrap())
        .await
        .unwrap();
    put_keys(&store, vec![5, 500, 995]);
    let sql = "SELECT count(*), sum(id) FROM Ids WHERE id IN (SELECT k FROM Keys)";
    let counted = query(&engine, sql).await.unwrap();
    assert_eq!((int(&counted, 0, 0), int(&counted, 1, 0)), (3, 1500));
    let plan = analyzed(&engine, sql).await;
    let filtered = plan
        .lines()
        .find(|line| line.contains("DynamicFilterExec"))
        .unwrap_or_else(|| panic!("no filter over the file's scan in {plan}"));
    assert!(filtered.contains("filters=[DynamicFilter"), "{plan}");
    assert!(filtered.contains("output_rows=3,"), "{plan}");
    assert!(counted_in(filtered, "build_key_batches") > 0, "{plan}");
    assert!(plan.contains("BuildKeysExec: keys=[k@0]"), "{plan}");
}

/// The plan of `EXPLAIN ANALYZE sql`, with its metrics.
async fn analyzed(engine: &SqlEngine, sql: &str) -> String {
    let analyzed = query(engine, &format!("EXPLAIN ANALYZE {sql}"))
        .await
        .unwrap();
    explained_row(&analyzed, "Plan with Metrics")
}

/// The line of `plan` that shows the scan of the stored table of `rows` rows.
fn scan_of(plan: &str, rows: usize) -> &str {
    let scanned = format!("rows={rows},");
    plan.lines()
        .find(|line| line.contains("StoredScanExec") && line.contains(&scanned))
        .unwrap_or_else(|| panic!("no scan of {rows} rows in {plan}"))
}

/// The line of `EXPLAIN ANALYZE sql` that shows the scan of the stored table of `rows`
/// rows, with its metrics.
async fn analyzed_scan(engine: &SqlEngine, sql: &str, rows: usize) -> String {
    scan_of(&analyzed(engine, sql).await, rows).to_string()
}

/// The plan of the `EXPLAIN` row of type `plan_type`.
fn explained_row(explained: &RecordBatch, plan_type: &str) -> String {
    let column = |i: usize| {
        explained
            .column(i)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap()
            .clone()
    };
    let (types, plans) = (column(0), column(1));
    let row = (0..types.len())
        .find(|&i| types.value(i) == plan_type)
        .unwrap_or_else(|| panic!("no {plan_type} row in {explained:?}"));
    plans.value(row).to_string()
}

#[tokio::test]
async fn explain_shows_the_settings_a_plan_was_made_under() {
    let (_, engine) = engine_with(EngineOptions {
        target_partitions: 3,
        settings: vec![Setting::parse("execution.batch_size=1024").unwrap()],
        ..Default::default()
    });
    let explained = query(
        &engine,
        "EXPLAIN SELECT \"Name\", count(*) FROM Trips GROUP BY \"Name\"",
    )
    .await
    .unwrap();
    assert!(explained_row(&explained, "physical_plan").contains("AggregateExec"));
    let settings = explained_row(&explained, SETTINGS_ROW);
    for shown in [
        "execution.target_partitions=3",
        "execution.batch_size=1024",
        "execution.parquet.pushdown_filters=false",
        "optimizer.repartition_joins=true",
        "optimizer.use_statistics_registry=true",
    ] {
        assert!(settings.contains(shown), "{shown} in {settings}");
    }
    // EXPLAIN ANALYZE runs the query and shows its metrics, as DataFusion does.
    let analyzed = query(&engine, "EXPLAIN ANALYZE SELECT count(*) FROM Trips")
        .await
        .unwrap();
    assert_eq!(analyzed.num_rows(), 1);
}

/// Where a statement may not make the server read or write: another URL
/// scheme, an endpoint or credentials in its options, a local `COPY TO`.
/// All refused before anything is reached.
#[tokio::test]
async fn tables_in_place_and_copies_reach_only_what_the_server_allows() {
    let dir = tempfile::tempdir().unwrap();
    let (_, engine) = engine();
    let forbidden = |e: SqlError| matches!(e, SqlError::Forbidden(_));
    let err = engine
        .register_location("h", "http://127.0.0.1:9/x.parquet")
        .await
        .unwrap_err();
    assert!(forbidden(err), "an http:// location");
    for statement in [
        "CREATE EXTERNAL TABLE h STORED AS PARQUET LOCATION 'http://127.0.0.1:9/x.parquet'",
        "CREATE EXTERNAL TABLE s STORED AS PARQUET LOCATION 's3://lake/t/' \
         OPTIONS ('aws.endpoint' 'http://127.0.0.1:9')",
        "CREATE EXTERNAL TABLE s STORED AS PARQUET LOCATION 's3://lake/t/' \
         OPTIONS ('aws.secret_access_key' 'x')",
    ] {
        let err = changed(&engine, statement).await.unwrap_err();
        assert!(forbidden(err), "{statement}");
    }
    let local = dir.path().join("out.parquet");
    let copy = format!(
        "COPY (SELECT 1 AS x) TO '{}' STORED AS PARQUET",
        local.display()
    );
    let err = changed(&engine, &copy).await.unwrap_err();
    assert!(forbidden(err), "{copy}");
    assert!(!local.exists());
    // A file:// URL is a local path like any other.
    let csv = dir.path().join("c.csv");
    std::fs::write(&csv, "a\n1\n").unwrap();
    engine
        .register_location("c", &format!("file://{}", csv.display()))
        .await
        .unwrap();
    let missing = engine
        .register_location("m", &dir.path().join("missing").display().to_string())
        .await
        .unwrap_err();
    assert!(matches!(missing, SqlError::NotFound(_)), "{missing}");
}
