"""Operating a live server: metrics scraped, health checked, config files, JSON logs.

Every check talks to the real ``quiver serve`` with real clients: Prometheus'
own Python parser reads the metrics page, grpcio's health stub (the
``grpcio-health-checking`` package) asks ``grpc.health.v1``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import quiver
from cluster_helpers import wait_until
from metrics_helpers import scrape, value
from quiver.testing import find_quiver_binary
from server_process import REPO, Server, ServerFactory

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
FLIGHT_SERVICE = "arrow.flight.protocol.FlightService"


def target(server: Server) -> str:
    return server.uri.removeprefix("grpc+tcp://")


def health(channel: grpc.Channel, service: str = "") -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def wait_serving(channel: grpc.Channel) -> None:
    """Wait for SERVING. The port opens, and ``quiver listening on`` is
    printed, before startup ends; health says NOT_SERVING until then."""
    wait_until("the server to report SERVING", lambda: health(channel) == SERVING, timeout=30)


@pytest.fixture
def channel_of() -> Iterator:
    channels: list[grpc.Channel] = []

    def make(server: Server) -> grpc.Channel:
        channel = grpc.insecure_channel(target(server))
        channels.append(channel)
        return channel

    yield make
    for c in channels:
        c.close()


def test_metrics_count_what_the_server_did(start_quiver: ServerFactory) -> None:
    server = start_quiver("--metrics-listen", "127.0.0.1:0", "--max-memory", "64MiB")
    url = server.metrics_url()
    table = pa.table({"x": pa.array(range(100_000), pa.int64())})
    with quiver.connect(server.uri, transport="grpc") as client:
        client.put("t", table)
        assert client.get("t").num_rows == 100_000
        with pytest.raises(quiver.NotFoundError):
            client.get("missing")
        too_big = pa.table({"x": pa.array(range(10_000_000), pa.int64())})
        with pytest.raises(quiver.ResourceExhaustedError):
            client.put("big", too_big)
        assert client.sql("SELECT sum(x) AS s FROM t").column("s")[0].as_py() == sum(range(100_000))
        with pytest.raises(quiver.QuiverError):
            client.sql("SELECT nope FROM t")
    s = scrape(url)
    assert value(s, "quiver_rpcs_total", method="DoPut", code="OK") >= 1
    assert value(s, "quiver_rpcs_total", method="GetFlightInfo", code="NotFound") >= 1
    assert value(s, "quiver_rpcs_total", method="DoGet", code="OK") >= 1
    assert value(s, "quiver_rpc_duration_seconds_count", method="DoPut") >= 2
    assert value(s, "quiver_rows_total", method="DoPut", direction="received") == 100_000
    assert value(s, "quiver_bytes_total", method="DoPut", direction="received") >= 800_000
    assert value(s, "quiver_rows_total", method="DoGet", direction="sent") >= 100_000
    assert value(s, "quiver_rejected_requests_total", limit="MEMORY_LIMIT") >= 1
    assert value(s, "quiver_tables") == 1
    assert value(s, "quiver_stored_rows") == 100_000
    assert value(s, "quiver_stored_bytes") >= 800_000
    assert value(s, "quiver_memory_limit_bytes") == 64 << 20
    assert 800_000 <= value(s, "quiver_memory_used_bytes") <= 64 << 20
    assert value(s, "quiver_sql_queries_total", outcome="ok") >= 1
    assert value(s, "quiver_sql_queries_total", outcome="failed") >= 1
    assert value(s, "quiver_sql_query_duration_seconds_count") >= 2
    assert (("quiver_shm_connections", ()) in s) and (("quiver_shm_grants", ()) in s)
    assert ("quiver_put_buffer_pool_bytes", ()) in s
    assert value(s, "quiver_build_info", version=quiver.__version__) == 1
    # The shared-memory data plane counts as methods of its own.
    with quiver.connect(server.uri, transport="shm") as client:
        client.put("s", table)
        assert client.get("s").num_rows == 100_000
    s = scrape(url)
    assert value(s, "quiver_rpcs_total", method="ShmPut", code="OK") == 1
    assert value(s, "quiver_rows_total", method="ShmPut", direction="received") == 100_000
    assert value(s, "quiver_rows_total", method="ShmGet", direction="sent") == 100_000
    assert value(s, "quiver_rpc_duration_seconds_count", method="ShmGet") == 1
    # Counters only grow: a second scrape after one more RPC.
    with quiver.connect(server.uri) as client:
        client.list_tables()
    again = scrape(url)
    assert value(again, "quiver_rpcs_total") == value(s, "quiver_rpcs_total") + 1


def test_metrics_time_the_fsyncs_of_a_data_dir(start_quiver: ServerFactory, tmp_path: Path) -> None:
    server = start_quiver("--metrics-listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"))
    url = server.metrics_url()
    assert value(scrape(url), "quiver_fsync_duration_seconds_count") == 0
    with quiver.connect(server.uri) as client:
        client.put("t", pa.table({"x": list(range(10))}))
    s = scrape(url)
    # A put: the segment file and the manifest, each with its directory.
    assert value(s, "quiver_fsync_duration_seconds_count", target="file") >= 2
    assert value(s, "quiver_fsync_duration_seconds_count", target="dir") >= 2
    assert value(s, "quiver_fsync_duration_seconds_sum") > 0
    # Durable tables live in the page cache, not the memory pool (docs/durability.md).
    assert value(s, "quiver_stored_rows") == 10


def test_metrics_serve_only_their_page(start_quiver: ServerFactory) -> None:
    url = start_quiver("--metrics-listen", "127.0.0.1:0").metrics_url()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.removesuffix("/metrics") + "/other", timeout=10)
    assert e.value.code == 404
    request = urllib.request.Request(url, method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=10)
    assert e.value.code == 405


def test_metrics_listen_taken_is_a_clear_error(start_quiver: ServerFactory, tmp_path: Path) -> None:
    url = start_quiver("--metrics-listen", "127.0.0.1:0").metrics_url()
    taken = url.removeprefix("http://").removesuffix("/metrics")
    run = subprocess.run(
        [
            str(find_quiver_binary(REPO)),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            taken,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode != 0
    assert f"cannot listen for metrics on {taken}" in run.stderr


def test_health_is_serving_without_credentials(
    start_quiver: ServerFactory, tmp_path: Path, channel_of
) -> None:
    users = tmp_path / "users.toml"
    binary = str(find_quiver_binary(REPO))
    subprocess.run(
        [binary, "user", "add", "alice", "--role", "admin", "--users", str(users)],
        input="pw\n",
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    server = start_quiver("--users", str(users))
    channel = channel_of(server)
    # A check without credentials reaches SERVING.
    wait_serving(channel)
    assert health(channel, FLIGHT_SERVICE) == SERVING
    with pytest.raises(grpc.RpcError) as e:
        health(channel, "no.such.Service")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # The Flight service itself still wants credentials.
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(flight.connect(server.uri).list_flights())


def test_health_watch_sees_not_serving_at_shutdown_and_ends(
    start_quiver: ServerFactory, channel_of
) -> None:
    server = start_quiver()
    channel = channel_of(server)
    wait_serving(channel)
    stub = health_pb2_grpc.HealthStub(channel)
    seen: list[int] = []
    ended = threading.Event()
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            for response in stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=60):
                seen.append(response.status)
        except grpc.RpcError as e:  # the end after the statuses are withdrawn
            errors.append(e)
        finally:
            ended.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [SERVING]
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert ended.wait(20), "the Watch stream did not end at shutdown"
    assert seen == [SERVING, NOT_SERVING]
    # The open Watch did not hold shutdown for --shutdown-timeout (30 s).
    assert server.process.wait(timeout=20) == 0
    assert time.monotonic() - started < 20


def open_for_writing(fifo: Path, timeout: float = 20) -> None:
    """Open ``fifo`` for writing and close it: what ends a reader's wait in open(2).

    The server registers a CSV table over the FIFO by opening it once, seeing
    a size of 0 and closing it, so nothing needs writing (a write could meet
    the closed reader: EPIPE). The open blocks until the server opens its end;
    if it never does, the test fails after ``timeout`` seconds, and the test
    opens the reading end itself so no thread stays blocked.
    """
    opener = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    opener.start()
    opener.join(timeout)
    if opener.is_alive():
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        opener.join(5)
        raise AssertionError(f"the server never opened {fifo}")


def test_not_serving_while_starting(
    start_quiver: ServerFactory, tmp_path: Path, channel_of
) -> None:
    # A --table whose file is a FIFO: registering it waits in open(2) until
    # the test opens the other end, which holds the server in its startup.
    fifo = tmp_path / "slow.csv"
    os.mkfifo(fifo)
    binary = str(find_quiver_binary(REPO))
    process = subprocess.Popen(
        [
            binary,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--shm-socket",
            "off",
            "--table",
            f"slow={fifo}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        assert line.startswith("quiver listening on "), line
        address = line.split("grpc+tcp://")[1].strip()
        channel = grpc.insecure_channel(address)
        stub = health_pb2_grpc.HealthStub(channel)
        check = health_pb2.HealthCheckRequest(service="")
        assert stub.Check(check, timeout=10).status == NOT_SERVING
        # A Flight RPC sent now waits for the startup, then succeeds.
        listed: list[list[flight.FlightInfo]] = []
        lister = threading.Thread(
            target=lambda: listed.append(
                list(flight.connect(f"grpc+tcp://{address}").list_flights())
            ),
            daemon=True,
        )
        lister.start()
        lister.join(0.5)
        assert lister.is_alive() and not listed, "a Flight RPC went through while starting"
        assert stub.Check(check, timeout=10).status == NOT_SERVING
        open_for_writing(fifo)
        lister.join(20)
        assert listed == [[]]
        deadline = time.monotonic() + 20
        while stub.Check(check, timeout=10).status != SERVING:
            assert time.monotonic() < deadline, "never SERVING"
            time.sleep(0.05)
        with quiver.connect(f"grpc+tcp://{address}") as client:
            # The gate is open. (A query of `slow` would wait on the FIFO again.)
            assert client.list_tables() == []
        channel.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_config_file_with_overrides_and_print_config(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    config = tmp_path / "quiver.toml"
    config.write_text('max-memory = "96MiB"\npartitions = 3\nlog-format = "json"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    server = start_quiver("--config", str(config), "--partitions", "2")
    with quiver.connect(server.uri) as client:
        assert client.stats().memory_limit == 96 << 20
        client.put("t", pa.table({"x": list(range(10))}))
        assert client.info("t").partitions == 2
    printed = subprocess.run(
        [str(find_quiver_binary(REPO)), "serve", "--config", str(config), "--print-config"],
        env={**env, "QUIVER_PARTITIONS": "5"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert f'max-memory = "96MiB"  # {config}' in printed
    assert 'partitions = "5"  # QUIVER_PARTITIONS' in printed
    assert 'listen = "127.0.0.1:8815"  # default' in printed
    bad = tmp_path / "bad.toml"
    bad.write_text('max_memory = "1GiB"\n')
    run = subprocess.run(
        [str(find_quiver_binary(REPO)), "serve", "--config", str(bad)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode != 0
    assert "unknown key `max_memory` (did you mean `max-memory`?)" in run.stderr


def test_json_logs_one_object_per_rpc(start_quiver: ServerFactory) -> None:
    server = start_quiver("--log-format", "json")
    with quiver.connect(server.uri, transport="grpc") as client:
        client.put("t", pa.table({"x": list(range(10))}))
        with pytest.raises(quiver.NotFoundError):
            client.get("missing")
    server.stop()
    lines = [json.loads(line) for line in server.log().splitlines() if line.strip()]
    put = next(e for e in lines if e.get("rpc") == "DoPut")
    assert put["message"] == "ok" and put["table"] == "t" and put["rows"] == 10
    assert {"timestamp", "level", "bytes", "duration_ms"} <= put.keys()
    failed = next(e for e in lines if e.get("rpc") == "GetFlightInfo" and e["message"] == "failed")
    assert failed["code"] == "NotFound" and "missing" in failed["error"]
