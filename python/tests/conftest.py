"""Fixtures that run the real quiver server binary (never a mock).

The binary is ``$QUIVER_BIN``, else ``$CARGO_TARGET_DIR/release/quiver``, else
``<repo>/target/release/quiver``. A missing binary fails the tests that need it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow.flight as flight
import pytest

import quiver
from cluster_helpers import NODES, SECURE, Cluster, Etcd, start_secured_etcd, wait_until
from engine_helpers import Planner, mixed_table
from quiver import testing
from s3_helpers import start_s3
from server_process import Server, ServerFactory, start_server


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers of quiver's tests (``--strict-markers`` refuses others)."""
    config.addinivalue_line(
        "markers",
        "gib: moves a GiB or more (seconds, and GiBs of memory); runs by default, "
        "deselect with -m 'not gib'",
    )


@pytest.fixture
def start_quiver(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start servers with extra flags; stop them at teardown and check they exited with 0."""
    servers: list[Server] = []

    def start(*flags: str) -> Server:
        server = start_server(*flags, log_dir=tmp_path)
        servers.append(server)
        return server

    yield start
    failures = []
    for server in servers:
        code = server.stop()
        if code != 0:
            failures.append(f"quiver {' '.join(server.flags)} exited with {code}:\n{server.log()}")
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


@pytest.fixture
def server(start_quiver: ServerFactory) -> Server:
    """A fresh server with default settings."""
    return start_quiver()


@pytest.fixture
def uri(server: Server) -> str:
    """The URI of a fresh server with default settings."""
    return server.uri


@pytest.fixture
def flight_client(uri: str) -> Iterator[flight.FlightClient]:
    """A plain ``pyarrow.flight`` client of a fresh server."""
    client = flight.FlightClient(uri)
    yield client
    client.close()


@pytest.fixture
def client(uri: str) -> Iterator[quiver.Client]:
    """A quiver client of a fresh server."""
    with quiver.connect(uri) as c:
        yield c


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[list[Server], str]]:
    """Two servers on 127.0.0.1 and 127.0.0.2 holding the same table, and a planner over them."""
    servers = [
        start_server("--shm-socket", "off", log_dir=tmp_path / "a", listen="127.0.0.1:0"),
        start_server("--shm-socket", "off", log_dir=tmp_path / "b", listen="127.0.0.2:0"),
    ]
    table = mixed_table()
    for server in servers:
        # Fresh servers: the same put gives the same version, so tickets are valid on both.
        with quiver.connect(server.uri) as c:
            c.put("trips", table, partitions=4)
    planner = Planner([s.uri for s in servers])
    thread = threading.Thread(target=planner.serve, daemon=True)
    thread.start()
    try:
        yield servers, f"grpc+tcp://127.0.0.1:{planner.port}"
    finally:
        planner.shutdown()
        for server in servers:
            if server.alive:
                server.stop()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    """A real etcd on 127.0.0.1 with a temporary data directory; with
    ``QUIVER_TEST_SECURE_CLUSTER``, over TLS with client certificates and users
    (cluster_helpers.start_secured_etcd)."""
    if SECURE:
        server, _, _ = start_secured_etcd(tmp_path / "secure-etcd")
    else:
        server = Etcd(tmp_path / "etcd")
        server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster(etcd: Etcd, tmp_path: Path) -> Iterator[Cluster]:
    """Nodes n1, n2 and n3 on 127.0.0.1, .2 and .3 over ``etcd``, two replicas; with
    ``QUIVER_TEST_SECURE_CLUSTER``, with TLS and users (cluster_helpers.py)."""
    nodes = Cluster(etcd, tmp_path)
    for node_id in NODES:
        nodes.start(node_id)
    wait_until("three live nodes", lambda: len(nodes.status()["nodes"]) == 3)  # type: ignore[arg-type]
    try:
        yield nodes
    finally:
        failures = nodes.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[testing.S3Server]:
    """One real S3 server (SeaweedFS) on 127.0.0.1 for the whole session (s3_helpers.py):
    each test creates its own buckets. A test that stops or pauses it starts or resumes it
    again before it ends."""
    server = start_s3(tmp_path_factory.mktemp("s3"))
    try:
        yield server
    finally:
        server.stop()
