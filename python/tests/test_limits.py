"""Every limit of docs/limits.md against the real server: the status, the flag in the
message, and a store left as it was."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import quiver
from flight_helpers import action, get, put, table_names
from server_process import ServerFactory


def _store(client: flight.FlightClient) -> tuple[object, ...]:
    stats = action(client, "stats")
    return stats["tables"], stats["rows"], stats["bytes"], stats["memory_used"]


@pytest.mark.parametrize("wire_path", ["direct", "stock"])
def test_message_over_max_message_size_names_the_flag(
    start_quiver: ServerFactory, wire_path: str
) -> None:
    server = start_quiver("--max-message-size", "1MiB", "--wire-path", wire_path)
    client = flight.FlightClient(server.uri)
    small = pa.table({"a": np.arange(1000)})
    put(client, "t", small)
    before = _store(client)
    with pytest.raises(pa.ArrowException, match="resource exhausted") as raised:
        put(client, "t", pa.table({"a": np.arange(512 * 1024)}))  # one 4 MiB message
    assert "--max-message-size" in str(raised.value)
    assert _store(client) == before
    assert get(client, "t").equals(small)
    client.close()


def test_table_limits_on_put_append_and_sql(start_quiver: ServerFactory) -> None:
    server = start_quiver(
        "--max-table-rows", "1000", "--max-table-bytes", "16KiB", "--max-rows", "2000"
    )
    with quiver.connect(server.uri) as client:

        def store() -> tuple[object, ...]:
            stats = client.stats()
            return stats.tables, stats.rows, stats.bytes, stats.memory_used

        kept = pa.table({"a": np.arange(600, dtype=np.int64)})  # 4800 bytes
        client.put("kept", kept)
        client.put("other", pa.table({"a": np.arange(900, dtype=np.int64)}))
        before = store()

        def refused(flag: str, call) -> None:
            with pytest.raises(quiver.ResourceExhaustedError) as raised:
                call()
            assert raised.value.code == "RESOURCE_EXHAUSTED"
            assert flag in str(raised.value), str(raised.value)
            assert store() == before, flag
            assert client.get("kept").equals(kept), flag

        def rows(n: int) -> pa.Table:
            return pa.table({"a": np.arange(n, dtype=np.int64)})

        refused("--max-table-rows", lambda: client.put("kept", rows(1200)))
        refused("--max-table-rows", lambda: client.put("kept", rows(500), mode="append"))
        # Many small batches, passing a limit mid-stream (all tables' rows, first).
        refused(
            "--max-rows",
            lambda: client.put("new", pa.Table.from_batches(rows(1200).to_batches(100))),
        )
        wide = pa.table({"s": ["x" * 100] * 400})  # 400 rows, over 16 KiB
        refused("--max-table-bytes", lambda: client.put("wide", wide))
        refused("--max-rows", lambda: client.put("third", rows(600)))  # 600 + 900 + 600
        refused(
            "--max-table-rows", lambda: client.execute_update("INSERT INTO kept SELECT a FROM kept")
        )
        refused(
            "--max-rows", lambda: client.execute_update("CREATE TABLE copy AS SELECT a FROM kept")
        )
        assert [t.name for t in client.list_tables()] == ["kept", "other"]
        # Within the limits, writes go through.
        client.put("kept", rows(300), mode="append")
        assert client.get("kept").num_rows == 900


def test_calls_past_max_concurrent_streams_wait_for_a_free_stream(
    start_quiver: ServerFactory,
) -> None:
    # HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: the client holds the third call of
    # one connection until one of the two open streams ends.
    server = start_quiver("--max-concurrent-streams", "2")
    client = flight.FlightClient(server.uri)
    big = pa.table({"a": np.arange(8 << 20, dtype=np.int64)})  # 64 MiB: more than windows
    put(client, "big", big, max_chunksize=1 << 16)
    put(client, "small", pa.table({"a": [1, 2, 3]}))
    open_streams = [client.do_get(flight.Ticket(b"big")) for _ in range(2)]
    for reader in open_streams:
        reader.read_chunk()  # started, far from finished
    with pytest.raises(flight.FlightTimedOutError):
        client.do_get(flight.Ticket(b"small"), flight.FlightCallOptions(timeout=2)).read_all()
    assert open_streams[0].read_all().num_rows == big.num_rows - (1 << 16)
    assert get(client, "small").num_rows == 3  # a stream is free again
    assert open_streams[1].read_all().num_rows == big.num_rows - (1 << 16)
    # Another connection has streams of its own.
    other = flight.FlightClient(server.uri)
    assert get(other, "small").num_rows == 3
    other.close()
    client.close()


def test_a_silent_put_stream_fails_after_the_idle_timeout(start_quiver: ServerFactory) -> None:
    server = start_quiver("--stream-idle-timeout", "1")
    client = flight.FlightClient(server.uri)
    batch = pa.record_batch({"a": np.arange(1000)})
    put(client, "kept", pa.Table.from_batches([batch]))
    before = _store(client)
    # A slow but steady writer is never cut: 6 batches 0.3 s apart.
    writer, results = client.do_put(flight.FlightDescriptor.for_path("steady"), batch.schema)
    for _ in range(6):
        writer.write_batch(batch)
        time.sleep(0.3)
    writer.done_writing()
    results.read()
    writer.close()
    assert get(client, "steady").num_rows == 6000
    before = _store(client)
    # A writer that goes silent mid-stream is cut, and nothing is stored.
    writer, results = client.do_put(flight.FlightDescriptor.for_path("silent"), batch.schema)
    writer.write_batch(batch)
    time.sleep(3)

    def finish() -> None:
        writer.write_batch(batch)
        writer.done_writing()
        results.read()

    with pytest.raises(flight.FlightTimedOutError, match="--stream-idle-timeout"):
        finish()
    with contextlib.suppress(flight.FlightError):
        writer.close()  # the error again, or nothing
    assert _store(client) == before
    assert table_names(client) == ["kept", "steady"]
    client.close()


def test_request_timeout_does_not_cut_a_long_doget(start_quiver: ServerFactory) -> None:
    server = start_quiver("--request-timeout", "1")
    client = flight.FlightClient(server.uri)
    big = pa.table({"a": np.arange(8 << 20, dtype=np.int64)})
    put(client, "big", big, max_chunksize=1 << 16)
    reader = client.do_get(flight.Ticket(b"big"))
    chunks = [reader.read_chunk().data]
    time.sleep(2.5)  # the stream outlives --request-timeout while the client dawdles
    chunks.extend(reader.read_all().to_batches())
    assert pa.Table.from_batches(chunks).equals(big)
    assert action(client, "health")["status"] == "ok"
    client.close()
