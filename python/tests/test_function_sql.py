"""SQL over a stream (DoExchange ``{"sql": ...}``) and served functions as SQL UDFs.

Against the real server with real Python workers serving ``functions_fixture.py``; the
expected values come from calling the fixture's functions in this process. Clients are
plain ``pyarrow.flight`` and ADBC's Flight SQL driver: what a user without the quiver
package has.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager.dbapi as adbc_errors
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import functions_fixture as fixture
from server_process import Server, ServerFactory

FIXTURE = str(Path(fixture.__file__).resolve())
#: Long enough for two workers to import xgboost on a loaded machine.
START_FLAGS = (
    "--functions",
    FIXTURE,
    "--function-workers",
    "2",
    "--function-python",
    sys.executable,
)
#: Bound on every read of a response in these tests.
CALL_TIMEOUT_S = 120.0


def serve_functions(start_quiver: ServerFactory, *flags: str) -> Server:
    """Start a server serving the fixture's functions with two workers."""
    return start_quiver(*START_FLAGS, *flags)


@pytest.fixture
def functions_server(start_quiver: ServerFactory) -> Server:
    return serve_functions(start_quiver)


def adbc_uri(uri: str) -> str:
    return uri.replace("grpc+tcp://", "grpc://")


def sql_exchange(
    uri: str,
    query: str,
    batches: Iterator[pa.RecordBatch] | list[pa.RecordBatch],
    schema: pa.Schema,
) -> pa.Table:
    """``{"sql": query}`` over ``batches`` with plain pyarrow, writing in a thread while reading."""
    descriptor = flight.FlightDescriptor.for_command(json.dumps({"sql": query}).encode())
    options = flight.FlightCallOptions(timeout=CALL_TIMEOUT_S)
    with flight.FlightClient(uri) as client:
        writer, reader = client.do_exchange(descriptor, options=options)

        def write() -> None:
            try:
                writer.begin(schema)
                for batch in batches:
                    writer.write_batch(batch)
                writer.done_writing()
            except (flight.FlightError, pa.ArrowException):
                return  # the server ended the call: the read raises its status

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        try:
            table = reader.read_all()
        finally:
            thread.join(CALL_TIMEOUT_S)
            writer.close()
        assert not thread.is_alive()
        return table


def counting(batches: int, rows: int) -> Iterator[pa.RecordBatch]:
    """``batches`` batches of ``rows`` rows: x counting up from 0, and 56 bytes of padding."""
    pad = pa.array(np.zeros(rows, dtype=np.int64))
    for b in range(batches):
        x = pa.array(np.arange(b * rows, (b + 1) * rows, dtype=np.int64))
        yield pa.record_batch([x] + [pad] * 7, names=["x"] + [f"p{i}" for i in range(7)])


COUNTING_SCHEMA = next(counting(1, 1)).schema


def test_sql_over_a_stream_filters_and_projects_in_order(functions_server: Server) -> None:
    table = sql_exchange(
        functions_server.uri,
        "SELECT x * 2 AS y FROM input WHERE x % 3 = 0",
        counting(20, 10_000),
        COUNTING_SCHEMA,
    )
    expected = np.arange(0, 200_000, 3, dtype=np.int64) * 2
    assert table.schema == pa.schema([("y", pa.int64())])
    assert np.array_equal(table.column("y").to_numpy(), expected)
    # The RPC's log line names the stream's table and counts the rows sent back.
    deadline = time.monotonic() + 10
    while not any(
        'rpc="DoExchange"' in line and 'table="input"' in line and f"rows={len(expected)}" in line
        for line in functions_server.log().splitlines()
    ):
        assert time.monotonic() < deadline, functions_server.log()[-2000:]
        time.sleep(0.05)  # the line is written when the response stream ends


def test_sql_over_a_stream_far_larger_than_the_servers_memory(start_quiver: ServerFactory) -> None:
    # 512 MiB through a server allowed 32 MiB of tables and 16 MiB per query.
    server = start_quiver("--max-memory", "32MiB", "--query-memory-limit", "16MiB")
    batches, rows = 64, 131_072  # 8 MiB each
    table = sql_exchange(
        server.uri,
        "SELECT x FROM input WHERE x % 100000 = 0",
        counting(batches, rows),
        COUNTING_SCHEMA,
    )
    assert table.column("x").to_pylist() == list(range(0, batches * rows, 100_000))
    # The server never held the stream: its peak resident memory stayed far below it.
    status = Path(f"/proc/{server.pid}/status").read_text()
    peak_kib = int(
        next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))
    )
    assert peak_kib * 1024 < 256 << 20, f"peak RSS {peak_kib} KiB for a 512 MiB stream"


def test_sql_over_a_stream_aggregates(functions_server: Server) -> None:
    table = sql_exchange(
        functions_server.uri,
        "SELECT count(*) AS n, sum(x) AS s FROM input",
        counting(5, 1_000),
        COUNTING_SCHEMA,
    )
    assert table.to_pylist() == [{"n": 5_000, "s": sum(range(5_000))}]


