"""The web console (``quiver serve --http-listen``, docs/console.md) against the real binary.

Its JSON API is called as a page calls it: statuses, logins, roles, the CSRF header, paging,
types and nulls, cancelling, bad input. Then Debian's headless Chromium, driven by Selenium,
uses the page as a person does: logs in, browses a table, runs a query, draws its chart,
cancels a long query, is refused as a reader. Without Chromium the browser tests skip,
saying why, except in CI (``CI=true``), where they fail.

``QUIVER_CONSOLE_SCREENSHOTS=DIR`` saves a PNG of each page into DIR (docs/console/).
"""

from __future__ import annotations

import http.client
import io
import json
import ssl
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import quiver
from console_helpers import (
    Api,
    Reply,
    browser_login,
    by_id,
    chromium,
    console_url,
    put_table,
    run_sql,
    shoot,
    status_after_run,
    until,
)
from security_helpers import PASSWORDS, Certs, make_certs, make_users
from server_process import Server, ServerFactory

ROWS = 10_000
#: A sum over 10^12 generated rows takes most of an hour: the query to cancel. (A cross
#: join of large tables would take as long, but DataFusion's cross join does not yield
#: to the runtime between its batches, so the server answers nothing else meanwhile.)
LONG_QUERY = "SELECT sum(value) FROM range(1, 1000000000000)"
WAIT_S = 30.0


def trips(rows: int = ROWS) -> pa.Table:
    """Rows of ints, floats, categories and strings with nulls (every 7th)."""
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "fare": pa.array([i * 0.25 for i in range(rows)], pa.float64()),
            "city": pa.array([["oslo", "lima", "pune"][i % 3] for i in range(rows)]),
            "note": pa.array([None if i % 7 == 0 else f"n{i}" for i in range(rows)]),
        }
    )


@pytest.fixture
def open_console(start_quiver: ServerFactory) -> Callable[..., tuple[Server, Api]]:
    """Start a server with the console on 127.0.0.1:0; return it and an API client."""

    def start(*flags: str, context: ssl.SSLContext | None = None) -> tuple[Server, Api]:
        server = start_quiver("--http-listen", "127.0.0.1:0", *flags)
        return server, Api(console_url(server), context=context)

    return start


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    return make_users(tmp_path_factory.mktemp("users"))


@pytest.fixture
def secure(
    open_console: Callable[..., tuple[Server, Api]], users: tuple[Path, dict[str, str]]
) -> tuple[Server, Api, dict[str, str]]:
    """A server with --users, the table ``trips`` put by the writer."""
    server, api = open_console("--users", str(users[0]))
    writer = api.login("writer", PASSWORDS["writer"])
    put_table(server.uri, "trips", trips(), token=writer.token)
    return server, api, users[1]


@pytest.fixture
def open_server(open_console: Callable[..., tuple[Server, Api]]) -> tuple[Server, Api]:
    """A server without --users, with the table ``trips``."""
    server, api = open_console()
    put_table(server.uri, "trips", trips())
    return server, api.anyone()


def error_of(reply: Reply, status: int) -> dict[str, Any]:
    """The JSON error of ``reply``, which must have ``status``."""
    assert reply.status == status, (reply.status, reply.body)
    assert isinstance(reply.body, dict) and reply.body["error"], reply.body
    return reply.body


# -- the API --------------------------------------------------------------------------------


def test_every_call_needs_a_login_and_no_data_is_sent_before(
    secure: tuple[Server, Api, dict[str, str]],
) -> None:
    _, api, tokens = secure
    page = api.get("/")
    assert page.status == 200 and b"trips" not in page.raw
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert api.get("/api/session").body == {"auth": True, "user": None}
    for path in ["/api/tables", "/api/tables/trips", "/api/live", "/api/queries"]:
        assert error_of(api.get(path), 401)["code"] == "Unauthenticated"
    assert error_of(api.query("SELECT * FROM trips"), 401)
    # Wrong password, unknown user, a forged token: refused alike.
    assert error_of(api.post("/api/login", {"user": "writer", "password": "x"}), 401)
    assert error_of(api.post("/api/login", {"user": "nobody", "password": "x"}), 401)
    assert error_of(Api(api.base, token="not-a-token").get("/api/tables"), 401)
    # A password on HTTP basic, or an API token, log in too.
    basic = api.login_basic("reader", PASSWORDS["reader"])
    assert basic.status == 200 and basic.body["role"] == "read"
    by_token = Api(api.base, token=tokens["reader"]).post("/api/login")
    assert by_token.status == 200 and by_token.body["user"] == "token:reader-token"
    reader = api.login("reader", PASSWORDS["reader"])
    assert reader.get("/api/session").body["user"] == "reader"
    names = [t["name"] for t in reader.get("/api/tables").body["tables"]]
    assert names == ["trips"]


