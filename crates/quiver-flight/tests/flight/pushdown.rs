//! Pinned table tickets that carry a column selection (`"c"`) and a filter
//! (`"f"`), as connectors send them: each endpoint read with the columns and
//! rows asked for, its version still pinned. A real server on 127.0.0.1:0 and
//! the stock arrow-flight client.

use std::io::Write;
use std::sync::{Mutex, OnceLock};

use arrow::array::{BooleanArray, Decimal128Array, DictionaryArray, TimestampMicrosecondArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::Int32Type;

use crate::common::*;

/// Rows in the test table, and how it is put and split.
const ROWS: i64 = 1_000;
const BATCH_ROWS: i64 = 250;
const PARTITIONS: usize = 3;

/// Rows `from..from + rows`: `id`; `name`, null every 7th; `color`, a
/// dictionary; `at`, a timestamp in UTC, `id` seconds after the epoch;
/// `price`, a decimal(10, 2), `id * 7 % 1000` cents.
fn trips(from: i64, rows: i64) -> RecordBatch {
    let ids: Vec<i64> = (from..from + rows).collect();
    let names: Vec<Option<String>> = ids
        .iter()
        .map(|i| (i % 7 != 0).then(|| format!("name-{i}")))
        .collect();
    let colors: DictionaryArray<Int32Type> = ids
        .iter()
        .map(|i| ["red", "green", "blue"][(i % 3) as usize])
        .collect();
    let at = TimestampMicrosecondArray::from_iter_values(ids.iter().map(|i| i * 1_000_000))
        .with_timezone("UTC");
    let price = Decimal128Array::from_iter_values(ids.iter().map(|i| i128::from(i * 7 % 1000)))
        .with_precision_and_scale(10, 2)
        .expect("decimal(10, 2)");
    RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
        ("name", Arc::new(StringArray::from(names)) as ArrayRef),
        ("color", Arc::new(colors) as ArrayRef),
        ("at", Arc::new(at) as ArrayRef),
        ("price", Arc::new(price) as ArrayRef),
    ])
    .expect("batch")
}

/// The whole table, as put.
fn all_trips() -> RecordBatch {
    trips(0, ROWS)
}

/// A server holding `trips`, split over [`PARTITIONS`] endpoints.
async fn serve_trips() -> (TestServer, FlightClient) {
    serve_trips_on(true).await
}

