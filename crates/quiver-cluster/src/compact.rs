//! Merging a table's small partitions, so that its catalog entry stops
//! growing with every append.
//!
//! Each append adds its partitions to the table's one etcd value: a table
//! appended to row by row would grow that value, and the cost of each
//! commit, without end (etcd refuses a request over 1.5 MiB). Once a table
//! has more than [`crate::ClusterOptions::compact_above`] partitions, its
//! first run of consecutive small ones (each under [`SMALL`]) is merged into
//! one partition of at most [`MERGED_BYTES`], by the run's first live
//! holder, on its tick: read (its own copies, else a replica's), stored
//! whole on the ring like a put's partition, under an intent, and committed
//! into the table's current entry in place of the run (appends that came
//! meanwhile kept). The rows, their order and the version stay as they
//! were; the run's partitions become orphans, held for readers that were
//! handed them ([`crate::reads`]).

use std::ops::Range;

use arrow::compute::concat_batches;
use quiver_store::batch_bytes;

use crate::catalog::{PartitionEntry, TableEntry, partition_name};
use crate::error::{ClusterError, Result};
use crate::etcd::{Guard, Snapshot};
use crate::node::ClusterNode;
use crate::placement::Ring;
use crate::put::Planned;

/// A partition under this many bytes is small: merged with its neighbours.
pub(crate) const SMALL: u64 = 8 << 20;

/// The most bytes one merge makes a partition of.
pub(crate) const MERGED_BYTES: u64 = 64 << 20;

/// The most partitions one merge reads.
pub(crate) const MERGED_PARTS: usize = 4096;

impl ClusterNode {
    /// Merges the first run of small partitions of table `name` (as
    /// `entry` has it) if it has too many and this node is the run's first
    /// live holder. Failures are logged; the next tick tries again. Whether
    /// it did anything.
    pub(crate) async fn compact(
        &self,
        name: &str,
        entry: &TableEntry,
        snapshot: &Snapshot,
    ) -> bool {
        if entry.partitions.len() <= self.options.compact_above {
            return false;
        }
        let Some(run) = small_run(&entry.partitions) else {
            return false;
        };
        let parts = &entry.partitions[run];
        let holder = parts[0]
            .replicas
            .iter()
            .find(|r| snapshot.nodes.contains_key(*r));
        if holder != Some(&self.options.node_id) {
            return false;
        }
        match self.merge(name, entry, parts, snapshot).await {
            Ok(merged) => tracing::info!(
                table = %name,
                partitions = parts.len(),
                rows = merged.rows,
                into = %merged.name,
                "merged small partitions"
            ),
            Err(e) => tracing::warn!(table = %name, "merging small partitions: {e}"),
        }
        true
    }

    /// Reads `parts` (consecutive partitions of `entry`), stores them as one
    /// partition, and commits it in their place.
    async fn merge(
        &self,
        name: &str,
        entry: &TableEntry,
        parts: &[PartitionEntry],
        snapshot: &Snapshot,
    ) -> Result<PartitionEntry> {
        let run = TableEntry {
            partitions: parts.to_vec(),
            ..entry.clone()
        };
        let (schema, batches) = self.sql.read(name, &run, &snapshot.nodes).await?;
        let merged = concat_batches(&schema, &batches)?;
        drop(batches);
        let merged_name = partition_name(name, 0);
        let replicas = Ring::new(
            &merged_name,
            self.placeable(snapshot),
            self.options.replicas,
        )
        .replicas(0);
        if replicas.is_empty() {
            return Err(ClusterError::TooFewNodes {
                live: snapshot.nodes.len(),
                replicas: self.options.replicas,
            });
        }
        let planned = Planned {
            entry: PartitionEntry {
                name: merged_name.clone(),
                rows: merged.num_rows() as u64,
                bytes: batch_bytes(&merged),
                replicas,
            },
            batches: vec![merged],
        };
        let intent = self.intend(name, vec![merged_name]).await?;
        let result = async {
            let stored = self.store_partition(&schema, planned, snapshot).await?;
            let guard = Guard {
                intent: Some(&intent),
                request: None,
            };
            self.commit_table(name, guard, |old| {
                let old = old.ok_or_else(|| ClusterError::NotFound(name.to_string()))?;
                let mut new = old.clone();
                let at = position(&old.partitions, parts).ok_or_else(|| {
                    ClusterError::Invalid(
                        "the partitions to merge were replaced meanwhile; left as they are".into(),
                    )
                })?;
                new.partitions
                    .splice(at..at + parts.len(), [stored.clone()]);
                // Sliced inputs may have counted buffers the merged copy does not hold.
                new.bytes = new.partitions.iter().map(|p| p.bytes).sum();
                Ok(Some(new))
            })
            .await?;
            Ok(stored)
        }
        .await;
        self.abandon(&intent, result.is_ok()).await;
        result
    }
}

