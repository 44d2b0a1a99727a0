//! Cancelled and broken-off streams store nothing; shutdown lets a stream in flight finish.
//! A real server on 127.0.0.1:0 and the stock arrow-flight client.

use crate::common::*;

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