/// [`serve_trips`], DoGet answered by quiver's own wire path or, with
/// `direct_wire` false, by arrow-flight's encoder through tonic.
async fn serve_trips_on(direct_wire: bool) -> (TestServer, FlightClient) {
    let config = ServerConfig {
        direct_wire,
        ..ServerConfig::default()
    };
    let server = TestServer::start_with(1 << 30, config).await;
    let mut client = server.client().await;
    let batches = (0..ROWS / BATCH_ROWS)
        .map(|b| trips(b * BATCH_ROWS, BATCH_ROWS))
        .collect();
    let options = format!(r#"{{"partitions": {PARTITIONS}}}"#);
    put_with(&mut client, path("trips"), Some(&options), batches)
        .await
        .expect("put");
    (server, client)
}

/// The JSON of each ticket GetFlightInfo gives for `name`.
async fn issued(client: &mut FlightClient, name: &str) -> Vec<serde_json::Value> {
    let info = client.get_flight_info(path(name)).await.expect("info");
    info.endpoint
        .into_iter()
        .map(|e| {
            let ticket = e.ticket.expect("ticket").ticket;
            let json = ticket
                .strip_prefix(b"\0quiver-ticket-v1:".as_slice())
                .expect("a quiver ticket");
            serde_json::from_slice(json).expect("ticket JSON")
        })
        .collect()
}

/// `issued` with columns and a filter added, as a client adds them.
fn pushed(issued: &serde_json::Value, columns: Option<&[&str]>, filter: Option<&str>) -> Ticket {
    let mut json = issued.clone();
    if let Some(columns) = columns {
        json["c"] = serde_json::json!(columns);
    }
    if let Some(filter) = filter {
        json["f"] = serde_json::json!(filter);
    }
    Ticket::new(format!("\0quiver-ticket-v1:{json}"))
}

async fn read(client: &mut FlightClient, ticket: Ticket) -> Result<Vec<RecordBatch>, FlightError> {
    client.do_get(ticket).await?.try_collect().await
}

/// Every endpoint of `trips` read with `columns` and `filter`, in order.
async fn read_all(
    client: &mut FlightClient,
    columns: Option<&[&str]>,
    filter: Option<&str>,
) -> Result<Vec<RecordBatch>, FlightError> {
    let mut out = Vec::new();
    for ticket in issued(client, "trips").await {
        out.extend(read(client, pushed(&ticket, columns, filter)).await?);
    }
    Ok(out)
}

/// The rows of the whole table whose id passes `keep`, with `columns`.
fn expected(columns: &[&str], keep: impl Fn(i64) -> bool) -> RecordBatch {
    let all = all_trips();
    let indices: Vec<usize> = columns
        .iter()
        .map(|c| all.schema().index_of(c).expect("a column"))
        .collect();
    let mask: BooleanArray = (0..ROWS).map(|id| Some(keep(id))).collect();
    filter_record_batch(&all.project(&indices).expect("project"), &mask).expect("filter")
}

/// `batches` as one batch (of `schema` if there are none).
fn joined(batches: &[RecordBatch], like: &RecordBatch) -> RecordBatch {
    arrow::compute::concat_batches(&like.schema(), batches).expect("concat")
}

/// Which ids a filter keeps.
type Keep = fn(i64) -> bool;

fn cents(id: i64) -> i64 {
    id * 7 % 1000
}

#[tokio::test]
async fn columns_alone_are_returned_in_the_order_asked() {
    let (_server, mut client) = serve_trips().await;
    let columns = ["price", "id", "color"];
    let got = read_all(&mut client, Some(&columns), None)
        .await
        .expect("read");
    let want = expected(&columns, |_| true);
    assert_eq!(got[0].schema(), want.schema());
    assert_eq!(joined(&got, &want), want);
    // One endpoint alone: its partition's rows, projected.
    let tickets = issued(&mut client, "trips").await;
    assert_eq!(tickets.len(), PARTITIONS);
    let second = read(&mut client, pushed(&tickets[1], Some(&["id"]), None))
        .await
        .expect("read");
    let (from, to) = (ROWS / 3, 2 * ROWS / 3);
    assert_eq!(
        joined(&second, &expected(&["id"], |_| true)),
        expected(&["id"], |id| (from..to).contains(&id))
    );
}

#[tokio::test]
async fn no_columns_return_the_row_counts() {
    let (_server, mut client) = serve_trips().await;
    for filter in [None, Some("id % 2 = 0")] {
        let got = read_all(&mut client, Some(&[]), filter)
            .await
            .expect("read");
        assert!(got.iter().all(|b| b.num_columns() == 0), "{filter:?}");
        let rows: usize = got.iter().map(RecordBatch::num_rows).sum();
        let want = if filter.is_some() { ROWS / 2 } else { ROWS };
        assert_eq!(rows as i64, want, "{filter:?}");
    }
}

#[tokio::test]
async fn a_filter_alone_returns_every_column_of_the_rows_it_keeps() {
    let (_server, mut client) = serve_trips().await;
    let got = read_all(
        &mut client,
        None,
        Some(r#""id" % 10 = 3 AND "name" IS NOT NULL"#),
    )
    .await
    .expect("read");
    let columns = ["id", "name", "color", "at", "price"];
    let want = expected(&columns, |id| id % 10 == 3 && id % 7 != 0);
    assert_eq!(got[0].schema(), all_trips().schema());
    assert_eq!(joined(&got, &want), want);
}

#[tokio::test]
async fn a_filter_on_columns_not_returned() {
    let (_server, mut client) = serve_trips().await;
    let got = read_all(
        &mut client,
        Some(&["name", "id"]),
        Some(r#""price" > 5.5 AND "id" < 800"#),
    )
    .await
    .expect("read");
    let want = expected(&["name", "id"], |id| cents(id) > 550 && id < 800);
    assert!(want.num_rows() > 0);
    assert_eq!(joined(&got, &want), want);
}

#[tokio::test]
async fn filters_on_a_dictionary_a_zoned_timestamp_and_a_decimal() {
    let (_server, mut client) = serve_trips().await;
    let cases: [(&str, Keep); 6] = [
        (r#""color" = 'green'"#, |id| id % 3 == 1),
        (r#""color" IN ('red', 'blue')"#, |id| id % 3 != 1),
        (r#""at" >= TIMESTAMP '1970-01-01T00:10:00Z'"#, |id| {
            id >= 600
        }),
        (r#""at" < '1970-01-01T00:01:40+00:00'"#, |id| id < 100),
        (r#""price" = 1.05"#, |id| cents(id) == 105),
        (
            r#""price" BETWEEN CAST('9.90' AS DECIMAL(10, 2)) AND 9.99"#,
            |id| (990..=999).contains(&cents(id)),
        ),
    ];
    for (filter, keep) in cases {
        let got = read_all(
            &mut client,
            Some(&["id", "color", "at", "price"]),
            Some(filter),
        )
        .await
        .unwrap_or_else(|e| panic!("{filter}: {e}"));
        let want = expected(&["id", "color", "at", "price"], keep);
        assert!(want.num_rows() > 0, "{filter}");
        assert_eq!(joined(&got, &want), want, "{filter}");
    }
}

#[tokio::test]
async fn both_wire_paths_push_down_alike() {
    let cases: [(Option<&[&str]>, Option<&str>); 4] = [
        (Some(&["color", "id"]), None),
        (Some(&[]), None),
        (None, Some(r#""color" = 'blue' AND "price" > 2.5"#)),
        (Some(&["at"]), Some(r#""name" LIKE 'name-1%'"#)),
    ];
    let (_direct, mut direct) = serve_trips_on(true).await;
    let (_library, mut library) = serve_trips_on(false).await;
    for (columns, filter) in cases {
        let ours = read_all(&mut direct, columns, filter)
            .await
            .expect("direct");
        let theirs = read_all(&mut library, columns, filter)
            .await
            .expect("library");
        let rows = |b: &[RecordBatch]| b.iter().map(RecordBatch::num_rows).sum::<usize>();
        assert!(rows(&ours) > 0, "{columns:?} {filter:?}");
        assert_eq!(rows(&ours), rows(&theirs), "{columns:?} {filter:?}");
        if columns != Some(&[]) {
            assert_eq!(
                joined(&ours, &ours[0]),
                joined(&theirs, &ours[0]),
                "{columns:?} {filter:?}"
            );
        }
    }
    let tickets = issued(&mut library, "trips").await;
    let err = read(&mut library, pushed(&tickets[0], None, Some("id >")))
        .await
        .unwrap_err();
    assert_eq!(status(err).0, Code::InvalidArgument);
}

#[tokio::test]
async fn the_same_ticket_read_twice_gives_the_same_rows() {
    let (_server, mut client) = serve_trips().await;
    let tickets = issued(&mut client, "trips").await;
    let ticket = pushed(
        &tickets[2],
        Some(&["at", "id"]),
        Some(r#""color" <> 'red' AND "price" < 3"#),
    );
    let first = read(&mut client, ticket.clone()).await.expect("first read");
    let second = read(&mut client, ticket).await.expect("second read");
    assert!(!first.is_empty());
    assert_eq!(first, second);
}

#[tokio::test]
async fn a_pushed_ticket_stays_pinned_to_its_version() {
    let (_server, mut client) = serve_trips().await;
    let tickets = issued(&mut client, "trips").await;
    let ticket = pushed(&tickets[0], Some(&["id"]), Some("id > 1"));
    read(&mut client, ticket.clone()).await.expect("read");
    put(&mut client, "trips", vec![trips(0, 10)]).await;
    let (code, message) = status(read(&mut client, ticket).await.unwrap_err());
    assert_eq!(code, Code::Aborted, "{message}");
}

#[tokio::test]
async fn bad_filters_are_invalid_argument_with_datafusion_s_message() {
    let (server, mut client) = serve_trips().await;
    let tickets = issued(&mut client, "trips").await;
    for (filter, says) in [
        (r#""id" >"#, "Expected: an expression"),
        (r#""nope" > 1"#, "nope"),
        (r#""id" + 1"#, "must be boolean"),
        (r#""name" LIKE"#, "SQL error"),
        ("no_such_function(id)", "no_such_function"),
        ("sum(id) > 1", "aggregate function"),
        ("id > 1; DROP TABLE trips", "end of expression"),
        ("DROP TABLE trips", "end of expression"),
    ] {
        let err = read(&mut client, pushed(&tickets[0], None, Some(filter)))
            .await
            .unwrap_err();
        let (code, message) = status(err);
        assert_eq!(code, Code::InvalidArgument, "{filter}: {message}");
        assert!(message.contains("invalid ticket filter"), "{message}");
        assert!(message.contains(says), "{filter}: {message}");
    }
    // A failure on the data itself is the filter's too, as in SQL.
    let err = read(
        &mut client,
        pushed(&tickets[0], None, Some(r#"CAST("name" AS BIGINT) > 0"#)),
    )
    .await
    .unwrap_err();
    assert_eq!(status(err).0, Code::InvalidArgument);
    // Nothing was dropped, and the server still serves.
    assert!(server.store.get("trips").is_ok());
    let got = read_all(&mut client, Some(&["id"]), Some("id < 3"))
        .await
        .expect("read");
    assert_eq!(joined(&got, &expected(&["id"], |_| true)).num_rows(), 3);
}

#[tokio::test]
async fn subqueries_are_refused() {
    let (_server, mut client) = serve_trips().await;
    let tickets = issued(&mut client, "trips").await;
    for filter in [
        "id IN (SELECT id FROM trips)",
        "EXISTS (SELECT 1 FROM trips)",
        "id = (SELECT max(id) FROM trips)",
        "id > (SELECT 1)",
    ] {
        let err = read(&mut client, pushed(&tickets[0], None, Some(filter)))
            .await
            .unwrap_err();
        let (code, message) = status(err);
        assert_eq!(code, Code::InvalidArgument, "{filter}: {message}");
        assert!(
            message.contains("subqueries are not allowed"),
            "{filter}: {message}"
        );
    }
}

#[tokio::test]
async fn unknown_and_repeated_columns_are_invalid_argument() {
    let (_server, mut client) = serve_trips().await;
    let tickets = issued(&mut client, "trips").await;
    let (code, message) = status(
        read(
            &mut client,
            pushed(&tickets[0], Some(&["id", "nope"]), None),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("\"nope\""), "{message}");
    assert!(message.contains("id, name, color, at, price"), "{message}");
    // Names are as stored: case matters.
    let (code, _) = status(
        read(&mut client, pushed(&tickets[0], Some(&["ID"]), None))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, Code::InvalidArgument);
    let (code, message) = status(
        read(&mut client, pushed(&tickets[0], Some(&["id", "id"]), None))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("twice"), "{message}");
    // Unknown keys too.
    let mut json = tickets[0].clone();
    json["columns"] = serde_json::json!(["id"]);
    let ticket = Ticket::new(format!("\0quiver-ticket-v1:{json}"));
    let (code, message) = status(read(&mut client, ticket).await.unwrap_err());
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("unknown field `columns`"), "{message}");
}

/// What the server logs, from the first test that asks on.
fn captured_logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let writer = Arc::clone(&logs);
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || Capture(Arc::clone(&writer)))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        logs
    })
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn each_pushed_read_logs_one_line_of_what_it_pushed() {
    let logs = captured_logs();
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, "logged/trips", vec![trips(0, 10)]).await;
    let tickets = issued(&mut client, "logged/trips").await;
    read(&mut client, pushed(&tickets[0], None, None))
        .await
        .expect("plain read");
    read(
        &mut client,
        pushed(
            &tickets[0],
            Some(&["id", "price"]),
            Some(r#""price" > 0.2"#),
        ),
    )
    .await
    .expect("pushed read");
    // A filter longer than a log line may show: cut.
    let long = format!("id >= 0{}", " AND id >= 0".repeat(300));
    read(&mut client, pushed(&tickets[0], None, Some(&long)))
        .await
        .expect("long read");
    let text = String::from_utf8(logs.lock().expect("logs").clone()).expect("UTF-8");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("DoGet pushdown") && l.contains("table=logged/trips"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("version=1 partition=0 partitions=1"),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains(r#"columns=["id","price"]"#),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains(r#"filter="\"price\" > 0.2""#),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("columns=*"), "{}", lines[1]);
    assert!(lines[1].contains("…"), "{}", lines[1]);
    assert!(lines[1].len() < 2_400, "{}", lines[1].len());
}
