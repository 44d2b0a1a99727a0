//! `quiver._core`: the Rust core of quiver's Python package.
//!
//! The Python client keeps pyarrow as its type system and for the control
//! RPCs (GetFlightInfo, actions, SQL, DoExchange); the data moves here:
//!
//! - [`get`]: DoGet of one or many endpoints, on Rust threads with the GIL
//!   released, each from the first of its locations that can be reached,
//!   each body copied once into aligned memory that is reused once the
//!   batches holding it are dropped;
//! - [`put`]: DoPut whose request body references the arrays' buffers;
//! - [`shm`]: the shared-memory get, batches built from the metadata received.
//!
//! Batches cross into pyarrow through the Arrow C stream interface, without
//! copying ([`arrow_c`]). [`connection`] holds the settings and connections, [`runtime`]
//! the process's tokio runtime, [`error`] the one error type and its Python
//! exception.

mod arrow_c;
mod connection;
mod error;
mod get;
mod put;
mod runtime;
mod shm;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_flight::FlightDescriptor;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::{HeaderMap, HeaderName, HeaderValue};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use quiver_wire::BodyPool;
use tokio::sync::mpsc;

use crate::connection::{Connections, Settings};
use crate::error::{CallError, Error, Result};
use crate::runtime::runtime;

/// Batches a streaming reader decodes ahead of its consumer.
const READ_AHEAD: usize = 2;

/// A client's connections to Flight servers: its TLS material, the headers
/// every call sends, its timeout, and its received bodies' memory.
#[pyclass(frozen, module = "quiver._core")]
struct Connection {
    connections: Arc<Connections>,
    bodies: BodyPool,
}

