"""DoPut with the plain pyarrow client: replace, append, options, big batches."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from flight_helpers import action, get, get_endpoints, put, typed_table
from server_process import ServerFactory


def test_append_adds_rows_after_the_table(flight_client: flight.FlightClient) -> None:
    first = typed_table(batches=3, rows=50)
    more = pa.Table.from_batches(typed_table(batches=5, rows=50).to_batches()[3:])
    v1 = put(flight_client, "t", first)
    v2 = put(flight_client, "t", more, b'{"mode":"append"}')
    assert v2["rows"] == first.num_rows + more.num_rows
    assert v2["version"] > v1["version"]
    assert v2["bytes"] > v1["bytes"]
    assert get(flight_client, "t").equals(pa.concat_tables([first, more]))


def test_options_on_the_first_batch(flight_client: flight.FlightClient) -> None:
    table = pa.table({"a": [1, 2]})
    put(flight_client, "t", table)
    writer, results = flight_client.do_put(flight.FlightDescriptor.for_path("t"), table.schema)
    writer.write_with_metadata(table.to_batches()[0], b'{"mode": "append", "partitions": 2}')
    # Later app_metadata is ignored.
    writer.write_with_metadata(table.to_batches()[0], b'{"mode": "bogus"}')
    writer.done_writing()
    assert results.read() is not None
    writer.close()
    assert get(flight_client, "t").column("a").to_pylist() == [1, 2, 1, 2, 1, 2]
    info = flight_client.get_flight_info(flight.FlightDescriptor.for_path("t"))
    assert len(info.endpoints) == 2


def test_replace_is_the_default(flight_client: flight.FlightClient) -> None:
    put(flight_client, "t", pa.table({"a": [1, 2, 3]}))
    put(flight_client, "t", pa.table({"b": ["x"]}))
    assert get(flight_client, "t").equals(pa.table({"b": ["x"]}))
    put(flight_client, "t", pa.table({"c": [1.5]}), b'{"mode":"replace"}')
    assert get(flight_client, "t").equals(pa.table({"c": [1.5]}))


def test_partitions_option_and_append_keeps_it(start_quiver: ServerFactory) -> None:
    server = start_quiver("--partitions", "2")
    client = flight.FlightClient(server.uri)
    table = pa.table({"a": np.arange(1000)})
    put(client, "t", table, b'{"partitions": 5}')
    assert len(client.get_flight_info(flight.FlightDescriptor.for_path("t")).endpoints) == 5
    put(client, "t", table, b'{"mode": "append"}')
    assert len(client.get_flight_info(flight.FlightDescriptor.for_path("t")).endpoints) == 5
    assert get_endpoints(client, "t").equals(pa.concat_tables([table, table]))
    put(client, "u", table)
    assert len(client.get_flight_info(flight.FlightDescriptor.for_path("u")).endpoints) == 2
    client.close()


def test_append_with_other_schema_is_rejected_and_changes_nothing(
    flight_client: flight.FlightClient,
) -> None:
    table = pa.table({"a": pa.array([1, 2, 3], pa.int64()), "b": ["x", "y", "z"]})
    put(flight_client, "t", table)
    before = action(flight_client, "stats")
    for other in [
        pa.table({"a": pa.array([1], pa.int32()), "b": ["q"]}),  # another type
        pa.table({"a": pa.array([1], pa.int64())}),  # a missing column
        pa.table({"b": ["q"], "a": pa.array([1], pa.int64())}),  # another order
        pa.table({"a": pa.array([1], pa.int64()), "c": ["q"]}),  # another name
    ]:
        with pytest.raises(pa.ArrowInvalid, match="schema") as raised:
            put(flight_client, "t", other, b'{"mode":"append"}')
        assert "invalid argument" in str(raised.value)
        assert get(flight_client, "t").equals(table)
    after = action(flight_client, "stats")
    assert (after["tables"], after["rows"], after["bytes"]) == (
        before["tables"],
        before["rows"],
        before["bytes"],
    )


def test_append_ignores_schema_metadata(flight_client: flight.FlightClient) -> None:
    table = pa.table({"a": [1, 2]})
    put(flight_client, "t", table.replace_schema_metadata({"origin": "first"}))
    put(
        flight_client,
        "t",
        table.replace_schema_metadata({"origin": "second"}),
        b'{"mode":"append"}',
    )
    assert get(flight_client, "t").column("a").to_pylist() == [1, 2, 1, 2]


def test_append_to_missing_table_is_not_found(flight_client: flight.FlightClient) -> None:
    with pytest.raises(KeyError, match="table 'nope' not found"):
        put(flight_client, "nope", pa.table({"a": [1]}), b'{"mode":"append"}')
    assert list(flight_client.list_flights()) == []


def test_a_64_mib_batch_is_accepted(flight_client: flight.FlightClient) -> None:
    table = pa.table({"a": np.arange(8 * 1024 * 1024, dtype=np.int64)})  # one 64 MiB batch
    assert len(table.to_batches()) == 1
    result = put(flight_client, "big", table)
    assert result["rows"] == table.num_rows
    assert result["bytes"] >= 64 * 1024 * 1024
    assert get(flight_client, "big").equals(table)


def test_batches_past_max_message_size_are_resource_exhausted(
    start_quiver: ServerFactory,
) -> None:
    server = start_quiver("--max-message-size", "1MiB")
    client = flight.FlightClient(server.uri)
    small = pa.table({"a": np.arange(1000)})
    put(client, "t", small)
    big = pa.table({"a": np.arange(512 * 1024)})  # one 4 MiB batch
    with pytest.raises(pa.ArrowException, match="resource exhausted") as raised:
        put(client, "t", big)
    assert "1048576" in str(raised.value)
    assert get(client, "t").equals(small)
    put(client, "t", big, max_chunksize=64 * 1024)  # the same rows in small batches fit
    assert get(client, "t").equals(big)
    client.close()


def test_a_dictionary_sent_once_is_charged_once(flight_client: flight.FlightClient) -> None:
    # 200 batches share one 1 MiB dictionary; pyarrow sends it once. The store
    # charges the bytes it holds, not the dictionary once per batch.
    words = pa.array([f"{i:08d}" * 16 for i in range(8192)])
    batches = [
        pa.record_batch(
            [pa.DictionaryArray.from_arrays(pa.array(range(i, i + 100), pa.int32()), words)],
            names=["w"],
        )
        for i in range(200)
    ]
    table = pa.Table.from_batches(batches)
    put(flight_client, "dict", table)
    stats = action(flight_client, "stats")
    assert stats["bytes"] < 3 * words.nbytes, stats
    assert stats["memory_used"] == stats["bytes"]
    assert get(flight_client, "dict").equals(table)
