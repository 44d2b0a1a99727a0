//! The function subcommands against the fake server of [`super::testing`].

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use clap::Parser;
use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::output::Output;
use super::testing::{self, FakeServer};
use super::{ApplyArgs, apply, exchange, list};
use crate::cli::{Cli, Command};
use crate::client::{Connector, Credentials};
use crate::files::{Format, open};

fn connector(server: &FakeServer) -> Connector {
    Connector::new(server.uri.clone(), None, None, Credentials::None)
}

/// Batches of `x` (0, 1, 2, ...) and a payload column, of `sizes` rows.
fn batches(sizes: &[usize]) -> Vec<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, false),
        Field::new("pad", DataType::Int64, false),
    ]));
    let mut start = 0i64;
    sizes
        .iter()
        .map(|&rows| {
            let end = start + rows as i64;
            let x: ArrayRef = Arc::new(Int64Array::from_iter_values(start..end));
            let pad: ArrayRef = Arc::new(Int64Array::from_iter_values((start..end).map(|v| -v)));
            start = end;
            RecordBatch::try_new(Arc::clone(&schema), vec![x, pad]).unwrap()
        })
        .collect()
}

fn write_stream(path: &Path, batches: &[RecordBatch]) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(file, &batches[0].schema()).unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.finish().unwrap();
}

fn read_file(path: &Path, format: Format) -> Vec<RecordBatch> {
    open(path, format, 1 << 20)
        .unwrap()
        .reader
        .collect::<Result<_, _>>()
        .unwrap()
}

fn column(batches: &[RecordBatch], name: &str) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let column = b.column_by_name(name).unwrap();
            let values = column.as_any().downcast_ref::<Int64Array>().unwrap();
            values.values().to_vec()
        })
        .collect()
}

