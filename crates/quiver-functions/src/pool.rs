//! The pool: one thread per worker process, taking batches from one queue.
//!
//! Each thread owns its worker: it starts it, hands it one batch at a time,
//! and replaces it when it dies or runs past the timeout. A call is a
//! [`FunctionPool::call`] per batch; the caller bounds how many it has in
//! flight (the Flight service's window), so the queue stays short. A batch
//! whose caller went away (a cancelled call) is dropped unrun.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use tokio::sync::oneshot;

use crate::protocol::Encoded;
use crate::registry::Registry;
use crate::worker::{CallFailure, Worker};
use crate::{FunctionConfig, FunctionError, FunctionSpec, Result, metrics};

/// The first wait before starting a worker again after a failed start.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between starts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A batch's results: their schema and one or more batches.
pub type Results = (SchemaRef, Vec<RecordBatch>);

/// One batch to run.
struct Job {
    function: Arc<FunctionSpec>,
    input: Encoded,
    /// The batch's rows.
    rows: usize,
    /// The batch's place in its call, from 0, for messages.
    index: u64,
    reply: oneshot::Sender<Result<Results>>,
}

/// What every worker thread shares.
#[derive(Debug)]
struct Shared {
    config: FunctionConfig,
    registry: OnceLock<Registry>,
    /// Held while a hello is compared with (or becomes) the registry.
    first_hello: Mutex<()>,
    jobs: Mutex<mpsc::Receiver<Job>>,
    alive: AtomicUsize,
}

/// How the pool is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStatus {
    /// Workers running.
    pub alive: usize,
    /// Workers configured.
    pub configured: usize,
}

