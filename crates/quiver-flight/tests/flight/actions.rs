//! DoAction, ListActions, DoExchange and Handshake end to end.
//! A real server on 127.0.0.1:0 and the stock arrow-flight client.

use crate::common::*;

#[tokio::test]
async fn actions_delete_rename_stats_health() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, "a", vec![sample(0, 5)]).await;
    put(&mut client, "b", vec![sample(0, 7)]).await;

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
            "publish",
            "stats",
            "health",
            "nodes",
            "shm-put",
            // Flight SQL's
            "CreatePreparedStatement",
            "ClosePreparedStatement",
            "CancelFlightInfo",
            "CancelQuery",
            "list-functions",
            // Flight's sessions
            "SetSessionOptions",
            "GetSessionOptions",
            "CloseSession",
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
    // A single server holds every put itself: no node to send one to.
    assert_eq!(
        action(&mut client, "nodes", "").await.expect("nodes"),
        serde_json::json!({"nodes": []})
    );

    let deleted = action(&mut client, "delete", "c").await.expect("delete");
    assert_eq!(deleted["rows"], 5);
    assert!(server.store.get("c").is_err());

    let (c, m) = status(action(&mut client, "compact", "").await.unwrap_err());
    assert_eq!(c, Code::Unimplemented);
    assert!(
        m.contains("delete, rename, publish, stats, health, nodes"),
        "{m}"
    );
}

/// Runs an action; its one JSON result.
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
    assert_eq!(results.len(), 1, "one result");
    Ok(serde_json::from_slice(&results[0]).expect("json"))
}

/// Every table's name and version, in name order.
fn tables(server: &TestServer) -> Vec<(String, u64)> {
    server
        .store
        .list("")
        .iter()
        .map(|t| (t.name().to_string(), t.version()))
        .collect()
}

#[tokio::test]
async fn publish_moves_staging_tables_into_one() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    // Ids from multiples of 105 = 3 * 5 * 7: every part has a null in each
    // nullable column, so that all have the same fields.
    let parts = [sample(0, 5), sample(105, 7), sample(210, 3), sample(315, 4)];
    for (name, part) in ["stage/0", "stage/1", "stage/2", "stage/3"]
        .iter()
        .zip(&parts)
    {
        put(&mut client, name, vec![part.clone()]).await;
    }
    put(&mut client, "trips", vec![sample(1, 2)]).await;

    // Replace, in the order given (not the names' order).
    let body =
        r#"{"into": "trips", "from": ["stage/1", "stage/0"], "mode": "replace", "partitions": 2}"#;
    let result = action(&mut client, "publish", body).await.expect("publish");
    let trips = server.store.get("trips").expect("trips");
    assert_eq!(
        result,
        serde_json::json!({
            "table": "trips",
            "version": trips.version(),
            "rows": 12,
            "bytes": trips.num_bytes(),
        })
    );
    let info = client.get_flight_info(path("trips")).await.expect("info");
    assert_eq!(info.endpoint.len(), 2);
    assert_eq!(info.total_records, 12);
    let read = get_all(&mut client, "trips").await.expect("read");
    assert_eq!(concat(&read), concat(&[parts[1].clone(), parts[0].clone()]));
    for gone in ["stage/0", "stage/1"] {
        let (c, m) = status(client.get_flight_info(path(gone)).await.unwrap_err());
        assert_eq!(c, Code::NotFound, "{gone}: {m}");
    }

    // Append: after the table's rows; its partitions kept.
    let body = r#"{"into": "trips", "from": ["stage/3", "stage/2"], "mode": "append"}"#;
    let result = action(&mut client, "publish", body).await.expect("append");
    assert_eq!(result["rows"], 19);
    assert!(result["version"].as_u64() > Some(trips.version()));
    let read = get_all(&mut client, "trips").await.expect("read");
    let expected = [&parts[1], &parts[0], &parts[3], &parts[2]].map(RecordBatch::clone);
    assert_eq!(concat(&read), concat(&expected));
    assert_eq!(
        client
            .get_flight_info(path("trips"))
            .await
            .expect("info")
            .endpoint
            .len(),
        2
    );
    let names: Vec<String> = tables(&server).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["trips"]);
}

#[tokio::test]
async fn a_refused_publish_changes_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, "a", vec![sample(0, 3)]).await;
    put(&mut client, "b", vec![sample(3, 3)]).await;
    put(&mut client, "t", vec![sample(6, 3)]).await;
    put(&mut client, "other", vec![uniform(1, 4)]).await;
    let before = tables(&server);

    for (body, code, says) in [
        // Bad bodies.
        ("", Code::InvalidArgument, "publish: body must be JSON"),
        (
            r#"{"into": "t", "from": ["a"]}"#,
            Code::InvalidArgument,
            "mode",
        ),
        (
            r#"{"into": "t", "from": ["a"], "mode": "upsert"}"#,
            Code::InvalidArgument,
            "upsert",
        ),
        (
            r#"{"into": "t", "from": ["a"], "mode": "append", "partitions": 0}"#,
            Code::InvalidArgument,
            "partitions",
        ),
        // Bad lists of sources.
        (
            r#"{"into": "t", "from": [], "mode": "replace"}"#,
            Code::InvalidArgument,
            "no source",
        ),
        (
            r#"{"into": "t", "from": ["a", "b", "a"], "mode": "replace"}"#,
            Code::InvalidArgument,
            "'a' is named twice",
        ),
        (
            r#"{"into": "t", "from": ["a", "t"], "mode": "append"}"#,
            Code::InvalidArgument,
            "into itself",
        ),
        (
            r#"{"into": "", "from": ["a"], "mode": "replace"}"#,
            Code::InvalidArgument,
            "invalid table name",
        ),
        // Missing tables: a source, or the target of an append.
        (
            r#"{"into": "t", "from": ["a", "nope", "b"], "mode": "replace"}"#,
            Code::NotFound,
            "table 'nope' not found",
        ),
        (
            r#"{"into": "missing", "from": ["a"], "mode": "append"}"#,
            Code::NotFound,
            "table 'missing' not found",
        ),
        // Other columns: among the sources, or than the target's.
        (
            r#"{"into": "u", "from": ["a", "other"], "mode": "replace"}"#,
            Code::InvalidArgument,
            "schema mismatch for table 'other'",
        ),
        (
            r#"{"into": "other", "from": ["a"], "mode": "append"}"#,
            Code::InvalidArgument,
            "schema mismatch for table 'a'",
        ),
    ] {
        let (c, m) = status(action(&mut client, "publish", body).await.unwrap_err());
        assert_eq!(c, code, "{body}: {m}");
        assert!(m.contains(says), "{body}: {m}");
        assert_eq!(tables(&server), before, "{body}");
    }
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