def test_roles_hold_on_every_call(secure: tuple[Server, Api, dict[str, str]]) -> None:
    _, api, tokens = secure
    reader = api.login("reader", PASSWORDS["reader"])
    for sql in [
        "CREATE TABLE copied AS SELECT * FROM trips",
        "DROP TABLE trips",
        "INSERT INTO trips SELECT * FROM trips",
        "EXPLAIN ANALYZE INSERT INTO trips SELECT * FROM trips",
    ]:
        body = error_of(reader.query(sql), 403)
        assert body["code"] == "PermissionDenied" and "role" in body["error"]
    # An API token of the read role is held to it as well.
    token = Api(api.base, token=tokens["reader"], csrf=reader.csrf)
    assert error_of(token.query("DROP TABLE trips"), 403)
    # A download runs queries only, whatever the role.
    admin = api.login("admin", PASSWORDS["admin"])
    assert error_of(admin.post("/api/download", {"sql": "DROP TABLE trips"}), 403)
    writer = api.login("writer", PASSWORDS["writer"])
    done = writer.query("CREATE TABLE copied AS SELECT * FROM trips WHERE id < 10")
    assert done.status == 200 and done.body == {**done.body, "kind": "changed", "changed": 10}
    assert reader.get("/api/tables/trips").body["rows"] == ROWS
    # A reader reads no other user's results.
    mine = writer.query("SELECT id FROM trips ORDER BY id", limit=1)
    assert writer.get(f"/api/results/{mine.body['id']}?offset=1&limit=1").body["columns"] == [[1]]
    assert error_of(reader.get(f"/api/results/{mine.body['id']}"), 404)


def test_a_state_change_needs_the_csrf_header(secure: tuple[Server, Api, dict[str, str]]) -> None:
    _, api, _ = secure
    writer = api.login("writer", PASSWORDS["writer"])
    body = error_of(writer.query("SELECT 1", call={"csrf": False}), 403)
    assert body["kind"] == "CSRF"
    assert error_of(writer.query("SELECT 1", call={"headers": {"X-Quiver-CSRF": "guess"}}), 403)
    # A cookie is no credential: the console sets none and reads none.
    cookie = {"Cookie": f"token={writer.token}; quiver_session={writer.token}"}
    assert error_of(writer.query("SELECT 1", call={"auth": False, "headers": cookie}), 401)
    ok = writer.query("SELECT 1 AS one")
    assert ok.status == 200 and ok.body["columns"] == [[1]]
    assert "set-cookie" not in ok.headers


def test_results_are_typed_paged_and_nulls_are_null(open_server: tuple[Server, Api]) -> None:
    _, api = open_server
    reply = api.query("SELECT id, fare, city, note FROM trips ORDER BY id", limit=8)
    assert reply.status == 200, reply.body
    body = reply.body
    assert [(f["name"], f["type"]) for f in body["schema"]] == [
        ("id", "Int64"),
        ("fare", "Float64"),
        ("city", "Utf8"),
        ("note", "Utf8"),
    ]
    assert body["total_rows"] == ROWS and not body["truncated"]
    ids, fares, cities, notes = body["columns"]
    assert ids == list(range(8)) and fares[:2] == [0.0, 0.25] and cities[:2] == ["oslo", "lima"]
    assert notes[0] is None and notes[7] is None and notes[1] == "n1"
    page = api.get(f"/api/results/{body['id']}?offset={ROWS - 3}&limit=10").body
    assert page["columns"][0] == [ROWS - 3, ROWS - 2, ROWS - 1]
    big = api.query("SELECT CAST(9007199254740993 AS BIGINT) AS big, 'null' AS text")
    assert big.body["columns"] == [["9007199254740993"], ["null"]]
    table = api.get("/api/tables/trips").body
    assert (table["rows"], table["version"], table["partitions"]) == (ROWS, 1, 1)
    stats = {s["column"]: s for s in table["statistics"]}
    assert (stats["id"]["min"], stats["id"]["max"], stats["id"]["nulls"]) == (0, ROWS - 1, 0)
    assert stats["note"]["nulls"] == (ROWS + 6) // 7
    assert table["sample"]["rows"] == 100 and None in table["sample"]["columns"][3]
    csv = api.post("/api/download", {"sql": "SELECT id, note FROM trips ORDER BY id LIMIT 3"})
    assert csv.status == 200 and csv.headers["content-type"].startswith("text/csv")
    assert csv.raw.decode().splitlines() == ["id,note", "0,", "1,n1", "2,n2"]
    plan = api.query("EXPLAIN ANALYZE SELECT city, count(*) FROM trips GROUP BY city")
    assert plan.status == 200 and "output_rows" in json.dumps(plan.body["columns"])


