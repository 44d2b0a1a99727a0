//! The console's results, kept for the page to read page by page (the
//! queries running are the server's [`crate::running`]).
//!
//! A result is kept whole up to [`MAX_KEPT_ROWS`] rows and
//! [`MAX_KEPT_BYTES`] bytes (past that it is cut, and says so), and only the
//! last [`MAX_KEPT_RESULTS`] are kept: at most 512 MiB over all users.
//! A user reads their own results; an admin anyone's.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::auth::Caller;
use crate::running::owns;
use crate::{Error, Result};

/// Rows of one result kept for paging.
pub(crate) const MAX_KEPT_ROWS: usize = 1_000_000;
/// Bytes of one result kept for paging: 64 MiB.
pub(crate) const MAX_KEPT_BYTES: usize = 64 << 20;
/// Results kept at once, over all users; the oldest goes first.
pub(crate) const MAX_KEPT_RESULTS: usize = 8;
/// Longest query id a page may choose.
const MAX_ID_LEN: usize = 64;

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

/// The console's results, the last [`MAX_KEPT_RESULTS`], oldest first.
#[derive(Debug, Default)]
pub(crate) struct Queries {
    kept: Mutex<VecDeque<(String, Arc<Kept>)>>,
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
    fn kept_results(&self) -> MutexGuard<'_, VecDeque<(String, Arc<Kept>)>> {
        // A panic while holding the lock leaves the list consistent.
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps a result under `id`, dropping the oldest past the limit.
    pub(crate) fn keep(&self, id: &str, kept: Kept) {
        let mut results = self.kept_results();
        results.retain(|(k, _)| k != id);
        results.push_back((id.to_string(), Arc::new(kept)));
        while results.len() > MAX_KEPT_RESULTS {
            results.pop_front();
        }
    }

    /// The result kept under `id`, if `caller` may read it.
    pub(crate) fn kept(&self, id: &str, caller: &Caller) -> Result<Arc<Kept>> {
        self.kept_results()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;

    fn caller(name: &str, role: Role) -> Caller {
        Caller {
            name: Arc::from(name),
            role,
        }
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
