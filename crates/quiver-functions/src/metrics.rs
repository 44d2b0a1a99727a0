//! The pool's metrics, through the `metrics` facade (docs/operations.md).

use std::time::Instant;

use crate::worker::CallFailure;

/// Workers alive.
pub(crate) fn set_alive(alive: usize) {
    metrics::gauge!("quiver_function_workers").set(alive as f64);
}

/// A worker replaced, by why: `crash`, `timeout` or `startup` (a start that
/// failed).
pub(crate) fn restarted(reason: &'static str) {
    metrics::counter!("quiver_function_worker_restarts_total", "reason" => reason).increment(1);
}

/// One batch run, whatever its outcome.
pub(crate) fn batch_done<T>(
    function: &str,
    rows_in: usize,
    outcome: &Result<(T, Vec<arrow::record_batch::RecordBatch>), CallFailure>,
    started: Instant,
) {
    let function = function.to_string();
    metrics::counter!("quiver_function_batches_total", "function" => function.clone()).increment(1);
    metrics::histogram!("quiver_function_batch_duration_seconds", "function" => function.clone())
        .record(started.elapsed().as_secs_f64());
    metrics::counter!("quiver_function_rows_total", "function" => function.clone(), "direction" => "in")
        .increment(rows_in as u64);
    if let Ok((_, batches)) = outcome {
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        metrics::counter!("quiver_function_rows_total", "function" => function, "direction" => "out")
            .increment(rows as u64);
    }
}
