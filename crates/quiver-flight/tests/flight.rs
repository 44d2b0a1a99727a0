//! The Flight RPCs end to end: a real server on 127.0.0.1:0 and the stock
//! arrow-flight client.

mod common;

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int64Array, ListArray, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{Int32Type, Schema};
use arrow::record_batch::RecordBatch;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::{Action, FlightClient, FlightData, FlightDescriptor, Ticket};
use bytes::Bytes;
use common::TestServer;
use futures::{StreamExt, TryStreamExt, stream};
use quiver_flight::ServerConfig;
use tonic::Code;

fn sample(offset: i64, rows: usize) -> RecordBatch {
    let ids: Vec<i64> = (0..rows as i64).map(|i| i + offset).collect();
    let names: Vec<Option<String>> = ids
        .iter()
        .map(|i| (i % 7 != 0).then(|| format!("name-{i}")))
        .collect();
    let lists = ListArray::from_iter_primitive::<Int32Type, _, _>(
        ids.iter()
            .map(|i| (i % 5 != 0).then(|| vec![Some(*i as i32), None])),
    );
    let dict: DictionaryArray<Int32Type> = ids
        .iter()
        .map(|i| ["red", "green", "blue"][(*i % 3) as usize])
        .collect();
    RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids.clone())) as ArrayRef),
        ("name", Arc::new(StringArray::from(names)) as ArrayRef),
        (
            "score",
            Arc::new(Float64Array::from_iter(
                ids.iter().map(|i| (i % 3 != 0).then_some(*i as f64 / 3.0)),
            )) as ArrayRef,
        ),
        (
            "flag",
            Arc::new(BooleanArray::from_iter(
                ids.iter().map(|i| Some(i % 2 == 0)),
            )),
        ),
        ("tags", Arc::new(lists) as ArrayRef),
        (
            "at",
            Arc::new(TimestampMicrosecondArray::from(ids.clone()).with_timezone("UTC")) as ArrayRef,
        ),
        ("color", Arc::new(dict) as ArrayRef),
    ])
    .expect("batch")
}

fn path(name: &str) -> FlightDescriptor {
    FlightDescriptor::new_path(vec![name.to_string()])
}

async fn put_with(
    client: &mut FlightClient,
    descriptor: FlightDescriptor,
    options: Option<&str>,
    batches: Vec<RecordBatch>,
) -> Result<serde_json::Value, FlightError> {
    let schema = batches[0].schema();
    let mut builder = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(descriptor))
        .with_dictionary_handling(DictionaryHandling::Resend);
    if let Some(options) = options {
        builder = builder.with_metadata(Bytes::from(options.to_string()));
    }
    let encoded = builder.build(stream::iter(batches.into_iter().map(Ok)));
    let results: Vec<_> = client.do_put(encoded).await?.try_collect().await?;
    assert_eq!(results.len(), 1, "one PutResult");
    Ok(serde_json::from_slice(&results[0].app_metadata).expect("PutResult JSON"))
}

async fn put(
    client: &mut FlightClient,
    name: &str,
    batches: Vec<RecordBatch>,
) -> serde_json::Value {
    put_with(client, path(name), None, batches)
        .await
        .expect("put")
}

async fn get_all(client: &mut FlightClient, name: &str) -> Result<Vec<RecordBatch>, FlightError> {
    let info = client.get_flight_info(path(name)).await?;
    let mut out = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.expect("ticket");
        let batches: Vec<RecordBatch> = client.do_get(ticket).await?.try_collect().await?;
        out.extend(batches);
    }
    Ok(out)
}

fn concat(batches: &[RecordBatch]) -> RecordBatch {
    arrow::compute::concat_batches(&batches[0].schema(), batches).expect("concat")
}

fn status(e: FlightError) -> (Code, String) {
    match e {
        FlightError::Tonic(s) => (s.code(), s.message().to_string()),
        other => panic!("expected a status, got {other}"),
    }
}

