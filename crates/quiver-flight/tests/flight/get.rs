//! DoGet, GetFlightInfo and ListFlights end to end: versions pinned by tickets, streams that keep their version, errors for missing tables and garbage.
//! A real server on 127.0.0.1:0 and the stock arrow-flight client.

use crate::common::*;

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
