//! The client subcommands: put, get, ls, info, rm (functions, exchange and
//! apply are in [`crate::functions`], sql in [`crate::sql`]).

use std::sync::Arc;

use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::{Action, FlightDescriptor, FlightInfo};
use futures::{StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::cli::{Command, GetArgs, LsArgs, NameArg, PutArgs};
use crate::client::{Connector, describe};
use crate::files::{FileSink, Format, open_as};
use crate::size::ByteSize;

type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// Times a changed table is re-read before `get` gives up.
const GET_RETRIES: usize = 3;

pub(crate) async fn run(connector: &Connector, command: Command) -> CmdResult {
    match command {
        Command::Serve(_)
        | Command::Bench(_)
        | Command::User(_)
        | Command::Top(_)
        | Command::Cluster(_) => {
            unreachable!("handled in main")
        }
        Command::Put(args) => put(connector, args).await,
        Command::Get(args) => get(connector, args).await,
        Command::Ls(args) => ls(connector, args).await,
        Command::Info(args) => info(connector, args).await,
        Command::Rm(args) => rm(connector, args).await,
        Command::Sql(args) => crate::sql::run(connector, args).await,
        Command::Export(args) => crate::sql::export(connector, args).await,
        Command::Functions(args) => crate::functions::list(connector, args).await,
        Command::Exchange(args) => crate::functions::exchange(connector, args).await,
        Command::Apply(args) => crate::functions::apply(connector, args).await,
    }
}

fn descriptor(name: &str) -> FlightDescriptor {
    FlightDescriptor::new_path(vec![name.to_string()])
}

pub(crate) fn progress_bar(total_rows: Option<u64>) -> ProgressBar {
    let bar = match total_rows {
        Some(total) => ProgressBar::new(total).with_style(
            ProgressStyle::with_template("{bar:40} {human_pos}/{human_len} rows {per_sec} {eta}")
                .expect("valid template"),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {human_pos} rows {per_sec}")
                .expect("valid template"),
        ),
    };
    // indicatif draws only when stderr is a terminal.
    bar
}

async fn put(connector: &Connector, args: PutArgs) -> CmdResult {
    let format = Format::resolve(args.format, &args.file)?;
    // Rows appended to a table are read with its types, not the ones a
    // CSV's text suggests (`1` as an int where the table has a double).
    let csv_schema = match (format, args.append) {
        (Format::Csv, true) => {
            let mut client = connector.connect_server().await?;
            // No such table: the put says so.
            client
                .get_schema(descriptor(&args.name))
                .await
                .ok()
                .map(Arc::new)
        }
        _ => None,
    };
    let source = open_as(&args.file, format, args.batch_size, csv_schema)?;
    let schema = source.reader.schema();
    let bar = progress_bar(source.total_rows);

    // The file reader is blocking: run it on its own thread, a few batches ahead.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch, FlightError>>(4);
    let mut reader = source.reader;
    let read_task = tokio::task::spawn_blocking(move || {
        for batch in reader.by_ref() {
            if tx.blocking_send(batch.map_err(FlightError::Arrow)).is_err() {
                break;
            }
        }
    });
    let counted = bar.clone();
    let batches =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
            .inspect_ok(move |b| counted.inc(b.num_rows() as u64));

    let mut options = json!({"mode": if args.append { "append" } else { "replace" }});
    if let Some(p) = args.partitions {
        options["partitions"] = json!(p);
    }
    let encoded = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(descriptor(&args.name)))
        .with_metadata(options.to_string().into())
        .with_dictionary_handling(DictionaryHandling::Resend)
        .build(batches);

    let mut client = connector.connect_server().await?;
    let mut results = client.do_put(encoded).await.map_err(describe)?;
    let mut summary = None;
    while let Some(result) = results.next().await {
        let result = result.map_err(describe)?;
        summary = serde_json::from_slice::<Value>(&result.app_metadata).ok();
    }
    read_task.await?;
    bar.finish_and_clear();
    let rows = summary
        .as_ref()
        .and_then(|s| s["rows"].as_u64())
        .unwrap_or(0);
    let bytes = summary
        .as_ref()
        .and_then(|s| s["bytes"].as_u64())
        .unwrap_or(0);
    println!(
        "{} '{}': {rows} rows, {} in the table",
        if args.append { "appended to" } else { "stored" },
        args.name,
        ByteSize(bytes)
    );
    Ok(())
}

/// Reads every endpoint of `info` in parallel, each from the first of its
/// locations that answers ([`Connector::do_get`]), and returns the batches in
/// endpoint order.
async fn fetch_all(
    connector: &Connector,
    info: &FlightInfo,
    bar: &ProgressBar,
) -> Result<Vec<RecordBatch>, FlightError> {
    let fetches = info.endpoint.iter().map(|endpoint| {
        let bar = bar.clone();
        async move {
            connector
                .do_get(endpoint)
                .await?
                .inspect_ok(|b| bar.inc(b.num_rows() as u64))
                .try_collect::<Vec<_>>()
                .await
        }
    });
    let parts = futures::future::try_join_all(fetches).await?;
    Ok(parts.into_iter().flatten().collect())
}