#[tokio::test]
async fn put_then_get_round_trips_every_type_over_partitions() {
    let server = TestServer::start_with(
        1 << 30,
        ServerConfig {
            partitions: 4,
            ..Default::default()
        },
    )
    .await;
    let mut client = server.client().await;
    let batches: Vec<RecordBatch> = (0..10).map(|i| sample(i * 1000, 1000)).collect();
    let result = put(&mut client, "typed", batches.clone()).await;
    assert_eq!(result["rows"], 10_000);

    let info = client.get_flight_info(path("typed")).await.expect("info");
    assert_eq!(info.total_records, 10_000);
    assert_eq!(info.endpoint.len(), 4);
    assert!(info.ordered);
    for endpoint in &info.endpoint {
        assert_eq!(endpoint.location[0].uri, server.uri());
    }
    let schema: Schema = info.clone().try_decode_schema().expect("schema");
    assert_eq!(schema.fields(), batches[0].schema().fields());

    let got = get_all(&mut client, "typed").await.expect("get");
    assert_eq!(concat(&got), concat(&batches));

    // A plain-name ticket reads the whole table.
    let whole: Vec<RecordBatch> = client
        .do_get(Ticket::new("typed"))
        .await
        .expect("do_get")
        .try_collect()
        .await
        .expect("batches");
    assert_eq!(concat(&whole), concat(&batches));
}

#[tokio::test]
async fn stock_wire_path_round_trips_too() {
    let server = TestServer::start_with(
        1 << 30,
        ServerConfig {
            direct_wire: false,
            partitions: 3,
            ..Default::default()
        },
    )
    .await;
    let mut client = server.client().await;
    let batches: Vec<RecordBatch> = (0..5).map(|i| sample(i * 1000, 1000)).collect();
    put(&mut client, "typed", batches.clone()).await;
    let got = get_all(&mut client, "typed").await.expect("get");
    assert_eq!(concat(&got), concat(&batches));
    let (c, _) = status(client.do_get(Ticket::new("nope")).await.unwrap_err());
    assert_eq!(c, Code::NotFound);
}

#[tokio::test]
async fn path_and_command_name_the_same_table() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put_with(
        &mut client,
        FlightDescriptor::new_cmd("a/b"),
        None,
        vec![sample(0, 10)],
    )
    .await
    .expect("put");
    let info = client
        .get_flight_info(FlightDescriptor::new_path(vec!["a".into(), "b".into()]))
        .await
        .expect("info");
    assert_eq!(info.total_records, 10);
}

