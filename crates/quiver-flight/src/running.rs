//! The SQL queries running on this server, whoever asked: the console's
//! (planned and run in one call) and Flight SQL clients' (planned by
//! GetFlightInfo, run by the DoGets of its endpoints). The console lists
//! them on its Live page, and cancels them.
//!
//! A user sees and cancels their own queries; an admin anyone's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use quiver_sql::Query;

use crate::auth::{Caller, Role};
use crate::{Error, Result};

/// Characters of a query's text kept for the list.
const KEPT_TEXT: usize = 1000;

/// Who asked for a query to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) enum Via {
    #[serde(rename = "console")]
    Console,
    #[serde(rename = "Flight SQL")]
    FlightSql,
}

/// A query running.
#[derive(Debug)]
struct Entry {
    user: Arc<str>,
    sql: String,
    via: Via,
    started: Instant,
    /// `None` while it is being planned.
    query: Option<Query>,
    cancelled: bool,
}

/// A running query as the console lists it.
#[derive(Debug, serde::Serialize)]
pub(crate) struct RunningInfo {
    pub(crate) id: String,
    pub(crate) user: String,
    pub(crate) sql: String,
    pub(crate) via: Via,
    pub(crate) seconds: f64,
}

/// The queries running, by id.
#[derive(Debug, Default)]
pub(crate) struct RunningQueries {
    running: Mutex<HashMap<String, Entry>>,
}

/// Whether `caller` may see or cancel `user`'s query.
pub(crate) fn owns(caller: &Caller, user: &str) -> bool {
    caller.role >= Role::Admin || &*caller.name == user
}

impl RunningQueries {
    fn running(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock leaves the map consistent.
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers query `id` of `caller`, before it is planned; the guard
    /// unregisters it when dropped.
    pub(crate) fn start(
        self: &Arc<Self>,
        id: &str,
        caller: &Caller,
        sql: &str,
        via: Via,
    ) -> Result<RunningGuard> {
        let mut running = self.running();
        if running.contains_key(id) {
            return Err(Error::Conflict(format!("query {id} is already running")));
        }
        running.insert(
            id.to_string(),
            Entry {
                user: Arc::clone(&caller.name),
                sql: sql.chars().take(KEPT_TEXT).collect(),
                via,
                started: Instant::now(),
                query: None,
                cancelled: false,
            },
        );
        Ok(RunningGuard {
            queries: Arc::clone(self),
            id: id.to_string(),
        })
    }

    /// Cancels query `id`; `false` if no such query of the caller runs.
    pub(crate) fn cancel(&self, id: &str, caller: &Caller) -> bool {
        let mut running = self.running();
        match running.get_mut(id) {
            Some(entry) if owns(caller, &entry.user) => {
                entry.cancelled = true;
                if let Some(query) = &entry.query {
                    query.cancel();
                }
                tracing::info!(query = id, user = %caller.name, "query cancelled");
                true
            }
            _ => false,
        }
    }

    /// The queries running that `caller` may see, oldest first.
    pub(crate) fn list(&self, caller: &Caller) -> Vec<RunningInfo> {
        let running = self.running();
        let mut list: Vec<RunningInfo> = running
            .iter()
            .filter(|(_, entry)| owns(caller, &entry.user))
            .map(|(id, entry)| RunningInfo {
                id: id.clone(),
                user: entry.user.to_string(),
                sql: entry.sql.clone(),
                via: entry.via,
                seconds: entry.started.elapsed().as_secs_f64(),
            })
            .collect();
        list.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        list
    }
}

/// A registered running query; unregistered when dropped.
#[derive(Debug)]
pub(crate) struct RunningGuard {
    queries: Arc<RunningQueries>,
    id: String,
}

impl RunningGuard {
    /// The query is planned: a cancel from now on reaches it (and one that
    /// came while it was planned, now).
    pub(crate) fn planned(&self, query: &Query) {
        let mut running = self.queries.running();
        if let Some(entry) = running.get_mut(&self.id) {
            if entry.cancelled {
                query.cancel();
            }
            entry.query = Some(query.clone());
        }
    }

    /// Whether the query was cancelled.
    pub(crate) fn cancelled(&self) -> bool {
        let running = self.queries.running();
        running.get(&self.id).is_some_and(|entry| entry.cancelled)
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.queries.running().remove(&self.id);
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
        let queries = Arc::new(RunningQueries::default());
        let alice = caller("alice", Role::Write);
        let bob = caller("bob", Role::Read);
        let root = caller("root", Role::Admin);
        let guard = queries
            .start("q1", &alice, "SELECT 1", Via::Console)
            .unwrap();
        assert!(
            queries
                .start("q1", &bob, "SELECT 2", Via::FlightSql)
                .is_err()
        );
        let _other = queries
            .start("q2", &bob, "SELECT 2", Via::FlightSql)
            .unwrap();
        assert_eq!(queries.list(&bob).len(), 1);
        assert!(!queries.cancel("q1", &bob));
        assert_eq!(queries.list(&root).len(), 2);
        assert!(queries.cancel("q1", &alice));
        assert!(guard.cancelled());
        drop(guard);
        let left: Vec<_> = queries.list(&root).into_iter().map(|q| q.id).collect();
        assert_eq!(left, ["q2"]);
    }
}
