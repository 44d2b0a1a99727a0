"""The clients suite (issue 67), run for real: its Go, Java and Python clients against real servers.

The Go client is built with ``go build`` (arrow-go from the Go module proxy), the Java one
with Maven (flight-core from Maven Central) and javac, both into the cache outside the clone
(``bench/clients/build.py``): the first run takes a few minutes, later ones none. A missing
toolchain skips what needs it, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from bench import flight_client
from bench.clients import build, syscalls, tables
from bench.clients.process import ClientError, ClientProcess
from bench.results import ARROW_CPP, QUIVER, Measurement
from bench.servers import REPO, quiver_bin, start_arrow_cpp, start_quiver
from bench.suites import clients as clients_suite

IN_CI = os.environ.get("CI") == "true"


def _command(name: str) -> list[str]:
    """Return a client's command, building it; skip (fail in CI) when it cannot be had."""
    if name in (clients_suite.PYARROW, clients_suite.ADBC):
        return [sys.executable, "-m", "bench.clients.py_client", name]
    builders = {
        clients_suite.GO: build.go_client,
        clients_suite.JAVA: build.java_client,
        clients_suite.JDBC: build.jdbc_client,
    }
    try:
        return builders[name]()
    except build.ClientUnavailable as e:
        if IN_CI:
            raise
        pytest.skip(f"the {name} client cannot be built here: {e}")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    binary = quiver_bin()
    if not binary.is_file():
        pytest.fail(f"quiver binary not found at {binary}: set QUIVER_BIN", pytrace=False)
    logs = tmp_path_factory.mktemp("clients-servers")
    started = [start_quiver(binary, logs, max_memory="2GiB"), start_arrow_cpp(logs)]
    yield started
    for server in started:
        server.stop()


def _addr(server) -> str:
    return server.uri.split("://", 1)[1]


def _stored(server, name: str) -> pa.Table:
    client = flight_client.connect(server.uri)
    try:
        return flight_client.timed_get([client], name, keep=True).table
    finally:
        client.close()


@pytest.mark.parametrize(
    "name", [clients_suite.GO, clients_suite.JAVA, clients_suite.PYARROW, clients_suite.ADBC]
)
@pytest.mark.parametrize("kind", tables.KINDS)
def test_each_client_puts_the_suites_table_and_gets_it_back(servers, tmp_path, name, kind):
    """Every client's put stores exactly the harness's table; its get reads every row back."""
    rows = 100_000
    expected = tables.make(kind, rows)
    client = ClientProcess(name, _command(name), tmp_path)
    try:
        prepared = client.call(
            {"op": "prepare", "kind": kind, "rows": rows, "batch_rows": tables.batch_rows(kind)}
        )
        assert prepared["batches"] == len(expected.to_batches())
        for server in servers:
            path = f"t_{name}_{kind}"
            put = client.call({"op": "put", "addr": _addr(server), "path": path})
            assert put["rows"] == rows and put["seconds"] > 0
            stored = _stored(server, path)
            assert stored.equals(expected.cast(stored.schema)), (server.name, stored.schema)
            got = client.call({"op": "get", "addr": _addr(server), "path": path})
            assert got["rows"] == rows
            if name != clients_suite.ADBC:  # a query's batches are the engine's, not the put's
                assert got["batches"] == len(expected.to_batches())
            assert got["bytes"] >= expected.nbytes and got["seconds"] > 0
    finally:
        client.close()


@pytest.mark.parametrize("name", [clients_suite.GO, clients_suite.JAVA, clients_suite.JDBC])
def test_go_java_and_jdbc_query_select_star_through_flight_sql(servers, tmp_path, name):
    table = tables.make("ints", 5_000)
    for server in servers:
        client = flight_client.connect(server.uri)
        flight_client.put(client, "clients_sql", table, 2_000)
        client.close()
    client = ClientProcess(name, _command(name), tmp_path)
    try:
        # The JDBC driver prepares every statement, which only quiver answers.
        for server in servers if name != clients_suite.JDBC else servers[:1]:
            query = {"op": "sql", "addr": _addr(server), "query": "SELECT * FROM clients_sql"}
            got = client.call(query)
            assert got["rows"] == 5_000, server.name
        with pytest.raises(ClientError, match="sql"):
            client.call({"op": "sql", "addr": _addr(servers[0]), "query": "SELECT * FROM nope"})
    finally:
        client.close()