#[tokio::test]
async fn append_adds_rows_and_mismatch_leaves_table_unchanged() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, "t", vec![sample(0, 100)]).await;
    let r = put_with(
        &mut client,
        path("t"),
        Some(r#"{"mode":"append"}"#),
        vec![sample(100, 50)],
    )
    .await
    .expect("append");
    assert_eq!(r["rows"], 150);
    let got = concat(&get_all(&mut client, "t").await.expect("get"));
    assert_eq!(got, concat(&[sample(0, 100), sample(100, 50)]));

    let other =
        RecordBatch::try_from_iter([("id", Arc::new(StringArray::from(vec!["x"])) as ArrayRef)])
            .expect("batch");
    let err = put_with(
        &mut client,
        path("t"),
        Some(r#"{"mode":"append"}"#),
        vec![other],
    )
    .await
    .unwrap_err();
    let (code, message) = status(err);
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("schema mismatch"), "{message}");
    assert_eq!(concat(&get_all(&mut client, "t").await.expect("get")), got);

    let (code, message) = status(
        put_with(
            &mut client,
            path("missing"),
            Some(r#"{"mode":"append"}"#),
            vec![sample(0, 1)],
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, Code::NotFound);
    assert!(message.contains("'missing'"), "{message}");
}

#[tokio::test]
async fn bad_options_are_invalid_argument() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    for bad in [r#"{"mode":"upsert"}"#, "not json", r#"{"partitions":0}"#] {
        let (code, _) = status(
            put_with(&mut client, path("t"), Some(bad), vec![sample(0, 1)])
                .await
                .unwrap_err(),
        );
        assert_eq!(code, Code::InvalidArgument, "{bad}");
    }
    assert_eq!(server.store.stats().tables, 0);
}

/// A client sends two batches and then goes away mid-stream: its task is
/// aborted, which resets the HTTP/2 stream (RST_STREAM CANCEL) and, when
/// `close_connection`, also drops its last handle to the connection.
async fn put_that_breaks_off(close_connection: bool, direct_wire: bool) {
    let server = TestServer::start_with(
        1 << 30,
        ServerConfig {
            direct_wire,
            ..Default::default()
        },
    )
    .await;
    let mut client = server.client().await;
    put(&mut client, "t", vec![sample(0, 10)]).await;
    let version = server.store.get("t").expect("t").version();

    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut writer = FlightClient::new(channel.clone());
    let kept = (!close_connection).then_some(channel);
    let task = tokio::spawn(async move {
        let batches =
            stream::iter([Ok(sample(0, 500)), Ok(sample(500, 500))]).chain(stream::pending());
        let encoded = FlightDataEncoderBuilder::new()
            .with_flight_descriptor(Some(path("t")))
            .build(batches);
        let _ = writer.do_put(encoded).await;
    });
    let held = || server.store.memory().used() - server.store.get("t").expect("t").num_bytes();
    for _ in 0..100 {
        if held() > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(held() > 0, "the put was under way");
    task.abort();
    let _ = task.await;
    // The server notices the break and drops what it had received.
    for _ in 0..100 {
        if held() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let table = server.store.get("t").expect("t");
    assert_eq!((table.version(), table.num_rows()), (version, 10));
    assert_eq!(held(), 0);
    drop(kept);
}

#[tokio::test]
async fn cancelled_put_stores_nothing_and_keeps_previous_version() {
    put_that_breaks_off(false, true).await;
}

#[tokio::test]
async fn put_whose_connection_closes_stores_nothing() {
    put_that_breaks_off(true, true).await;
}

/// The stock path: tonic reports the cancel as a clean end of stream, and only
/// the WatchBodyLayer below it tells the handler not to commit.
#[tokio::test]
async fn cancelled_put_stores_nothing_on_the_stock_path() {
    put_that_breaks_off(false, false).await;
    put_that_breaks_off(true, false).await;
}

#[tokio::test]
async fn append_of_no_batches_with_options_in_a_metadata_message_keeps_the_table() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, "t", vec![sample(0, 10)]).await;
    // Schema, then a metadata-only message with the options, then no batch:
    // what pyarrow sends for `write_metadata` and an empty table.
    let schema_only = FlightDataEncoderBuilder::new()
        .with_schema(sample(0, 1).schema())
        .with_dictionary_handling(DictionaryHandling::Resend)
        .with_flight_descriptor(Some(path("t")))
        .build(stream::empty());
    let options = FlightData {
        app_metadata: Bytes::from_static(br#"{"mode":"append","partitions":3}"#),
        ..Default::default()
    };
    let messages = schema_only.chain(stream::iter([Ok(options)]));
    client
        .do_put(messages)
        .await
        .expect("put")
        .try_collect::<Vec<_>>()
        .await
        .expect("result");
    let table = server.store.get("t").expect("t");
    assert_eq!(table.num_rows(), 10, "an empty append keeps the rows");
    assert_eq!(table.partitions(), Some(3), "the options were read");
}

#[tokio::test]
async fn a_stream_in_flight_keeps_its_version_charged() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let batches: Vec<RecordBatch> = (0..40).map(|i| sample(i * 5000, 5000)).collect();
    put(&mut client, "t", batches).await;
    let charged = server.store.memory().used();
    let mut reading = client.do_get(Ticket::new("t")).await.expect("get");
    reading.next().await.expect("a batch").expect("ok");
    let mut other = server.client().await;
    async {
        other
            .do_action(Action::new("delete", "t"))
            .await?
            .try_collect::<Vec<_>>()
            .await
    }
    .await
    .expect("delete");
    assert_eq!(
        server.store.memory().used(),
        charged,
        "the reader still holds the version"
    );
    while let Some(batch) = reading.next().await {
        batch.expect("the stream finishes after the delete");
    }
    drop(reading);
    for _ in 0..100 {
        if server.store.memory().used() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        server.store.memory().used(),
        0,
        "released when the reader is done"
    );
}

#[tokio::test]
async fn pinned_ticket_of_a_deleted_table_is_aborted() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, "t", vec![sample(0, 10)]).await;
    let info = client.get_flight_info(path("t")).await.expect("info");
    server.store.remove("t").expect("delete");
    let ticket = info.endpoint[0].ticket.clone().expect("ticket");
    assert_eq!(
        status(client.do_get(ticket).await.unwrap_err()).0,
        Code::Aborted
    );
    assert_eq!(
        status(client.do_get(Ticket::new("t")).await.unwrap_err()).0,
        Code::NotFound
    );
}