/// The first run of at least two consecutive small partitions, cut to at
/// most [`MERGED_BYTES`] and [`MERGED_PARTS`].
pub(crate) fn small_run(parts: &[PartitionEntry]) -> Option<Range<usize>> {
    let mut start = 0;
    while start < parts.len() {
        if parts[start].bytes >= SMALL {
            start += 1;
            continue;
        }
        let mut end = start + 1;
        let mut bytes = parts[start].bytes;
        while end < parts.len()
            && end - start < MERGED_PARTS
            && parts[end].bytes < SMALL
            && bytes + parts[end].bytes <= MERGED_BYTES
        {
            bytes += parts[end].bytes;
            end += 1;
        }
        if end - start >= 2 {
            return Some(start..end);
        }
        start = end;
    }
    None
}

/// Where `run` lies in `parts`, consecutive and in order, if it does.
fn position(parts: &[PartitionEntry], run: &[PartitionEntry]) -> Option<usize> {
    parts
        .windows(run.len())
        .position(|window| window.iter().zip(run).all(|(a, b)| a.name == b.name))
}

#[cfg(test)]
mod tests {
    use quiver_store::WriteMode;

    use super::*;
    use crate::testing;

    fn part(name: &str, bytes: u64) -> PartitionEntry {
        PartitionEntry {
            name: name.into(),
            rows: 1,
            bytes,
            replicas: vec!["n1".into()],
        }
    }

    #[test]
    fn runs_are_of_small_neighbours_within_the_merged_size() {
        let big = SMALL;
        let parts = |sizes: &[u64]| -> Vec<PartitionEntry> {
            sizes
                .iter()
                .enumerate()
                .map(|(i, b)| part(&i.to_string(), *b))
                .collect()
        };
        assert_eq!(small_run(&parts(&[1, 1, 1])), Some(0..3));
        assert_eq!(small_run(&parts(&[big, 1, big, 1, 1, big])), Some(3..5));
        assert_eq!(small_run(&parts(&[1, big, 1, big])), None);
        let seven = 7 << 20;
        assert_eq!(
            small_run(&parts(&[seven; 12])),
            Some(0..9),
            "9 × 7 MiB fit in 64 MiB"
        );
        assert_eq!(
            small_run(&vec![part("x", 1); MERGED_PARTS + 5]),
            Some(0..MERGED_PARTS)
        );
    }

    #[tokio::test]
    async fn appends_are_merged_in_order_under_the_same_version() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        let appends = 10;
        testing::put_values(&node, "t", WriteMode::Replace, 0..3, None)
            .await
            .unwrap();
        for i in 1..appends {
            testing::put_values(&node, "t", WriteMode::Append, i * 3..i * 3 + 3, None)
                .await
                .unwrap();
        }
        let before = node.etcd.table("t").await.unwrap().value.unwrap();
        assert_eq!(before.partitions.len(), appends as usize);
        let snapshot = node.etcd.snapshot().await.unwrap();
        assert!(node.compact("t", &before, &snapshot).await);
        let after = node.etcd.table("t").await.unwrap().value.unwrap();
        assert_eq!(after.partitions.len(), 1);
        assert_eq!((after.version, after.rows), (before.version, before.rows));
        assert!(node.etcd.snapshot().await.unwrap().intents.is_empty());
        let (_, batches) = node.sql.read("t", &after, &snapshot.nodes).await.unwrap();
        let values: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(values, (0..appends * 3).collect::<Vec<_>>());
        // Below the threshold: nothing to do.
        assert!(!node.compact("t", &after, &snapshot).await);
    }

    #[tokio::test]
    async fn a_merge_keeps_the_appends_that_came_meanwhile() {
        let Some((etcd, _)) = testing::etcd().await else {
            return;
        };
        let node = testing::node(&etcd, "n1").await;
        testing::put_values(&node, "t", WriteMode::Replace, 0..1, None)
            .await
            .unwrap();
        for i in 1..6 {
            testing::put_values(&node, "t", WriteMode::Append, i..i + 1, None)
                .await
                .unwrap();
        }
        let read = node.etcd.table("t").await.unwrap().value.unwrap();
        let snapshot = node.etcd.snapshot().await.unwrap();
        // An append lands after the entry the merge read.
        testing::put_values(&node, "t", WriteMode::Append, 6..7, None)
            .await
            .unwrap();
        assert!(node.compact("t", &read, &snapshot).await);
        let after = node.etcd.table("t").await.unwrap().value.unwrap();
        assert_eq!(after.rows, 7);
        assert_eq!(after.partitions.len(), 2, "{:?}", after.partitions);
        assert_eq!(after.partitions[0].rows, 6);
        // A run no longer in the table is left alone: nothing changes.
        assert!(node.compact("t", &read, &snapshot).await);
        let again = node.etcd.table("t").await.unwrap().value.unwrap();
        assert_eq!(again, after);
    }
}
