//! Flight SQL end to end: a real server on 127.0.0.1:0 and arrow-flight's
//! Flight SQL client, on both wire paths.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{Int64Type, UInt64Type};
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandGetDbSchemas, CommandGetTables, CommandStatementIngest, SqlInfo, TableDefinitionOptions,
    TableExistsOption, TableNotExistOption,
};
use arrow_flight::{Action, CancelFlightInfoRequest, CancelFlightInfoResult, FlightInfo};
use futures::{TryStreamExt, stream};
use prost::Message;
use quiver_flight::ServerConfig;
use quiver_sql::EngineOptions;
use quiver_store::WriteMode;
use tonic::Code;
use tonic::transport::Channel;

use crate::common::TestServer;

type Client = FlightSqlServiceClient<Channel>;

fn trips(ids: std::ops::Range<i64>) -> RecordBatch {
    let names: Vec<String> = ids.clone().map(|i| format!("n{i}")).collect();
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(ids)) as ArrayRef,
        ),
        ("name", Arc::new(StringArray::from(names)) as ArrayRef),
    ])
    .unwrap()
}

async fn server(direct_wire: bool, sql: EngineOptions) -> TestServer {
    let server = TestServer::start_with(
        1 << 30,
        ServerConfig {
            direct_wire,
            sql,
            ..Default::default()
        },
    )
    .await;
    let batch = trips(0..10_000);
    server
        .store
        .put("trips", WriteMode::Replace, batch.schema(), [batch])
        .unwrap();
    server
}

/// Every endpoint of `info`, fetched in order and concatenated.
async fn fetch(client: &mut Client, info: FlightInfo) -> Result<RecordBatch, tonic::Status> {
    let schema = Arc::new(info.clone().try_decode_schema().unwrap());
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.expect("ticket");
        let stream = client.do_get(ticket).await.map_err(status)?;
        batches.extend(stream.try_collect::<Vec<_>>().await.map_err(status)?);
    }
    Ok(concat_batches(&schema, &batches).unwrap())
}

fn status(e: arrow_flight::error::FlightError) -> tonic::Status {
    match e {
        arrow_flight::error::FlightError::Tonic(s) => *s,
        other => tonic::Status::unknown(other.to_string()),
    }
}

async fn query(client: &mut Client, sql: &str) -> Result<RecordBatch, tonic::Status> {
    let info = client.execute(sql.into(), None).await.map_err(status)?;
    fetch(client, info).await
}

#[tokio::test]
async fn queries_stream_from_every_endpoint_on_both_wire_paths() {
    for direct in [true, false] {
        let server = server(
            direct,
            EngineOptions {
                target_partitions: 3,
                ..Default::default()
            },
        )
        .await;
        let mut client = server.sql_client().await;
        let info = client
            .execute("SELECT id, name FROM trips".into(), None)
            .await
            .unwrap();
        assert_eq!(info.endpoint.len(), 3, "one endpoint per partition");
        let all = fetch(&mut client, info).await.unwrap();
        assert_eq!(all.num_rows(), 10_000);
        let sum: i64 = all
            .column(0)
            .as_primitive::<Int64Type>()
            .values()
            .iter()
            .sum();
        assert_eq!(sum, 9_999 * 10_000 / 2);
        let one = query(&mut client, "SELECT name FROM trips WHERE id = 4242")
            .await
            .unwrap();
        assert_eq!(one.column(0).as_string::<i32>().value(0), "n4242");
        // No rows still carries the schema.
        let none = query(&mut client, "SELECT id FROM trips WHERE id < 0")
            .await
            .unwrap();
        assert_eq!((none.num_rows(), none.num_columns()), (0, 1));
    }
}

