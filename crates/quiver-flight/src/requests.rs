//! Puts' request ids on one node: a put repeated with the id of a put this
//! process committed lately is answered with that commit's result, not
//! applied again (a client that lost the answer to an append retries it
//! safely). A cluster node keeps them in the catalog instead
//! (crates/quiver-cluster).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::published::Published;
use crate::{Error, Result};

/// How long an id is remembered, at most.
const KEEP: Duration = Duration::from_secs(600);

/// How many ids are remembered, at most (the oldest go first).
const MOST: usize = 100_000;

/// The ids of puts committed lately, and what each published.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    by_id: HashMap<String, (String, Published)>,
    order: VecDeque<(Instant, String)>,
}

impl Requests {
    /// Runs `commit`, the put of `table` with request id `id`, unless a put
    /// with that id was committed lately: then answers with its result (an
    /// error if it was of another table). Puts with ids commit one at a time.
    pub(crate) fn once(
        &self,
        id: Option<&str>,
        table: &str,
        commit: impl FnOnce() -> Result<Published>,
    ) -> Result<Published> {
        let Some(id) = id else { return commit() };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.forget_old(Instant::now());
        if let Some((first, published)) = seen.by_id.get(id) {
            if first != table {
                return Err(Error::invalid(reused(id, first)));
            }
            return Ok(*published);
        }
        let published = commit()?;
        seen.by_id
            .insert(id.to_string(), (table.to_string(), published));
        seen.order.push_back((Instant::now(), id.to_string()));
        Ok(published)
    }
}

impl Seen {
    fn forget_old(&mut self, now: Instant) {
        while let Some((at, id)) = self.order.front() {
            if now.duration_since(*at) < KEEP && self.order.len() < MOST {
                break;
            }
            self.by_id.remove(id);
            self.order.pop_front();
        }
    }
}

/// Why a put whose request id was used by a put of `table` is refused.
pub fn reused(id: &str, table: &str) -> String {
    format!("request id '{id}' was used by a put of table '{table}': give each put its own id")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(version: u64) -> Published {
        Published {
            version,
            rows: version * 10,
            bytes: version * 80,
        }
    }

    #[test]
    fn a_repeated_id_is_answered_without_committing() {
        let requests = Requests::default();
        let mut commits = 0;
        let mut put = |id: Option<&str>, table: &str| {
            requests.once(id, table, || {
                commits += 1;
                Ok(published(commits))
            })
        };
        assert_eq!(put(Some("a"), "t").unwrap(), published(1));
        assert_eq!(put(Some("a"), "t").unwrap(), published(1));
        assert_eq!(put(None, "t").unwrap(), published(2));
        assert_eq!(put(Some("b"), "t").unwrap(), published(3));
        let elsewhere = put(Some("a"), "u").unwrap_err().to_string();
        assert!(elsewhere.contains("request id 'a'"), "{elsewhere}");
        assert_eq!(commits, 3);
    }

    #[test]
    fn a_failed_commit_is_not_remembered() {
        let requests = Requests::default();
        assert!(
            requests
                .once(Some("a"), "t", || Err(Error::invalid("no")))
                .is_err()
        );
        assert_eq!(
            requests.once(Some("a"), "t", || Ok(published(1))).unwrap(),
            published(1)
        );
    }

    #[test]
    fn the_oldest_ids_go_first() {
        let mut seen = Seen::default();
        let start = Instant::now();
        for i in 0..MOST {
            seen.by_id.insert(i.to_string(), ("t".into(), published(1)));
            seen.order.push_back((start, i.to_string()));
        }
        seen.forget_old(start);
        assert_eq!(seen.order.len(), MOST - 1);
        assert!(!seen.by_id.contains_key("0"));
        seen.forget_old(start + KEEP);
        assert!(seen.order.is_empty() && seen.by_id.is_empty());
    }
}
