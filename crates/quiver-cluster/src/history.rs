//! etcd's history, compacted.
//!
//! etcd keeps every version of every key until it is told to discard the
//! old ones. Each commit rewrites a table's entry, each read hold its node's
//! entry, so under steady appends the history grows by megabytes a minute;
//! when etcd's database reaches its quota (2 GiB by default) etcd refuses
//! every write, and the cluster stops taking puts and nodes cannot start.
//! Nothing in quiver reads old revisions (watches start from the present),
//! so the history is kept only for operators' tools (`etcdctl watch --rev`):
//! the node first in id order among the live ones compacts it to the last
//! [`ClusterOptions::history_keep`] revisions, at most once every
//! [`ClusterOptions::compact_every`] (etcd's own auto-compaction in its
//! revision mode does the same).
//!
//! What is kept is counted in revisions, read from the catalog's snapshot,
//! not in time remembered by a node: a node that just started (or just
//! became the first) compacts at its first turn, which matters when the
//! first node is the one restarted most.
//!
//! [`ClusterOptions::history_keep`]: crate::ClusterOptions::history_keep
//! [`ClusterOptions::compact_every`]: crate::ClusterOptions::compact_every

use std::sync::PoisonError;
use std::time::Instant;

use crate::etcd::Snapshot;
use crate::node::ClusterNode;

/// The revision to compact etcd's history to, read at `revision` and
/// keeping `keep` revisions; none while there is not more than that.
pub(crate) fn compaction_target(revision: i64, keep: i64) -> Option<i64> {
    let target = revision.saturating_sub(keep.max(0));
    (target > 1).then_some(target)
}

impl ClusterNode {
    /// Compacts etcd's history if this node is the first live one by id and
    /// its last compaction is [`crate::ClusterOptions::compact_every`] old.
    /// A failure is logged: a later tick tries again.
    pub(crate) async fn compact_history(&self, snapshot: &Snapshot) {
        if snapshot.nodes.keys().next() != Some(&self.options.node_id) {
            return;
        }
        let Some(target) = compaction_target(snapshot.revision, self.options.history_keep) else {
            return;
        };
        {
            let mut last = self
                .compacted
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.is_some_and(|at| at.elapsed() < self.options.compact_every) {
                return;
            }
            *last = Some(Instant::now());
        }
        match self.etcd.compact(target).await {
            Ok(()) => tracing::debug!(revision = target, "etcd history compacted"),
            Err(e) => tracing::warn!(revision = target, "compacting etcd's history: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_history_keeps_its_last_revisions() {
        assert_eq!(compaction_target(10_500, 10_000), Some(500));
        assert_eq!(
            compaction_target(10_001, 10_000),
            None,
            "revision 1 is the first"
        );
        assert_eq!(compaction_target(900, 10_000), None);
        assert_eq!(compaction_target(900, 0), Some(900));
        assert_eq!(compaction_target(900, -5), Some(900));
    }

    #[tokio::test]
    async fn a_node_keeps_a_busy_etcd_under_its_quota() {
        // 64 MiB of database; 400 writes of 256 KiB beside the catalog are
        // 100 MiB of history, which fill it unless the node compacts.
        let quota = ["--quota-backend-bytes=67108864".to_string()];
        let Some(etcd) = quiver_etcd::testing::TestEtcd::start(false, &quota) else {
            return;
        };
        let client = etcd.client(quiver_etcd::ConnectOptions::default()).await;
        let node = crate::testing::node(&etcd, "n1").await;
        node.spawn_background();
        let value = vec![b'x'; 256 << 10];
        for i in 0..400 {
            if let Err(e) = client.put("/test/zz-churn", value.clone(), 0).await {
                panic!("write {i} of 400 refused: {e}");
            }
            if i % 20 == 19 {
                // 5 MiB written: the node's upkeep (every 250 ms) has a turn.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}
