//! The console's queries: those running (to list and cancel), and the
//! results kept for the page to read page by page.
//!
//! A result is kept whole up to [`MAX_KEPT_ROWS`] rows and
//! [`MAX_KEPT_BYTES`] bytes (past that it is cut, and says so), and only the
//! last [`MAX_KEPT_RESULTS`] are kept: at most 512 MiB over all users.
//! A user sees and cancels their own queries; an admin anyone's.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use quiver_sql::Query;

use crate::auth::{Caller, Role};
use crate::{Error, Result};

/// Rows of one result kept for paging.
pub(crate) const MAX_KEPT_ROWS: usize = 1_000_000;
/// Bytes of one result kept for paging: 64 MiB.
pub(crate) const MAX_KEPT_BYTES: usize = 64 << 20;
/// Results kept at once, over all users; the oldest goes first.
pub(crate) const MAX_KEPT_RESULTS: usize = 8;
/// Longest query id a page may choose.
const MAX_ID_LEN: usize = 64;

/// A query the console runs.
#[derive(Debug)]
struct Running {
    user: Arc<str>,
    sql: String,
    started: Instant,
    /// `None` while it is being planned.
    query: Option<Query>,
    cancelled: bool,
}

/// A finished query's rows.
#[derive(Debug)]
pub(crate) struct Kept {
    pub(crate) user: Arc<str>,
    pub(crate) schema: SchemaRef,
    pub(crate) batches: Vec<RecordBatch>,
    pub(crate) rows: usize,
    /// Whether rows past the limits were left out.
    pub(crate) truncated: bool,
}

/// A running query as `GET /api/queries` lists it.
#[derive(Debug, serde::Serialize)]
pub(crate) struct RunningInfo {
    pub(crate) id: String,
    pub(crate) user: String,
    pub(crate) sql: String,
    pub(crate) seconds: f64,
}

#[derive(Debug, Default)]
struct State {
    running: HashMap<String, Running>,
    /// Oldest first.
    kept: VecDeque<(String, Arc<Kept>)>,
}

/// The console's queries and results.
#[derive(Debug, Default)]
pub(crate) struct Queries {
    state: Mutex<State>,
}

/// Whether `caller` may see or cancel `user`'s query.
fn owns(caller: &Caller, user: &str) -> bool {
    caller.role >= Role::Admin || &*caller.name == user
}

/// Checks an id a page chose: letters, digits, `-` and `_`, at most 64.
pub(crate) fn validate_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "a query id is 1 to {MAX_ID_LEN} letters, digits, '-' or '_'"
        )))
    }
}

impl Queries {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the maps consistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers query `id` of `caller`, before it is planned; the guard
    /// unregisters it when dropped.
    pub(crate) fn start<'a>(
        &'a self,
        id: &str,
        caller: &Caller,
        sql: &str,
    ) -> Result<RunningGuard<'a>> {
        let mut state = self.state();
        if state.running.contains_key(id) {
            return Err(Error::Conflict(format!("query {id} is already running")));
        }
        state.running.insert(
            id.to_string(),
            Running {
                user: Arc::clone(&caller.name),
                sql: sql.chars().take(1000).collect(),
                started: Instant::now(),
                query: None,
                cancelled: false,
            },
        );
        Ok(RunningGuard {
            queries: self,
            id: id.to_string(),
        })
    }

    /// Cancels query `id`; `Ok(false)` if no such query of the caller runs.
    pub(crate) fn cancel(&self, id: &str, caller: &Caller) -> bool {
        let mut state = self.state();
        match state.running.get_mut(id) {
            Some(running) if owns(caller, &running.user) => {
                running.cancelled = true;
                if let Some(query) = &running.query {
                    query.cancel();
                }
                tracing::info!(query = id, user = %caller.name, "console: query cancelled");
                true
            }
            _ => false,
        }
    }

    /// The queries running that `caller` may see, oldest first.
    pub(crate) fn running(&self, caller: &Caller) -> Vec<RunningInfo> {
        let state = self.state();
        let mut list: Vec<RunningInfo> = state
            .running
            .iter()
            .filter(|(_, r)| owns(caller, &r.user))
            .map(|(id, r)| RunningInfo {
                id: id.clone(),
                user: r.user.to_string(),
                sql: r.sql.clone(),
                seconds: r.started.elapsed().as_secs_f64(),
            })
            .collect();
        list.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        list
    }

    /// Keeps a result under `id`, dropping the oldest past the limit.
    pub(crate) fn keep(&self, id: &str, kept: Kept) {
        let mut state = self.state();
        state.kept.retain(|(k, _)| k != id);
        state.kept.push_back((id.to_string(), Arc::new(kept)));
        while state.kept.len() > MAX_KEPT_RESULTS {
            state.kept.pop_front();
        }
    }

    /// The result kept under `id`, if `caller` may read it.
    pub(crate) fn kept(&self, id: &str, caller: &Caller) -> Result<Arc<Kept>> {
        let state = self.state();
        state
            .kept
            .iter()
            .find(|(k, kept)| k == id && owns(caller, &kept.user))
            .map(|(_, kept)| Arc::clone(kept))
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "no result {id}: it was never yours, or newer results replaced it \
                     (the last {MAX_KEPT_RESULTS} are kept); run the query again"
                ))
            })
    }
}