def test_the_tables_are_at_least_their_size_in_2_mib_batches():
    for kind in tables.KINDS:
        rows = tables.rows_for(kind, 2**30)
        assert 0 <= rows * tables.ROW_BYTES[kind] - 2**30 < tables.ROW_BYTES[kind]
        table = tables.make(kind, tables.rows_for(kind, 8 * 2**20))
        assert table.nbytes == table.num_rows * tables.ROW_BYTES[kind]
        assert max(b.nbytes for b in table.to_batches()) <= tables.BATCH_BYTES
    strings = tables.make("strings", 3).column("s").to_pylist()
    assert strings == [f"{i:032d}" for i in range(3)]


def test_the_go_client_is_built_once_into_the_cache():
    first = _command(clients_suite.GO)
    binary = Path(first[0])
    assert binary.is_file() and build.cache_dir() in binary.parents
    assert REPO not in binary.parents
    mtime = binary.stat().st_mtime_ns
    assert _command(clients_suite.GO) == first and binary.stat().st_mtime_ns == mtime


def test_syscalls_of_a_server_are_counted_during_a_transfer(servers, tmp_path):
    counter = syscalls.tool()
    if counter is None:
        if IN_CI:
            pytest.fail("neither perf nor strace can count syscalls here")
        pytest.skip("neither perf nor strace can count syscalls here")
    quiver = servers[0]
    table = tables.make("ints", tables.rows_for("ints", 8 * 2**20))
    client = flight_client.connect(quiver.uri)
    flight_client.put(client, "clients_count", table, tables.batch_rows("ints"))
    client.close()
    go = ClientProcess(clients_suite.GO, _command(clients_suite.GO), tmp_path)
    try:
        request = {"op": "get", "addr": _addr(quiver), "path": "clients_count"}
        counts = syscalls.count(quiver.pid, lambda: go.call(request), counter)
    finally:
        go.close()
    # 8 MiB cannot leave a server in fewer than a handful of writes, nor in more than one
    # per 100 bytes.
    assert 4 <= counts.writes <= table.nbytes // 100, counts
    assert counts.tool == counter