#[tokio::test]
async fn memory_limit_is_resource_exhausted_and_keeps_previous_version() {
    let server = TestServer::start_with(200_000, ServerConfig::default()).await;
    let mut client = server.client().await;
    put(&mut client, "small", vec![sample(0, 100)]).await;
    let before = server.store.memory().used();
    let big: Vec<RecordBatch> = (0..20).map(|i| sample(i * 1000, 1000)).collect();
    let (code, message) = status(
        put_with(&mut client, path("small"), None, big)
            .await
            .unwrap_err(),
    );
    assert_eq!(code, Code::ResourceExhausted);
    assert!(message.contains("--max-memory"), "{message}");
    assert_eq!(server.store.get("small").expect("small").num_rows(), 100);
    assert_eq!(server.store.memory().used(), before);
}

#[tokio::test]
async fn missing_table_is_not_found_everywhere() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let (c, m) = status(client.get_flight_info(path("nope")).await.unwrap_err());
    assert_eq!((c, m.as_str()), (Code::NotFound, "table 'nope' not found"));
    let (c, _) = status(client.get_schema(path("nope")).await.unwrap_err());
    assert_eq!(c, Code::NotFound);
    let (c, _) = status(client.poll_flight_info(path("nope")).await.unwrap_err());
    assert_eq!(c, Code::NotFound);
    let (c, _) = status(client.do_get(Ticket::new("nope")).await.unwrap_err());
    assert_eq!(c, Code::NotFound);
    let err = async {
        client
            .do_action(Action::new("delete", "nope"))
            .await?
            .try_collect::<Vec<_>>()
            .await
    }
    .await
    .unwrap_err();
    assert_eq!(status(err).0, Code::NotFound);
}

#[tokio::test]
async fn pinned_ticket_is_aborted_after_the_table_changes() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, "t", vec![sample(0, 10)]).await;
    let info = client.get_flight_info(path("t")).await.expect("info");
    put(&mut client, "t", vec![sample(0, 20)]).await;
    let ticket = info.endpoint[0].ticket.clone().expect("ticket");
    let (c, m) = status(client.do_get(ticket).await.unwrap_err());
    assert_eq!(c, Code::Aborted);
    assert!(m.contains("GetFlightInfo"), "{m}");
}

#[tokio::test]
async fn garbage_tickets_and_descriptors_are_invalid_argument() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    for ticket in [
        &b""[..],
        &[0xff, 0xfe],
        b"\0quiver-ticket-v1:{",
        b"\0quiver-ticket-v1:{\"t\":\"x\",\"p\":5,\"n\":2}",
    ] {
        let (c, _) = status(
            client
                .do_get(Ticket::new(Bytes::copy_from_slice(ticket)))
                .await
                .unwrap_err(),
        );
        assert_eq!(c, Code::InvalidArgument, "{ticket:?}");
    }
    let (c, _) = status(
        client
            .get_flight_info(FlightDescriptor::new_path(vec![]))
            .await
            .unwrap_err(),
    );
    assert_eq!(c, Code::InvalidArgument);
    let (c, _) = status(
        client
            .get_flight_info(FlightDescriptor::new_cmd(" padded "))
            .await
            .unwrap_err(),
    );
    assert_eq!(c, Code::InvalidArgument);
}

