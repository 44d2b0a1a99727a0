//! Partitions handed to readers, kept from collection while they may read.
//!
//! A client that got a table's endpoints, or a query planned over its
//! partitions, reads them a moment later, maybe after a put replaced the
//! version or a copy moved to another node. Each node remembers the copies
//! (partition, node) it handed out, until
//! [`crate::ClusterOptions::read_hold`] (the query timeout) from then, and
//! publishes the set in `reads/<node>` (under its lease) at most every
//! [`PUBLISH_EVERY`]; orphan collection on a node spares every copy of its
//! own a `reads/` key names. A reader that planned before a replacement or
//! a move thus finds its copies for as long as its query may run; a replaced
//! version no one read, or a moved copy no one was handed, is dropped after
//! `--orphan-grace` as before.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often a node publishes what its readers hold, when it changed: well
/// under the shortest `--orphan-grace` (1 s), so a partition handed out just
/// before its version was replaced is published before any node could drop it.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// The copies (partition, node) this node handed to readers, and until
/// when each is held.
#[derive(Debug, Default)]
pub(crate) struct Reads {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    until: HashMap<(String, String), Instant>,
    /// Whether the set changed since it was last taken.
    changed: bool,
}

impl Reads {
    /// Holds `copies` (partition, node) until `until` (or later, if held
    /// longer already).
    pub(crate) fn hold<'a>(
        &self,
        copies: impl IntoIterator<Item = (&'a str, &'a str)>,
        until: Instant,
    ) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        for (partition, node) in copies {
            let key = (partition.to_string(), node.to_string());
            match held.until.get_mut(&key) {
                Some(at) => *at = (*at).max(until),
                None => {
                    held.until.insert(key, until);
                    held.changed = true;
                }
            }
        }
    }

    /// The copies held at `now`, sorted, if the set changed since the last
    /// call (those held no longer are let go first).
    pub(crate) fn changed(&self, now: Instant) -> Option<Vec<(String, String)>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let before = held.until.len();
        held.until.retain(|_, until| *until > now);
        if held.until.len() != before {
            held.changed = true;
        }
        if !std::mem::take(&mut held.changed) {
            return None;
        }
        let mut copies: Vec<(String, String)> = held.until.keys().cloned().collect();
        copies.sort_unstable();
        Some(copies)
    }

    /// Marks the set as changed: its last publication did not land.
    pub(crate) fn unpublished(&self) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .changed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_taken_when_it_changes_and_lets_go_when_its_time_ends() {
        let reads = Reads::default();
        let now = Instant::now();
        let copy = |p: &str, n: &str| (p.to_string(), n.to_string());
        assert_eq!(reads.changed(now), None);
        reads.hold([("b", "n1"), ("a", "n2")], now + Duration::from_secs(2));
        assert_eq!(
            reads.changed(now),
            Some(vec![copy("a", "n2"), copy("b", "n1")])
        );
        assert_eq!(reads.changed(now), None);
        // Held again for longer: the set is the same, nothing to publish.
        reads.hold([("a", "n2")], now + Duration::from_secs(5));
        assert_eq!(reads.changed(now), None);
        // Another copy of a partition held: a change.
        reads.hold([("a", "n3")], now + Duration::from_secs(2));
        assert_eq!(
            reads.changed(now),
            Some(vec![copy("a", "n2"), copy("a", "n3"), copy("b", "n1")])
        );
        assert_eq!(
            reads.changed(now + Duration::from_secs(3)),
            Some(vec![copy("a", "n2")])
        );
        reads.unpublished();
        assert_eq!(
            reads.changed(now + Duration::from_secs(3)),
            Some(vec![copy("a", "n2")])
        );
        assert_eq!(reads.changed(now + Duration::from_secs(6)), Some(vec![]));
        assert_eq!(reads.changed(now + Duration::from_secs(7)), None);
    }
}
