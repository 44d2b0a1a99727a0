//! `quiver exchange NAME IN -o OUT`: a file through a served function, both
//! ways at once (DoExchange with `{"function": NAME}`).
//!
//! Three things run together: a thread reading the input file a few batches
//! ahead, the transport sending them (tonic drives the request stream), and
//! this task reading results into the output's writer thread. The server
//! holds only a few batches of a call, so a client that wrote everything
//! before reading would stall it.
//!
//! Progress is over input rows whose results arrived: each record batch
//! message sent carries its row count as `app_metadata`, which the server
//! returns on the first result message of that batch (results come in input
//! order, so the count is exact).

use arrow::record_batch::{RecordBatch, RecordBatchReader};
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, FlightDescriptor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::{StreamExt, TryStreamExt};
use indicatif::ProgressBar;
use serde_json::json;
use tokio::sync::mpsc;

use super::output::{Output, Received, do_exchange, receive};
use super::{CmdResult, ExchangeArgs};
use crate::client::{Connector, describe};
use crate::commands::progress_bar;
use crate::files::{FileSource, Format, open};

/// Batches the input reader may be ahead of the transport.
const READ_AHEAD: usize = 4;

/// Largest message body sent: a batch over it goes as several zero-copy
/// slices. As the Python client's put: large enough that `--batch-rows`,
/// not this, decides what one function call gets.
const MAX_FLIGHT_DATA_SIZE: usize = 64 << 20;

pub(crate) async fn exchange(connector: &Connector, args: ExchangeArgs) -> CmdResult {
    let input_format = Format::resolve(args.format, &args.input)?;
    let output_format = Format::resolve(args.output_format, &args.output)?;
    let source = open(&args.input, input_format, args.batch_rows)?;
    let bar = progress_bar(source.total_rows);
    let mut output = Output::file(args.output.clone(), output_format);
    let result = call(
        connector,
        &args.name,
        source,
        args.batch_rows,
        &mut output,
        &bar,
    )
    .await;
    bar.finish_and_clear();
    let (sent, received) = match result {
        Ok(done) => done,
        Err(e) => {
            output.abandon().await;
            return Err(e);
        }
    };
    output.finish(received.schema).await?;
    println!(
        "{sent} rows through '{}': wrote {} rows to {}",
        args.name,
        received.rows,
        args.output.display()
    );
    Ok(())
}

/// Sends `source`'s batches (at most `batch_rows` rows each) through
/// function `name` into `output`; returns the input rows sent and what came
/// back. `bar` counts input rows whose results arrived.
pub(super) async fn call(
    connector: &Connector,
    name: &str,
    source: FileSource,
    batch_rows: usize,
    output: &mut Output,
    bar: &ProgressBar,
) -> Result<(u64, Received), Box<dyn std::error::Error>> {
    let schema = source.reader.schema();
    let reader = source.reader;
    let (tx, rx) = mpsc::channel::<Result<RecordBatch, FlightError>>(READ_AHEAD);
    let read_task = tokio::task::spawn_blocking(move || read_input(reader, batch_rows, &tx));
    let batches =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    let command = json!({ "function": name }).to_string();
    let encoded = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(FlightDescriptor::new_cmd(command)))
        .with_max_flight_data_size(MAX_FLIGHT_DATA_SIZE)
        .with_dictionary_handling(DictionaryHandling::Resend)
        .build(batches)
        .map_ok(tag_rows);

    // The request stream ends at its first error (a file that does not
    // read), kept to be reported once the server has answered what it got,
    // or when the server reads no more input (it sent STOP_INPUT).
    let failed = Arc::new(Mutex::new(None));
    let kept = Arc::clone(&failed);
    let halted = Arc::new(AtomicBool::new(false));
    let halt = Arc::clone(&halted);
    let encoded = encoded
        .take_while(move |_| futures::future::ready(!halt.load(Ordering::Relaxed)))
        .map(move |message| match message {
            Ok(message) => Some(message),
            Err(e) => {
                *kept.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                None
            }
        })
        .take_while(|message| futures::future::ready(message.is_some()))
        .filter_map(futures::future::ready);
    let mut client = connector.connect_server().await?;
    let results = do_exchange(&mut client, encoded).await.map_err(describe)?;
    let received = receive(results, output, |message| {
        if message.inner.app_metadata == quiver_flight::STOP_INPUT {
            halted.store(true, Ordering::Relaxed);
        }
        if let Some(rows) = tagged_rows(&message.inner.app_metadata) {
            bar.inc(rows);
        }
    })
    .await?;
    // The results ended after the server read the whole input, so the
    // reader is done; a panic there would have looked like the input's end.
    if let Some(e) = failed.lock().unwrap_or_else(PoisonError::into_inner).take() {
        return Err(describe(e).into());
    }
    let sent = read_task.await?;
    Ok((sent, received))
}

/// Reads every batch of `reader` into `tx`, sliced to at most `batch_rows`
/// rows; returns the rows sent. A read error is sent too: it ends the call.
fn read_input(
    mut reader: Box<dyn RecordBatchReader + Send>,
    batch_rows: usize,
    tx: &mpsc::Sender<Result<RecordBatch, FlightError>>,
) -> u64 {
    let mut sent = 0;
    for batch in reader.by_ref() {
        let batch = match batch {
            Ok(batch) => batch,
            Err(e) => {
                let _ = tx.blocking_send(Err(FlightError::Arrow(e)));
                break;
            }
        };
        for slice in slices(&batch, batch_rows) {
            let rows = slice.num_rows() as u64;
            if tx.blocking_send(Ok(slice)).is_err() {
                return sent;
            }
            sent += rows;
        }
    }
    sent
}

/// `batch` cut into zero-copy slices of at most `rows` rows (one slice,
/// `batch` itself, when it is no longer; empty batches are kept).
pub(super) fn slices(batch: &RecordBatch, rows: usize) -> Vec<RecordBatch> {
    let total = batch.num_rows();
    if total <= rows || rows == 0 {
        return vec![batch.clone()];
    }
    (0..total)
        .step_by(rows)
        .map(|offset| batch.slice(offset, rows.min(total - offset)))
        .collect()
}

/// A record batch message tagged with its row count (decimal) as
/// `app_metadata`; other messages (schema, dictionaries) as they are.
pub(super) fn tag_rows(mut data: FlightData) -> FlightData {
    if let Some(rows) = batch_rows(&data.data_header) {
        data.app_metadata = rows.to_string().into();
    }
    data
}

/// The row count in an IPC message header, if it is a record batch's.
fn batch_rows(header: &[u8]) -> Option<u64> {
    let message = arrow::ipc::root_as_message(header).ok()?;
    let batch = message.header_as_record_batch()?;
    u64::try_from(batch.length()).ok()
}

/// The row count a result message's `app_metadata` returns, if it is one
/// of our tags.
pub(super) fn tagged_rows(app_metadata: &[u8]) -> Option<u64> {
    std::str::from_utf8(app_metadata).ok()?.parse().ok()
}