def test_bad_input_gets_a_clear_error_and_breaks_nothing(open_server: tuple[Server, Api]) -> None:
    _, api = open_server
    bad_sql = error_of(api.query("SELEC 1"), 400)
    assert bad_sql["kind"] == "INVALID_SQL" and "SELEC" in bad_sql["error"]
    # As on Flight SQL: a statement naming no table is bad SQL.
    assert "not found" in error_of(api.query("SELECT * FROM nowhere"), 400)["error"]
    assert "100000" in error_of(api.query("SELECT 1", limit=10**9), 400)["error"]
    assert error_of(api.query(""), 400)
    assert error_of(api.query("SELECT 1", id="../../etc"), 400)
    assert error_of(api.get("/api/tables/nowhere"), 404)
    assert error_of(api.get("/api/tables/trailing%20"), 400)
    assert error_of(api.get("/api/tables/%ff"), 400)
    assert error_of(api.get("/api/results/none?offset=x"), 400)
    assert error_of(api.get("/api/results/none"), 404)
    assert error_of(api.post("/api/query", data=b"{not json", headers={}), 400)
    assert error_of(api.post("/api/query", {"sql": "SELECT 1", "rows": 5}), 400)
    assert error_of(api.post("/api/query", data=b"x" * ((1 << 20) + 1024)), 413)
    assert error_of(api.get("/api/query"), 405)
    assert error_of(api.get("/api/nothing"), 404)
    assert api.get("/nothing").status == 404
    assert error_of(api.post("/api/queries/none/cancel"), 404)
    # After all that, the server answers as before.
    assert api.query("SELECT count(*) AS n FROM trips").body["columns"] == [[ROWS]]


def test_a_running_query_is_listed_and_cancelled(open_server: tuple[Server, Api]) -> None:
    _, api = open_server
    answer: list[Reply] = []
    thread = threading.Thread(target=lambda: answer.append(api.query(LONG_QUERY, id="long-1")))
    started = time.monotonic()
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not api.get("/api/queries").body["queries"]:
        assert time.monotonic() < deadline, "the query never showed as running"
        time.sleep(0.05)
    running = api.get("/api/queries").body["queries"]
    assert [q["id"] for q in running] == ["long-1"] and "range(" in running[0]["sql"]
    live = api.get("/api/live").body
    assert [q["id"] for q in live["queries"]] == ["long-1"]
    time.sleep(0.5)
    assert api.post("/api/queries/long-1/cancel").body == {"cancelled": True}
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the cancelled query did not end"
    assert error_of(answer[0], 499)["code"] == "Cancelled"
    assert time.monotonic() - started < WAIT_S
    assert api.get("/api/queries").body["queries"] == []


