//! Throughput of the Rust Flight client: the paper's 4 x int64 records, over
//! N parallel streams, each on its own connection.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::{FlightData, FlightDescriptor, FlightInfo};
use futures::{StreamExt, TryStreamExt, stream};
use serde_json::json;

use super::{ClientArgs, Op, gbps};
use crate::client::{Connector, describe};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Bytes in one record: four int64 columns.
const RECORD_BYTES: u64 = 32;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(
        ["a", "b", "c", "d"]
            .map(|n| Field::new(n, DataType::Int64, false))
            .to_vec(),
    ))
}

/// `rows` records in batches of `batch_rows`.
fn records(rows: usize, batch_rows: usize) -> Result<Vec<RecordBatch>> {
    let schema = schema();
    let mut out = Vec::new();
    let mut start = 0;
    while start < rows {
        let len = batch_rows.min(rows - start);
        let columns: Vec<ArrayRef> = (0..4i64)
            .map(|c| {
                let base = start as i64 * 4 + c;
                Arc::new(Int64Array::from_iter_values(
                    (0..len as i64).map(move |i| base + i * 4),
                )) as ArrayRef
            })
            .collect();
        out.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
        start += len;
    }
    Ok(out)
}

async fn put_table(
    connector: &Connector,
    server: &str,
    name: String,
    options: serde_json::Value,
    batches: Vec<RecordBatch>,
) -> Result<()> {
    let mut client = connector.connect(server).await?;
    let encoded = FlightDataEncoderBuilder::new()
        .with_schema(schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![name])))
        .build(stream::iter(batches.into_iter().map(Ok)));
    // The options travel in a metadata-only message right after the schema, as
    // pyarrow's `write_metadata` sends them: servers built on Arrow C++ never see
    // the schema message's app_metadata.
    let options = FlightData {
        app_metadata: options.to_string().into(),
        ..Default::default()
    };
    let mut options = Some(options);
    let with_options = encoded.flat_map(move |item| {
        let extra = if item.is_ok() {
            options.take().map(Ok)
        } else {
            None
        };
        stream::iter(std::iter::once(item).chain(extra))
    });
    client
        .do_put(with_options)
        .await
        .map_err(describe)?
        .try_collect::<Vec<_>>()
        .await
        .map_err(describe)?;
    Ok(())
}

async fn get_all(connector: &Connector, server: &str, info: &FlightInfo) -> Result<u64> {
    let fetches = info.endpoint.iter().map(|endpoint| async move {
        let ticket = endpoint.ticket.clone().ok_or("endpoint without a ticket")?;
        let mut client = connector.connect(server).await?;
        let batches: Vec<RecordBatch> = client
            .do_get(ticket)
            .await
            .map_err(describe)?
            .try_collect()
            .await
            .map_err(describe)?;
        Ok::<u64, Box<dyn std::error::Error>>(batches.iter().map(|b| b.num_rows() as u64).sum())
    });
    let rows = futures::future::try_join_all(fetches).await?;
    Ok(rows.iter().sum())
}

pub(super) async fn run(args: ClientArgs, connector: &Connector) -> Result<()> {
    let streams = args.streams.max(1);
    let batch_rows = args.batch_rows.max(1);
    let bytes = (streams * args.rows) as u64 * RECORD_BYTES;
    match args.op {
        Op::Put => {
            let data = records(args.rows, batch_rows)?;
            for rep in 0..args.repeat {
                let started = Instant::now();
                let puts = (0..streams).map(|i| {
                    put_table(
                        connector,
                        &args.server,
                        format!("bench-rust-{i}"),
                        json!({"mode": "replace"}),
                        data.clone(),
                    )
                });
                futures::future::try_join_all(puts).await?;
                let seconds = started.elapsed().as_secs_f64();
                report("put", &args, rep, bytes, seconds, None);
            }
        }
        Op::Get => {
            let name = "bench-rust-get";
            put_table(
                connector,
                &args.server,
                name.to_string(),
                json!({"mode": "replace", "partitions": streams}),
                records(streams * args.rows, batch_rows)?,
            )
            .await?;
            let mut control = connector.connect(&args.server).await?;
            for rep in 0..args.repeat {
                let started = Instant::now();
                let info = control
                    .get_flight_info(FlightDescriptor::new_path(vec![name.to_string()]))
                    .await
                    .map_err(describe)?;
                let rows = get_all(connector, &args.server, &info).await?;
                let seconds = started.elapsed().as_secs_f64();
                if rows != (streams * args.rows) as u64 {
                    return Err(format!("got {rows} rows, expected {}", streams * args.rows).into());
                }
                report("get", &args, rep, bytes, seconds, Some(info.endpoint.len()));
            }
        }
    }
    Ok(())
}

fn report(
    op: &str,
    args: &ClientArgs,
    rep: usize,
    bytes: u64,
    seconds: f64,
    endpoints: Option<usize>,
) {
    println!(
        "{}",
        json!({
            "op": op,
            "client": "rust",
            "streams": args.streams,
            "rows_per_stream": args.rows,
            "batch_rows": args.batch_rows,
            "endpoints": endpoints,
            "rep": rep,
            "bytes": bytes,
            "seconds": seconds,
            "gbps": gbps(bytes, seconds),
        })
    );
}
