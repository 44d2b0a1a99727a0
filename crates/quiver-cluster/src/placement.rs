//! Where partitions go: rendezvous (highest random weight) hashing over the
//! live nodes, and the split of a put's rows into partitions.
//!
//! Each (key, node) pair gets a score from a hash of both names. A put's
//! partitions go round a ring of the live nodes ordered by their scores for
//! the put ([`Ring`]): every node gets as many partitions and as many first
//! copies as any other (give or take one), so reads of the table spread
//! evenly, and different puts start the ring at different nodes. A lost
//! replica is replaced by the best-scoring node for the partition among those
//! that do not hold it ([`replicas_for`]), which moves nothing else. Every
//! node computes the same answer from the same membership.

use std::hash::{DefaultHasher, Hash, Hasher};

use arrow::array::RecordBatch;

/// The `count` nodes of `nodes` that should hold partition `key`, best first.
pub(crate) fn replicas_for<'a>(
    key: &str,
    nodes: impl IntoIterator<Item = &'a str>,
    count: usize,
) -> Vec<String> {
    let mut scored: Vec<(u64, &str)> = nodes
        .into_iter()
        .map(|node| (score(key, node), node))
        .collect();
    // Highest score first; the id breaks ties so the order is total.
    scored.sort_unstable_by(|a, b| b.cmp(a));
    scored
        .into_iter()
        .take(count)
        .map(|(_, node)| node.to_string())
        .collect()
}

/// The live nodes ordered by their weights for one put's `key`: partition
/// `i` of the put goes on the `replicas` nodes from position `i` on, so that
/// every node gets as many partitions and first copies as any other, however
/// many partitions the put turns out to have.
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    nodes: Vec<String>,
    copies: usize,
    /// The node that takes every partition's first copy, if one does: the
    /// other copies go round the rest of the ring.
    first: Option<String>,
}

impl Ring {
    pub(crate) fn new<'a>(
        key: &str,
        nodes: impl IntoIterator<Item = &'a str>,
        replicas: usize,
    ) -> Self {
        let nodes = replicas_for(key, nodes, usize::MAX);
        let copies = replicas.min(nodes.len());
        Self {
            nodes,
            copies,
            first: None,
        }
    }

    /// The ring with every partition's first copy on `node`, if it is one
    /// of the ring's (`"place": "here"`); the ring as it was otherwise.
    pub(crate) fn first_on(mut self, node: &str) -> Self {
        if let Some(at) = self.nodes.iter().position(|n| n == node) {
            self.first = Some(self.nodes.remove(at));
        }
        self
    }

    /// The replicas of partition `i`: empty when there are no nodes.
    pub(crate) fn replicas(&self, i: usize) -> Vec<String> {
        let rest = self.copies - usize::from(self.first.is_some());
        let around = (0..rest).map(|j| self.nodes[(i + j) % self.nodes.len()].clone());
        self.first.iter().cloned().chain(around).collect()
    }
}

/// The weight of `node` for `key`: a hash of both (SipHash with fixed keys),
/// the same in every process of a build. Placements are recorded in the
/// catalog, so nodes of different builds may place new partitions
/// differently but never disagree about where one is.
fn score(key: &str, node: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    node.hash(&mut hasher);
    hasher.finish()
}