/// `exchange`'s call, with the bar it counts on.
async fn exchange_file(
    server: &FakeServer,
    name: &str,
    input: &Path,
    batch_rows: usize,
    output: &mut Output,
) -> Result<(u64, u64, ProgressBar), String> {
    let source = open(input, Format::Arrows, batch_rows).unwrap();
    let bar = ProgressBar::hidden();
    let (sent, received) =
        exchange::call(&connector(server), name, source, batch_rows, output, &bar)
            .await
            .map_err(|e| e.to_string())?;
    Ok((sent, received.rows, bar))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_streams_a_file_through_a_function_both_ways() {
    let server = testing::start().await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.arrows");
    // 64 MiB each way: more than the HTTP/2 windows, so a client that wrote
    // everything before reading would stall against this server, which
    // reads a batch only as it sends the one before.
    write_stream(&input, &batches(&[1 << 20; 4]));
    let target = dir.path().join("out.arrows");
    let mut output = Output::file(target.clone(), Format::Arrows);
    let (sent, rows, bar) = exchange_file(&server, "identity", &input, 300_000, &mut output)
        .await
        .unwrap();
    output.finish(None).await.unwrap();
    assert_eq!((sent, rows), (4 << 20, 4 << 20));
    assert_eq!(
        bar.position(),
        4 << 20,
        "every input row's results were counted"
    );
    let back = read_file(&target, Format::Arrows);
    assert_eq!(column(&back, "x"), (0..4 << 20).collect::<Vec<_>>());
    assert!(
        back.iter().all(|b| b.num_rows() <= 300_000),
        "batches were cut to --batch-rows"
    );
    assert_eq!(
        server.commands.lock().unwrap()[0],
        json!({"function": "identity"})
    );
}

#[tokio::test]
async fn exchange_writes_each_format_and_slices_batches() {
    let server = testing::start().await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.arrows");
    write_stream(&input, &batches(&[25, 0, 7]));
    for (file, format) in [
        ("out.parquet", Format::Parquet),
        ("out.csv", Format::Csv),
        ("out.arrow", Format::Arrow),
        ("out.arrows", Format::Arrows),
    ] {
        let target = dir.path().join(file);
        let mut output = Output::file(target.clone(), format);
        let (sent, rows, bar) = exchange_file(&server, "double", &input, 10, &mut output)
            .await
            .unwrap();
        output.finish(None).await.unwrap();
        assert_eq!((sent, rows, bar.position()), (32, 32, 32), "{file}");
        let back = read_file(&target, format);
        assert_eq!(
            column(&back, "x2"),
            (0..32).map(|x| 2 * x).collect::<Vec<_>>()
        );
        if format == Format::Arrows {
            let sizes: Vec<usize> = back.iter().map(RecordBatch::num_rows).collect();
            // One result per batch sent; arrow-flight's encoder sends no
            // message for the batch of 0 rows.
            assert_eq!(sizes, [10, 10, 5, 7], "one result per batch sent");
        }
    }
}

#[tokio::test]
async fn a_failed_exchange_says_why_and_leaves_no_file() {
    let server = testing::start().await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.arrows");
    write_stream(&input, &batches(&[10, 10, 10]));
    let target = dir.path().join("out.parquet");

    let mut output = Output::file(target.clone(), Format::Parquet);
    let error = exchange_file(&server, "fails", &input, 10, &mut output)
        .await
        .unwrap_err();
    output.abandon().await;
    assert!(
        error.contains("Internal: function fails raised ValueError: bad row (batch 1)"),
        "{error}"
    );
    assert!(!target.exists(), "the half-written output was removed");

    let mut output = Output::file(target.clone(), Format::Parquet);
    let error = exchange_file(&server, "nope", &input, 10, &mut output)
        .await
        .unwrap_err();
    assert_eq!(error, "NotFound: function nope not found");
}

fn apply_args(args: &[&str]) -> ApplyArgs {
    let mut argv = vec!["quiver", "apply"];
    argv.extend(args);
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Apply(args) => args,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn apply_into_prints_the_servers_summary() {
    let server = testing::start().await;
    let args = apply_args(&[
        "double",
        "--source",
        "trips",
        "--into",
        "scores",
        "--mode",
        "append",
        "--partitions",
        "2",
    ]);
    let command = apply::command(&args);
    let received = apply::call(
        &connector(&server),
        &command,
        &mut Output::Discard,
        &ProgressBar::hidden(),
    )
    .await
    .unwrap();
    assert_eq!(
        server.commands.lock().unwrap()[0],
        json!({"apply": "double", "source": "trips", "into": "scores", "mode": "append",
               "partitions": 2})
    );
    let printed: Value = serde_json::from_str(&apply::report(&args, &received).unwrap()).unwrap();
    assert_eq!(
        printed,
        json!({"table": "scores", "version": 3, "rows": 10, "bytes": 80, "source_version": 1})
    );
    let default_mode = apply::command(&apply_args(&["f", "--source", "t", "--into", "u"]));
    assert_eq!(
        serde_json::from_str::<Value>(&default_mode).unwrap(),
        json!({"apply": "f", "source": "t", "into": "u", "mode": "replace"})
    );
}

#[tokio::test]
async fn apply_without_into_brings_the_results_back() {
    let server = testing::start().await;
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("scores.parquet");
    let target_arg = target.to_str().unwrap();
    let args = apply_args(&["double", "--source", "trips", "-o", target_arg]);
    let mut output = Output::file(target.clone(), Format::Parquet);
    let bar = ProgressBar::hidden();
    let received = apply::call(
        &connector(&server),
        &apply::command(&args),
        &mut output,
        &bar,
    )
    .await
    .unwrap();
    output.finish(received.schema.clone()).await.unwrap();
    assert_eq!(
        server.commands.lock().unwrap()[0],
        json!({"apply": "double", "source": "trips"})
    );
    assert_eq!((received.rows, bar.position()), (10, 10));
    assert_eq!(
        column(&read_file(&target, Format::Parquet), "x2"),
        (0..10).map(|x| 2 * x).collect::<Vec<_>>()
    );
    assert_eq!(
        apply::report(&args, &received).unwrap(),
        format!("wrote 10 rows of double over 'trips' to {target_arg}")
    );
    let counted = apply_args(&["double", "--source", "trips"]);
    assert!(
        apply::report(&counted, &received)
            .unwrap()
            .starts_with("double over 'trips': 10 rows (not kept")
    );

    let missing = apply_args(&["double", "--source", "missing"]);
    let error = apply::call(
        &connector(&server),
        &apply::command(&missing),
        &mut Output::Discard,
        &bar,
    )
    .await
    .unwrap_err();
    assert_eq!(error.to_string(), "NotFound: table 'missing' not found");
    // An apply into a table whose stream held no summary is an error.
    let into = apply_args(&["double", "--source", "trips", "--into", "u"]);
    assert!(apply::report(&into, &received).is_err());
}

#[tokio::test]
async fn functions_are_listed() {
    let server = testing::start().await;
    list::list(&connector(&server), super::FunctionsArgs { json: true })
        .await
        .unwrap();
    assert_eq!(
        list::render(&testing::listing()),
        "double(x: int64) -> (x2: int64)\n    Twice x. More.\n\
         identity(any) -> any  [pandas]\n\
         workers: 2 of 2 alive\n"
    );
    assert_eq!(
        list::render(&json!({"functions": [], "workers": {"alive": 0, "configured": 0}})),
        "no functions served (quiver serve --functions MODULE)\nworkers: 0 of 0 alive\n"
    );
}

#[test]
fn an_output_without_results_is_an_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (file, format) in [
        ("e.parquet", Format::Parquet),
        ("e.csv", Format::Csv),
        ("e.arrow", Format::Arrow),
        ("e.arrows", Format::Arrows),
    ] {
        let target = dir.path().join(file);
        let output = Output::file(target.clone(), format);
        runtime.block_on(output.finish(None)).unwrap();
        assert!(target.exists(), "{file}");
    }
}

#[test]
fn batches_are_sliced_and_tagged_with_their_rows() {
    let batch = &batches(&[25])[0];
    let sizes: Vec<usize> = exchange::slices(batch, 10)
        .iter()
        .map(RecordBatch::num_rows)
        .collect();
    assert_eq!(sizes, [10, 10, 5]);
    assert_eq!(exchange::slices(batch, 25).len(), 1);

    let messages =
        arrow_flight::utils::batches_to_flight_data(&batch.schema(), vec![batch.clone()]).unwrap();
    let [schema, message] = <[_; 2]>::try_from(messages).unwrap();
    let tagged = exchange::tag_rows(message);
    assert_eq!(exchange::tagged_rows(&tagged.app_metadata), Some(25));
    assert!(exchange::tag_rows(schema).app_metadata.is_empty());
    assert_eq!(exchange::tagged_rows(b"{\"table\": 1}"), None);
}

#[test]
fn apply_flags_hang_together() {
    let parse = |args: &[&str]| {
        let mut argv = vec!["quiver"];
        argv.extend(args);
        Cli::try_parse_from(argv).map(|_| ())
    };
    assert!(parse(&["apply", "f", "--source", "t", "--mode", "append"]).is_err());
    assert!(parse(&["apply", "f", "--source", "t", "--partitions", "2"]).is_err());
    assert!(parse(&["apply", "f", "--source", "t", "--into", "u", "-o", "x.csv"]).is_err());
    assert!(parse(&["apply", "f", "--into", "u"]).is_err());
    assert!(
        parse(&[
            "exchange",
            "f",
            "in.csv",
            "-o",
            "o.csv",
            "--batch-rows",
            "0"
        ])
        .is_err()
    );
    assert!(parse(&["exchange", "f", "in.csv"]).is_err());
    assert!(parse(&["functions", "--json"]).is_ok());
}