#[tokio::test]
async fn stream_without_descriptor_or_schema_is_refused() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    // No descriptor on the first message.
    let encoded = FlightDataEncoderBuilder::new().build(stream::iter([Ok(sample(0, 3))]));
    let err = async { client.do_put(encoded).await?.try_collect::<Vec<_>>().await }
        .await
        .unwrap_err();
    assert_eq!(status(err).0, Code::InvalidArgument);
    // A descriptor but no IPC message at all.
    let only = FlightData {
        flight_descriptor: Some(path("t")),
        ..Default::default()
    };
    let err = async {
        client
            .do_put(stream::iter([Ok(only)]))
            .await?
            .try_collect::<Vec<_>>()
            .await
    }
    .await
    .unwrap_err();
    let (c, m) = status(err);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("no schema"), "{m}");
    // Garbage where the IPC header should be.
    let garbage = FlightData {
        flight_descriptor: Some(path("t")),
        data_header: Bytes::from_static(b"\x01\x02\x03\x04garbage"),
        data_body: Bytes::from_static(b"more garbage"),
        ..Default::default()
    };
    let err = async {
        client
            .do_put(stream::iter([Ok(garbage)]))
            .await?
            .try_collect::<Vec<_>>()
            .await
    }
    .await
    .unwrap_err();
    assert_eq!(status(err).0, Code::InvalidArgument);
    assert_eq!(server.store.stats().tables, 0);
}

#[tokio::test]
async fn schema_only_put_creates_an_empty_table() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let schema = sample(0, 1).schema();
    let encoded = FlightDataEncoderBuilder::new()
        .with_schema(Arc::clone(&schema))
        .with_dictionary_handling(DictionaryHandling::Resend)
        .with_flight_descriptor(Some(path("empty")))
        .build(stream::empty());
    client
        .do_put(encoded)
        .await
        .expect("put")
        .try_collect::<Vec<_>>()
        .await
        .expect("result");
    let info = client.get_flight_info(path("empty")).await.expect("info");
    assert_eq!((info.total_records, info.endpoint.len()), (0, 1));
    assert_eq!(
        client
            .get_schema(path("empty"))
            .await
            .expect("schema")
            .fields(),
        schema.fields()
    );
    let got: Vec<RecordBatch> = client
        .do_get(Ticket::new("empty"))
        .await
        .expect("get")
        .try_collect()
        .await
        .expect("batches");
    assert!(got.iter().all(|b| b.num_rows() == 0));
}

#[tokio::test]
async fn list_flights_filters_by_prefix() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    for name in ["taxi/2023", "taxi/2024", "weather"] {
        put(&mut client, name, vec![sample(0, 5)]).await;
    }
    let names = |infos: Vec<arrow_flight::FlightInfo>| -> Vec<String> {
        infos
            .into_iter()
            .map(|i| i.flight_descriptor.expect("descriptor").path.join("/"))
            .collect()
    };
    let all = client
        .list_flights("")
        .await
        .expect("list")
        .try_collect()
        .await
        .expect("infos");
    assert_eq!(names(all), ["taxi/2023", "taxi/2024", "weather"]);
    let taxi = client
        .list_flights("taxi/")
        .await
        .expect("list")
        .try_collect()
        .await
        .expect("infos");
    assert_eq!(names(taxi), ["taxi/2023", "taxi/2024"]);
}

