"""Reads fail over to an endpoint's next location, against real servers.

A Flight endpoint lists every location (replica) that can serve its ticket. The
client reads each endpoint from the first of them that can be reached: a location
that is unreachable before the stream's first message (connection refused,
UNAVAILABLE) passes the read to the next one; any other error is the read's at
once. The planner here is a small pyarrow Flight server that answers
GetFlightInfo with a real quiver server's tickets and locations of its choosing
(a dead loopback port first); the data comes from the quiver server. Each read
is checked through the Rust core and through pyarrow (``QUIVER_CORE=0``), and
``quiver get`` likewise.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

import quiver
from engine_helpers import mixed_table
from quiver._core import CallError
from server_process import Server, quiver_bin

#: What the planner serves itself, were a read to reach it: never the table asked for.
DECOY = pa.table({"decoy": pa.array([1, 2, 3], pa.int64())})


def dead_locations(n: int) -> list[str]:
    """Return ``n`` distinct locations on 127.0.0.2 that nobody listens on (ports just freed)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.2", 0))
            ports.append(sock.getsockname()[1])
    return [f"grpc+tcp://127.0.0.2:{port}" for port in ports]


def dead_location() -> str:
    """Return a location on 127.0.0.2 that nobody listens on."""
    return dead_locations(1)[0]


def _varint(n: int) -> bytes:
    out = b""
    while n > 0x7F:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def rich_status(code: int, message: str, kind: str) -> bytes:
    """A ``google.rpc.Status`` with a quiver ``ErrorInfo`` of reason ``kind``."""
    info = _field(1, kind.encode()) + _field(2, b"quiver")
    detail = _field(1, b"type.googleapis.com/google.rpc.ErrorInfo") + _field(2, info)
    return _varint(1 << 3) + _varint(code) + _field(2, message.encode()) + _field(3, detail)


class FailoverPlanner(flight.FlightServerBase):  # type: ignore[misc]
    """A pyarrow Flight server that plans reads of a real quiver server.

    GetFlightInfo asks ``upstream`` for the same descriptor (a table or a Flight SQL
    query) and answers with its schema and tickets (or ``ticket`` in every endpoint),
    every endpoint listing ``locations``. Its own DoGet counts the calls, so a read
    sent to it is seen, and serves :data:`DECOY`, or with ``down`` set fails with
    UNAVAILABLE and a rich status (as a server that is shutting down does).
    """

    def __init__(self, upstream: str) -> None:
        super().__init__("grpc+tcp://127.0.0.1:0")
        self.upstream = upstream
        self.uri = f"grpc+tcp://127.0.0.1:{self.port}"
        self.locations: list[str] = []
        self.ticket: bytes | None = None
        self.down = False
        self.do_gets = 0

    def get_flight_info(self, context, descriptor):  # type: ignore[no-untyped-def]
        client = flight.FlightClient(self.upstream)
        try:
            info = client.get_flight_info(descriptor)
        finally:
            client.close()
        endpoints = [
            flight.FlightEndpoint(
                e.ticket if self.ticket is None else flight.Ticket(self.ticket), self.locations
            )
            for e in info.endpoints
        ]
        return flight.FlightInfo(
            info.schema, descriptor, endpoints, info.total_records, info.total_bytes
        )

    def do_get(self, context, ticket):  # type: ignore[no-untyped-def]
        self.do_gets += 1
        if self.down:
            status = rich_status(14, "replica down", "DRAINING")
            raise flight.FlightUnavailableError("replica down", status)
        return flight.RecordBatchStream(DECOY)


@pytest.fixture
def planner(server: Server) -> Iterator[FailoverPlanner]:
    """A planner over a fresh quiver server holding ``trips`` in 4 partitions."""
    with quiver.connect(server.uri, transport="grpc") as client:
        client.put("trips", mixed_table(), partitions=4)
    planner = FailoverPlanner(server.uri)
    thread = threading.Thread(target=planner.serve, daemon=True)
    thread.start()
    try:
        yield planner
    finally:
        planner.shutdown()
        thread.join(timeout=10)