def test_the_clients_smoke_run_measures_every_client_on_both_servers(tmp_path):
    for name in (clients_suite.GO, clients_suite.JAVA, clients_suite.JDBC):
        _command(name)  # skip (fail in CI) before the run when a client cannot be built
    binary = quiver_bin()
    if not binary.is_file():
        pytest.fail(f"quiver binary not found at {binary}: set QUIVER_BIN", pytrace=False)
    command = [
        sys.executable, "-m", "bench", "--smoke", "--only", "clients",
        "--out", str(tmp_path / "out"),
        "--report", str(tmp_path / "BENCHMARKS.md"),
        "--plots-dir", str(tmp_path / "plots"),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-6000:]
    with (tmp_path / "out" / "results.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["suite"] == "clients"]
    for client in clients_suite.MATRIX_CLIENTS:
        for server in (QUIVER, ARROW_CPP):
            for op in ("get:ints", "get:strings", "put:ints", "put:strings", "latency"):
                found = [
                    r for r in rows if (r["client"], r["server"], r["op"]) == (client, server, op)
                ]
                assert found, (client, server, op)
                assert all(float(r["seconds"]) > 0 for r in found), found
                if op != "latency":
                    assert all(r["server_cpu_seconds"] != "" for r in found), found
            if syscalls.tool() is not None:
                counted = [
                    r
                    for r in rows
                    if (r["client"], r["server"], r["op"]) == (client, server, "get:ints:writes")
                ]
                assert counted and int(counted[0]["ops"]) > 0, (client, server)
    for client in clients_suite.SQL_CLIENTS:
        assert any(r["client"] == client and r["op"] == "sql:ints" for r in rows), client
    jdbc = [r for r in rows if r["client"] == clients_suite.JDBC]
    assert {(r["server"], r["op"]) for r in jdbc if r["op"].count(":") == 1} == {
        (QUIVER, "sql:ints"),
        (QUIVER, "sql:strings"),
    }
    report = (tmp_path / "BENCHMARKS.md").read_text()
    assert "## Flight clients: pyarrow, Go, Java and ADBC (issue 67)" in report
    assert "SELECT * through ADBC / raw DoGet by the Go client" in report
    assert (tmp_path / "plots" / "clients_cpu.png").is_file()
    assert "clients_cpu.png" in report


def _row(server: str, client: str, op: str, seconds: float, cpu: float | None = None, **extra):
    measurement = Measurement(
        "clients",
        server,
        client,
        op,
        1,
        1000,
        100,
        bytes=2**30,
        seconds=seconds,
        server_cpu_seconds=cpu,
        **extra,
    )
    return {k: getattr(measurement, k) for k in measurement.__dataclass_fields__}


def _goal_rows() -> list[dict]:
    rows = []
    for server, get_s, put_s, cpu in ((QUIVER, 0.5, 1.0, 0.6), (ARROW_CPP, 0.8, 0.9, 0.5)):
        for kind in tables.KINDS:
            rows.append(_row(server, "go", f"get:{kind}", get_s, cpu))
            rows.append(_row(server, "go", f"put:{kind}", put_s, cpu))
            rows.append(_row(server, "adbc", f"get:{kind}", get_s * 1.05, cpu))
            rows.append(_row(server, "go", f"get:{kind}:writes", 0.0, ops=65536, note="perf"))
        rows.append(_row(server, "go", "latency", 0.001 if server == QUIVER else 0.002))
    return rows


def test_clients_goals_pass_and_fail_from_the_same_runs_medians():
    goals = {g.text: g for g in clients_suite.clients_goals(_goal_rows())}
    get = goals["DoGet of the 1 GiB 4 x int64 table, go: quiver / C++ throughput"]
    assert get.passed and get.value == pytest.approx(0.8 / 0.5)
    put = goals["DoPut of the 1 GiB 4 x int64 table, go: quiver / C++ throughput"]
    assert put.passed is False and put.value == pytest.approx(0.9 / 1.0)
    cpu = goals["DoGet of the 1 GiB 4 x int64 table, go: quiver / C++ server CPU per GiB"]
    assert cpu.passed is False and cpu.value == pytest.approx(1.2)
    adbc = goals[
        "quiver, 1 GiB 4 x int64 table: SELECT * through ADBC / raw DoGet by the Go client"
    ]
    assert adbc.passed and adbc.value == pytest.approx(1.05)
    latency = goals["1-row get, go: quiver / C++ median latency"]
    assert latency.passed and latency.value == pytest.approx(0.5)
    java = goals["DoGet of the 1 GiB 4 x int64 table, go: quiver / C++ throughput"]
    assert java is get  # only measured clients have goals
    assert not any(", java:" in text for text in goals)


def test_the_clients_section_renders_from_stored_rows(tmp_path):
    run = {"plan": {"mode": "full", "clients_reps": 5, "clients_warm_ups": 1}}
    run["sql_software"] = {"arrow-go (clients suite)": "v18.9.0", "PostgreSQL": "16"}
    lines = clients_suite._section(_goal_rows(), run, {}, tmp_path)
    text = "\n".join(lines)
    assert text.startswith("## Flight clients: pyarrow, Go, Java and ADBC (issue 67)")
    assert "arrow-go v18.9.0" in text and "PostgreSQL" not in text
    # 65,536 writes for 1 GiB; rates in GB/s of 1e9 bytes; CPU 0.6 s per GiB.
    assert "| Go: arrow-go (grpc-go) | 2.15 (2.15–2.15) | 1.34 (1.34–1.34) | 1.60× |" in text
    assert "| 0.60 (0.60–0.60) | 0.50 (0.50–0.50) | 1.20× | 65,536 | 65,536 |" in text
    assert "Syscalls counted by perf" in text
    assert clients_suite._section([], run, {}, tmp_path) == []