#[tokio::test]
async fn actions_delete_rename_stats_health() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, "a", vec![sample(0, 5)]).await;
    put(&mut client, "b", vec![sample(0, 7)]).await;

    async fn action(
        client: &mut FlightClient,
        kind: &str,
        body: &str,
    ) -> Result<serde_json::Value, FlightError> {
        let results: Vec<Bytes> = client
            .do_action(Action::new(kind, body.to_string()))
            .await?
            .try_collect()
            .await?;
        Ok(serde_json::from_slice(&results[0]).expect("json"))
    }

    let types: Vec<String> = client
        .list_actions()
        .await
        .expect("list")
        .map_ok(|a| a.r#type)
        .try_collect()
        .await
        .expect("types");
    assert_eq!(
        types,
        [
            "delete",
            "rename",
            "stats",
            "health",
            "shm-put",
            // Flight SQL's
            "CreatePreparedStatement",
            "ClosePreparedStatement",
            "CancelFlightInfo",
            "CancelQuery"
        ]
    );

    let (c, m) = status(
        action(&mut client, "rename", r#"{"from":"a","to":"b"}"#)
            .await
            .unwrap_err(),
    );
    assert_eq!(c, Code::AlreadyExists);
    assert!(m.contains("'b'"), "{m}");
    assert_eq!(server.store.get("b").expect("b").num_rows(), 7);
    action(&mut client, "rename", r#"{"from":"a","to":"c"}"#)
        .await
        .expect("rename");
    assert_eq!(server.store.get("c").expect("c").num_rows(), 5);
    let (c, _) = status(action(&mut client, "rename", "{}").await.unwrap_err());
    assert_eq!(c, Code::InvalidArgument);

    let stats = action(&mut client, "stats", "").await.expect("stats");
    assert_eq!(
        (stats["tables"].as_u64(), stats["rows"].as_u64()),
        (Some(2), Some(12))
    );
    assert!(stats["memory_limit"].as_u64().unwrap_or(0) > 0);
    assert_eq!(
        action(&mut client, "health", "").await.expect("health")["status"],
        "ok"
    );

    let deleted = action(&mut client, "delete", "c").await.expect("delete");
    assert_eq!(deleted["rows"], 5);
    assert!(server.store.get("c").is_err());

    let (c, m) = status(action(&mut client, "compact", "").await.unwrap_err());
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("delete, rename, stats, health"), "{m}");
}

#[tokio::test]
async fn exchange_echoes_and_handshake_is_accepted() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let batches = vec![sample(0, 100), sample(100, 100)];
    let encoded = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(path("x")))
        .with_dictionary_handling(DictionaryHandling::Resend)
        .build(stream::iter(batches.clone().into_iter().map(Ok)));
    let echoed: Vec<RecordBatch> = client
        .do_exchange(encoded)
        .await
        .expect("exchange")
        .try_collect()
        .await
        .expect("batches");
    assert_eq!(concat(&echoed), concat(&batches));
    let reply = client.handshake(Bytes::new()).await.expect("handshake");
    assert!(reply.is_empty());
}

#[tokio::test]
async fn large_messages_are_accepted() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    // One 64 MiB message: far over tonic's 4 MiB default.
    let big = RecordBatch::try_from_iter([(
        "x",
        Arc::new(Int64Array::from_iter_values(0..(8 << 20))) as ArrayRef,
    )])
    .expect("batch");
    let encoded = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(path("big")))
        .with_max_flight_data_size(usize::MAX)
        .build(stream::iter([Ok(big.clone())]));
    client
        .do_put(encoded)
        .await
        .expect("put")
        .try_collect::<Vec<_>>()
        .await
        .expect("result");
    let got = get_all(&mut client, "big").await.expect("get");
    assert!(got.len() > 1, "DoGet splits a large batch");
    assert_eq!(concat(&got), big);
}

#[tokio::test]
async fn message_over_the_limit_is_resource_exhausted() {
    let server = TestServer::start_with(
        1 << 30,
        ServerConfig {
            max_message_size: 1 << 20,
            ..Default::default()
        },
    )
    .await;
    let mut client = server.client().await;
    let big = RecordBatch::try_from_iter([(
        "x",
        Arc::new(Int64Array::from_iter_values(0..(1 << 18))) as ArrayRef,
    )])
    .expect("batch");
    let encoded = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(path("big")))
        .with_max_flight_data_size(usize::MAX)
        .build(stream::iter([Ok(big)]));
    let err = async { client.do_put(encoded).await?.try_collect::<Vec<_>>().await }
        .await
        .unwrap_err();
    let (c, m) = status(err);
    assert_eq!(c, Code::ResourceExhausted);
    assert!(m.contains("--max-message-size"), "{m}");
    assert_eq!(server.store.stats().tables, 0);
}

/// A batch of `rows` copies of `v`.
fn uniform(v: i64, rows: usize) -> RecordBatch {
    RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![v; rows])) as ArrayRef)])
        .expect("batch")
}

/// Whether every value of column 0 of `batches` is `v`, and how many there are.
fn all_equal(batches: &[RecordBatch], v: i64) -> (bool, usize) {
    let all = concat(batches);
    let col = all
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("ints");
    (col.values().iter().all(|x| *x == v), col.len())
}

