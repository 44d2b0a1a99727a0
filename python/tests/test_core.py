"""The client's Rust core (``quiver._core``): when it moves the data, and what it promises.

Every other test of the client runs through the core too (it is the default), and
``scripts/test.sh`` runs the client's tests again with ``QUIVER_CORE=0``, the pyarrow
fallback. These tests check what is the core's own: which settings choose it, types
round-tripping through its framing, a peer that is not quiver (pyarrow's Arrow C++ Flight
server), body memory reused by a streaming reader, a failing source cancelling a put, and
the GIL released while bytes move.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import quiver
from engine_helpers import mixed_table
from quiver import _core


@pytest.fixture(autouse=True)
def _core_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core, even in the run of the tests with ``QUIVER_CORE=0``."""
    monkeypatch.delenv("QUIVER_CORE", raising=False)


def test_the_core_moves_the_data_unless_told_otherwise(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with quiver.connect(uri) as client:
        assert isinstance(client.data_plane.core, _core.Connection)
    # Settings only pyarrow applies: pyarrow moves the data too, so they apply to every call.
    with quiver.connect(uri, middleware=[_NoMiddlewareFactory()]) as client:
        assert client.data_plane.core is None
    with quiver.connect(uri, generic_options=[("grpc.max_receive_message_length", -1)]) as client:
        assert client.data_plane.core is None
    monkeypatch.setenv("QUIVER_CORE", "0")
    with quiver.connect(uri) as client:
        assert client.data_plane.core is None
        client.put("t", pa.table({"a": [1, 2]}))
        assert client.get("t").num_rows == 2


class _NoMiddlewareFactory(flight.ClientMiddlewareFactory):  # type: ignore[misc]
    def start_call(self, info: flight.CallInfo) -> None:
        return None


def test_every_type_round_trips_through_the_core(uri: str) -> None:
    table = mixed_table(5000)
    with quiver.connect(uri, transport="grpc") as client:
        assert client.data_plane.core is not None
        client.put("mixed", table, partitions=3)
        got = client.get("mixed")
        assert got.schema == table.schema
        assert got.equals(table)
        assert pa.Table.from_batches(list(client.get_reader("mixed"))).equals(table)
        # A table of no rows: the schema alone travels.
        client.put("empty", table.schema.empty_table())
        empty = client.get("empty")
        assert empty.num_rows == 0 and empty.schema == table.schema


class _ArrowCppServer(flight.FlightServerBase):  # type: ignore[misc]
    """pyarrow's Flight server (Arrow C++'s gRPC transport): tables by path, two endpoints each."""

    def __init__(self) -> None:
        super().__init__("grpc+tcp://127.0.0.1:0")
        self.tables: dict[bytes, pa.Table] = {}
        self.metadata: list[bytes] = []

    def do_put(self, context, descriptor, reader, writer):  # type: ignore[no-untyped-def]
        batches = []
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            if chunk.app_metadata is not None:
                self.metadata.append(chunk.app_metadata.to_pybytes())
            if chunk.data is not None:
                batches.append(chunk.data)
        self.tables[descriptor.path[0]] = pa.Table.from_batches(batches, reader.schema)

    def get_flight_info(self, context, descriptor):  # type: ignore[no-untyped-def]
        key = descriptor.path[0]
        if key not in self.tables:
            raise flight.FlightServerError(f"no table {key!r}")
        table = self.tables[key]
        location = f"grpc+tcp://127.0.0.1:{self.port}"
        endpoints = [flight.FlightEndpoint(key + b"#" + bytes([i]), [location]) for i in range(2)]
        return flight.FlightInfo(table.schema, descriptor, endpoints, table.num_rows * 2, -1)

    def do_get(self, context, ticket):  # type: ignore[no-untyped-def]
        name, _, _ = ticket.ticket.rpartition(b"#")
        return flight.RecordBatchStream(self.tables[name])


def test_the_core_reads_and_writes_an_arrow_cpp_server() -> None:
    server = _ArrowCppServer()
    try:
        table = pa.table({"a": np.arange(200_000), "s": pa.array([str(i) for i in range(200_000)])})
        with quiver.connect(f"grpc+tcp://127.0.0.1:{server.port}", transport="grpc") as client:
            assert client.data_plane.core is not None
            client.put("t", table)
            assert server.tables[b"t"].equals(table)
            # The options, with the request id the client gives every put.
            options = json.loads(server.metadata[0])
            assert options.pop("mode") == "replace"
            assert re.fullmatch("[0-9a-f]{32}", options.pop("request"))
            assert options == {}
            # Two endpoints, each the whole table, read in parallel and joined in order.
            assert client.get("t").equals(pa.concat_tables([table, table]))
            with pytest.raises(quiver.QuiverError):
                client.get("missing")
    finally:
        server.shutdown()


def test_a_streaming_reader_reuses_the_memory_of_bodies_it_passed_on(uri: str) -> None:
    # 64 batches of 4 MiB: each body is over the pool's smallest (64 KiB).
    rows = 512 * 1024
    table = pa.table({"a": np.arange(64 * rows, dtype=np.int64)})
    with quiver.connect(uri, transport="grpc") as client:
        assert client.data_plane.core is not None
        client.put("t", table.to_reader(max_chunksize=rows))
        assert client.data_plane.core.body_pool() == (0, 0)
        total = 0
        for batch in client.get_reader("t"):
            total += batch.num_rows
            del batch
        assert total == table.num_rows
        idle_bytes, idle_regions = client.data_plane.core.body_pool()
        # Each body went back to the pool once its batch was dropped; the next one took
        # it. The regions alive at once are the batches in flight: the read-ahead queue,
        # one being received, one in the C stream and one held here, more when the server
        # splits a batch's message or a release lands late. Without reuse there would be 64.
        assert 0 < idle_regions <= 16, (idle_bytes, idle_regions)
        assert idle_bytes <= 16 * 8 * rows * 2, (idle_bytes, idle_regions)
        # A whole-table get takes its first bodies from the pool too.
        whole = client.get("t")
        assert client.data_plane.core.body_pool()[1] < idle_regions
        assert whole.equals(table)


def test_a_source_that_fails_cancels_the_put(client: quiver.Client) -> None:
    client.put("t", pa.table({"a": np.arange(10)}))

    class SourceFailed(Exception):
        pass

    def failing() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"a": np.arange(100)})
        yield pa.record_batch({"a": np.arange(100)})
        raise SourceFailed("the source broke")

    grpc = quiver.connect(client.uri, transport="grpc")
    assert grpc.data_plane.core is not None
    with pytest.raises(SourceFailed):
        grpc.put("t", failing(), mode="append")
    # Through the core the call was cancelled: nothing of it was stored.
    assert client.get("t").num_rows == 10
    assert client.info("t").version == 1
    grpc.close()


def test_the_gil_is_released_while_a_get_moves_bytes(uri: str) -> None:
    table = pa.table({f"c{i}": np.arange(4 << 20, dtype=np.int64) for i in range(4)})  # 128 MiB
    with quiver.connect(uri, transport="grpc") as client:
        assert client.data_plane.core is not None
        client.put("t", table)
        endpoints = [([uri], b"t")]
        counted = 0
        stop = threading.Event()

        def count() -> None:
            nonlocal counted
            while not stop.is_set():
                counted += 1

        counter = threading.Thread(target=count)
        counter.start()
        try:
            before = counted
            reader = client.data_plane.core.get(endpoints)
            during = counted - before
        finally:
            stop.set()
            counter.join(timeout=10)
        assert reader.read_all().num_rows == table.num_rows
        # Python code ran on another thread while the core received 128 MiB.
        assert during > 1000, during
