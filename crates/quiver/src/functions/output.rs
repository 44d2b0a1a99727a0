//! Where a call's results go, read as they arrive: a file written on its own
//! thread (a few batches behind the stream, so a slow disk slows the server
//! through flow control rather than filling memory), or nowhere (counted).

use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::{DecodedFlightData, DecodedPayload, FlightDataDecoder};
use arrow_flight::error::FlightError;
use arrow_flight::{FlightClient, FlightData};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::describe;
use crate::files::{FileSink, Format};

/// Batches the file writer may be behind the stream.
const WRITE_AHEAD: usize = 4;

/// What a call's result stream held.
#[derive(Debug, Default)]
pub(super) struct Received {
    /// Rows of the result batches.
    pub(super) rows: u64,
    /// The results' schema, if the server sent one.
    pub(super) schema: Option<SchemaRef>,
    /// The `app_metadata` of the last message that carried only metadata
    /// (apply's summary).
    pub(super) summary: Option<Bytes>,
}

/// DoExchange with `request` on `client`, the replies decoded. arrow-flight's
/// `FlightClient::do_exchange` cannot decode the metadata-only messages a
/// quiver server sends (apply's summary, metadata passed through: an empty
/// IPC header), so the replies are given a header of no kind first.
pub(super) async fn do_exchange(
    client: &mut FlightClient,
    request: impl Stream<Item = FlightData> + Send + 'static,
) -> Result<FlightDataDecoder, FlightError> {
    let mut request = tonic::Request::new(request);
    *request.metadata_mut() = client.metadata().clone();
    let replies = client.inner_mut().do_exchange(request).await?.into_inner();
    Ok(FlightDataDecoder::new(replies.map(|message| {
        let mut message = message.map_err(|s| FlightError::Tonic(Box::new(s)))?;
        if message.data_header.is_empty() {
            message.data_header = Bytes::from_static(quiver_ipc::NO_HEADER);
        }
        Ok(message)
    })))
}

/// Reads `results` to the end into `output`, showing each message to
/// `observe` first (for progress).
pub(super) async fn receive(
    mut results: FlightDataDecoder,
    output: &mut Output,
    mut observe: impl FnMut(&DecodedFlightData),
) -> Result<Received, Box<dyn std::error::Error>> {
    let mut received = Received::default();
    while let Some(message) = results.next().await {
        let message = message.map_err(describe)?;
        observe(&message);
        match message.payload {
            DecodedPayload::Schema(schema) => {
                output.start(&schema);
                received.schema = Some(schema);
            }
            DecodedPayload::RecordBatch(batch) => {
                received.rows += batch.num_rows() as u64;
                output.write(batch).await?;
            }
            DecodedPayload::None => {
                let metadata = message.inner.app_metadata;
                if !metadata.is_empty() && metadata != quiver_flight::STOP_INPUT {
                    received.summary = Some(metadata);
                }
            }
        }
    }
    Ok(received)
}

/// Where results go.
#[derive(Debug)]
pub(super) enum Output {
    /// Nowhere: they are counted.
    Discard,
    /// A file, created when the results' schema arrives.
    File {
        path: PathBuf,
        format: Format,
        writer: Option<Writer>,
        /// Whether the file was created (a writer started).
        created: bool,
    },
}

/// The thread writing a file, and the channel to it.
#[derive(Debug)]
pub(super) struct Writer {
    batches: mpsc::Sender<RecordBatch>,
    task: JoinHandle<Result<(), String>>,
}

impl Output {
    /// Results written to `path` as `format`.
    pub(super) fn file(path: PathBuf, format: Format) -> Self {
        Self::File {
            path,
            format,
            writer: None,
            created: false,
        }
    }

    /// Starts the file with the results' schema (a second schema is ignored:
    /// the decoder refuses one).
    fn start(&mut self, schema: &SchemaRef) {
        if let Self::File {
            path,
            format,
            writer,
            created,
        } = self
            && !*created
        {
            *writer = Some(Writer::spawn(path.clone(), *format, Arc::clone(schema)));
            *created = true;
        }
    }

    async fn write(&mut self, batch: RecordBatch) -> Result<(), String> {
        self.start(batch.schema_ref());
        let Self::File {
            writer: slot @ Some(_),
            ..
        } = self
        else {
            return Ok(());
        };
        let sent = match slot.as_ref() {
            Some(writer) => writer.batches.send(batch).await.is_ok(),
            None => true,
        };
        if sent {
            return Ok(());
        }
        // The writer stopped: its error says why.
        let stopped = match slot.take() {
            Some(writer) => writer.join().await,
            None => Ok(()),
        };
        Err(stopped
            .err()
            .unwrap_or_else(|| "the output file's writer stopped early".to_string()))
    }

    /// Finishes the file; one that never got a schema is written with
    /// `schema`, or none.
    pub(super) async fn finish(mut self, schema: Option<SchemaRef>) -> Result<(), String> {
        self.start(&schema.unwrap_or_else(|| Arc::new(Schema::empty())));
        match self {
            Self::File {
                writer: Some(writer),
                ..
            } => writer.join().await,
            _ => Ok(()),
        }
    }

    /// Stops writing and removes the file, after a failed call: no half
    /// result is left looking like a whole one.
    pub(super) async fn abandon(self) {
        if let Self::File {
            path,
            writer,
            created: true,
            ..
        } = self
        {
            if let Some(writer) = writer {
                let _ = writer.join().await;
            }
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Writer {
    fn spawn(path: PathBuf, format: Format, schema: SchemaRef) -> Self {
        let (batches, mut rx) = mpsc::channel::<RecordBatch>(WRITE_AHEAD);
        let task = tokio::task::spawn_blocking(move || {
            let mut sink = FileSink::create(&path, format, &schema).map_err(|e| e.to_string())?;
            while let Some(batch) = rx.blocking_recv() {
                sink.write(&batch)
                    .map_err(|e| format!("writing {}: {e}", path.display()))?;
            }
            sink.finish()
                .map_err(|e| format!("writing {}: {e}", path.display()))
        });
        Self { batches, task }
    }

    /// Waits for the file's last batch and footer to be written.
    async fn join(self) -> Result<(), String> {
        drop(self.batches);
        self.task
            .await
            .map_err(|e| format!("the output file's writer failed: {e}"))?
    }
}