#[tokio::test]
async fn recycled_put_memory_never_reaches_a_version_still_read() {
    // 80 KB bodies: over the body pool's minimum, so replaced versions'
    // bodies go back to the pool and later puts are copied into them.
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, "t", vec![uniform(0, 10_000); 20]).await;
    let mut reading = client.do_get(Ticket::new("t")).await.expect("get");
    let mut old = vec![reading.next().await.expect("a batch").expect("ok")];
    let mut writer = server.client().await;
    for v in 1..6 {
        put(&mut writer, "t", vec![uniform(v, 10_000); 20]).await;
    }
    while let Some(batch) = reading.next().await {
        old.push(batch.expect("the old version streams to its end"));
    }
    assert_eq!(
        all_equal(&old, 0),
        (true, 200_000),
        "the old version intact"
    );
    let now = get_all(&mut writer, "t").await.expect("get");
    assert_eq!(all_equal(&now, 5), (true, 200_000), "the latest version");

    // Deleted, its bodies wait in the pool; the next put of that size takes them.
    drop((old, now, reading));
    let _ = writer
        .do_action(Action::new("delete", "t"))
        .await
        .expect("delete")
        .try_collect::<Vec<_>>()
        .await
        .expect("delete");
    let mut pooled = pool_bytes(&mut writer).await;
    for _ in 0..100 {
        // Versions are freed on a thread of their own.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let now = pool_bytes(&mut writer).await;
        if now == pooled && now > 0 {
            break;
        }
        pooled = now;
    }
    assert!(pooled >= 20 * 80_000, "freed bodies are kept: {pooled}");
    put(&mut writer, "u", vec![uniform(7, 10_000); 20]).await;
    let taken = pooled - pool_bytes(&mut writer).await;
    assert!(
        (20 * 80_000..=20 * 90_000).contains(&taken),
        "the put took its 20 bodies from the pool: {taken} bytes"
    );
    let got = get_all(&mut writer, "u").await.expect("get");
    assert_eq!(all_equal(&got, 7), (true, 200_000));
}

/// Bytes the server's DoPut body pool holds (the `stats` action).
async fn pool_bytes(client: &mut FlightClient) -> u64 {
    let results: Vec<Bytes> = client
        .do_action(Action::new("stats", ""))
        .await
        .expect("stats")
        .try_collect()
        .await
        .expect("stats");
    let stats: serde_json::Value = serde_json::from_slice(&results[0]).expect("JSON");
    stats["put_buffer_pool_bytes"]
        .as_u64()
        .expect("put_buffer_pool_bytes")
}

#[tokio::test]
async fn reader_sees_one_version_while_a_writer_replaces() {
    let server = TestServer::start().await;
    // 80 KB bodies, recycled through the body pool from one version to the next.
    let uniform = |v: i64| uniform(v, 10_000);
    let mut client = server.client().await;
    put(&mut client, "t", vec![uniform(0); 20]).await;
    let mut writer = server.client().await;
    let writing = tokio::spawn(async move {
        for v in 1..30 {
            put(&mut writer, "t", vec![uniform(v); 20]).await;
        }
    });
    for _ in 0..30 {
        let got: Vec<RecordBatch> = client
            .do_get(Ticket::new("t"))
            .await
            .expect("get")
            .try_collect()
            .await
            .expect("b");
        let first = got[0]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("ints")
            .value(0);
        assert_eq!(
            all_equal(&got, first),
            (true, 200_000),
            "a read mixed two versions"
        );
    }
    writing.await.expect("writer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_stream_in_flight_finish() {
    let mut server = TestServer::start().await;
    let mut client = server.client().await;
    let batches: Vec<RecordBatch> = (0..50).map(|i| sample(i * 2000, 2000)).collect();
    put(&mut client, "t", batches).await;
    let mut stream = client.do_get(Ticket::new("t")).await.expect("get");
    let first = stream.next().await.expect("one batch").expect("ok");
    server.shutdown_in_background();
    let mut rows = first.num_rows();
    while let Some(batch) = stream.next().await {
        rows += batch.expect("batch after shutdown began").num_rows();
    }
    assert_eq!(rows, 100_000);
}
