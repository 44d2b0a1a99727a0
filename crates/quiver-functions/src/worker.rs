//! One worker process: started fresh, greeted, given one batch at a time,
//! stopped or killed.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use quiver_shm::process::{self, Link};

use crate::config::SHUTDOWN_GRACE;
use crate::protocol::Encoded;
use crate::protocol::{self, Failure, FromWorker, Hello, MAX_DATAGRAM};
use crate::{FunctionConfig, FunctionError, Result};

/// Lines of a worker's output kept for error messages.
const KEPT_LINES: usize = 8;

/// How long a worker that closed its socket may take to exit before it is
/// killed, and its output readers to finish.
const EXIT_WAIT: Duration = Duration::from_millis(500);

/// Thread libraries read these; one thread each, unless the operator chose:
/// the parallelism is the workers.
const THREAD_VARIABLES: [&str; 3] = ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"];

/// A live worker process.
#[derive(Debug)]
pub(crate) struct Worker {
    id: usize,
    child: Child,
    link: Link,
    output: Output,
    seq: u64,
}

/// How one batch failed, for the pool to turn into a [`FunctionError`].
#[derive(Debug)]
pub(crate) enum CallFailure {
    /// The function raised, or its result was unusable; the worker goes on.
    Raised { kind: String, failure: Failure },
    /// The batch ran past the timeout; the worker was killed.
    TimedOut,
    /// The worker died; `how` and its last output say why.
    Died { how: String, output: String },
    /// The worker broke the protocol; it was killed.
    Broken(String),
}

