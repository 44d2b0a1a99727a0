"""The server speaks standard Arrow Flight: every RPC, with the plain pyarrow client."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from flight_helpers import action, get, get_endpoints, put, table_names, typed_table
from server_process import ServerFactory


def test_many_types_round_trip_over_four_partitions(start_quiver: ServerFactory) -> None:
    server = start_quiver("--partitions", "4")
    client = flight.FlightClient(server.uri)
    table = typed_table(batches=50, rows=200)

    result = put(client, "typed", table)
    assert result["table"] == "typed"
    assert result["rows"] == table.num_rows
    assert isinstance(result["version"], int)
    assert isinstance(result["bytes"], int)
    assert result["bytes"] > 0

    info = client.get_flight_info(flight.FlightDescriptor.for_path("typed"))
    assert info.schema.equals(table.schema)
    assert info.total_records == table.num_rows
    assert info.total_bytes == result["bytes"]
    assert info.ordered
    assert len(info.endpoints) == 4
    metadata = json.loads(info.app_metadata)
    written = metadata.pop("written_ms")
    assert metadata == {"version": result["version"], "partitions": 4}
    assert abs(written / 1000 - time.time()) < 600, written
    for endpoint in info.endpoints:
        assert [loc.uri.decode() for loc in endpoint.locations] == [server.uri]

    parts = []
    for endpoint in info.endpoints:
        with flight.FlightClient(endpoint.locations[0]) as located:
            parts.append(located.do_get(endpoint.ticket).read_all())
    # Partition i of n holds rows [i*rows/n, (i+1)*rows/n).
    rows = table.num_rows
    assert [p.num_rows for p in parts] == [(i + 1) * rows // 4 - i * rows // 4 for i in range(4)]
    assert pa.concat_tables(parts).equals(table)

    assert get(client, "typed").equals(table)
    client.close()


@pytest.mark.parametrize(
    "column",
    [
        pa.array([[1, 2], None, [3]], pa.large_list(pa.int64())),
        pa.array([["a"], None, []], pa.large_list(pa.string())),
        pa.array([b"ab", None, b"cde"], pa.large_binary()),
        pa.array(["ab", None, "long enough to leave the view"], pa.string_view()),
        pa.array([b"ab", None, b"long enough to leave the view"], pa.binary_view()),
        pa.array([[1, 2], None, [3]], pa.list_view(pa.int32())),
        pa.array([[("a", 1)], None, [("b", 2), ("c", 3)]], pa.map_(pa.string(), pa.int32())),
        pa.array([[1, 2], None, [3, 4]], pa.list_(pa.int32(), 2)),
        pa.array([b"ab", None, b"cd"], pa.binary(2)),
        pa.UnionArray.from_sparse(
            pa.array([0, 1, 0], pa.int8()), [pa.array([1, 2, 3]), pa.array(["x", "y", "z"])]
        ),
        pa.array([1, None, 3], pa.duration("ms")),
        pa.array([1, None, 3], pa.time64("us")),
        pa.array([1, None, 3], pa.decimal256(40, 2)),
        pa.array([None, None], pa.null()),
        pa.array(["a", "b", None, "a"], pa.large_string()).dictionary_encode(),
    ],
    ids=lambda column: str(column.type),
)
def test_more_types_round_trip(flight_client: flight.FlightClient, column: pa.Array) -> None:
    table = pa.table({"c": column})
    put(flight_client, "t", table)
    assert flight_client.get_flight_info(flight.FlightDescriptor.for_path("t")).schema.equals(
        table.schema
    )
    back = get(flight_client, "t")
    assert back.schema.equals(table.schema)
    assert back.equals(table)


def test_empty_table_has_one_endpoint_and_schema(flight_client: flight.FlightClient) -> None:
    schema = pa.schema([("a", pa.int64()), ("b", pa.string())])
    put(flight_client, "empty", schema.empty_table())
    info = flight_client.get_flight_info(flight.FlightDescriptor.for_path("empty"))
    assert info.total_records == 0
    assert len(info.endpoints) == 1
    assert get(flight_client, "empty").equals(schema.empty_table())
    assert get_endpoints(flight_client, "empty").equals(schema.empty_table())


def test_fewer_rows_than_partitions(start_quiver: ServerFactory) -> None:
    server = start_quiver("--partitions", "8")
    client = flight.FlightClient(server.uri)
    table = pa.table({"a": [1, 2, 3]})
    put(client, "small", table)
    info = client.get_flight_info(flight.FlightDescriptor.for_path("small"))
    assert len(info.endpoints) == 3
    assert get_endpoints(client, "small").equals(table)
    client.close()


def test_path_and_command_descriptors_name_the_same_table(
    flight_client: flight.FlightClient,
) -> None:
    table = pa.table({"fare": [7.5, 12.0]})
    writer, _ = flight_client.do_put(flight.FlightDescriptor.for_path("taxi", "2024"), table.schema)
    writer.write_table(table)
    writer.close()

    by_path = flight_client.get_flight_info(flight.FlightDescriptor.for_path("taxi", "2024"))
    joined = flight_client.get_flight_info(flight.FlightDescriptor.for_path("taxi/2024"))
    by_command = flight_client.get_flight_info(flight.FlightDescriptor.for_command(b"taxi/2024"))
    for info in (by_path, joined, by_command):
        assert info.total_records == 2
        assert info.schema.equals(table.schema)
    assert get(flight_client, "taxi/2024").equals(table)

    # A put through a command descriptor replaces the same table.
    replacement = pa.table({"fare": [1.0]})
    writer, _ = flight_client.do_put(
        flight.FlightDescriptor.for_command(b"taxi/2024"), replacement.schema
    )
    writer.write_table(replacement)
    writer.close()
    assert get(flight_client, "taxi/2024").equals(replacement)
    assert table_names(flight_client) == ["taxi/2024"]


def test_get_schema(flight_client: flight.FlightClient) -> None:
    table = typed_table(batches=2, rows=10)
    put(flight_client, "typed", table)
    result = flight_client.get_schema(flight.FlightDescriptor.for_path("typed"))
    assert result.schema.equals(table.schema)


def test_poll_flight_info(flight_client: flight.FlightClient) -> None:
    if not hasattr(flight_client, "poll_flight_info"):
        pytest.skip(f"pyarrow {pa.__version__} has no FlightClient.poll_flight_info")
    put(flight_client, "t", pa.table({"a": [1, 2]}))
    poll = flight_client.poll_flight_info(flight.FlightDescriptor.for_path("t"))
    assert poll.info.total_records == 2
    assert poll.flight_descriptor is None
    assert poll.progress == 1.0


def test_list_flights_with_and_without_prefix(flight_client: flight.FlightClient) -> None:
    for name in ["weather", "taxi/2024", "taxi/2023", "taxis"]:
        put(flight_client, name, pa.table({"n": [len(name)]}))
    assert table_names(flight_client) == ["taxi/2023", "taxi/2024", "taxis", "weather"]
    assert table_names(flight_client, b"taxi/") == ["taxi/2023", "taxi/2024"]
    assert table_names(flight_client, b"taxi") == ["taxi/2023", "taxi/2024", "taxis"]
    assert table_names(flight_client, b"nothing") == []
    infos = list(flight_client.list_flights())
    assert [i.total_records for i in infos] == [1, 1, 1, 1]
    assert all(i.schema.equals(pa.schema([("n", pa.int64())])) for i in infos)


def test_list_actions(flight_client: flight.FlightClient) -> None:
    actions = {a.type: a.description for a in flight_client.list_actions()}
    assert set(actions) == {
        "delete",
        "rename",
        "publish",
        "stats",
        "health",
        "nodes",
        "shm-put",
        # Flight SQL's (docs/protocol.md)
        "CreatePreparedStatement",
        "ClosePreparedStatement",
        "CancelFlightInfo",
        "CancelQuery",
        # Served functions (docs/functions.md)
        "list-functions",
        # Flight's sessions
        "SetSessionOptions",
        "GetSessionOptions",
        "CloseSession",
    }
    assert all(actions.values())


def test_actions(flight_client: flight.FlightClient) -> None:
    table = pa.table({"a": pa.array(range(100), pa.int64())})
    first = put(flight_client, "a", table)

    health = action(flight_client, "health")
    assert health["status"] == "ok"
    assert isinstance(health["uptime_seconds"], (int, float))

    stats = action(flight_client, "stats")
    assert stats.keys() >= {
        "tables",
        "rows",
        "bytes",
        "memory_used",
        "memory_limit",
        "uptime_seconds",
        "version",
    }
    assert (stats["tables"], stats["rows"], stats["bytes"]) == (1, 100, first["bytes"])

    renamed = action(
        flight_client, "rename", json.dumps({"from": "a", "to": "b", "overwrite": False}).encode()
    )
    assert renamed["renamed"] == "a"
    assert renamed["to"] == "b"
    assert isinstance(renamed["version"], int)
    assert renamed["version"] > first["version"]
    assert table_names(flight_client) == ["b"]
    assert get(flight_client, "b").equals(table)

    put(flight_client, "c", pa.table({"x": [1]}))
    over = action(
        flight_client, "rename", json.dumps({"from": "c", "to": "b", "overwrite": True}).encode()
    )
    assert over["to"] == "b"
    assert table_names(flight_client) == ["b"]
    assert get(flight_client, "b").equals(pa.table({"x": [1]}))

    deleted = action(flight_client, "delete", b"b")
    assert deleted == {"deleted": "b", "rows": 1, "bytes": deleted["bytes"]}
    assert table_names(flight_client) == []
    stats = action(flight_client, "stats")
    assert (stats["tables"], stats["rows"], stats["bytes"]) == (0, 0, 0)


def test_do_exchange_echoes_every_message(flight_client: flight.FlightClient) -> None:
    table = typed_table(batches=3, rows=20)
    writer, reader = flight_client.do_exchange(flight.FlightDescriptor.for_path("echo"))
    try:
        writer.begin(table.schema)
        for i, batch in enumerate(table.to_batches()):
            writer.write_with_metadata(batch, f"m{i}".encode())
            chunk = reader.read_chunk()
            assert chunk.data.equals(batch)
            assert chunk.app_metadata.to_pybytes() == f"m{i}".encode()
        writer.write_metadata(b"just metadata")
        chunk = reader.read_chunk()
        assert chunk.data is None
        assert chunk.app_metadata.to_pybytes() == b"just metadata"
        writer.done_writing()
        with pytest.raises(StopIteration):
            reader.read_chunk()
        assert reader.schema.equals(table.schema)
    finally:
        writer.close()


class _NoCredentials(flight.ClientAuthHandler):
    """Sends one empty handshake request and keeps the answer."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: bytes | None = None

    def authenticate(self, outgoing, incoming) -> None:
        outgoing.write(b"")
        self.answer = incoming.read()

    def get_token(self) -> bytes:
        return b""