/// `--function-workers` Python processes serving the deployed functions.
#[derive(Debug)]
pub struct FunctionPool {
    shared: Arc<Shared>,
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("function", &self.function.name)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl FunctionPool {
    /// A pool that will run `config`; nothing starts until [`Self::start`].
    pub fn new(config: FunctionConfig) -> Arc<Self> {
        let (sender, receiver) = mpsc::channel();
        Arc::new(Self {
            shared: Arc::new(Shared {
                config,
                registry: OnceLock::new(),
                first_hello: Mutex::new(()),
                jobs: Mutex::new(receiver),
                alive: AtomicUsize::new(0),
            }),
            sender: Mutex::new(Some(sender)),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Starts every worker and waits until each said hello. The first failure
    /// stops the pool and is returned: functions that do not import must not
    /// come up half-working.
    pub async fn start(&self) -> Result<()> {
        let workers = self.shared.config.workers.max(1);
        let (ready, mut started) = tokio::sync::mpsc::unbounded_channel();
        {
            let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
            for id in 0..workers {
                let shared = Arc::clone(&self.shared);
                let ready = ready.clone();
                let thread = std::thread::Builder::new()
                    .name(format!("quiver-fn-{id}"))
                    .spawn(move || run(&shared, id, &ready))
                    .map_err(|e| FunctionError::Startup(format!("cannot start a thread: {e}")))?;
                threads.push(thread);
            }
        }
        drop(ready);
        for _ in 0..workers {
            match started.recv().await {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    self.shutdown().await;
                    return Err(e);
                }
                None => {
                    self.shutdown().await;
                    return Err(FunctionError::Startup(
                        "a worker thread ended while starting".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The functions served: empty until the pool started.
    pub fn registry(&self) -> Registry {
        self.shared.registry.get().cloned().unwrap_or_default()
    }

    /// The function named `name`.
    pub fn function(&self, name: &str) -> Result<Arc<FunctionSpec>> {
        match self.shared.registry.get() {
            Some(registry) => registry.get(name).cloned(),
            None => Registry::default().get(name).cloned(),
        }
    }

    /// Workers alive and configured.
    pub fn status(&self) -> PoolStatus {
        PoolStatus {
            alive: self.shared.alive.load(Ordering::Relaxed),
            configured: self.shared.config.workers.max(1),
        }
    }

    /// The pool's settings.
    pub fn config(&self) -> &FunctionConfig {
        &self.shared.config
    }

    /// Runs `function` on `batch`, the call's batch number `index`, on the
    /// next free worker. Dropping the future before it completes withdraws the
    /// batch if no worker took it yet.
    pub async fn call(
        &self,
        function: &Arc<FunctionSpec>,
        batch: RecordBatch,
        index: u64,
    ) -> Result<Results> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            function: Arc::clone(function),
            input: Encoded::new(&batch)?,
            rows: batch.num_rows(),
            index,
            reply,
        };
        {
            let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
            let stopping = || FunctionError::NoWorkers("the server is shutting down".into());
            sender
                .as_ref()
                .ok_or_else(stopping)?
                .send(job)
                .map_err(|_| stopping())?;
        }
        answer
            .await
            .map_err(|_| FunctionError::NoWorkers("the worker thread went away".into()))?
    }

    /// Stops taking batches, lets each worker finish its batch and exit (or
    /// kills it after a grace period), and waits for the threads.
    pub async fn shutdown(&self) {
        drop(
            self.sender
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        let _ = joined.await;
    }
}

/// Starts worker `id`, checking its hello against the registry.
fn start_worker(shared: &Shared, id: usize) -> Result<Worker> {
    let (worker, hello) = Worker::spawn(&shared.config, id)?;
    let _first = shared
        .first_hello
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    match shared.registry.get() {
        Some(registry) if registry.same_as(&hello.functions) => {}
        Some(_) => {
            return Err(FunctionError::Startup(format!(
                "worker {id} (pid {}) declares other functions than the first worker: the \
                 modules must declare the same functions in every process",
                worker.pid()
            )));
        }
        None => {
            let registry = Registry::from_hello(hello.functions)?;
            let _ = shared.registry.set(registry);
        }
    }
    shared.alive.fetch_add(1, Ordering::Relaxed);
    metrics::set_alive(shared.alive.load(Ordering::Relaxed));
    Ok(worker)
}

fn lost(shared: &Shared) {
    shared.alive.fetch_sub(1, Ordering::Relaxed);
    metrics::set_alive(shared.alive.load(Ordering::Relaxed));
}

/// One worker thread: start the worker, then serve batches until the pool
/// stops.
fn run(shared: &Shared, id: usize, ready: &tokio::sync::mpsc::UnboundedSender<Result<()>>) {
    let mut worker = match start_worker(shared, id) {
        Ok(worker) => {
            let _ = ready.send(Ok(()));
            Some(worker)
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut backoff = FIRST_BACKOFF;
    let mut next_start = Instant::now();
    loop {
        let job = {
            let jobs = shared.jobs.lock().unwrap_or_else(PoisonError::into_inner);
            jobs.recv()
        };
        let Ok(job) = job else { break };
        if job.reply.is_closed() {
            // The call was cancelled while the batch waited.
            continue;
        }
        if worker.is_none() {
            // Start again, no sooner than the backoff allows; meanwhile the
            // batch fails rather than waits without bound.
            if Instant::now() < next_start {
                std::thread::sleep(next_start - Instant::now());
            }
            match start_worker(shared, id) {
                Ok(w) => {
                    worker = Some(w);
                    backoff = FIRST_BACKOFF;
                }
                Err(e) => {
                    tracing::error!(worker = id, error = %e, "function worker failed to start");
                    metrics::restarted("startup");
                    next_start = Instant::now() + backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    let _ = job.reply.send(Err(FunctionError::NoWorkers(e.to_string())));
                    continue;
                }
            }
        }
        let Some(w) = worker.as_mut() else { continue };
        let function = &job.function;
        let started = Instant::now();
        let outcome = w.call(&function.name, &job.input, shared.config.timeout);
        metrics::batch_done(&function.name, job.rows, &outcome, started);
        let (result, replace) = match outcome {
            Ok(results) => (Ok(results), None),
            Err(CallFailure::Raised { kind, failure }) => {
                let error = if kind == "FUNCTION_OUTPUT" {
                    FunctionError::Output {
                        function: function.name.clone(),
                        message: failure.message,
                        batch: job.index,
                    }
                } else {
                    tracing::warn!(
                        function = %function.name,
                        batch = job.index,
                        traceback = %failure.traceback,
                        "function raised {}: {}", failure.python_type, failure.message
                    );
                    FunctionError::Raised {
                        function: function.name.clone(),
                        python_type: failure.python_type,
                        message: failure.message,
                        batch: job.index,
                    }
                };
                (Err(error), None)
            }
            Err(CallFailure::TimedOut) => (
                Err(FunctionError::Timeout {
                    function: function.name.clone(),
                    timeout: shared.config.timeout.unwrap_or_default(),
                    batch: job.index,
                }),
                Some("timeout"),
            ),
            Err(CallFailure::Died { how, output }) => (
                Err(FunctionError::WorkerDied {
                    function: function.name.clone(),
                    how,
                    batch: job.index,
                    output,
                }),
                Some("crash"),
            ),
            Err(CallFailure::Broken(what)) => (Err(FunctionError::Internal(what)), Some("crash")),
        };
        if let (Err(e), Some(_)) = (&result, replace) {
            tracing::error!(worker = id, error = %e, "function worker replaced");
        }
        let _ = job.reply.send(result);
        if let Some(reason) = replace {
            worker = None;
            lost(shared);
            metrics::restarted(reason);
            // Replaced at once, so that the pool is whole again before the
            // next batch arrives.
            match start_worker(shared, id) {
                Ok(w) => worker = Some(w),
                Err(e) => {
                    tracing::error!(worker = id, error = %e, "function worker failed to start");
                    metrics::restarted("startup");
                    next_start = Instant::now() + backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
    if let Some(w) = worker {
        lost(shared);
        w.stop();
    }
}
