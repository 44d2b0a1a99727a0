"""Peers that keep HTTP/2's default 16 KiB frames get few large writes, not one per frame.

grpc-go and grpc-java (so Go, Java, ADBC and JDBC Flight clients) advertise a 16 KiB
maximum frame. h2 writes each frame with a write of its own; quiver gathers them
(``quiver_wire::coalesce``) into writes of up to 256 KiB, on the server's connections
and on the Python client's. These tests count the write system calls a transfer took
(``syscw`` in ``/proc/PID/io``: every ``write``/``writev``), which does not depend on
the machine's speed: without the gathering, 64 MiB to such a peer takes 4,096 or more.
pyarrow's client stands in for the Go and Java ones: told to advertise 16 KiB frames
and to keep them (``grpc.http2.bdp_probe`` off), it sees the same frames they do.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import quiver
from quiver._planes import CorePlane
from server_process import Server, ServerFactory

#: 64 MiB of int64s, in 2 MiB batches.
ROWS = 8 << 20
BATCH_ROWS = 256 << 10
MIB = ROWS * 8 / 2**20

#: The writes a MiB may take: 4 at 256 KiB each, with room for what else the
#: process writes meanwhile (its log lines, the other frames of the connection).
WRITES_PER_MIB = 8

#: What a client that keeps 16 KiB frames tells the server.
SMALL_FRAMES = [("grpc.http2.max_frame_size", 16384), ("grpc.http2.bdp_probe", 0)]


def table() -> pa.Table:
    """64 MiB of int64s, one 2 MiB batch per message."""
    values = pa.table({"x": np.arange(ROWS, dtype=np.int64)})
    return pa.Table.from_batches(values.to_batches(max_chunksize=BATCH_ROWS))


def writes(pid: int | str) -> int:
    """The write system calls process ``pid`` (all its threads) has made so far."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "syscw":
            return int(value)
    raise AssertionError(f"no syscw in /proc/{pid}/io")


def put(uri: str, name: str, data: pa.Table) -> None:
    with quiver.connect(uri) as client:
        client.put(name, data)


def test_a_get_to_a_small_frame_client_takes_few_writes(server: Server, uri: str) -> None:
    data = table()
    put(uri, "t", data)
    client = flight.FlightClient(uri, generic_options=SMALL_FRAMES)
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_path("t"))
        before = writes(server.pid)
        got = pa.concat_tables(
            client.do_get(endpoint.ticket).read_all() for endpoint in info.endpoints
        )
        made = writes(server.pid) - before
    finally:
        client.close()
    assert got.combine_chunks().equals(data.combine_chunks())
    assert made <= WRITES_PER_MIB * MIB, f"{made} writes for {MIB:.0f} MiB"


def test_small_replies_to_a_small_frame_client_are_not_held(server: Server, uri: str) -> None:
    """A gathered reply goes out when the connection has nothing more to send: one
    request after another on one connection, each waits for its answer alone."""
    put(uri, "one", pa.table({"x": [1]}))
    client = flight.FlightClient(uri, generic_options=SMALL_FRAMES)
    try:
        for _ in range(200):
            info = client.get_flight_info(flight.FlightDescriptor.for_path("one"))
            assert client.do_get(info.endpoints[0].ticket).read_all().num_rows == 1
            assert [a.type for a in client.list_actions()]
    finally:
        client.close()


def test_concurrent_streams_to_a_small_frame_client_arrive_whole(server: Server, uri: str) -> None:
    """Frames of several streams gathered into the same writes stay each in its own
    stream."""
    data = table()
    put(uri, "t", data)
    client = flight.FlightClient(uri, generic_options=SMALL_FRAMES)
    got: list[pa.Table] = []
    errors: list[BaseException] = []

    def get() -> None:
        try:
            info = client.get_flight_info(flight.FlightDescriptor.for_path("t"))
            got.append(pa.concat_tables(client.do_get(e.ticket).read_all() for e in info.endpoints))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=get) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    client.close()
    assert not errors, errors
    assert len(got) == 4
    for table_got in got:
        assert table_got.combine_chunks().equals(data.combine_chunks())


def test_the_python_client_puts_to_a_small_frame_server_in_few_writes(
    start_quiver: ServerFactory,
) -> None:
    """The Python client's core gathers its writes too, to a server that keeps 16 KiB
    frames (``--h2-max-frame-size 16KiB``)."""
    server = start_quiver("--h2-max-frame-size", "16KiB")
    data = table()
    with quiver.connect(server.uri, transport="grpc") as client:
        if not isinstance(client.data_plane, CorePlane):
            pytest.skip("the client's core is off (QUIVER_CORE=0): pyarrow writes instead")
        client.put("warm", pa.table({"x": [1]}))
        before = writes("self")
        client.put("t", data)
        made = writes("self") - before
        assert client.get("t").combine_chunks().equals(data.combine_chunks())
    assert made <= WRITES_PER_MIB * MIB, f"{made} writes for {MIB:.0f} MiB"