def test_handshake_without_credentials(uri: str) -> None:
    client = flight.FlightClient(uri)
    handler = _NoCredentials()
    client.authenticate(handler)
    assert handler.answer == b""
    # Calls after the handshake still work.
    put(client, "t", pa.table({"a": [1]}))
    assert get(client, "t").num_rows == 1
    client.close()


def test_basic_token_handshake_is_accepted(uri: str) -> None:
    client = flight.FlightClient(uri)
    header = client.authenticate_basic_token("user", "password")
    assert isinstance(header, tuple)
    client.close()


def _batches_received(client: flight.FlightClient, name: str) -> list[int]:
    """Return the row counts of the record batches a DoGet of ``name`` delivers."""
    info = client.get_flight_info(flight.FlightDescriptor.for_path(name))
    reader = client.do_get(info.endpoints[0].ticket)
    return [chunk.data.num_rows for chunk in reader]


def test_pyarrow_gets_a_large_batch_whole(start_quiver: ServerFactory) -> None:
    # pyarrow's Flight client takes messages of any size (Arrow C++ servers send batches
    # whole), and tells it by gRPC C++'s user-agent: quiver sends it a 16 MiB batch as one
    # message, where clients with gRPC's 4 MiB default limit get 2 MiB slices.
    server = start_quiver()
    client = flight.FlightClient(server.uri)
    rows = 1 << 20
    table = pa.table({"a": pa.array(range(rows), pa.int64()), "b": pa.array([0.5] * rows)})
    table = pa.concat_tables([table, table.slice(0, 1000)])
    put(client, "big", table)
    assert _batches_received(client, "big") == [rows, 1000]
    assert get(client, "big").equals(table)
    client.close()


def test_large_flight_data_size_caps_what_pyarrow_gets(start_quiver: ServerFactory) -> None:
    server = start_quiver("--large-flight-data-size", "2MiB")
    client = flight.FlightClient(server.uri)
    rows = 1 << 20  # 16 MiB: cut into 64-row-aligned slices of about 2 MiB
    table = pa.table({"a": pa.array(range(rows), pa.int64()), "b": pa.array([0.5] * rows)})
    put(client, "big", table)
    received = _batches_received(client, "big")
    assert len(received) == 8
    assert sum(received) == rows
    assert all(n % 64 == 0 for n in received[:-1])
    assert get(client, "big").equals(table)
    client.close()
