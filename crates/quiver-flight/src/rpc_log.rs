//! One log line per RPC (name, table, rows, bytes, duration, outcome), and
//! its metrics.

use std::time::Instant;

use futures::stream;
use futures::{Stream, StreamExt};

/// Longest text (a SQL statement, a pushed-down filter) a log line shows.
pub(crate) const MAX_LOGGED_TEXT: usize = 2000;

/// The first `max` characters of `text`, with `…` if that is not all of it.
pub(crate) fn truncated(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => text.into(),
        Some((cut, _)) => format!("{}…", &text[..cut]).into(),
    }
}

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
    /// A response stream that has not reached its end yet: dropped like
    /// this, the client cancelled or its connection closed.
    unfinished: bool,
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
            unfinished: false,
        }
    }

    /// The RPC's name.
    pub(crate) fn rpc(&self) -> &'static str {
        self.rpc
    }

    pub(crate) fn table(&mut self, name: &str) {
        self.table = Some(name.to_string());
    }

    pub(crate) fn add(&mut self, rows: u64, bytes: u64) {
        self.rows += rows;
        self.bytes += bytes;
    }

    /// Records that the response stream reached its end.
    fn finish(&mut self) {
        self.unfinished = false;
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

/// Runs the handler of the RPC `rpc` with a new log of it, the one place a
/// handler's name is written: a panic in the handler becomes INTERNAL. The
/// handler records its outcome in the log (or moves the log into its response
/// stream).
pub(crate) async fn handle<T, F>(
    rpc: &'static str,
    handler: impl FnOnce(RpcLog) -> F,
) -> Result<T, tonic::Status>
where
    F: Future<Output = Result<T, tonic::Status>>,
{
    crate::panics::handler(rpc, async move { handler(RpcLog::new(rpc)).await }).await
}

/// The response stream of a streaming RPC: each item of `inner` goes through
/// `f` with the log, whose line is written when the stream ends (`ok`, or
/// `failed` after an error) or is dropped before its end (`cancelled`: the
/// client cancelled the call or its connection closed).
pub(crate) fn logged<S, U, F>(
    inner: S,
    mut log: RpcLog,
    f: F,
) -> impl Stream<Item = Result<U, tonic::Status>> + Send + 'static
where
    S: Stream + Unpin + Send + 'static,
    U: Send + 'static,
    F: FnMut(&mut RpcLog, S::Item) -> Result<U, tonic::Status> + Send + 'static,
{
    log.unfinished = true;
    stream::unfold((inner, log, f), |(mut inner, mut log, mut f)| async move {
        match inner.next().await {
            Some(item) => {
                let out = f(&mut log, item);
                Some((out, (inner, log, f)))
            }
            None => {
                log.finish();
                None
            }
        }
    })
}

impl Drop for RpcLog {
    fn drop(&mut self) {
        let seconds = self.started.elapsed().as_secs_f64();
        let code = match &self.error {
            None if self.unfinished => tonic::Code::Cancelled,
            None => tonic::Code::Ok,
            Some((code, _)) => *code,
        };
        crate::metrics::record_rpc(self.rpc, code, seconds, self.rows, self.bytes);
        let duration_ms = seconds * 1e3;
        let table = self.table.as_deref().unwrap_or("-");
        match &self.error {
            None if self.unfinished => tracing::info!(
                rpc = self.rpc,
                table,
                rows = self.rows,
                bytes = self.bytes,
                duration_ms = format_args!("{duration_ms:.2}"),
                "cancelled: the stream was dropped before its end (the client cancelled \
                 the call or its connection closed)"
            ),
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
                error = message.as_str(),
                "failed"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` and returns what it logged.
    fn logged_by(f: impl FnOnce()) -> String {
        let lines = Lines::default();
        tracing::subscriber::with_default(lines.subscriber(), f);
        lines.text()
    }

    #[test]
    fn long_text_is_cut_at_a_character() {
        assert_eq!(truncated("SELECT 1", MAX_LOGGED_TEXT), "SELECT 1");
        let exact = "x".repeat(MAX_LOGGED_TEXT);
        assert_eq!(truncated(&exact, MAX_LOGGED_TEXT), exact);
        let long = "é".repeat(MAX_LOGGED_TEXT + 1);
        let cut = truncated(&long, MAX_LOGGED_TEXT);
        assert_eq!(cut.chars().count(), MAX_LOGGED_TEXT + 1);
        assert!(cut.ends_with("é…"), "{cut}");
    }

    fn counted(
        items: Vec<Result<u64, tonic::Status>>,
    ) -> impl Stream<Item = Result<u64, tonic::Status>> {
        logged(stream::iter(items), RpcLog::new("DoGet"), |log, item| {
            log.outcome(item).inspect(|rows| log.add(*rows, *rows * 8))
        })
    }

    #[test]
    fn a_stream_read_to_its_end_is_ok() {
        let out = logged_by(|| {
            let all = futures::executor::block_on(counted(vec![Ok(2), Ok(3)]).collect::<Vec<_>>());
            assert_eq!(all.len(), 2);
        });
        assert!(out.contains(" ok ") && out.contains("rows=5"), "{out}");
    }

    #[test]
    fn a_stream_dropped_before_its_end_is_cancelled() {
        let out = logged_by(|| {
            let mut items = counted(vec![Ok(2), Ok(3)]).boxed();
            let first = futures::executor::block_on(items.next());
            assert_eq!(first.unwrap().unwrap(), 2);
            drop(items);
        });
        assert!(out.contains("cancelled") && out.contains("rows=2"), "{out}");
        assert!(!out.contains(" ok "), "{out}");
    }

    #[test]
    fn a_stream_that_fails_is_failed() {
        let out = logged_by(|| {
            let mut items = counted(vec![Ok(2), Err(tonic::Status::internal("broken"))]).boxed();
            let _ = futures::executor::block_on(items.next());
            let second = futures::executor::block_on(items.next()).unwrap();
            assert!(second.is_err());
            drop(items);
        });
        assert!(out.contains("failed") && out.contains("broken"), "{out}");
        assert!(!out.contains("cancelled"), "{out}");
    }
}

/// What tests log, captured (`tracing_subscriber`'s plain format, no colours).
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl Lines {
    /// A subscriber that writes into these lines.
    pub(crate) fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
    }

    /// Everything logged so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

#[cfg(test)]
impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
