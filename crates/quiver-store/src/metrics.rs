//! The store's metrics (recorded through the `metrics` facade; the server
//! exports them).

use std::time::Instant;

/// fsync duration, by `target`: `file` (a segment or the manifest) or `dir`
/// (a directory's entries). Only with `--data-dir` and `--fsync always`.
pub const FSYNC_SECONDS: &str = "quiver_fsync_duration_seconds";

/// Describes the store's metrics to the installed recorder.
pub fn describe() {
    metrics::describe_histogram!(
        FSYNC_SECONDS,
        metrics::Unit::Seconds,
        "fsync duration, by target (file or dir)"
    );
}

/// Runs `fsync`, recording how long it took.
pub(crate) fn fsync<T>(target: &'static str, fsync: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = fsync();
    metrics::histogram!(FSYNC_SECONDS, "target" => target).record(started.elapsed().as_secs_f64());
    out
}
