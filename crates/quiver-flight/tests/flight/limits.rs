//! The memory and message-size limits: refused with RESOURCE_EXHAUSTED, nothing stored changed.
//! A real server on 127.0.0.1:0 and the stock arrow-flight client.

use crate::common::*;

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
    put_messages(&mut client, encoded).await.expect("put");
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
    let err = put_messages(&mut client, encoded).await.unwrap_err();
    let (c, m) = status(err);
    assert_eq!(c, Code::ResourceExhausted);
    assert!(m.contains("--max-message-size"), "{m}");
    assert_eq!(server.store.stats().tables, 0);
}