impl Worker {
    /// Starts worker `id` and waits for its hello.
    pub(crate) fn spawn(config: &FunctionConfig, id: usize) -> Result<(Worker, Hello)> {
        let startup = |m: String| FunctionError::Startup(format!("worker {id}: {m}"));
        let (link, theirs) = Link::pair().map_err(|e| startup(format!("socketpair: {e}")))?;
        let mut command = Command::new(&config.python);
        command
            .args([
                "-m",
                "quiver.functions.worker",
                "--worker-id",
                &id.to_string(),
            ])
            .args(&config.modules)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("PYTHONUNBUFFERED", "1");
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("QUIVER_") {
                command.env_remove(name);
            }
        }
        for name in THREAD_VARIABLES {
            if std::env::var_os(name).is_none() {
                command.env(name, "1");
            }
        }
        let mut child = process::spawn_linked(&mut command, theirs).map_err(|e| {
            startup(format!(
                "cannot run {} (--function-python): {e}",
                config.python.display()
            ))
        })?;
        let output = Output::read(id, child.id(), &mut child);
        let mut worker = Worker {
            id,
            child,
            link,
            output,
            seq: 0,
        };
        let hello = worker.hello(config).map_err(|e| {
            let how = worker.end();
            startup(format!("{e} ({how}){}", worker.output.tail_suffix()))
        })?;
        worker
            .link
            .set_read_timeout(config.timeout)
            .map_err(|e| startup(format!("setting the function timeout: {e}")))?;
        Ok((worker, hello))
    }

    fn hello(&mut self, config: &FunctionConfig) -> std::result::Result<Hello, String> {
        self.link
            .set_read_timeout(Some(config.startup_timeout))
            .map_err(|e| e.to_string())?;
        let hello = match self.link.recv(MAX_DATAGRAM) {
            Ok(Some(datagram)) => match protocol::parse(datagram) {
                Ok(FromWorker::Hello(hello)) => hello,
                Ok(_) => return Err("its first message was not a hello".into()),
                Err(e) => return Err(e.to_string()),
            },
            Ok(None) => return Err("it exited before its hello".into()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(format!(
                    "no hello within --function-startup-timeout ({} s)",
                    config.startup_timeout.as_secs_f64()
                ));
            }
            Err(e) => return Err(format!("reading its hello: {e}")),
        };
        if let Some(error) = &hello.error {
            return Err(format!(
                "{}: {}\n{}",
                error.python_type, error.message, error.traceback
            ));
        }
        let ours = env!("CARGO_PKG_VERSION");
        if hello.protocol != protocol::PROTOCOL || hello.quiver != ours {
            return Err(format!(
                "it speaks protocol {} of quiver {:?}; the server speaks {} of {ours}: install \
                 the quiver package of the server's version for --function-python",
                hello.protocol,
                hello.quiver,
                protocol::PROTOCOL
            ));
        }
        tracing::info!(
            worker = self.id,
            pid = hello.pid,
            python = %hello.python,
            pyarrow = %hello.pyarrow,
            "function worker ready"
        );
        Ok(hello)
    }

    /// The worker's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Runs `function` on `batch` and waits for the answer, at most `timeout`.
    pub(crate) fn call(
        &mut self,
        function: &str,
        input: &Encoded,
        timeout: Option<Duration>,
    ) -> std::result::Result<(SchemaRef, Vec<RecordBatch>), CallFailure> {
        self.seq += 1;
        let seq = self.seq;
        if let Err(e) = protocol::send_call(&self.link, function, seq, input) {
            // A worker that died makes the send fail (EPIPE).
            if let Ok(Some(_)) | Err(_) = self.child.try_wait() {
                return Err(self.died());
            }
            return Err(self.broken(e.to_string()));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            match self.link.recv(MAX_DATAGRAM) {
                Ok(Some(datagram)) => {
                    return match protocol::parse(datagram) {
                        Ok(FromWorker::Result {
                            seq: s,
                            schema,
                            batches,
                        }) if s == seq => Ok((schema, batches)),
                        Ok(FromWorker::Error {
                            seq: s,
                            kind,
                            failure,
                        }) if s == seq => Err(CallFailure::Raised { kind, failure }),
                        Ok(other) => {
                            Err(self
                                .broken(format!("an unexpected message for call {seq}: {other:?}")))
                        }
                        Err(e) => Err(self.broken(e.to_string())),
                    };
                }
                Ok(None) => return Err(self.died()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    // A signal cut the wait short: wait for what is left.
                    if let Some(deadline) = deadline {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() || self.link.set_read_timeout(Some(left)).is_err() {
                            self.end();
                            return Err(CallFailure::TimedOut);
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.end();
                    return Err(CallFailure::TimedOut);
                }
                Err(e) => return Err(self.broken(format!("reading a result: {e}"))),
            }
        }
    }

    fn died(&mut self) -> CallFailure {
        let how = self.end();
        CallFailure::Died {
            how,
            output: self.output.tail(),
        }
    }

    fn broken(&mut self, what: String) -> CallFailure {
        let how = self.end();
        CallFailure::Broken(format!("{what} (the worker was stopped: {how})"))
    }

    /// Tells the worker to exit; kills it if it has not after the grace period.
    pub(crate) fn stop(mut self) {
        if protocol::send_shutdown(&self.link).is_ok() {
            let deadline = Instant::now() + SHUTDOWN_GRACE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.end();
    }

    /// Ends the process (a short wait if it is exiting, then `SIGKILL`) and
    /// says how it ended.
    fn end(&mut self) -> String {
        let deadline = Instant::now() + EXIT_WAIT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => {
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        self.output.finish(EXIT_WAIT);
        status.map_or_else(|| "its status is unknown".to_string(), describe)
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// A worker's stdout and stderr, logged line by line; the last lines kept.
#[derive(Debug)]
struct Output {
    tail: Arc<Mutex<VecDeque<String>>>,
    done: mpsc::Receiver<()>,
    readers: usize,
}

impl Output {
    fn read(id: usize, pid: u32, child: &mut Child) -> Output {
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(KEPT_LINES)));
        let (tx, done) = mpsc::channel();
        let mut readers = 0;
        let streams: [Option<Box<dyn Read + Send>>; 2] = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ];
        for stream in streams.into_iter().flatten() {
            let tail = Arc::clone(&tail);
            let tx = tx.clone();
            readers += 1;
            let spawned = std::thread::Builder::new()
                .name(format!("quiver-fn-out-{id}"))
                .spawn(move || {
                    for line in BufReader::new(stream).lines() {
                        let Ok(line) = line else { break };
                        tracing::info!(target: "quiver_functions::worker", worker = id, pid, "{line}");
                        let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                        if tail.len() == KEPT_LINES {
                            tail.pop_front();
                        }
                        tail.push_back(line);
                    }
                    let _ = tx.send(());
                });
            if spawned.is_err() {
                readers -= 1;
            }
        }
        Output {
            tail,
            done,
            readers,
        }
    }

    /// Waits, at most `wait`, for the readers to reach the end of the output.
    fn finish(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while self.readers > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.done.recv_timeout(left).is_err() {
                break;
            }
            self.readers -= 1;
        }
    }

    /// The last lines, joined.
    fn tail(&self) -> String {
        let tail = self.tail.lock().unwrap_or_else(PoisonError::into_inner);
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    fn tail_suffix(&self) -> String {
        let tail = self.tail();
        if tail.is_empty() {
            String::new()
        } else {
            format!("; its output ended with:\n{tail}")
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Already reaped: both are no-ops.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
