//! The pool's settings: the library side of `quiver serve`'s function flags.

use std::path::PathBuf;
use std::time::Duration;

/// How long a worker may take to import the modules and say hello.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// How long one batch may run before its worker is replaced.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a worker told to shut down may take before it is killed.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What the pool runs and how.
#[derive(Debug, Clone)]
pub struct FunctionConfig {
    /// Modules to import in every worker: `.py` paths or importable names.
    pub modules: Vec<String>,
    /// Worker processes.
    pub workers: usize,
    /// The Python interpreter; it must import the `quiver` package of the
    /// server's version.
    pub python: PathBuf,
    /// How long one batch may run (`None`: no limit).
    pub timeout: Option<Duration>,
    /// How long a worker may take to start.
    pub startup_timeout: Duration,
}

impl FunctionConfig {
    /// Batches of one call between their arrival and the moment their
    /// results leave: enough to keep every worker busy with the next batch
    /// waiting, bounded so that a slow client holds little.
    pub fn window(&self) -> usize {
        (2 * self.workers).clamp(2, 32)
    }
}