#[tokio::test]
async fn every_endpoint_is_at_the_servers_location_and_can_be_read_there() {
    let server = server(
        true,
        EngineOptions {
            target_partitions: 3,
            ..Default::default()
        },
    )
    .await;
    let mut client = server.sql_client().await;
    let locations = |info: &FlightInfo| -> Vec<Vec<String>> {
        info.endpoint
            .iter()
            .map(|e| e.location.iter().map(|l| l.uri.clone()).collect())
            .collect()
    };
    let info = client
        .execute("SELECT id FROM trips WHERE id % 2 = 0".into(), None)
        .await
        .unwrap();
    assert_eq!(locations(&info), vec![vec![server.uri()]; 3]);
    // What a partitioned reader does: read the endpoints at their location.
    let uri = info.endpoint[0].location[0].uri.clone();
    let channel = tonic::transport::Endpoint::from_shared(uri.replace("grpc+tcp://", "http://"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut located = FlightSqlServiceClient::new(channel);
    let all = fetch(&mut located, info).await.unwrap();
    assert_eq!(all.num_rows(), 5_000);
    // Prepared statements and catalog commands alike.
    let mut prepared = client
        .prepare("SELECT name FROM trips".into(), None)
        .await
        .unwrap();
    let info = prepared.execute().await.unwrap();
    assert_eq!(locations(&info), vec![vec![server.uri()]; 3]);
    let info = client.get_catalogs().await.unwrap();
    assert_eq!(locations(&info), vec![vec![server.uri()]]);
}

#[tokio::test]
async fn a_result_partition_is_fetched_once() {
    let server = server(true, EngineOptions::default()).await;
    let mut client = server.sql_client().await;
    let info = client
        .execute("SELECT count(*) FROM trips".into(), None)
        .await
        .unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let first: Vec<_> = client
        .do_get(ticket.clone())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        first[0].column(0).as_primitive::<Int64Type>().value(0),
        10_000
    );
    let again = client.do_get(ticket).await;
    let err = match again {
        Ok(stream) => stream.try_collect::<Vec<_>>().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(status(err).code(), Code::NotFound);
}

#[tokio::test]
async fn updates_return_true_counts_and_change_the_store() {
    let server = server(true, EngineOptions::default()).await;
    let mut client = server.sql_client().await;
    let created = client
        .execute_update(
            "CREATE TABLE recent AS SELECT * FROM trips WHERE id >= 9000".into(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(created, 1000);
    assert_eq!(server.store.get("recent").unwrap().num_rows(), 1000);
    let inserted = client
        .execute_update(
            "INSERT INTO recent SELECT * FROM trips WHERE id < 5".into(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(inserted, 5);
    let dropped = client
        .execute_update("DROP TABLE recent".into(), None)
        .await
        .unwrap();
    assert_eq!(dropped, 0, "DDL writes no rows");
    assert!(server.store.get("recent").is_err());
    // A statement query of DDL answers with its count, once.
    let result = query(&mut client, "CREATE TABLE copy AS SELECT * FROM trips")
        .await
        .unwrap();
    assert_eq!(
        result.column(0).as_primitive::<UInt64Type>().value(0),
        10_000
    );
    // The store's own readers see SQL's tables.
    let mut flight = server.client().await;
    let info = flight
        .get_flight_info(arrow_flight::FlightDescriptor::new_path(vec![
            "copy".into(),
        ]))
        .await
        .unwrap();
    assert_eq!(info.total_records, 10_000);
}

#[tokio::test]
async fn sql_errors_carry_codes_and_leave_tables_alone() {
    let server = server(true, EngineOptions::default()).await;
    let mut client = server.sql_client().await;
    let version = server.store.get("trips").unwrap().version();
    let cases = [
        ("SELEC 1", Code::InvalidArgument),
        ("SELECT * FROM no_such_table", Code::InvalidArgument),
        ("SELECT nope FROM trips", Code::InvalidArgument),
        ("DELETE FROM trips", Code::Unimplemented),
        ("CREATE TABLE trips AS SELECT 1", Code::AlreadyExists),
        ("INSERT INTO trips VALUES ('x', 'y')", Code::InvalidArgument),
        ("DROP TABLE missing", Code::NotFound),
    ];
    for (sql, code) in cases {
        let err = match client.execute_update(sql.into(), None).await {
            Err(e) => status(e),
            Ok(n) => panic!("{sql} succeeded with {n}"),
        };
        assert_eq!(err.code(), code, "{sql}: {}", err.message());
    }
    let err = status(
        client
            .execute("SELECT * FROM no_such_table".into(), None)
            .await
            .unwrap_err(),
    );
    assert!(err.message().contains("no_such_table"), "{}", err.message());
    let err = status(
        client
            .execute_update("SELECT 1".into(), None)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(server.store.get("trips").unwrap().version(), version);
}

#[tokio::test]
async fn a_query_over_its_memory_limit_fails_and_the_server_goes_on() {
    let server = server(
        true,
        EngineOptions {
            query_memory_limit: 64 << 10,
            ..Default::default()
        },
    )
    .await;
    let mut client = server.sql_client().await;
    let err = query(&mut client, "SELECT * FROM trips ORDER BY name DESC, id")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{}", err.message());
    let count = query(&mut client, "SELECT count(*) FROM trips")
        .await
        .unwrap();
    assert_eq!(count.column(0).as_primitive::<Int64Type>().value(0), 10_000);
}

#[tokio::test]
async fn prepared_statements_bind_parameters() {
    let server = server(true, EngineOptions::default()).await;
    let mut client = server.sql_client().await;
    let mut statement = client
        .prepare(
            "SELECT id FROM trips WHERE id > ? AND id <= ? ORDER BY id".into(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(statement.parameter_schema().unwrap().fields().len(), 2);
    assert_eq!(statement.dataset_schema().unwrap().field(0).name(), "id");
    for (low, high) in [(10i64, 13i64), (100, 101)] {
        let params = RecordBatch::try_from_iter([
            ("$1", Arc::new(Int64Array::from(vec![low])) as ArrayRef),
            ("$2", Arc::new(Int64Array::from(vec![high])) as ArrayRef),
        ])
        .unwrap();
        statement.set_parameters(params).unwrap();
        let info = statement.execute().await.unwrap();
        let ids = fetch(&mut client, info).await.unwrap();
        let ids: Vec<i64> = ids.column(0).as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(ids, ((low + 1)..=high).collect::<Vec<_>>());
    }
    statement.close().await.unwrap();

    let mut insert = client
        .prepare("INSERT INTO trips VALUES (?, ?)".into(), None)
        .await
        .unwrap();
    let rows = RecordBatch::try_from_iter([
        (
            "$1",
            Arc::new(Int64Array::from(vec![-1, -2, -3])) as ArrayRef,
        ),
        (
            "$2",
            Arc::new(StringArray::from(vec!["a", "b", "c"])) as ArrayRef,
        ),
    ])
    .unwrap();
    insert.set_parameters(rows).unwrap();
    assert_eq!(insert.execute_update().await.unwrap(), 3);
    assert_eq!(server.store.get("trips").unwrap().num_rows(), 10_003);
}

#[tokio::test]
async fn bulk_ingest_creates_appends_replaces_and_refuses() {
    let server = server(true, EngineOptions::default()).await;
    let mut client = server.sql_client().await;
    let ingest = |table: &str, if_not_exist: TableNotExistOption, if_exists: TableExistsOption| {
        CommandStatementIngest {
            table_definition_options: Some(TableDefinitionOptions {
                if_not_exist: if_not_exist as i32,
                if_exists: if_exists as i32,
            }),
            table: table.into(),
            ..Default::default()
        }
    };
    let batches = || stream::iter([Ok(trips(0..100)), Ok(trips(100..150))]);
    let create = ingest(
        "fresh",
        TableNotExistOption::Create,
        TableExistsOption::Fail,
    );
    assert_eq!(
        client
            .execute_ingest(create.clone(), batches())
            .await
            .unwrap(),
        150
    );
    let err = status(client.execute_ingest(create, batches()).await.unwrap_err());
    assert_eq!(err.code(), Code::AlreadyExists);
    let append = ingest(
        "fresh",
        TableNotExistOption::Fail,
        TableExistsOption::Append,
    );
    assert_eq!(client.execute_ingest(append, batches()).await.unwrap(), 150);
    assert_eq!(server.store.get("fresh").unwrap().num_rows(), 300);
    let replace = ingest(
        "fresh",
        TableNotExistOption::Create,
        TableExistsOption::Replace,
    );
    assert_eq!(
        client.execute_ingest(replace, batches()).await.unwrap(),
        150
    );
    assert_eq!(server.store.get("fresh").unwrap().num_rows(), 150);
    let missing = ingest(
        "absent",
        TableNotExistOption::Fail,
        TableExistsOption::Append,
    );
    let err = status(client.execute_ingest(missing, batches()).await.unwrap_err());
    assert_eq!(err.code(), Code::NotFound);
    let count = query(&mut client, "SELECT count(*) FROM fresh")
        .await
        .unwrap();
    assert_eq!(count.column(0).as_primitive::<Int64Type>().value(0), 150);
}

#[tokio::test]
async fn catalog_commands_describe_the_tables() {
    let server = server(true, EngineOptions::default()).await;
    let mut client = server.sql_client().await;
    let info = client.get_catalogs().await.unwrap();
    let catalogs = fetch(&mut client, info).await.unwrap();
    assert_eq!(catalogs.column(0).as_string::<i32>().value(0), "quiver");
    let info = client
        .get_db_schemas(CommandGetDbSchemas::default())
        .await
        .unwrap();
    let schemas = fetch(&mut client, info).await.unwrap();
    assert_eq!(schemas.column(1).as_string::<i32>().value(0), "public");
    let info = client
        .get_tables(CommandGetTables {
            include_schema: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let tables = fetch(&mut client, info).await.unwrap();
    assert_eq!(tables.num_rows(), 1);
    assert_eq!(tables.column(2).as_string::<i32>().value(0), "trips");
    assert_eq!(tables.column(3).as_string::<i32>().value(0), "TABLE");
    let schema_ipc = tables.column(4).as_binary::<i32>().value(0);
    let schema = arrow::ipc::convert::try_schema_from_ipc_buffer(schema_ipc).unwrap();
    assert_eq!(schema.field(1).name(), "name");
    let info = client.get_table_types().await.unwrap();
    assert_eq!(fetch(&mut client, info).await.unwrap().num_rows(), 3);
    let info = client
        .get_sql_info(vec![
            SqlInfo::FlightSqlServerName,
            SqlInfo::FlightSqlServerTransaction,
        ])
        .await
        .unwrap();
    assert_eq!(fetch(&mut client, info).await.unwrap().num_rows(), 2);
    let info = client.get_xdbc_type_info(Default::default()).await.unwrap();
    assert!(fetch(&mut client, info).await.unwrap().num_rows() >= 10);
    let info = client.get_primary_keys(Default::default()).await.unwrap();
    assert_eq!(fetch(&mut client, info).await.unwrap().num_rows(), 0);
}

#[tokio::test]
async fn cancel_flight_info_stops_a_planned_query() {
    let server = server(true, EngineOptions::default()).await;
    let mut client = server.sql_client().await;
    let info = client
        .execute("SELECT * FROM trips".into(), None)
        .await
        .unwrap();
    let request = CancelFlightInfoRequest {
        info: Some(info.clone()),
    };
    let mut results = client
        .do_action(Action::new("CancelFlightInfo", request.encode_to_vec()))
        .await
        .unwrap();
    let result = results.try_next().await.unwrap().unwrap();
    // CancelStatus::Cancelled
    assert_eq!(
        CancelFlightInfoResult::decode(result.body).unwrap().status,
        1
    );
    let err = fetch(&mut client, info).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let unsupported = client.begin_transaction().await.unwrap_err();
    assert_eq!(status(unsupported).code(), Code::Unimplemented);
}