async fn get(connector: &Connector, args: GetArgs) -> CmdResult {
    let format = Format::resolve(args.format, &args.output)?;
    let mut client = connector.connect_server().await?;
    let mut attempt = 0;
    let (schema, batches) = loop {
        let info = client
            .get_flight_info(descriptor(&args.name))
            .await
            .map_err(describe)?;
        let schema = Arc::new(info.clone().try_decode_schema()?);
        let bar = progress_bar(u64::try_from(info.total_records).ok());
        match fetch_all(connector, &info, &bar).await {
            Ok(batches) => {
                bar.finish_and_clear();
                break (schema, batches);
            }
            Err(FlightError::Tonic(s))
                if s.code() == tonic::Code::Aborted && attempt < GET_RETRIES =>
            {
                bar.finish_and_clear();
                attempt += 1;
            }
            Err(e) => return Err(describe(e).into()),
        }
    };
    let mut sink = FileSink::create(&args.output, format, &schema)?;
    let mut rows = 0;
    for batch in &batches {
        rows += batch.num_rows();
        sink.write(batch)?;
    }
    sink.finish()?;
    println!(
        "wrote {rows} rows of '{}' to {}",
        args.name,
        args.output.display()
    );
    Ok(())
}

fn table_name(info: &FlightInfo) -> String {
    info.flight_descriptor
        .as_ref()
        .map(|d| {
            if d.path.is_empty() {
                String::from_utf8_lossy(&d.cmd).into_owned()
            } else {
                d.path.join("/")
            }
        })
        .unwrap_or_default()
}

pub(crate) async fn ls(connector: &Connector, args: LsArgs) -> CmdResult {
    let mut client = connector.connect_server().await?;
    let infos: Vec<FlightInfo> = client
        .list_flights(args.prefix.into_bytes())
        .await
        .map_err(describe)?
        .try_collect()
        .await
        .map_err(describe)?;
    if args.json {
        for info in &infos {
            let columns = info
                .clone()
                .try_decode_schema()
                .map(|s| s.fields().len())
                .unwrap_or(0);
            println!(
                "{}",
                json!({"name": table_name(info), "rows": info.total_records, "bytes": info.total_bytes, "columns": columns})
            );
        }
        return Ok(());
    }
    let width = infos
        .iter()
        .map(|i| table_name(i).len())
        .max()
        .unwrap_or(0)
        .max(4);
    println!(
        "{:<width$}  {:>14}  {:>11}  {:>7}",
        "NAME", "ROWS", "SIZE", "COLUMNS"
    );
    for info in &infos {
        let columns = info
            .clone()
            .try_decode_schema()
            .map(|s| s.fields().len())
            .unwrap_or(0);
        println!(
            "{:<width$}  {:>14}  {:>11}  {:>7}",
            table_name(info),
            info.total_records,
            ByteSize(u64::try_from(info.total_bytes).unwrap_or(0)).to_string(),
            columns
        );
    }
    Ok(())
}

pub(crate) async fn info(connector: &Connector, args: NameArg) -> CmdResult {
    let mut client = connector.connect_server().await?;
    let info = client
        .get_flight_info(descriptor(&args.name))
        .await
        .map_err(describe)?;
    let schema: Schema = info.clone().try_decode_schema()?;
    let meta: Value = serde_json::from_slice(&info.app_metadata).unwrap_or(Value::Null);
    println!("table:      {}", args.name);
    println!("version:    {}", meta["version"]);
    println!("rows:       {}", info.total_records);
    println!(
        "size:       {}",
        ByteSize(u64::try_from(info.total_bytes).unwrap_or(0))
    );
    println!("endpoints:  {}", info.endpoint.len());
    for endpoint in &info.endpoint {
        let locations: Vec<&str> = endpoint.location.iter().map(|l| l.uri.as_str()).collect();
        println!("  - {}", locations.join(", "));
    }
    println!("schema:");
    for field in schema.fields() {
        println!(
            "  {}: {}{}",
            field.name(),
            field.data_type(),
            if field.is_nullable() { "" } else { " not null" }
        );
    }
    Ok(())
}

async fn rm(connector: &Connector, args: NameArg) -> CmdResult {
    let mut client = connector.connect_server().await?;
    let results: Vec<bytes::Bytes> = client
        .do_action(Action::new("delete", args.name.clone()))
        .await
        .map_err(describe)?
        .try_collect()
        .await
        .map_err(describe)?;
    let result: Value = results
        .first()
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or(Value::Null);
    println!(
        "deleted '{}' ({} rows, {})",
        args.name,
        result["rows"],
        ByteSize(result["bytes"].as_u64().unwrap_or(0))
    );
    Ok(())
}