/// `batches` (holding `rows` rows) cut into `count` runs of consecutive rows
/// as even as can be, by zero-copy slices; a run may be empty only when
/// there are fewer rows than runs.
pub(crate) fn split_rows(
    batches: &[RecordBatch],
    rows: usize,
    count: usize,
) -> Vec<Vec<RecordBatch>> {
    let count = count.max(1);
    let mut parts: Vec<Vec<RecordBatch>> = (0..count).map(|_| Vec::new()).collect();
    // Partition i holds rows [i * rows / count, (i + 1) * rows / count).
    let bound = |i: usize| i * rows / count;
    let (mut part, mut at) = (0, 0);
    for batch in batches {
        let mut offset = 0;
        while offset < batch.num_rows() {
            while part + 1 < count && at >= bound(part + 1) {
                part += 1;
            }
            let end = if part + 1 < count {
                bound(part + 1)
            } else {
                usize::MAX
            };
            let take = (batch.num_rows() - offset).min(end - at);
            parts[part].push(batch.slice(offset, take));
            offset += take;
            at += take;
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(from: i64, len: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(from..from + len))],
        )
        .expect("batch")
    }

    #[test]
    fn replicas_are_stable_distinct_and_move_little() {
        let nodes = ["n1", "n2", "n3", "n4"];
        let three = &nodes[..3];
        let mut moved = 0;
        for p in 0..200 {
            let key = format!("t/{p}");
            let r = replicas_for(&key, three.iter().copied(), 2);
            assert_eq!(r.len(), 2);
            assert_ne!(r[0], r[1]);
            assert_eq!(r, replicas_for(&key, three.iter().rev().copied(), 2));
            let first4 = replicas_for(&key, nodes.iter().copied(), 1);
            if first4[0] != r[0] {
                // Only to the new node.
                assert_eq!(first4[0], "n4");
                moved += 1;
            }
        }
        // About a quarter of the partitions move to the fourth node.
        assert!((20..=90).contains(&moved), "{moved}");
        assert_eq!(replicas_for("k", three.iter().copied(), 5).len(), 3);
    }

    /// The replicas of each of a put's `count` partitions on its ring.
    fn place<'a>(
        key: &str,
        nodes: impl IntoIterator<Item = &'a str>,
        count: usize,
        replicas: usize,
    ) -> Vec<Vec<String>> {
        let ring = Ring::new(key, nodes, replicas);
        (0..count).map(|i| ring.replicas(i)).collect()
    }

    #[test]
    fn a_put_is_placed_evenly_round_the_ring() {
        let nodes = ["n1", "n2", "n3"];
        let placed = place("t#1", nodes.iter().copied(), 6, 2);
        assert_eq!(placed.len(), 6);
        for node in nodes {
            let copies = placed
                .iter()
                .filter(|r| r.iter().any(|n| n == node))
                .count();
            let first = placed.iter().filter(|r| r[0] == node).count();
            assert_eq!((copies, first), (4, 2), "{node}: {placed:?}");
        }
        assert!(placed.iter().all(|r| r[0] != r[1]));
        assert_eq!(place("t#1", nodes.iter().copied(), 6, 2), placed);
        assert!(
            place("t#1", nodes.iter().copied(), 2, 5)
                .iter()
                .all(|r| r.len() == 3)
        );
        assert!(
            place("t#1", std::iter::empty(), 2, 2)
                .iter()
                .all(Vec::is_empty)
        );
        // Different puts start the ring at different nodes.
        let firsts: std::collections::HashSet<String> = (0..20)
            .map(|p| place(&format!("t#{p}"), nodes.iter().copied(), 1, 1)[0][0].clone())
            .collect();
        assert_eq!(firsts.len(), 3);
    }

    #[test]
    fn a_put_placed_here_keeps_every_first_copy_and_spreads_the_rest() {
        let nodes = ["n1", "n2", "n3"];
        let ring = Ring::new("t#1", nodes.iter().copied(), 2).first_on("n2");
        let placed: Vec<Vec<String>> = (0..4).map(|i| ring.replicas(i)).collect();
        assert!(
            placed.iter().all(|r| r.len() == 2 && r[0] == "n2"),
            "{placed:?}"
        );
        let seconds: std::collections::HashSet<&str> =
            placed.iter().map(|r| r[1].as_str()).collect();
        assert_eq!(seconds, ["n1", "n3"].into_iter().collect());
        // All the copies asked for, on distinct nodes, however few there are.
        let all = Ring::new("t#1", nodes.iter().copied(), 5).first_on("n3");
        let r = all.replicas(0);
        assert_eq!(r[0], "n3");
        assert_eq!(r.iter().collect::<std::collections::HashSet<_>>().len(), 3);
        let alone = Ring::new("t#1", ["n1"], 2).first_on("n1");
        assert_eq!(alone.replicas(7), vec!["n1".to_string()]);
        // A node that is not in the ring (a suspect) places as the ring does.
        let ring = Ring::new("t#1", ["n1", "n3"], 2);
        assert_eq!(ring.clone().first_on("n2").replicas(1), ring.replicas(1));
    }

    #[test]
    fn splits_rows_evenly_across_batches() {
        let batches = [batch(0, 5), batch(5, 0), batch(5, 6)];
        let parts = split_rows(&batches, 11, 3);
        let lens: Vec<usize> = parts
            .iter()
            .map(|p| p.iter().map(RecordBatch::num_rows).sum())
            .collect();
        assert_eq!(lens, [3, 4, 4]);
        let values: Vec<i64> = parts
            .iter()
            .flatten()
            .flat_map(|b| {
                let a = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("int64");
                (0..a.len()).map(|i| a.value(i)).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(values, (0..11).collect::<Vec<_>>());
        let few = split_rows(&[batch(0, 2)], 2, 4);
        assert_eq!(few.iter().map(Vec::len).sum::<usize>(), 2);
        assert!(split_rows(&[], 0, 2).iter().all(Vec::is_empty));
    }
}
