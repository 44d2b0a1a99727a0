//! One log line per RPC: name, table, rows, bytes, duration, outcome.

use std::time::Instant;

/// Collects what an RPC did and logs it once, when dropped (for streaming
/// responses: when the stream ends or the client goes away).
#[derive(Debug)]
pub(crate) struct RpcLog {
    rpc: &'static str,
    table: Option<String>,
    rows: u64,
    bytes: u64,
    started: Instant,
    error: Option<(tonic::Code, String)>,
}

impl RpcLog {
    pub(crate) fn new(rpc: &'static str) -> Self {
        Self {
            rpc,
            table: None,
            rows: 0,
            bytes: 0,
            started: Instant::now(),
            error: None,
        }
    }

    pub(crate) fn table(&mut self, name: &str) {
        self.table = Some(name.to_string());
    }

    pub(crate) fn add(&mut self, rows: u64, bytes: u64) {
        self.rows += rows;
        self.bytes += bytes;
    }

    /// Records that the RPC failed with `status`.
    pub(crate) fn failed(&mut self, status: &tonic::Status) {
        self.error = Some((status.code(), status.message().to_string()));
    }

    /// Records the outcome of `result` and passes it through.
    pub(crate) fn outcome<T>(
        &mut self,
        result: Result<T, tonic::Status>,
    ) -> Result<T, tonic::Status> {
        if let Err(status) = &result {
            self.failed(status);
        }
        result
    }
}

impl Drop for RpcLog {
    fn drop(&mut self) {
        let duration_ms = self.started.elapsed().as_secs_f64() * 1e3;
        let table = self.table.as_deref().unwrap_or("-");
        match &self.error {
            None => tracing::info!(
                rpc = self.rpc,
                table,
                rows = self.rows,
                bytes = self.bytes,
                duration_ms = format_args!("{duration_ms:.2}"),
                "ok"
            ),
            Some((code, message)) => tracing::info!(
                rpc = self.rpc,
                table,
                rows = self.rows,
                bytes = self.bytes,
                duration_ms = format_args!("{duration_ms:.2}"),
                code = ?code,
                message = message.as_str(),
                "failed"
            ),
        }
    }
}
