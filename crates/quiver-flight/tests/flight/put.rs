//! DoPut end to end: round trips on both wire paths, names, append and replace, options, empty and schema-only streams, recycled put memory.
//! A real server on 127.0.0.1:0 and the stock arrow-flight client.

use crate::common::*;

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
    put_messages(&mut client, messages).await.expect("put");
    let table = server.store.get("t").expect("t");
    assert_eq!(table.num_rows(), 10, "an empty append keeps the rows");
    assert_eq!(table.partitions(), Some(3), "the options were read");
}

#[tokio::test]
async fn stream_without_descriptor_or_schema_is_refused() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    // No descriptor on the first message.
    let encoded = FlightDataEncoderBuilder::new().build(stream::iter([Ok(sample(0, 3))]));
    let err = put_messages(&mut client, encoded).await.unwrap_err();
    assert_eq!(status(err).0, Code::InvalidArgument);
    // A descriptor but no IPC message at all.
    let only = FlightData {
        flight_descriptor: Some(path("t")),
        ..Default::default()
    };
    let err = put_messages(&mut client, stream::iter([Ok(only)]))
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
    let err = put_messages(&mut client, stream::iter([Ok(garbage)]))
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
    put_messages(&mut client, encoded).await.expect("put");
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
