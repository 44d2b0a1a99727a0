//! The pool's error type. It knows no gRPC status: the Flight service maps it,
//! with every other error, in one place.

use std::time::Duration;

/// Result alias for function calls.
pub type Result<T, E = FunctionError> = std::result::Result<T, E>;

/// Everything a function call or the pool can fail with.
#[derive(Debug, thiserror::Error)]
pub enum FunctionError {
    /// No function of that name is served.
    #[error("{}", not_found(.name, .served))]
    NotFound {
        /// The name asked for.
        name: String,
        /// The names served (empty: the server runs no functions).
        served: Vec<String>,
    },
    /// The function raised an exception.
    #[error("function {function} raised {python_type}: {message} (batch {batch})")]
    Raised {
        /// The function.
        function: String,
        /// The exception's class.
        python_type: String,
        /// Its message.
        message: String,
        /// The call's batch, from 0.
        batch: u64,
    },
    /// The function's result does not fit its declared output schema, or its
    /// schema changed within a call, or it cannot be converted.
    #[error("function {function} returned an unusable result on batch {batch}: {message}")]
    Output {
        /// The function.
        function: String,
        /// What is wrong.
        message: String,
        /// The call's batch, from 0.
        batch: u64,
    },
    /// The input does not match the function's declared input schema.
    #[error("{0}")]
    SchemaMismatch(String),
    /// A batch ran past `--function-timeout`; its worker was killed.
    #[error(
        "function {function} ran past --function-timeout ({} s) on batch {batch}; its worker \
         was replaced", .timeout.as_secs_f64()
    )]
    Timeout {
        /// The function.
        function: String,
        /// The limit.
        timeout: Duration,
        /// The call's batch, from 0.
        batch: u64,
    },
    /// The worker running the batch died.
    #[error(
        "the worker running function {function} died on batch {batch} ({how}) and was \
         replaced{}", last_output(.output)
    )]
    WorkerDied {
        /// The function.
        function: String,
        /// How it ended: an exit code or a signal.
        how: String,
        /// The call's batch, from 0.
        batch: u64,
        /// The worker's last lines of output.
        output: String,
    },
    /// No worker could be started to run the batch.
    #[error("no function worker is running: {0}")]
    NoWorkers(String),
    /// The workers could not be started (a module that does not import, two
    /// functions of one name, a version mismatch): the server does not start.
    #[error("function workers failed to start: {0}")]
    Startup(String),
    /// A bug or an unexpected failure (a system call, a malformed message).
    #[error("function worker: {0}")]
    Internal(String),
}

fn not_found(name: &str, served: &[String]) -> String {
    if served.is_empty() {
        format!(
            "no function named {name:?}: this server serves no functions (start it with \
             --functions)"
        )
    } else {
        format!(
            "no function named {name:?}; this server serves: {}",
            served.join(", ")
        )
    }
}

fn last_output(output: &str) -> String {
    if output.is_empty() {
        String::new()
    } else {
        format!("; its last output: {output}")
    }
}

impl FunctionError {
    /// The error's kind, as docs/protocol.md lists it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "FUNCTION_NOT_FOUND",
            Self::Raised { .. } => "FUNCTION_ERROR",
            Self::Output { .. } => "FUNCTION_OUTPUT",
            Self::SchemaMismatch(_) => "SCHEMA_MISMATCH",
            Self::Timeout { .. } => "FUNCTION_TIMEOUT",
            Self::WorkerDied { .. } => "FUNCTION_WORKER_DIED",
            Self::NoWorkers(_) => "NO_FUNCTION_WORKERS",
            Self::Startup(_) | Self::Internal(_) => "INTERNAL",
        }
    }
}