def test_sql_over_a_stream_refuses_what_is_not_a_query_over_input(functions_server: Server) -> None:
    for query, fragment in [
        ("CREATE TABLE t AS SELECT * FROM input", "runs a query"),
        ("SELECT * FROM elsewhere", "elsewhere"),
        ("SELECT x FROM input UNION ALL SELECT x FROM input", "once"),
    ]:
        with pytest.raises(pa.ArrowInvalid) as info:  # INVALID_ARGUMENT
            sql_exchange(functions_server.uri, query, counting(2, 10), COUNTING_SCHEMA)
        assert fragment in str(info.value), query
    # The server goes on.
    ok = sql_exchange(functions_server.uri, "SELECT x FROM input", counting(1, 3), COUNTING_SCHEMA)
    assert ok.column("x").to_pylist() == [0, 1, 2]


def test_sql_over_a_stream_past_the_query_memory_limit_is_resource_exhausted(
    start_quiver: ServerFactory,
) -> None:
    server = start_quiver("--query-memory-limit", "1MiB")
    # pyarrow raises RESOURCE_EXHAUSTED as ArrowInvalid.
    with pytest.raises(pa.ArrowInvalid, match="resource exhausted") as info:
        sql_exchange(
            server.uri, "SELECT x FROM input ORDER BY x DESC", counting(16, 65_536), COUNTING_SCHEMA
        )
    assert "--query-memory-limit" in str(info.value)


def fetch(cur: flight_sql.Cursor, query: str) -> pa.Table:
    cur.execute(query)
    return cur.fetch_arrow_table()


def features_table(rows: int, seed: int = fixture.SEED) -> pa.Table:
    return pa.Table.from_batches([fixture.features(rows, seed)])


def test_a_function_in_sql_through_adbc(functions_server: Server) -> None:
    feats = features_table(5_000)
    expected = fixture.predict(fixture.features(5_000))
    columns = ", ".join(f"f{i}" for i in range(20))
    with (
        flight_sql.connect(adbc_uri(functions_server.uri), autocommit=True) as conn,
        conn.cursor() as cur,
    ):
        cur.adbc_ingest("feats", feats, mode="create")
        cur.execute(f"SELECT score({columns}) AS s FROM feats")
        scores = cur.fetch_arrow_table()
        cur.execute(f"SELECT count(*) AS n FROM feats WHERE score({columns}) > 0.5")
        above = cur.fetch_arrow_table()
    assert scores.column("s").type == pa.float32()
    # SQL may scan in any partition order: compare as multisets.
    assert np.allclose(np.sort(scores.column("s").to_numpy()), np.sort(expected), atol=1e-6)
    assert above.column("n")[0].as_py() == int((expected > 0.5).sum())


def test_a_function_in_sql_over_a_stream(functions_server: Server) -> None:
    batch = fixture.features(3_000, seed=7)
    columns = ", ".join(f"f{i}" for i in range(20))
    table = sql_exchange(
        functions_server.uri,
        f"SELECT f0, score({columns}) AS s FROM input",
        [batch.slice(0, 1_000), batch.slice(1_000)],
        batch.schema,
    )
    assert np.allclose(table.column("s").to_numpy(), fixture.predict(batch), atol=1e-6)
    assert np.array_equal(table.column("f0").to_numpy(), batch.column("f0").to_numpy())


def test_function_failures_in_sql_keep_their_kind(functions_server: Server) -> None:
    with (
        flight_sql.connect(adbc_uri(functions_server.uri), autocommit=True) as conn,
        conn.cursor() as cur,
    ):
        cur.adbc_ingest("xs", pa.table({"x": pa.array([1, 2, 3], pa.int64())}), mode="create")
        # first_col declares its output but not its input: any arguments.
        cur.execute("SELECT first_col(x) AS f FROM xs ORDER BY f")
        assert cur.fetch_arrow_table().column("f").to_pylist() == [1, 2, 3]
        # wrong_output returns strings for its declared int64: FUNCTION_OUTPUT.
        with pytest.raises(adbc_errors.InternalError, match="unusable result"):
            fetch(cur, "SELECT wrong_output(x) FROM xs")
        # identity declares no output schema: not a SQL function.
        with pytest.raises(adbc_errors.ProgrammingError, match="identity"):
            fetch(cur, "SELECT identity(x) FROM xs")
        # score's declared input is 20 float32s: one int64 does not fit.
        with pytest.raises(adbc_errors.ProgrammingError, match="score"):
            fetch(cur, "SELECT score(x) FROM xs")


def test_sql_functions_run_on_the_worker_that_replaced_a_dead_one(
    functions_server: Server,
) -> None:
    # crash declares no output schema (no SQL function): its worker is killed over DoExchange.
    descriptor = flight.FlightDescriptor.for_command(json.dumps({"function": "crash"}).encode())
    batch = pa.record_batch({"x": pa.array([1, -1], pa.int64())})

    def call() -> None:
        with flight.FlightClient(functions_server.uri) as client:
            writer, reader = client.do_exchange(descriptor)
            writer.begin(batch.schema)
            writer.write_batch(batch)
            writer.done_writing()
            reader.read_all()

    with pytest.raises(flight.FlightInternalError, match="died on batch 0"):
        call()
    # The replaced worker serves SQL again.
    columns = ", ".join(f"f{i}" for i in range(20))
    with (
        flight_sql.connect(adbc_uri(functions_server.uri), autocommit=True) as conn,
        conn.cursor() as cur,
    ):
        cur.adbc_ingest("feats", features_table(10), mode="create")
        cur.execute(f"SELECT score({columns}) AS s FROM feats")
        scores = cur.fetch_arrow_table().column("s").to_numpy()
    assert np.allclose(np.sort(scores), np.sort(fixture.predict(fixture.features(10))), atol=1e-6)
