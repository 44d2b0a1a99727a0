"""Graceful shutdown: SIGTERM stops new connections but lets streams in flight finish."""

from __future__ import annotations

import signal

import pyarrow as pa
import pyarrow.flight as flight

from server_process import Server


def test_sigterm_lets_a_get_in_flight_finish(server: Server) -> None:
    client = flight.connect(server.uri)
    table = pa.table({"x": pa.array(range(20_000_000), pa.int64())})
    writer, _ = client.do_put(flight.FlightDescriptor.for_path("t"), table.schema)
    writer.write_table(table, max_chunksize=1 << 20)
    writer.close()

    reader = client.do_get(flight.Ticket(b"t"))
    rows = reader.read_chunk().data.num_rows
    server.process.send_signal(signal.SIGTERM)
    for chunk in reader:
        rows += chunk.data.num_rows
    assert rows == table.num_rows
    assert server.process.wait(timeout=30) == 0
    assert "shutting down" in server.log()


def test_sigterm_closes_streams_left_open_after_the_grace_period(start_quiver) -> None:
    server = start_quiver("--shutdown-timeout", "1")
    client = flight.connect(server.uri)
    # A DoExchange the client never finishes.
    writer, _reader = client.do_exchange(flight.FlightDescriptor.for_path("x"))
    writer.begin(pa.schema([("a", pa.int64())]))
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=20) == 0
    assert "grace period" in server.log()
