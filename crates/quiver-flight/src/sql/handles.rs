//! Server-side state behind Flight SQL handles: planned query results waiting
//! for their DoGets, and prepared statements.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use quiver_sql::{Prepared, Query};

use crate::running::RunningGuard;
use crate::{Error, Result};

/// How long a planned result waits for its first DoGet before it is dropped.
pub(crate) const RESULT_TTL: Duration = Duration::from_secs(600);
/// How long a prepared statement is kept unused before it is dropped.
pub(crate) const STATEMENT_TTL: Duration = Duration::from_secs(3600);
/// Most results waiting at once; planning more fails with RESOURCE_EXHAUSTED.
const MAX_RESULTS: usize = 4096;
/// Most prepared statements open at once.
const MAX_STATEMENTS: usize = 16384;

/// Planned results, each fetched partition by partition, each partition once.
#[derive(Debug, Default)]
pub(crate) struct Results {
    pending: Mutex<HashMap<u128, PendingResult>>,
}

#[derive(Debug)]
struct PendingResult {
    query: Query,
    /// Its listing as a running query, held by the streams of its
    /// partitions too.
    running: Option<Arc<RunningGuard>>,
    fetched: Vec<bool>,
    created: Instant,
}

impl Results {
    /// Keeps `query` for its DoGets and returns its id.
    pub(crate) fn insert(&self, query: Query, running: Option<RunningGuard>) -> Result<u128> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        Self::drop_expired(&mut pending);
        if pending.len() >= MAX_RESULTS {
            return Err(Error::ResourceExhausted(format!(
                "{MAX_RESULTS} query results are waiting to be fetched; fetch or cancel some"
            )));
        }
        let id = uuid::Uuid::new_v4().as_u128();
        let fetched = vec![false; query.partitions()];
        pending.insert(
            id,
            PendingResult {
                query,
                running: running.map(Arc::new),
                fetched,
                created: Instant::now(),
            },
        );
        Ok(id)
    }

    /// Drops the results that waited past [`RESULT_TTL`] (and with them
    /// their listing as running queries).
    pub(crate) fn expire(&self) {
        Self::drop_expired(&mut self.pending.lock().unwrap_or_else(PoisonError::into_inner));
    }

    fn drop_expired(pending: &mut HashMap<u128, PendingResult>) {
        pending.retain(|_, r| r.created.elapsed() < RESULT_TTL);
    }

    /// Takes partition `partition` of result `id` to run it. A partition can
    /// be fetched once; the result is forgotten when all have been.
    pub(crate) fn take(
        &self,
        id: u128,
        partition: usize,
    ) -> Result<(Query, Option<Arc<RunningGuard>>)> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let gone = || {
            Error::NotFound(
                "no such query result: it was fetched, cancelled or expired \
                 (results wait 10 minutes); run the query again"
                    .into(),
            )
        };
        let result = pending.get_mut(&id).ok_or_else(gone)?;
        match result.fetched.get_mut(partition) {
            Some(fetched) if !*fetched => *fetched = true,
            Some(_) => {
                return Err(Error::NotFound(format!(
                    "partition {partition} of this query result was fetched already; \
                     run the query again"
                )));
            }
            None => {
                return Err(Error::invalid(format!(
                    "partition {partition} out of range: the result has {}",
                    result.fetched.len()
                )));
            }
        }
        let taken = (result.query.clone(), result.running.clone());
        if result.fetched.iter().all(|f| *f) {
            pending.remove(&id);
        }
        Ok(taken)
    }

    /// Cancels result `id`: running partitions stop, the rest can no longer
    /// be fetched. False if there is no such result waiting.
    pub(crate) fn cancel(&self, id: u128) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        match pending.remove(&id) {
            Some(result) => {
                result.query.cancel();
                true
            }
            None => false,
        }
    }
}

/// Prepared statements by handle.
#[derive(Debug, Default)]
pub(crate) struct Statements {
    open: Mutex<HashMap<Bytes, Statement>>,
}

/// A prepared statement and the parameters bound to it.
#[derive(Debug, Clone)]
pub(crate) struct Statement {
    pub(crate) prepared: Prepared,
    pub(crate) parameters: Option<RecordBatch>,
    used: Instant,
}

impl Statements {
    /// Keeps `prepared` and returns its handle.
    pub(crate) fn insert(&self, prepared: Prepared) -> Result<Bytes> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|_, s| s.used.elapsed() < STATEMENT_TTL);
        if open.len() >= MAX_STATEMENTS {
            return Err(Error::ResourceExhausted(format!(
                "{MAX_STATEMENTS} prepared statements are open; close some"
            )));
        }
        let handle = Bytes::from(uuid::Uuid::new_v4().simple().to_string());
        open.insert(
            handle.clone(),
            Statement {
                prepared,
                parameters: None,
                used: Instant::now(),
            },
        );
        Ok(handle)
    }

    /// The statement `handle`, as it is now.
    pub(crate) fn get(&self, handle: &[u8]) -> Result<Statement> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let statement = open.get_mut(handle).ok_or_else(Self::gone)?;
        statement.used = Instant::now();
        Ok(statement.clone())
    }

    /// Binds `parameters` to statement `handle`, replacing what was bound.
    pub(crate) fn bind(&self, handle: &[u8], parameters: RecordBatch) -> Result<()> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let statement = open.get_mut(handle).ok_or_else(Self::gone)?;
        statement.parameters = Some(parameters);
        statement.used = Instant::now();
        Ok(())
    }

    /// Closes statement `handle`; closing one that is gone is not an error.
    pub(crate) fn close(&self, handle: &[u8]) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.remove(handle);
    }

    fn gone() -> Error {
        Error::NotFound(
            "no such prepared statement: it was closed or expired (unused for an hour)".into(),
        )
    }
}
