//! The SQL engine's metrics (recorded through the `metrics` facade; the server
//! exports them).

use std::time::Instant;

use crate::SqlError;

/// Statements finished, by `outcome`: `ok`, `failed`, `denied`, `timeout`,
/// `cancelled` or `resources` (over the per-query memory limit).
pub const QUERIES: &str = "quiver_sql_queries_total";
/// Queries planned again after they lost a cluster node before their first row.
pub const QUERIES_PLANNED_AGAIN: &str = "quiver_sql_queries_planned_again_total";
/// Statement duration: planning to the end of the last partition fetched.
pub const QUERY_SECONDS: &str = "quiver_sql_query_duration_seconds";

/// Describes the engine's metrics to the installed recorder.
pub fn describe() {
    metrics::describe_counter!(QUERIES, "SQL statements finished, by outcome");
    metrics::describe_counter!(
        QUERIES_PLANNED_AGAIN,
        "queries planned again and run once more after losing a cluster node before their \
         first row"
    );
    metrics::describe_histogram!(
        QUERY_SECONDS,
        metrics::Unit::Seconds,
        "SQL statement duration, planning to the end of its last partition"
    );
}

/// The outcome label of a statement that failed with `e`.
pub(crate) fn outcome_of(e: &SqlError) -> &'static str {
    match e {
        SqlError::Timeout(_) => "timeout",
        SqlError::Cancelled => "cancelled",
        SqlError::ResourcesExhausted(_) => "resources",
        SqlError::Denied(_) | SqlError::Forbidden(_) => "denied",
        _ => "failed",
    }
}

/// Records a statement started at `started` that ended with `outcome`.
pub(crate) fn record(started: Instant, outcome: &'static str) {
    metrics::counter!(QUERIES, "outcome" => outcome).increment(1);
    metrics::histogram!(QUERY_SECONDS).record(started.elapsed().as_secs_f64());
}
