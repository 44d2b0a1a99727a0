"""Every error case, with the plain pyarrow client; the store is unchanged after each."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from flight_helpers import action, get, put, table_names
from server_process import ServerFactory


def _store(client: flight.FlightClient) -> tuple[object, ...]:
    stats = action(client, "stats")
    return stats["tables"], stats["rows"], stats["bytes"], stats["memory_used"]


@pytest.fixture
def stored(flight_client: flight.FlightClient) -> pa.Table:
    table = pa.table({"a": np.arange(100), "b": [str(i) for i in range(100)]})
    put(flight_client, "kept", table)
    return table


def test_missing_table(flight_client: flight.FlightClient, stored: pa.Table) -> None:
    before = _store(flight_client)
    calls = {
        "GetFlightInfo": lambda: flight_client.get_flight_info(
            flight.FlightDescriptor.for_path("nope")
        ),
        "GetSchema": lambda: flight_client.get_schema(flight.FlightDescriptor.for_path("nope")),
        "DoGet": lambda: flight_client.do_get(flight.Ticket(b"nope")).read_all(),
        "delete": lambda: action(flight_client, "delete", b"nope"),
        "rename": lambda: action(
            flight_client, "rename", json.dumps({"from": "nope", "to": "x"}).encode()
        ),
    }
    for rpc, call in calls.items():
        with pytest.raises(KeyError) as raised:
            call()
        message = str(raised.value)
        assert "not found" in message, rpc
        assert "table 'nope' not found" in message, rpc
    assert _store(flight_client) == before
    assert get(flight_client, "kept").equals(stored)


def test_unknown_action_names_the_known_ones(
    flight_client: flight.FlightClient, stored: pa.Table
) -> None:
    before = _store(flight_client)
    # An action quiver does not offer is UNIMPLEMENTED, as docs/protocol.md says.
    with pytest.raises(pa.ArrowNotImplementedError, match="unimplemented") as raised:
        action(flight_client, "frobnicate")
    for known in ["delete", "rename", "stats", "health"]:
        assert known in str(raised.value)
    assert "frobnicate" in str(raised.value)
    assert _store(flight_client) == before


@pytest.mark.parametrize(
    "options",
    [
        b"not json",
        b"[1, 2]",
        b'{"mode": "upsert"}',
        b'{"mode": 1}',
        b'{"partitions": 0}',
        b'{"partitions": 1025}',
        b'{"partitions": "four"}',
        b'{"color": "blue"}',
    ],
)
def test_bad_put_options_are_invalid_argument(
    flight_client: flight.FlightClient, stored: pa.Table, options: bytes
) -> None:
    before = _store(flight_client)
    with pytest.raises(pa.ArrowInvalid, match="invalid argument"):
        put(flight_client, "kept", pa.table({"z": [1]}), options)
    with pytest.raises(pa.ArrowInvalid, match="invalid argument"):
        put(flight_client, "new", pa.table({"z": [1]}), options)
    assert _store(flight_client) == before
    assert get(flight_client, "kept").equals(stored)
    assert table_names(flight_client) == ["kept"]


@pytest.mark.parametrize("name", ["", " padded", "padded ", "tab\there", "x" * 1025])
def test_bad_names_are_invalid_argument(flight_client: flight.FlightClient, name: str) -> None:
    with pytest.raises(pa.ArrowInvalid, match="invalid argument"):
        flight_client.get_flight_info(flight.FlightDescriptor.for_command(name.encode()))
    with pytest.raises(pa.ArrowInvalid, match="invalid argument"):
        put(flight_client, name, pa.table({"a": [1]}))
    assert table_names(flight_client) == []


def test_bad_rename_body_is_invalid_argument(
    flight_client: flight.FlightClient, stored: pa.Table
) -> None:
    before = _store(flight_client)
    for body in [b"", b"kept", b'{"from": "kept"}', b'{"from": "kept", "to": " x"}']:
        with pytest.raises(pa.ArrowInvalid, match="invalid argument"):
            action(flight_client, "rename", body)
    assert _store(flight_client) == before
    assert table_names(flight_client) == ["kept"]


def test_malformed_ticket_is_invalid_argument(flight_client: flight.FlightClient) -> None:
    with pytest.raises(pa.ArrowInvalid, match="invalid argument"):
        flight_client.do_get(flight.Ticket(b"\0quiver-ticket-v1:{not json")).read_all()


def test_rename_onto_existing_table_without_overwrite(
    flight_client: flight.FlightClient, stored: pa.Table
) -> None:
    other = pa.table({"x": [1.0]})
    put(flight_client, "other", other)
    before = _store(flight_client)
    body = json.dumps({"from": "other", "to": "kept", "overwrite": False}).encode()
    with pytest.raises(pa.ArrowException, match="already exists") as raised:
        action(flight_client, "rename", body)
    assert "table 'kept' already exists" in str(raised.value)
    assert _store(flight_client) == before
    assert get(flight_client, "kept").equals(stored)
    assert get(flight_client, "other").equals(other)


def test_put_over_memory_limit(start_quiver: ServerFactory) -> None:
    server = start_quiver("--max-memory", "1MiB")
    client = flight.FlightClient(server.uri)
    small = pa.table({"a": np.arange(1000)})
    put(client, "kept", small)
    before = _store(client)
    big = pa.table({"a": np.arange(512 * 1024)})  # 4 MiB
    for chunk in [None, 16 * 1024]:  # one batch; many batches, passing the limit mid-stream
        for name, options in [("kept", None), ("kept", b'{"mode":"append"}'), ("new", None)]:
            with pytest.raises(pa.ArrowException, match="resource exhausted") as raised:
                put(client, name, big, options, max_chunksize=chunk)
            assert "max-memory" in str(raised.value) or "limit" in str(raised.value)
            assert _store(client) == before
    assert get(client, "kept").equals(small)
    assert table_names(client) == ["kept"]
    # Still usable: a put that fits is accepted.
    put(client, "kept", pa.table({"a": np.arange(10)}))
    client.close()


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np, pyarrow as pa, pyarrow.flight as flight
    uri, name, options = sys.argv[1], sys.argv[2], sys.argv[3].encode()
    client = flight.FlightClient(uri)
    numbers = np.arange(100_000)
    batch = pa.record_batch({"a": numbers, "b": pa.array(numbers.astype(str))})
    writer, _ = client.do_put(flight.FlightDescriptor.for_path(name), batch.schema)
    if options:
        writer.write_metadata(options)
    for _ in range(20):
        writer.write_batch(batch)
    print("written", flush=True)
    time.sleep(60)
    """
)


@pytest.mark.parametrize(
    ("name", "options"),
    [("kept", ""), ("kept", '{"mode":"append"}'), ("fresh", "")],
)
def test_broken_off_put_stores_nothing(
    uri: str, flight_client: flight.FlightClient, stored: pa.Table, name: str, options: str
) -> None:
    before = _store(flight_client)
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, uri, name, options],
        stdout=subprocess.PIPE,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == b"written\n"
        # Kill only once the server holds the put in progress: otherwise a
        # server that committed it a moment later would still pass.
        deadline = time.monotonic() + 10
        while _store(flight_client)[3] == before[3] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _store(flight_client)[3] > before[3], "the put never reached the server"
    finally:
        writer.kill()
        writer.wait()
    # The server notices the reset connection and drops the put in progress.
    deadline = time.monotonic() + 10
    while _store(flight_client) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _store(flight_client) == before
    assert get(flight_client, "kept").equals(stored)
    assert table_names(flight_client) == ["kept"]