/// A registered running query; unregistered when dropped.
#[derive(Debug)]
pub(crate) struct RunningGuard<'a> {
    queries: &'a Queries,
    id: String,
}

impl RunningGuard<'_> {
    /// The query is planned: a cancel from now on reaches it (and one that
    /// came while it was planned, now).
    pub(crate) fn planned(&self, query: &Query) {
        let mut state = self.queries.state();
        if let Some(running) = state.running.get_mut(&self.id) {
            if running.cancelled {
                query.cancel();
            }
            running.query = Some(query.clone());
        }
    }

    /// Whether the query was cancelled.
    pub(crate) fn cancelled(&self) -> bool {
        let state = self.queries.state();
        state.running.get(&self.id).is_some_and(|r| r.cancelled)
    }
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.queries.state().running.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str, role: Role) -> Caller {
        Caller {
            name: Arc::from(name),
            role,
        }
    }

    #[test]
    fn users_see_and_cancel_their_own_queries_and_admins_any() {
        let queries = Queries::default();
        let alice = caller("alice", Role::Write);
        let bob = caller("bob", Role::Read);
        let root = caller("root", Role::Admin);
        let guard = queries.start("q1", &alice, "SELECT 1").unwrap();
        assert!(queries.start("q1", &bob, "SELECT 2").is_err());
        assert!(queries.running(&bob).is_empty());
        assert!(!queries.cancel("q1", &bob));
        assert_eq!(queries.running(&root).len(), 1);
        assert!(queries.cancel("q1", &alice));
        assert!(guard.cancelled());
        drop(guard);
        assert!(queries.running(&root).is_empty());
    }

    #[test]
    fn only_the_last_results_are_kept() {
        let queries = Queries::default();
        let alice = caller("alice", Role::Read);
        for i in 0..=MAX_KEPT_RESULTS {
            queries.keep(
                &format!("r{i}"),
                Kept {
                    user: Arc::clone(&alice.name),
                    schema: Arc::new(arrow::datatypes::Schema::empty()),
                    batches: Vec::new(),
                    rows: 0,
                    truncated: false,
                },
            );
        }
        assert!(queries.kept("r0", &alice).is_err());
        assert!(queries.kept("r1", &alice).is_ok());
        assert!(queries.kept("r1", &caller("bob", Role::Write)).is_err());
    }

    #[test]
    fn ids_are_short_and_plain() {
        assert!(validate_id("a-B_9").is_ok());
        for bad in ["", "a b", "../x", &"x".repeat(65)] {
            assert!(validate_id(bad).is_err(), "{bad}");
        }
    }
}