def test_flight_sql_clients_queries_are_listed_and_cancelled(
    secure: tuple[Server, Api, dict[str, str]],
) -> None:
    """A query an ADBC client runs (planned by GetFlightInfo, run by DoGet) shows on Live
    with its user, to that user and to an admin only, and either may cancel it there."""
    import adbc_driver_flightsql.dbapi as flight_sql

    server, api, _ = secure
    admin = api.login("admin", PASSWORDS["admin"])
    reader = api.login("reader", PASSWORDS["reader"])
    writer = api.login("writer", PASSWORDS["writer"])
    failure: list[BaseException] = []

    def run() -> None:
        kwargs = {"username": "reader", "password": PASSWORDS["reader"]}
        try:
            with (
                flight_sql.connect(server.uri, db_kwargs=kwargs, autocommit=True) as conn,
                conn.cursor() as cur,
            ):
                cur.execute(LONG_QUERY)
                cur.fetchall()
        except Exception as e:
            failure.append(e)

    thread = threading.Thread(target=run)
    started = time.monotonic()
    thread.start()

    def flight_sql_queries(who: Api) -> list[dict[str, Any]]:
        return [q for q in who.get("/api/live").body["queries"] if q["via"] == "Flight SQL"]

    deadline = time.monotonic() + WAIT_S
    while not flight_sql_queries(admin):
        assert time.monotonic() < deadline, "the ADBC query never showed as running"
        time.sleep(0.05)
    [query] = flight_sql_queries(admin)
    assert query["user"] == "reader" and "range(" in query["sql"], query
    assert [q["id"] for q in flight_sql_queries(reader)] == [query["id"]]
    assert flight_sql_queries(writer) == []
    assert writer.post(f"/api/queries/{query['id']}/cancel").status == 404
    time.sleep(0.5)
    assert reader.post(f"/api/queries/{query['id']}/cancel").body == {"cancelled": True}
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the cancelled ADBC query did not end"
    assert failure and "cancel" in str(failure[0]).lower(), failure
    assert time.monotonic() - started < WAIT_S
    until_true(lambda: flight_sql_queries(admin) == [], "the query to leave the list")


