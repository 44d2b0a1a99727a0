//! DoPut streams decoded: FlightData messages into a schema and record batches.
//!
//! Every DoPut, whichever path read its frames (quiver's own below tonic, or
//! tonic's) and whatever it carries (a table, a Flight SQL ingest, a prepared
//! statement's parameters), is decoded here, once: IPC messages whose buffers
//! lie outside their body are refused before arrow-ipc sees them
//! ([`quiver_wire::ipc_message`]), a panic of arrow-ipc's decoder on other
//! malformed data is the client's bad data (INVALID_ARGUMENT), the put's
//! options are taken from the first `app_metadata` of any message, and the
//! body bytes received are counted, which is what the stored batches hold in
//! memory (dictionary bodies included, each once).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::tables::TablePut;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::FlightData;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::error::FlightError;
use bytes::Bytes;
use futures::stream::{self, Stream};
use futures::{FutureExt, StreamExt, TryStreamExt};
use tonic::Status;

use crate::body_watch::BodyOutcome;
use crate::error::inbound_status;
use crate::{Error, PutOptions, Result, panics};

/// What a DoPut stream carries, decoded message by message.
pub(crate) struct PutDecoder {
    decoder: FlightDataDecoder,
    first_metadata: Arc<OnceLock<Bytes>>,
    received_bytes: Arc<AtomicU64>,
    schema: Option<SchemaRef>,
}

impl std::fmt::Debug for PutDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutDecoder")
            .field("received_bytes", &self.received_bytes())
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PutDecoder {
    /// A decoder of the stream whose first message (already read for its
    /// descriptor) is `first`.
    pub(crate) fn new(
        first: FlightData,
        input: impl Stream<Item = Result<FlightData, Status>> + Send + Unpin + 'static,
    ) -> Self {
        let first_metadata: Arc<OnceLock<Bytes>> = Arc::default();
        let received_bytes = Arc::new(AtomicU64::new(0));
        let (metadata_seen, bytes_seen) =
            (Arc::clone(&first_metadata), Arc::clone(&received_bytes));
        let messages = stream::once(async { Ok(first) })
            .chain(input.map_err(|s| FlightError::Tonic(Box::new(inbound_status(s)))))
            .try_filter_map(move |data: FlightData| {
                if !data.app_metadata.is_empty() {
                    let _ = metadata_seen.set(data.app_metadata.clone());
                }
                bytes_seen.fetch_add(data.data_body.len() as u64, Ordering::Relaxed);
                futures::future::ready(
                    quiver_wire::ipc_message(data)
                        .map_err(|e| FlightError::DecodeError(e.to_string())),
                )
            });
        Self {
            decoder: FlightDataDecoder::new(messages),
            first_metadata,
            received_bytes,
            schema: None,
        }
    }

    /// The next record batch; `None` at the end of the stream. The schema
    /// message is taken on the way (one per stream).
    pub(crate) async fn next_batch(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            // arrow-ipc panics on some malformed messages instead of failing:
            // a panic while decoding is the client's bad data, refused as such.
            let decoded = AssertUnwindSafe(self.decoder.next())
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| {
                    let what = panics::panic_message(&*panic);
                    tracing::warn!(panic = %what, "the IPC decoder panicked on a DoPut's data");
                    Some(Err(FlightError::DecodeError(format!(
                        "malformed IPC message (the decoder failed: {what})"
                    ))))
                })?;
            let payload = match decoded {
                Ok(decoded) => decoded.payload,
                Err(e) => return Some(Err(e.into())),
            };
            match payload {
                DecodedPayload::None => {}
                DecodedPayload::Schema(schema) => {
                    if self.schema.is_some() {
                        return Some(Err(Error::invalid(
                            "a DoPut stream must carry one schema message",
                        )));
                    }
                    self.schema = Some(schema);
                }
                DecodedPayload::RecordBatch(batch) => return Some(Ok(batch)),
            }
        }
    }

    /// The stream's schema, once its schema message has been decoded.
    pub(crate) fn schema(&self) -> Option<&SchemaRef> {
        self.schema.as_ref()
    }

    /// Body bytes received so far.
    pub(crate) fn received_bytes(&self) -> u64 {
        self.received_bytes.load(Ordering::Relaxed)
    }

    /// The put's options: the first `app_metadata` of any message so far.
    pub(crate) fn options(&self) -> Result<PutOptions> {
        Ok(self
            .first_metadata
            .get()
            .map(|m| PutOptions::from_app_metadata(m))
            .transpose()?
            .unwrap_or_default())
    }

    /// Reads the batches into the put `open` makes, and returns it
    /// uncommitted. `open` runs at the first batch (or at the end, for a table
    /// of no rows): by then the put's options have arrived, wherever the
    /// client put them. `outcome` tells whether the transport broke the stream
    /// off (tonic reports that as a clean end); `None` when the input reports
    /// it as an error itself.
    pub(crate) async fn into_put<'a>(
        mut self,
        outcome: Option<BodyOutcome>,
        open: impl FnOnce(SchemaRef, PutOptions) -> Result<Box<dyn TablePut + 'a>>,
    ) -> Result<Box<dyn TablePut + 'a>> {
        let mut open = Some(open);
        let mut open_writer = |decoder: &Self| {
            let schema = decoder
                .schema()
                .cloned()
                .ok_or_else(|| Error::invalid("DoPut stream carried no schema before its data"))?;
            let open = open
                .take()
                .ok_or_else(|| Error::Internal("a put's writer opened twice".into()))?;
            open(schema, decoder.options()?)
        };
        let mut writer = None;
        let mut charged = 0u64;
        while let Some(batch) = self.next_batch().await {
            let batch = batch?;
            let writer = match &mut writer {
                Some(writer) => writer,
                None => writer.insert(open_writer(&self)?),
            };
            let received = self.received_bytes();
            writer.push_charged(batch, received - charged).await?;
            charged = received;
        }
        // tonic ends a cancelled request stream as if the client had finished it.
        if outcome.is_some_and(|o| o.broken()) {
            return Err(Error::Cancelled(
                "the DoPut stream broke off before its end; nothing was stored".into(),
            ));
        }
        match writer {
            Some(writer) => Ok(writer),
            None => open_writer(&self),
        }
    }
}