@pytest.fixture(params=[True, False], ids=["core", "pyarrow"])
def core(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Reads through the Rust core, or through pyarrow (``QUIVER_CORE=0``)."""
    if request.param:
        monkeypatch.delenv("QUIVER_CORE", raising=False)
    else:
        monkeypatch.setenv("QUIVER_CORE", "0")
    return bool(request.param)


@pytest.fixture
def client(planner: FailoverPlanner, core: bool) -> Iterator[quiver.Client]:
    """A client of the planner, reading through the core or through pyarrow."""
    with quiver.connect(planner.uri, transport="grpc") as client:
        assert (client.data_plane.core is not None) == core
        yield client


def _read(client: quiver.Client, how: str) -> pa.Table:
    if how == "get":
        return client.get("trips")
    if how == "sql":
        return client.sql("SELECT * FROM trips")
    return client.sql_reader("SELECT * FROM trips").read_all()


@pytest.mark.parametrize("how", ["get", "sql", "sql_reader"])
def test_a_read_fails_over_to_the_next_location(
    server: Server, planner: FailoverPlanner, client: quiver.Client, how: str
) -> None:
    # The dead location first, then the quiver server, then the planner's decoy: each
    # endpoint must be read from the second, the first one that answers.
    planner.locations = [dead_location(), server.uri, planner.uri]
    got = _read(client, how)
    expected = mixed_table()
    if how == "get":
        assert got.equals(expected)
    else:
        assert got.column_names == expected.column_names
        assert sorted(got.column("id").to_pylist()) == expected.column("id").to_pylist()
    assert planner.do_gets == 0


def test_a_streaming_read_fails_over_endpoint_by_endpoint(
    server: Server, planner: FailoverPlanner, client: quiver.Client
) -> None:
    # The stream of one endpoint (what sql_reader, get_reader and quiver.splits read
    # through), from an endpoint whose first location is dead.
    planner.locations = [dead_location(), server.uri]
    endpoint = client.flight_client.get_flight_info(
        flight.FlightDescriptor.for_path("trips")
    ).endpoints[0]
    assert [loc.uri.decode() for loc in endpoint.locations] == planner.locations
    schema, batches = client.data_plane.stream(endpoint)
    got = pa.Table.from_batches(list(batches), schema)
    with quiver.connect(server.uri, transport="grpc") as direct:
        first = direct._flight_info("trips").endpoints[0]
        assert got.equals(direct.flight_client.do_get(first.ticket).read_all())
    assert got.num_rows > 0


def test_get_reader_reads_the_server_it_is_connected_to(server: Server, core: bool) -> None:
    # get_reader's one DoGet names the table, with no location: "this server". Through a
    # client whose server is up, it reads the table; one whose server is down raises
    # UNAVAILABLE naming that server (the one location tried).
    with quiver.connect(server.uri, transport="grpc") as client:
        client.put("trips", mixed_table(), partitions=4)
        assert client.get_reader("trips").read_all().equals(mixed_table())
    dead = dead_location()
    with quiver.connect(dead, transport="grpc") as client:
        assert (client.data_plane.core is not None) == core
        with pytest.raises(quiver.ServerUnavailableError) as raised:
            client.get_reader("trips")
    assert raised.value.code == "UNAVAILABLE"
    assert dead in raised.value.message


@pytest.mark.parametrize("how", ["get", "sql", "sql_reader"])
def test_an_endpoint_whose_only_location_is_dead_raises_unavailable(
    planner: FailoverPlanner, client: quiver.Client, how: str
) -> None:
    dead = dead_location()
    planner.locations = [dead]
    with pytest.raises(quiver.ServerUnavailableError) as raised:
        _read(client, how)
    error = raised.value
    assert type(error) is quiver.ServerUnavailableError
    assert error.code == "UNAVAILABLE"
    assert error.message == str(error)
    assert error.message.endswith(f"(locations tried: {dead})"), error.message
    # The Flight call's own failure: the core's or pyarrow's.
    assert isinstance(error.__cause__, (CallError, pa.ArrowException)), repr(error.__cause__)


def test_when_every_location_is_dead_the_last_error_names_them_all(
    planner: FailoverPlanner, client: quiver.Client
) -> None:
    first, last = dead_locations(2)
    planner.locations = [first, last]
    with pytest.raises(quiver.ServerUnavailableError) as raised:
        client.get("trips")
    message = raised.value.message
    assert message.endswith(f"(locations tried: {first}, {last})"), message
    # The error is the last location's: its own words name its address.
    assert last.removeprefix("grpc+tcp://") in message.removesuffix(f"{first}, {last})")


def test_unavailable_before_the_schema_fails_over_and_keeps_its_kind(
    server: Server, planner: FailoverPlanner, client: quiver.Client
) -> None:
    # A location that answers (the planner) but fails the DoGet with UNAVAILABLE and a
    # rich status passes each endpoint's read to the next location.
    planner.down = True
    planner.locations = [planner.uri, server.uri]
    assert client.get("trips").equals(mixed_table())
    assert planner.do_gets == 4  # once per endpoint
    # Last of the locations, its error is the read's: its class, code and kind, its
    # message (the one in the status details) naming the locations tried.
    dead = dead_location()
    planner.locations = [dead, planner.uri]
    with pytest.raises(quiver.ServerUnavailableError) as raised:
        client.sql_reader("SELECT * FROM trips").read_all()
    error = raised.value
    assert (error.code, error.kind) == ("UNAVAILABLE", "DRAINING")
    assert error.message == f"replica down (locations tried: {dead}, {planner.uri})"


@pytest.mark.parametrize("how", ["get", "sql_reader"])
def test_not_found_from_the_first_location_is_not_retried(
    server: Server, planner: FailoverPlanner, client: quiver.Client, how: str
) -> None:
    # The quiver server answers NOT_FOUND (the ticket names no table); the planner,
    # listed next, would answer with its decoy: it must not be asked.
    planner.locations = [server.uri, planner.uri]
    planner.ticket = b"no-such-table"
    with pytest.raises(quiver.TableNotFoundError) as raised:
        _read(client, how)
    assert raised.value.code == "NOT_FOUND"
    assert "no-such-table" in raised.value.message
    assert "locations tried" not in raised.value.message
    assert planner.do_gets == 0


def test_a_location_after_a_dead_one_that_answers_not_found_is_the_error(
    server: Server, planner: FailoverPlanner, client: quiver.Client
) -> None:
    # Unreachable, then NOT_FOUND: the answer is the read's error; the decoy after
    # them is not asked.
    planner.locations = [dead_location(), server.uri, planner.uri]
    planner.ticket = b"no-such-table"
    with pytest.raises(quiver.TableNotFoundError):
        client.get("trips")
    assert planner.do_gets == 0


def _run_cli(server_uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    env["QUIVER_SERVER"] = server_uri
    return subprocess.run(
        [str(quiver_bin()), *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_quiver_get_fails_over_to_the_next_location(
    server: Server, planner: FailoverPlanner, tmp_path: Path
) -> None:
    planner.locations = [dead_location(), server.uri, planner.uri]
    target = tmp_path / "trips.parquet"
    done = _run_cli(planner.uri, "get", "trips", "-o", str(target))
    assert done.returncode == 0, done.stderr
    got = pq.read_table(target)
    assert got.column("id").to_pylist() == list(range(mixed_table().num_rows))
    assert planner.do_gets == 0

    # Every location dead: the command fails, naming them.
    first, last = dead_locations(2)
    planner.locations = [first, last]
    failed = _run_cli(planner.uri, "get", "trips", "-o", str(tmp_path / "no.parquet"))
    assert failed.returncode != 0
    assert f"locations tried: {first}, {last}" in failed.stderr, failed.stderr

    # NOT_FOUND from the first location is the command's error: the decoy is not asked.
    planner.locations = [server.uri, planner.uri]
    planner.ticket = b"no-such-table"
    missing = _run_cli(planner.uri, "get", "trips", "-o", str(tmp_path / "no.parquet"))
    assert missing.returncode != 0
    assert "not found" in missing.stderr, missing.stderr
    assert planner.do_gets == 0