def until_true(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Wait, bounded, until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_tables_show_when_they_were_last_written_across_a_restart(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    """A put, an append and a statement set a table's last write; a rename keeps it; a
    durable server remembers it over a restart."""
    data = tmp_path / "data"
    flags = ("--http-listen", "127.0.0.1:0", "--data-dir", str(data))
    server = start_quiver(*flags)
    api = Api(console_url(server)).anyone()

    def written(name: str) -> int:
        [table] = [t for t in api.get("/api/tables").body["tables"] if t["name"] == name]
        assert api.get(f"/api/tables/{name}").body["written_ms"] == table["written_ms"]
        return int(table["written_ms"])

    before = time.time() * 1000
    put_table(server.uri, "trips", trips(100))
    first = written("trips")
    assert before - 1 <= first <= time.time() * 1000 + 1
    time.sleep(0.05)
    assert api.query("INSERT INTO trips SELECT * FROM trips LIMIT 1").status == 200
    appended = written("trips")
    assert appended > first
    with quiver.connect(server.uri) as client:
        client.rename("trips", "rides")
    assert written("rides") == appended
    server.stop()
    server = start_quiver(*flags)
    api = Api(console_url(server)).anyone()
    assert written("rides") == appended


def test_live_samples_only_while_polled_and_metrics_are_served(
    open_server: tuple[Server, Api],
) -> None:
    _, api = open_server
    first = api.get("/api/live").body
    assert len(first["samples"]) == 1 and first["every_ms"] == 1000
    sample = first["samples"][0]
    assert sample["bytes_in"] > 0 and sample["rpcs"]["DoPut"] == 1
    assert sample["tables"] == 1 and sample["memory_limit"] > 0
    assert len(api.get("/api/live").body["samples"]) == 1  # not yet a second old
    time.sleep(3)
    # Nothing sampled while nobody asked: one more sample, not three.
    assert len(api.get("/api/live").body["samples"]) == 2
    metrics = api.get("/metrics")
    assert metrics.status == 200 and b"quiver_rpcs_total" in metrics.raw


def test_the_console_speaks_tls_with_the_flight_certificate(
    open_console: Callable[..., tuple[Server, Api]], tmp_path: Path
) -> None:
    (tmp_path / "certs").mkdir()
    certs: Certs = make_certs(tmp_path / "certs")
    context = ssl.create_default_context(cafile=str(certs.ca))
    _, api = open_console(
        "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key), context=context
    )
    assert api.base.startswith("https://127.0.0.1:")
    assert api.get("/").status == 200
    assert api.anyone().query("SELECT 1 AS one").body["columns"] == [[1]]
    plain = Api(api.base.replace("https://", "http://"))
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
        plain.get("/api/session")


def operators(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every operator of a plan tree, the root first."""
    yield node
    for child in node["children"]:
        yield from operators(child)


#: A query whose operators' rows are known: 700 rows pass the filter, three groups come out.
GROUPED = "SELECT city, count(*) AS n FROM trips WHERE id < 700 GROUP BY city ORDER BY city"


def test_explain_gives_the_operators_and_analyze_their_rows(
    open_server: tuple[Server, Api],
) -> None:
    _, api = open_server
    ran = api.post("/api/explain", {"sql": GROUPED, "analyze": True})
    assert ran.status == 200, ran.body
    assert ran.body["kind"] == "plan" and ran.body["analyze"] is True
    tree = ran.body["plan"]
    nodes = list(operators(tree))
    names = [n["name"] for n in nodes]
    assert "AggregateExec" in names and "FilterExec" in names
    # Rows as they ran: three groups out of the root, 700 out of the filter, and every
    # operator above the scan measured (quiver's scan keeps no metrics; its line says its rows).
    assert tree["output_rows"] == 3
    assert all(isinstance(n["output_rows"], int) for n in nodes if n["children"]), nodes
    assert all(
        isinstance(n["elapsed_compute_ns"], int) for n in nodes if n["name"] == "AggregateExec"
    )
    assert [n["output_rows"] for n in nodes if n["name"] == "FilterExec"] == [700]
    assert [n["detail"] for n in nodes if not n["children"]] == [
        "StoredScanExec: partitions=2, rows=10000"
    ]
    assert any(m["name"] == "output_rows" for m in tree["metrics"])
    assert "output_rows" in json.dumps(ran.body["text"])
    # EXPLAIN runs nothing: the same operators, no rows yet.
    planned = api.post("/api/explain", {"sql": GROUPED})
    assert planned.status == 200, planned.body
    assert [n["name"] for n in operators(planned.body["plan"])] == names
    assert all(n["output_rows"] is None for n in operators(planned.body["plan"]))
    assert "physical_plan" in [t["type"] for t in planned.body["text"]]
    # What /api/query answers is as before: EXPLAIN's text.
    text = api.query(f"EXPLAIN ANALYZE {GROUPED}")
    assert text.status == 200 and "output_rows" in json.dumps(text.body["columns"])
    assert error_of(api.post("/api/explain", {"sql": "SELEC 1"}), 400)["kind"] == "INVALID_SQL"
    assert error_of(api.post("/api/explain", {"sql": "  "}), 400)
    assert error_of(api.post("/api/explain", {"sql": "SELECT 1", "analyse": True}), 400)
    assert (
        error_of(api.post("/api/explain", {"sql": "SELECT 1"}, csrf=False), 403)["kind"] == "CSRF"
    )


def test_explain_analyze_is_held_to_the_role(secure: tuple[Server, Api, dict[str, str]]) -> None:
    _, api, _ = secure
    reader = api.login("reader", PASSWORDS["reader"])
    insert = "INSERT INTO trips SELECT * FROM trips"
    body = error_of(reader.post("/api/explain", {"sql": insert, "analyze": True}), 403)
    assert body["code"] == "PermissionDenied"
    # A writer's EXPLAIN ANALYZE of a write is refused too: it would run the write.
    writer = api.login("writer", PASSWORDS["writer"])
    assert error_of(writer.post("/api/explain", {"sql": insert, "analyze": True}), 501)
    # EXPLAIN runs nothing, so anyone sees a write's plan, as text: its tree would come
    # from planning it as a query, which it is not.
    for user in [reader, writer]:
        shown = user.post("/api/explain", {"sql": insert})
        assert shown.status == 200 and shown.body["plan"] is None and shown.body["text"]
    assert reader.get("/api/tables/trips").body["rows"] == ROWS
    plan = reader.post("/api/explain", {"sql": GROUPED, "analyze": True})
    assert plan.status == 200 and plan.body["plan"]["output_rows"] == 3


def test_downloads_are_the_whole_result_as_csv_parquet_and_arrow(
    secure: tuple[Server, Api, dict[str, str]],
) -> None:
    _, api, _ = secure
    reader = api.login("reader", PASSWORDS["reader"])
    sql = "SELECT id, fare, city, note FROM trips ORDER BY id"
    expected = trips().to_pydict()
    kinds = {
        "csv": ("text/csv; charset=utf-8", "result.csv"),
        "parquet": ("application/vnd.apache.parquet", "result.parquet"),
        "arrow": ("application/vnd.apache.arrow.stream", "result.arrows"),
    }
    read = {
        "parquet": lambda raw: pq.read_table(io.BytesIO(raw)),
        "arrow": lambda raw: pa.ipc.open_stream(raw).read_all(),
    }
    for format, (content_type, name) in kinds.items():
        got = reader.post("/api/download", {"sql": sql, "format": format})
        assert got.status == 200, got.body
        assert got.headers["content-type"] == content_type
        assert got.headers["content-disposition"] == f'attachment; filename="{name}"'
        if format == "csv":
            lines = got.raw.decode().splitlines()
            assert len(lines) == ROWS + 1 and lines[:3] == [
                "id,fare,city,note",
                "0,0.0,oslo,",
                "1,0.25,lima,n1",
            ]
            continue
        table = read[format](got.raw)
        assert table.num_rows == ROWS and table.to_pydict() == expected, format
        assert table.schema.field("note").type == pa.string()
    # A result of many partitions and batches: all its rows, whatever their order.
    many = reader.post(
        "/api/download", {"sql": "SELECT id FROM trips WHERE id % 2 = 0", "format": "arrow"}
    )
    ids = pa.ipc.open_stream(many.raw).read_all().column("id").to_pylist()
    assert sorted(ids) == list(range(0, ROWS, 2))
    empty = reader.post(
        "/api/download", {"sql": "SELECT id FROM trips WHERE id < 0", "format": "parquet"}
    )
    assert empty.status == 200 and pq.read_table(io.BytesIO(empty.raw)).num_rows == 0
    # Held to the role and the CSRF header as queries are; a format it does not know is refused.
    body = error_of(
        reader.post("/api/download", {"sql": "DROP TABLE trips", "format": "parquet"}), 403
    )
    assert body["code"] == "PermissionDenied"
    assert error_of(reader.post("/api/download", {"sql": sql, "format": "arrow"}, csrf=False), 403)
    assert error_of(Api(api.base).post("/api/download", {"sql": sql, "format": "arrow"}), 401)
    assert error_of(reader.post("/api/download", {"sql": sql, "format": "xlsx"}), 400)
    assert error_of(reader.post("/api/download", {"sql": "SELEC", "format": "parquet"}), 400)
    assert reader.get("/api/tables/trips").body["rows"] == ROWS


# -- in the browser -------------------------------------------------------------------------


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver


def drawn_rows(driver: Any) -> list[list[str]]:
    """The result table's rows in the document (those in view and a margin), as text."""
    return list(
        driver.execute_script(
            "return Array.from(document.querySelectorAll('#result-table tbody tr:not(.pad)'),"
            " (tr) => Array.from(tr.cells, (td) => td.textContent))"
        )
    )


def test_browser_login_browse_query_chart_and_live(
    secure: tuple[Server, Api, dict[str, str]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    _, api, _ = secure
    browser.get(api.base + "/")
    until(browser, lambda d: by_id(d, "view-login").is_displayed(), "the login form")
    assert "trips" not in browser.page_source
    shoot(browser, "login")
    by_id(browser, "login-user").send_keys("writer")
    by_id(browser, "login-password").send_keys("wrong")
    by_id(browser, "login-submit").click()
    until(browser, lambda d: "wrong" in by_id(d, "login-error").text, "the refusal")
    by_id(browser, "login-password").clear()
    browser_login(browser, api.base, "writer")
    row = until(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#tables-list tr[data-name=trips]"),
        "the table in the list",
    )[0]
    assert "10,000" in row.text
    row.click()
    until(browser, lambda d: by_id(d, "table-detail").get_attribute("data-ms"), "the sample")
    sample_rows = browser.find_elements(By.CSS_SELECTOR, "#sample-table tbody tr")
    assert len(sample_rows) == 100
    assert "null" in browser.find_element(By.CSS_SELECTOR, "#sample-table td.null").text
    columns = by_id(browser, "detail-columns").text
    assert "Int64" in columns and "9999" in columns
    shoot(browser, "tables")
    run_sql(browser, "SELECT city, sum(fare) AS fares FROM trips GROUP BY city ORDER BY city")
    assert "3 rows" in status_after_run(browser)
    cells = browser.find_elements(By.CSS_SELECTOR, "#result-table tbody tr")
    assert [c.text.split()[1] for c in cells] == ["lima", "oslo", "pune"]
    by_id(browser, "show-chart").click()
    svg = until(browser, lambda d: d.find_elements(By.ID, "chart-svg"), "the chart")[0]
    assert svg.get_attribute("data-kind") == "bar"
    assert len(svg.find_elements(By.CSS_SELECTOR, "rect")) == 3
    shoot(browser, "sql-chart")
    by_id(browser, "show-table").click()
    run_sql(browser, "SELECT id, note FROM trips ORDER BY id")
    assert "10,000 rows" in status_after_run(browser)
    assert browser.find_element(By.CSS_SELECTOR, "#result-table td.null").text == "null"
    shoot(browser, "sql")
    # The page holds 100 rows; those in view are drawn, the rest when scrolled to.
    assert by_id(browser, "result-table").get_attribute("data-rows") == "100"
    assert len(drawn_rows(browser)) < 100
    browser.execute_script(
        "const b = document.getElementById('result-table-box'); b.scrollTop = b.scrollHeight"
    )
    until(browser, lambda d: drawn_rows(d)[-1][0] == "100", "the last row, scrolled to")
    assert drawn_rows(browser)[-1] == ["100", "99", "n99"]
    by_id(browser, "next").click()
    until(browser, lambda d: "rows 101\u2013200" in by_id(d, "page-note").text, "the second page")
    browser.find_element(By.CSS_SELECTOR, "#nav [data-view=live]").click()
    charts = until(
        browser,
        lambda d: (
            len(d.find_elements(By.CSS_SELECTOR, "#live-charts svg")) >= 4
            and d.find_elements(By.CSS_SELECTOR, "#live-charts svg")
        ),
        "the live charts",
    )
    assert "Throughput" in by_id(browser, "live-charts").text
    time.sleep(2.5)  # a few samples, so the lines have points
    shoot(browser, "live")
    assert charts


def test_browser_cancels_a_long_query_and_shows_bad_sql(
    open_server: tuple[Server, Api], browser: Any
) -> None:
    _, api = open_server
    browser.get(api.base + "/")
    until(browser, lambda d: by_id(d, "nav").is_displayed(), "the console (no login here)")
    run_sql(browser, LONG_QUERY)
    until(browser, lambda d: not by_id(d, "cancel").get_attribute("disabled"), "Cancel enabled")
    time.sleep(1)
    assert api.get("/api/queries").body["queries"], "the query is not running"
    started = time.monotonic()
    by_id(browser, "cancel").click()
    assert status_after_run(browser) == "Cancelled."
    assert time.monotonic() - started < 10
    run_sql(browser, "SELEC nonsense")
    text = status_after_run(browser)
    assert "SELEC" in text and by_id(browser, "status").get_attribute("class") == "error"
    run_sql(browser, "SELECT count(*) FROM trips")
    assert "1 rows" in status_after_run(browser)


def test_browser_draws_a_plan_as_a_tree(open_server: tuple[Server, Api], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    _, api = open_server
    browser.get(api.base + "/#sql")
    until(browser, lambda d: by_id(d, "nav").is_displayed(), "the console (no login here)")
    box = by_id(browser, "sql")
    browser.execute_script("arguments[0].value = arguments[1];", box, GROUPED)
    by_id(browser, "analyze").click()
    assert "operators" in status_after_run(browser)
    tree = until(browser, lambda d: d.find_elements(By.ID, "plan-tree"), "the plan's tree")[0]
    root = tree.find_element(By.CSS_SELECTOR, ":scope > li")
    assert root.get_attribute("data-rows") == "3" and "3 rows" in root.text
    filtered = tree.find_elements(By.CSS_SELECTOR, "li[data-op=FilterExec]")
    assert filtered and filtered[0].get_attribute("data-rows") == "700"
    assert tree.find_elements(By.CSS_SELECTOR, "li[data-op=AggregateExec] li")
    assert not by_id(browser, "result-rows").is_displayed()
    shoot(browser, "explain")
    # EXPLAIN written in the editor is drawn the same way, without rows: nothing ran.
    run_sql(browser, f"explain {GROUPED}")
    assert "planned" in status_after_run(browser)
    root = by_id(browser, "plan-tree").find_element(By.CSS_SELECTOR, ":scope > li")
    assert root.get_attribute("data-rows") == "" and not root.find_elements(
        By.CLASS_NAME, "op-rows"
    )
    run_sql(browser, "SELECT count(*) FROM trips")
    assert "1 rows" in status_after_run(browser) and not by_id(browser, "plan").is_displayed()


def test_browser_refuses_a_reader_its_writes(
    secure: tuple[Server, Api, dict[str, str]], browser: Any
) -> None:
    _, api, _ = secure
    browser_login(browser, api.base, "reader")
    who = browser.execute_script("return document.getElementById('who').textContent")
    assert who == "reader (read)", browser.execute_script("return document.body.innerText")
    run_sql(browser, "DROP TABLE trips")
    text = status_after_run(browser)
    assert "permission denied" in text and "write role" in text
    shoot(browser, "refused")
    reader = api.login("reader", PASSWORDS["reader"])
    assert [t["name"] for t in reader.get("/api/tables").body["tables"]] == ["trips"]


def test_browser_times_a_large_sample_and_result(
    open_console: Callable[..., tuple[Server, Api]], browser: Any
) -> None:
    """How long a page takes to show a 1M-row table's sample, and a 100k-row result.

    Printed, not asserted (docs/console.md keeps the numbers): the goals are 200 ms and 1 s.
    """
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    # Drawing a page of 100,000 rows keeps the renderer busy past WebDriver's default.
    browser.set_page_load_timeout(300)
    server, api = open_console()
    put_table(server.uri, "big", trips(1_000_000))
    api = api.anyone()
    started = time.monotonic()
    reply = api.query("SELECT * FROM big LIMIT 100000", limit=100_000)
    api_s = time.monotonic() - started
    assert reply.status == 200 and reply.body["total_rows"] == 100_000
    browser.get(api.base + "/#tables")
    row = until(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#tables-list tr[data-name=big]"),
        "the table",
    )[0]
    row.click()
    sample_ms = float(
        until(browser, lambda d: by_id(d, "table-detail").get_attribute("data-ms"), "the sample")
    )
    timings = {}
    for page in ["100", "100000"]:
        browser.find_element(By.CSS_SELECTOR, "#nav [data-view=sql]").click()
        Select(by_id(browser, "page-size")).select_by_visible_text(page)
        run_sql(browser, "SELECT * FROM big LIMIT 100000")
        shown = until(
            browser, lambda d: by_id(d, "result-table").get_attribute("data-ms"), "the result", 120
        )
        total = by_id(browser, "result-table").get_attribute("data-total-ms")
        parse = by_id(browser, "result-table").get_attribute("data-parse-ms")
        assert by_id(browser, "result-table").get_attribute("data-rows") == page
        timings[page] = (float(shown), float(total), float(parse))
    # Of 100,000 rows, those in view are drawn; scrolling draws the others, nulls as nulls.
    drawn = drawn_rows(browser)
    assert 0 < len(drawn) < 200 and drawn[0][0] == "1"
    for row in [50_000, 100_000]:
        browser.execute_script(
            "const b = document.getElementById('result-table-box');"
            "b.scrollTop = b.scrollHeight * arguments[0]",
            (row - 1) / 100_000,
        )
        until(browser, lambda d, n=str(row): n in [r[0] for r in drawn_rows(d)], f"row {row}")
    last = drawn_rows(browser)[-1]
    assert last[0] == "100000" and len(last) == 5
    nulls = browser.execute_script(
        "return Array.from(document.querySelectorAll('#result-table tbody td.null'),"
        " (td) => td.textContent)"
    )
    assert nulls and set(nulls) == {"null"}
    print(
        f"\nconsole: 1M-row table's sample shown in {sample_ms:.0f} ms; a 100k-row result: "
        f"its first page of 100 rows shown {timings['100'][0]:.0f} ms after it arrived "
        f"({timings['100'][1]:.0f} ms after Run); all 100,000 rows in one page "
        f"({len(reply.raw) / 2**20:.1f} MiB of JSON, {api_s * 1e3:.0f} ms through the API, "
        f"JSON.parse {timings['100000'][2]:.0f} ms in the page) "
        f"shown {timings['100000'][0]:.0f} ms after they arrived "
        f"({timings['100000'][1]:.0f} ms after Run)"
    )
