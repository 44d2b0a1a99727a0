//! DoAction, ListActions, DoExchange and Handshake end to end.
//! A real server on 127.0.0.1:0 and the stock arrow-flight client.

mod common;

use common::*;

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
            "CancelQuery",
            "list-functions",
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