#[pymethods]
impl Connection {
    /// Settings as for `pyarrow.flight.FlightClient`; `headers` are sent with
    /// every call; `body_pool_bytes` of freed bodies are kept for reuse.
    #[new]
    #[pyo3(signature = (
        *,
        tls_root_certs = None,
        cert_chain = None,
        private_key = None,
        override_hostname = None,
        headers = Vec::new(),
        timeout = None,
        max_message_size = 1 << 30,
        body_pool_bytes = 1 << 30,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        tls_root_certs: Option<Vec<u8>>,
        cert_chain: Option<Vec<u8>>,
        private_key: Option<Vec<u8>>,
        override_hostname: Option<String>,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
        timeout: Option<f64>,
        max_message_size: usize,
        body_pool_bytes: usize,
    ) -> PyResult<Self> {
        let identity = match (cert_chain, private_key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(Error::Invalid("cert_chain and private_key go together".into()).into());
            }
        };
        let mut header_map = HeaderMap::new();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(&name)
                .map_err(|e| Error::Invalid(format!("header name: {e}")))?;
            let value = HeaderValue::from_bytes(&value)
                .map_err(|e| Error::Invalid(format!("header {name}: {e}")))?;
            header_map.append(name, value);
        }
        let timeout = timeout
            .map(Duration::try_from_secs_f64)
            .transpose()
            .map_err(|e| Error::Invalid(format!("timeout: {e}")))?;
        let settings = Settings {
            tls_root_certs,
            identity,
            override_hostname,
            headers: header_map,
            timeout,
            max_message_size,
        };
        Ok(Self {
            connections: Arc::new(Connections::new(settings)),
            bodies: BodyPool::new(body_pool_bytes),
        })
    }

    /// Freed bodies held for reuse: `(bytes, regions)`.
    fn body_pool(&self) -> (usize, usize) {
        let stats = self.bodies.stats();
        (stats.idle_bytes, stats.idle_regions)
    }

    /// The locations this client holds an idle connection to, sorted.
    fn locations(&self) -> Vec<String> {
        self.connections.locations()
    }

    /// DoGet every `(locations, ticket)`, at most `max_streams` at once, each
    /// on a connection of its own, from the first of its locations that
    /// answers (the next one tried when one cannot be reached before the
    /// schema arrives); a `pyarrow.RecordBatchReader` over their batches, in
    /// endpoint order. The first endpoint (in order) that fails raises
    /// `CallError`; the others are cancelled.
    #[pyo3(signature = (endpoints, max_streams = 16))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        endpoints: Vec<(Vec<String>, Vec<u8>)>,
        max_streams: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let runtime = runtime()?;
        let fetches = endpoints.into_iter().map(|(locations, ticket)| {
            let (connections, bodies) = (Arc::clone(&self.connections), self.bodies.clone());
            let fetch = AbortOnDrop(runtime.spawn(async move {
                get::do_get_first(connections, locations, Bytes::from(ticket), bodies)
                    .await?
                    .collect()
                    .await
            }));
            async move {
                let mut fetch = fetch;
                (&mut fetch.0)
                    .await
                    .map_err(|e| Error::Internal(format!("an endpoint's task failed: {e}")))?
            }
        });
        // `buffered` starts the next fetch as one ends and yields them in
        // order; dropping the rest at the first error aborts their tasks.
        let parts: Vec<(SchemaRef, Vec<RecordBatch>)> = py.detach(|| {
            runtime.block_on(
                futures::stream::iter(fetches)
                    .buffered(max_streams.max(1))
                    .try_collect(),
            )
        })?;
        let schema = parts
            .first()
            .map(|(schema, _)| Arc::clone(schema))
            .ok_or_else(|| Error::Invalid("no endpoints to read".into()))?;
        let batches = parts.into_iter().flat_map(|(_, batches)| batches).map(Ok);
        let reader: Box<dyn RecordBatchReader + Send> =
            Box::new(RecordBatchIterator::new(batches, schema));
        arrow_c::to_pyarrow(py, reader)
    }

    /// DoGet of one endpoint as a stream, from the first of its `locations`
    /// that answers: `(pyarrow.RecordBatchReader, StreamStatus)`. A batch is
    /// decoded ahead of the one being read; the status raises the call's
    /// error after the reader has failed.
    fn get_stream<'py>(
        &self,
        py: Python<'py>,
        locations: Vec<String>,
        ticket: Vec<u8>,
    ) -> PyResult<(Bound<'py, PyAny>, StreamStatus)> {
        let runtime = runtime()?;
        let (connections, bodies) = (Arc::clone(&self.connections), self.bodies.clone());
        let mut stream = py.detach(|| {
            runtime.block_on(get::do_get_first(
                connections,
                locations,
                Bytes::from(ticket),
                bodies,
            ))
        })?;
        let schema = stream.schema();
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        runtime.spawn(async move {
            while let Some(batch) = stream.next_batch().await {
                let failed = batch.is_err();
                // The reader was dropped: dropping the stream cancels the call.
                if tx.send(batch).await.is_err() || failed {
                    break;
                }
            }
        });
        let status = StreamStatus::default();
        let reader: Box<dyn RecordBatchReader + Send> = Box::new(StreamReader {
            schema,
            batches: rx,
            error: Arc::clone(&status.error),
        });
        Ok((arrow_c::to_pyarrow(py, reader)?, status))
    }

    /// DoPut of `data` (any object with `__arrow_c_stream__`) to the table
    /// at `path`, `app_metadata` in the first message, batches over
    /// `max_message_bytes` sent as row slices. Returns the last PutResult's
    /// `app_metadata`.
    fn put<'py>(
        &self,
        py: Python<'py>,
        location: String,
        path: Vec<String>,
        data: &Bound<'py, PyAny>,
        app_metadata: Vec<u8>,
        max_message_bytes: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let runtime = runtime()?;
        let reader = arrow_c::from_python(data)?;
        let schema = reader.schema();
        let request = put::PutRequest {
            location,
            descriptor: FlightDescriptor::new_path(path),
            app_metadata: Bytes::from(app_metadata),
            max_message_bytes,
        };
        let connections = Arc::clone(&self.connections);
        let result =
            py.detach(|| put::do_put(&runtime, connections, request, schema, reader.into_iter()))?;
        Ok(PyBytes::new(py, &result))
    }
}

/// A spawned task aborted if its result is no longer wanted.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The error that ended a streaming DoGet, for Python to raise as itself
/// (through the C stream interface it is only a message).
#[pyclass(frozen, module = "quiver._core")]
#[derive(Default)]
struct StreamStatus {
    error: Arc<Mutex<Option<Error>>>,
}

#[pymethods]
impl StreamStatus {
    /// Raises the stream's error, if it failed.
    fn check(&self) -> PyResult<()> {
        match self.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// A streaming DoGet's batches as a `RecordBatchReader`, fed by the task
/// reading the stream.
struct StreamReader {
    schema: SchemaRef,
    batches: mpsc::Receiver<Result<RecordBatch>>,
    error: Arc<Mutex<Option<Error>>>,
}

impl Iterator for StreamReader {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.batches.blocking_recv()? {
            Ok(batch) => Some(Ok(batch)),
            Err(e) => {
                let message = e.to_string();
                *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                Some(Err(ArrowError::ExternalError(message.into())))
            }
        }
    }
}

impl RecordBatchReader for StreamReader {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

#[pymodule]
fn _core(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Connection>()?;
    module.add_class::<StreamStatus>()?;
    module.add("CallError", module.py().get_type::<CallError>())?;
    module.add_function(wrap_pyfunction!(shm::shm_get, module)?)?;
    Ok(())
}
