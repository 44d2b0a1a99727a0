"""The clients suite (issue 67): DoGet and DoPut by pyarrow, Go, Java and ADBC, server CPU per GiB.

Go's, Java's and ADBC's Flight clients advertise HTTP/2's default 16 KiB max frame size, and
a server that writes each frame with a syscall of its own pays for it in CPU. Every client
here (``bench/clients/``) gets and puts the same two tables from and into quiver and the
Arrow C++ peer in the same run, the servers alternating round by round, and the harness
reads the server's CPU seconds (``/proc/PID/stat``) around each transfer; an untimed pass of
its own counts the server's syscalls (:mod:`bench.clients.syscalls`). Beside them: Flight
SQL ``SELECT *`` against a raw DoGet by the same client, and the latency of 1-row gets.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import re
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from .. import flight_client, sql_clients
from ..clients import build, syscalls, tables
from ..clients.process import ClientProcess
from ..plots import COLORS, LABELS, SERVERS, _save
from ..report import Goal, _figure, _goal_rows, _ratio, _size, _times
from ..results import ARROW_CPP, QUIVER, Measurement
from ..run import Run, Section, Suite, alternating, log
from ..servers import ServerProcess
from ..summary import Row, Spread, select, spread
from ..workers import CLOCK_TICKS, cpu_seconds

SUITE_NAME = "clients"
#: The clients (the ``client`` column), in the order they run and the report lists them.
PYARROW = "pyarrow"
GO = "go"
JAVA = "java"
ADBC = "adbc"
JDBC = "jdbc"
CLIENTS = (PYARROW, GO, JAVA, ADBC, JDBC)
CLIENT_LABELS = {
    PYARROW: "pyarrow.flight (gRPC C++)",
    GO: "Go: arrow-go (grpc-go)",
    JAVA: "Java: flight-core (grpc-netty)",
    ADBC: "ADBC Flight SQL (Go driver, grpc-go)",
    JDBC: "Flight SQL JDBC driver (Java, grpc-netty)",
}
#: The clients that also run Flight SQL ``SELECT *`` beside their raw DoGet (ADBC's get is
#: one already).
SQL_CLIENTS = (GO, JAVA)
#: The clients that run ``SELECT *`` only (no get, put or 1-row gets), against quiver only:
#: the Flight SQL JDBC driver prepares every statement, which the Arrow C++ peer does not.
QUERY_ONLY_CLIENTS = (JDBC,)
#: The clients of the matrix: every transfer, every server.
MATRIX_CLIENTS = (PYARROW, GO, JAVA, ADBC)
#: The transfers, as the ``op`` column names them: ``OP:KIND``.
OPS = ("get", "put")
#: Syscall rows: ``OP:KIND:writes`` and ``OP:KIND:reads``, the count in ``ops``.
WRITES, READS = "writes", "reads"
LATENCY = "latency"
#: Untimed 1-row gets per client and server before the timed ones.
LATENCY_WARM_UPS = 10
#: The name of the 1-row table.
ONE_ROW = "clients_one_row"

#: Issue 67's goals: quiver's throughput at least this times the C++ server's, by every
#: client...
THROUGHPUT_VS_CPP = 1.0
#: ...and the server's CPU per GiB at most this times the C++ server's...
CPU_VS_CPP = 1.0
#: ...``SELECT *`` through ADBC at most this times a raw DoGet by the Go client (the same
#: arrow-go Flight code on grpc-go)...
ADBC_SQL_VS_DOGET = 1.1
#: ...and the 1-row get's median latency at most the C++ server's.
LATENCY_VS_CPP = 1.0

#: The versions the section shows, in ``run.software`` (the run's ``sql_software``).
SOFTWARE_SUFFIX = " (clients suite)"


def _addr(server: ServerProcess) -> str:
    """Return ``host:port`` of a server's ``grpc+tcp://`` URI."""
    return server.uri.split("://", 1)[1]


def _table_name(kind: str) -> str:
    return f"clients_{kind}"


def _go_module_version(module: str) -> str:
    text = (build.GO_DIR / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(\S+)", text, re.M)
    return match.group(1) if match else "unknown"


def _maven_version() -> str:
    match = re.search(r"<arrow.version>([^<]+)<", (build.JAVA_DIR / "pom.xml").read_text())
    return match.group(1) if match else "unknown"


def _tool_version(command: list[str]) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        lines = (done.stdout + done.stderr).strip().splitlines()
        return lines[0] if lines else "unknown"
    return "unknown"


def _commands(run: Run) -> dict[str, list[str]]:
    """Return the command of every client that can run here (a missing one is noted)."""
    found = {PYARROW: [sys.executable, "-m", "bench.clients.py_client", PYARROW]}
    software = run.software
    if importlib.util.find_spec("adbc_driver_flightsql") is None:
        run.note("clients: ADBC not measured: adbc_driver_flightsql is not installed")
    else:
        found[ADBC] = [sys.executable, "-m", "bench.clients.py_client", ADBC]
        version = importlib.metadata.version("adbc-driver-flightsql")
        software["adbc-driver-flightsql" + SOFTWARE_SUFFIX] = version
    builders: dict[str, Callable[[], list[str]]] = {
        GO: build.go_client,
        JAVA: build.java_client,
        JDBC: build.jdbc_client,
    }
    for name, builder in builders.items():
        log(f"clients: building the {name} client (cached in {build.cache_dir()})")
        try:
            found[name] = builder()
        except build.ClientUnavailable as e:
            run.note(f"clients: the {name} client not measured: {e}")
    if GO in found:
        software["arrow-go" + SOFTWARE_SUFFIX] = _go_module_version(
            "github.com/apache/arrow-go/v18"
        )
        software["grpc-go" + SOFTWARE_SUFFIX] = _go_module_version("google.golang.org/grpc")
        go = _tool_version(["go", "version"]).split()  # go version go1.26.8 linux/amd64
        software["Go" + SOFTWARE_SUFFIX] = go[2].removeprefix("go") if len(go) > 2 else "?"
    if JAVA in found:
        software["Arrow Java flight-core" + SOFTWARE_SUFFIX] = _maven_version()
        java = _tool_version([found[JAVA][0], "-version"])  # openjdk version "17.0.15" ...
        match = re.search(r'version "([^"]+)"', java)
        software["Java" + SOFTWARE_SUFFIX] = match.group(1) if match else java
    return {name: found[name] for name in CLIENTS if name in found}


def _request(op: str, kind: str, server: ServerProcess) -> dict[str, Any]:
    name = _table_name(kind)
    if op == "get":
        return {"op": "get", "addr": _addr(server), "path": name}
    if op == "put":
        return {"op": "put", "addr": _addr(server), "path": f"{name}_put"}
    if op == "sql":
        return {"op": "sql", "addr": _addr(server), "query": sql_clients.select_all(name)}
    raise ValueError(op)


def run_clients(run: Run) -> None:
    """Time every client's gets, puts and queries of both tables on every server.

    The tables are stored in each server by the harness (pyarrow.flight, 2 MiB batches);
    each client then, per table: gets it, puts its own copy of it (made before the round, in
    the client), and for Go and Java runs ``SELECT *`` of it; ``clients_warm_ups`` untimed
    rounds then ``clients_reps`` timed ones, the servers alternating; then one more round
    per server with its syscalls counted. Last, the 1-row gets.
    """
    run.restart_flight_servers()
    counter = syscalls.tool()
    if counter is None:
        run.note("clients: syscalls not counted: neither perf nor strace can be had here")
    with contextlib.ExitStack() as stack:
        clients: dict[str, ClientProcess] = {}
        for name, command in _commands(run).items():
            with run.attempt(f"clients: start the {name} client"):
                clients[name] = stack.enter_context(
                    contextlib.closing(ClientProcess(name, command, run.log_dir / "clients"))
                )
        for kind in tables.KINDS:
            _measure_table(run, clients, kind, counter)
        _measure_latency(run, clients)


def _store(run: Run, name: str, table: Any) -> list[ServerProcess]:
    """Put ``table`` as ``name`` into every server; return those that have it."""
    stored = []
    for server in run.servers_alive():
        with run.attempt(f"clients: store {name} in {server.name}"):
            client = flight_client.connect(server.uri)
            try:
                flight_client.put(client, name, table, table.to_batches()[0].num_rows)
            finally:
                client.close()
            stored.append(server)
    return stored


def _drop(run: Run, names: list[str]) -> None:
    for server in run.servers_alive():
        with run.attempt(f"clients: delete {', '.join(names)} in {server.name}"):
            client = flight_client.connect(server.uri)
            for name in names:
                flight_client.delete(client, name)
            client.close()


def _measure_table(
    run: Run, clients: dict[str, ClientProcess], kind: str, counter: str | None
) -> None:
    plan = run.plan
    rows = tables.rows_for(kind, plan.clients_bytes)
    batch_rows = tables.batch_rows(kind)
    name = _table_name(kind)
    table = tables.make(kind, rows)
    nbytes = table.nbytes
    log(f"clients: {kind} table, {rows:,} rows, {_size(nbytes)} in batches of {batch_rows:,}")
    stored = _store(run, name, table)
    del table
    try:
        for client_name, client in clients.items():
            if client_name in QUERY_ONLY_CLIENTS:
                on = [s for s in stored if s.name == QUIVER]
                run.note(
                    f"clients: {client_name} queried quiver only (it prepares every statement, "
                    "which the Arrow C++ peer does not answer)"
                )
                shape = _Transfer(client_name, client, "sql", kind, rows, batch_rows, nbytes)
                _rounds(run, shape, on)
                if counter is not None:
                    _count_syscalls(run, shape, on, counter)
                continue
            with run.attempt(f"clients: {client_name} prepares the {kind} table"):
                client.call({"op": "prepare", "kind": kind, "rows": rows, "batch_rows": batch_rows})
            ops = [*OPS, *(["sql"] if client_name in SQL_CLIENTS else [])]
            for op in ops:
                shape = _Transfer(client_name, client, op, kind, rows, batch_rows, nbytes)
                _rounds(run, shape, stored)
                if counter is not None:
                    _count_syscalls(run, shape, stored, counter)
            with run.attempt(f"clients: {client_name} drops its {kind} batches"):
                client.call({"op": "prepare", "kind": kind, "rows": 0, "batch_rows": batch_rows})
    finally:
        _drop(run, [name, f"{name}_put"])


class _Transfer:
    """One client's get, put or query of one table."""

    def __init__(
        self,
        client_name: str,
        client: ClientProcess,
        op: str,
        kind: str,
        rows: int,
        batch_rows: int,
        nbytes: int,
    ) -> None:
        self.client_name = client_name
        self.client = client
        self.op = op
        self.kind = kind
        self.rows = rows
        self.batch_rows = batch_rows
        self.nbytes = nbytes

    @property
    def label(self) -> str:
        return f"clients: {self.client_name} {self.op} {self.kind}"

    def call(self, server: ServerProcess) -> dict[str, Any]:
        got = self.client.call(_request(self.op, self.kind, server))
        if int(got.get("rows", -1)) != self.rows:
            raise RuntimeError(f"moved {got.get('rows')} rows, expected {self.rows:,}")
        return got


def _rounds(run: Run, transfer: _Transfer, servers: list[ServerProcess]) -> None:
    plan = run.plan
    for rep in range(-plan.clients_warm_ups, plan.clients_reps):
        for server in alternating(servers, rep):
            with run.attempt(f"{transfer.label} {server.name}"):
                before = cpu_seconds(transfer.client.pid), cpu_seconds(server.pid)
                got = transfer.call(server)
                after = cpu_seconds(transfer.client.pid), cpu_seconds(server.pid)
                if rep < 0:
                    continue
                run.add(
                    Measurement(
                        SUITE_NAME,
                        server.name,
                        transfer.client_name,
                        f"{transfer.op}:{transfer.kind}",
                        1,
                        transfer.rows,
                        transfer.batch_rows,
                        bytes=transfer.nbytes,
                        seconds=float(got["seconds"]),
                        rep=rep,
                        ttfb_seconds=got.get("ttfb_seconds") or None,
                        endpoints=got.get("endpoints"),
                        client_cpu_seconds=_ticks(after[0] - before[0]),
                        server_cpu_seconds=_ticks(after[1] - before[1]),
                    )
                )


def _ticks(seconds: float) -> float:
    """Round a difference of ``/proc/PID/stat`` times to its clock ticks (no float noise)."""
    return round(seconds * CLOCK_TICKS) / CLOCK_TICKS


def _count_syscalls(
    run: Run, transfer: _Transfer, servers: list[ServerProcess], counter: str
) -> None:
    for server in servers:
        with run.attempt(f"{transfer.label} {server.name}: count syscalls with {counter}"):
            counts = syscalls.count(server.pid, lambda s=server: transfer.call(s), counter)
            for side, value in ((WRITES, counts.writes), (READS, counts.reads)):
                run.add(
                    Measurement(
                        SUITE_NAME,
                        server.name,
                        transfer.client_name,
                        f"{transfer.op}:{transfer.kind}:{side}",
                        1,
                        transfer.rows,
                        transfer.batch_rows,
                        bytes=transfer.nbytes,
                        ops=value,
                        note=counts.tool,
                    )
                )


def _measure_latency(run: Run, clients: dict[str, ClientProcess]) -> None:
    """Time ``clients_latency_calls`` 1-row gets per client, server and round."""
    plan = run.plan
    one = tables.make("ints", 1)
    servers = _store(run, ONE_ROW, one)
    calls = plan.clients_latency_calls
    try:
        for client_name, client in clients.items():
            if client_name in QUERY_ONLY_CLIENTS:
                continue
            for server in servers:
                with run.attempt(f"clients: {client_name} warms up on {server.name}"):
                    request = {"op": "latency", "addr": _addr(server), "path": ONE_ROW}
                    client.call({**request, "calls": LATENCY_WARM_UPS})
            for rep in range(max(1, plan.clients_reps)):
                for server in alternating(servers, rep):
                    with run.attempt(f"clients: {client_name} 1-row gets {server.name}"):
                        request = {"op": "latency", "addr": _addr(server), "path": ONE_ROW}
                        got = client.call({**request, "calls": calls})
                        latencies = sorted(float(s) for s in got["latencies"])
                        run.add(
                            Measurement(
                                SUITE_NAME,
                                server.name,
                                client_name,
                                LATENCY,
                                1,
                                1,
                                1,
                                bytes=one.nbytes,
                                seconds=statistics.median(latencies),
                                rep=rep,
                                ops=len(latencies),
                                p99_seconds=latencies[
                                    min(len(latencies) - 1, len(latencies) * 99 // 100)
                                ],
                            )
                        )
    finally:
        _drop(run, [ONE_ROW])


# --- the report ---------------------------------------------------------------------------------


def _rows(rows: list[Row], **where: object) -> list[Row]:
    return select(rows, suite=SUITE_NAME, **where)


def _gib(row: Row) -> float:
    return float(row["bytes"]) / 2**30


def _rate(rows: list[Row], server: str, client: str, op: str) -> Spread | None:
    return spread(_rows(rows, server=server, client=client, op=op), "gbps")


def _seconds(rows: list[Row], server: str, client: str, op: str) -> Spread | None:
    return spread(_rows(rows, server=server, client=client, op=op), "seconds")


def _cpu_per_gib(rows: list[Row], server: str, client: str, op: str) -> Spread | None:
    found = [
        r
        for r in _rows(rows, server=server, client=client, op=op)
        if r.get("server_cpu_seconds") is not None
    ]
    return spread(found, lambda r: float(r["server_cpu_seconds"]) / _gib(r))


def _syscalls_per_gib(rows: list[Row], server: str, client: str, op: str) -> float | None:
    found = _rows(rows, server=server, client=client, op=op)
    values = [float(r["ops"]) / _gib(r) for r in found if r.get("ops") is not None]
    return statistics.median(values) if values else None


def _kinds(rows: list[Row]) -> list[str]:
    ops = {str(r["op"]) for r in _rows(rows)}
    return [k for k in tables.KINDS if any(o.endswith(f":{k}") for o in ops)]


def _clients(rows: list[Row]) -> list[str]:
    """Return the matrix's clients that have rows (not the query-only ones)."""
    found = {str(r["client"]) for r in _rows(rows)}
    return [c for c in MATRIX_CLIENTS if c in found]


def _size_of(rows: list[Row], kind: str) -> str:
    found = [r for r in _rows(rows) if str(r["op"]).endswith(f":{kind}")]
    return _size(float(found[0]["bytes"])) if found else "?"


def _op_text(op: str) -> str:
    return {"get": "DoGet", "put": "DoPut", "sql": "Flight SQL SELECT *"}[op]


def _kind_text(kind: str) -> str:
    return {"ints": "4 x int64", "strings": "string + int64"}[kind]


def clients_goals(rows: list[Row]) -> list[Goal]:
    """Evaluate issue 67's goals on the clients suite's rows (none when it did not run)."""
    out: list[Goal] = []
    for kind in _kinds(rows):
        size = _size_of(rows, kind)
        for op in OPS:
            for client in _clients(rows):
                what = f"{_op_text(op)} of the {size} {_kind_text(kind)} table, {client}"
                key = f"{op}:{kind}"
                ours, theirs = _rate(rows, QUIVER, client, key), _rate(rows, ARROW_CPP, client, key)
                ratio = _ratio(ours, theirs)
                shown = _times(ratio)
                if ratio is not None and ours is not None and theirs is not None:
                    shown += f" ({ours.median:.2f} vs {theirs.median:.2f} GB/s)"
                out.append(
                    Goal(
                        f"{what}: quiver / C++ throughput",
                        f"≥ {THROUGHPUT_VS_CPP:g}×",
                        ratio,
                        None if ratio is None else ratio >= THROUGHPUT_VS_CPP,
                        shown,
                    )
                )
                ours = _cpu_per_gib(rows, QUIVER, client, key)
                theirs = _cpu_per_gib(rows, ARROW_CPP, client, key)
                ratio = _ratio(ours, theirs)
                shown = _times(ratio)
                if ratio is not None and ours is not None and theirs is not None:
                    shown += f" ({ours.median:.2f} vs {theirs.median:.2f} CPU s/GiB)"
                out.append(
                    Goal(
                        f"{what}: quiver / C++ server CPU per GiB",
                        f"≤ {CPU_VS_CPP:g}×",
                        ratio,
                        None if ratio is None else ratio <= CPU_VS_CPP,
                        shown,
                    )
                )
        adbc = _seconds(rows, QUIVER, ADBC, f"get:{kind}")
        doget = _seconds(rows, QUIVER, GO, f"get:{kind}")
        ratio = _ratio(adbc, doget)
        shown = _times(ratio)
        if ratio is not None and adbc is not None and doget is not None:
            shown += f" ({adbc.median:.3f} s vs {doget.median:.3f} s)"
        out.append(
            Goal(
                f"quiver, {size} {_kind_text(kind)} table: SELECT * through ADBC / raw DoGet by "
                "the Go client",
                f"≤ {ADBC_SQL_VS_DOGET:g}×",
                ratio,
                None if ratio is None else ratio <= ADBC_SQL_VS_DOGET,
                shown,
            )
        )
    for client in _clients(rows):
        ours = _seconds(rows, QUIVER, client, LATENCY)
        theirs = _seconds(rows, ARROW_CPP, client, LATENCY)
        if ours is None and theirs is None:
            continue
        ratio = _ratio(ours, theirs)
        shown = _times(ratio)
        if ratio is not None and ours is not None and theirs is not None:
            shown += f" ({ours.median * 1e3:.2f} vs {theirs.median * 1e3:.2f} ms)"
        out.append(
            Goal(
                f"1-row get, {client}: quiver / C++ median latency",
                f"≤ {LATENCY_VS_CPP:g}×",
                ratio,
                None if ratio is None else ratio <= LATENCY_VS_CPP,
                shown,
            )
        )
    return out


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _spread_text(found: Spread | None, digits: int = 2) -> str:
    if found is None:
        return "—"
    return f"{found.median:.{digits}f} ({found.low:.{digits}f}–{found.high:.{digits}f})"


def _transfer_table(rows: list[Row], op: str, kind: str) -> list[str]:
    key = f"{op}:{kind}"
    side = WRITES if op == "get" else READS
    other = READS if op == "get" else WRITES
    lines = [
        f"**{_op_text(op)}, {_size_of(rows, kind)} {_kind_text(kind)} table**",
        "",
        "| client | quiver GB/s | C++ GB/s | quiver / C++ | quiver CPU s/GiB | C++ CPU s/GiB "
        f"| quiver / C++ | quiver {side}/GiB | C++ {side}/GiB | quiver {other}/GiB "
        f"| C++ {other}/GiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for client in _clients(rows):
        rate = {s: _rate(rows, s, client, key) for s in (QUIVER, ARROW_CPP)}
        if rate[QUIVER] is None and rate[ARROW_CPP] is None:
            continue
        cpu = {s: _cpu_per_gib(rows, s, client, key) for s in (QUIVER, ARROW_CPP)}
        calls = {
            (s, d): _syscalls_per_gib(rows, s, client, f"{key}:{d}")
            for s in (QUIVER, ARROW_CPP)
            for d in (side, other)
        }
        lines.append(
            f"| {CLIENT_LABELS[client]} | {_spread_text(rate[QUIVER])} | "
            f"{_spread_text(rate[ARROW_CPP])} | {_times(_ratio(rate[QUIVER], rate[ARROW_CPP]))} | "
            f"{_spread_text(cpu[QUIVER])} | {_spread_text(cpu[ARROW_CPP])} | "
            f"{_times(_ratio(cpu[QUIVER], cpu[ARROW_CPP]))} | "
            f"{_fmt(calls[QUIVER, side], 0)} | {_fmt(calls[ARROW_CPP, side], 0)} | "
            f"{_fmt(calls[QUIVER, other], 0)} | {_fmt(calls[ARROW_CPP, other], 0)} |"
        )
    return [*lines, ""]


def _sql_table(rows: list[Row]) -> list[str]:
    lines = [
        "**Flight SQL `SELECT *` against a raw DoGet of the same table**",
        "",
        "Seconds, median (min–max). ADBC's query is set against the Go client's raw DoGet "
        "(ADBC's Flight SQL driver is arrow-go's Flight client on grpc-go).",
        "",
        "| table | server | client | SELECT * s | raw DoGet s (client) | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    found = False
    for kind in _kinds(rows):
        for server in (QUIVER, ARROW_CPP):
            for client, raw in ((ADBC, GO), (GO, GO), (JAVA, JAVA), (JDBC, JAVA)):
                query_op = f"get:{kind}" if client == ADBC else f"sql:{kind}"
                query = _seconds(rows, server, client, query_op)
                doget = _seconds(rows, server, raw, f"get:{kind}")
                if query is None:
                    continue
                found = True
                lines.append(
                    f"| {_size_of(rows, kind)} {_kind_text(kind)} | {server} | "
                    f"{CLIENT_LABELS[client]} | {_spread_text(query, 3)} | "
                    f"{_spread_text(doget, 3)} ({raw}) | {_times(_ratio(query, doget))} |"
                )
    return [*lines, ""] if found else []


def _latency_table(rows: list[Row]) -> list[str]:
    lines = [
        "**1-row gets** (GetFlightInfo + DoGet of a 1-row table, one after another; ADBC: "
        "`SELECT *` of it), milliseconds: the median over the rounds of each round's p50, "
        "and of its p99",
        "",
        "| client | quiver p50 | C++ p50 | quiver / C++ | quiver p99 | C++ p99 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    found = False
    for client in _clients(rows):
        p50 = {s: _seconds(rows, s, client, LATENCY) for s in (QUIVER, ARROW_CPP)}
        p99 = {
            s: spread(
                [
                    r
                    for r in _rows(rows, server=s, client=client, op=LATENCY)
                    if r.get("p99_seconds") is not None
                ],
                "p99_seconds",
            )
            for s in (QUIVER, ARROW_CPP)
        }
        if p50[QUIVER] is None and p50[ARROW_CPP] is None:
            continue
        found = True
        ms: dict[tuple[str, str], float | None] = {}
        for s in (QUIVER, ARROW_CPP):
            for which, found in (("p50", p50[s]), ("p99", p99[s])):
                ms[which, s] = None if found is None else found.median * 1e3
        lines.append(
            f"| {CLIENT_LABELS[client]} | {_fmt(ms['p50', QUIVER], 3)} | "
            f"{_fmt(ms['p50', ARROW_CPP], 3)} | {_times(_ratio(p50[QUIVER], p50[ARROW_CPP]))} | "
            f"{_fmt(ms['p99', QUIVER], 3)} | {_fmt(ms['p99', ARROW_CPP], 3)} |"
        )
    return [*lines, ""] if found else []


def _counter_text(rows: list[Row]) -> str:
    tools = {str(r["note"]) for r in _rows(rows) if str(r["op"]).endswith((WRITES, READS))}
    if not tools:
        return "Syscalls were not counted in this run (neither perf nor strace could be had)."
    return (
        f"Syscalls counted by {' and '.join(sorted(tools))}, attached to the server process "
        "(every thread) for one untimed transfer of its own per client and server: writes are "
        "`write`, `writev`, `sendmsg` and `sendto`, reads `read`, `readv`, `recvmsg` and "
        "`recvfrom`; per GiB of Arrow data moved."
    )


def _section(
    rows: list[Row], run: dict[str, object], plots: dict[str, Path], at: Path
) -> list[str]:
    if not _rows(rows):
        return []
    software = run.get("sql_software") or {}
    assert isinstance(software, dict)
    versions = ", ".join(
        f"{k.removesuffix(SOFTWARE_SUFFIX)} {v}"
        for k, v in software.items()
        if str(k).endswith(SOFTWARE_SUFFIX)
    )
    plan = run.get("plan") or {}
    assert isinstance(plan, dict)
    lines = [
        "## Flight clients: pyarrow, Go, Java and ADBC (issue 67)",
        "",
        "Go's (grpc-go), Java's (grpc-netty) and ADBC's (grpc-go) Flight clients advertise "
        "HTTP/2's default 16 KiB max frame size (1 GiB is 65,536 such frames); pyarrow's "
        "(gRPC C++) takes larger ones (the server's writes per GiB below show it). Each "
        "client, with its library's defaults, gets and puts two tables in 2 MiB batches, a "
        "4 x int64 one and a string (32 bytes) + int64 one, from and into quiver and the "
        "Arrow C++ server in the same run (`bench/clients/`, `bench/suites/clients.py`), "
        f"{plan.get('clients_warm_ups', '?')} untimed round(s) then "
        f"{plan.get('clients_reps', '?')} timed, the servers alternating round by round. "
        "The harness stores the tables with pyarrow.flight; a get is GetFlightInfo of the "
        "table's path and DoGet of its endpoint, a put is a DoPut of the client's own copy "
        "of the table (made before the round), replacing it. ADBC speaks Flight SQL only: "
        "its get is `SELECT * FROM table`, its put `adbc_ingest` (bulk ingest), which the "
        "C++ peer answers too. Go and Java also run Flight SQL `SELECT *` of each table, "
        "and so does the Flight SQL JDBC driver (`Statement.executeQuery`, every value of "
        "every row read with `getObject`), against quiver only: it prepares every statement, "
        "which the C++ peer does not. Server CPU: utime + stime of the server process "
        "(`/proc/PID/stat`) read around each transfer, per GiB of Arrow data. "
        + _counter_text(rows),
        "",
    ]
    if versions:
        lines += [f"- **Clients**: {versions}", ""]
    if plan.get("mode") != "full":
        lines += [
            "> Not a full run: the goals are for 1 GiB tables "
            "(`python -m bench --full --only clients`).",
            "",
        ]
    lines += ["| goal | target | measured | result |", "| --- | --- | --- | --- |"]
    lines += [*_goal_rows(clients_goals(rows)), ""]
    lines += [
        *_figure("Server CPU per GiB by Flight client", plots.get("clients_cpu"), at),
        "Rates in GB/s (1e9 bytes per second) and server CPU seconds per GiB: median "
        "(min–max) of the rounds; syscalls per GiB from the counted transfer.",
        "",
    ]
    for op in OPS:
        for kind in _kinds(rows):
            lines += _transfer_table(rows, op, kind)
    return [*lines, *_sql_table(rows), *_latency_table(rows)]


def clients_cpu(rows: list[Row], path: Path) -> Path:
    """Server CPU seconds per GiB by client, quiver beside the C++ server, with the rates."""
    ops = [(op, kind) for op in OPS for kind in _kinds(rows)]
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops), 4.2), squeeze=False)
    clients = _clients(rows)
    for ax, (op, kind) in zip(axes[0], ops, strict=True):
        key = f"{op}:{kind}"
        for k, server in enumerate(SERVERS):
            xs, heights, rates = [], [], []
            for i, client in enumerate(clients):
                cpu = _cpu_per_gib(rows, server, client, key)
                rate = _rate(rows, server, client, key)
                if cpu is None:
                    continue
                xs.append(i + (k - 0.5) * 0.4)
                heights.append(cpu.median)
                rates.append(None if rate is None else rate.median)
            ax.bar(xs, heights, 0.4, color=COLORS[server], label=LABELS[server])
            for x, height, rate in zip(xs, heights, rates, strict=True):
                if rate is not None:
                    ax.annotate(
                        f"{rate:.2f} GB/s",
                        xy=(x, height),
                        xytext=(0, 2),
                        textcoords="offset points",
                        ha="center",
                        va="bottom",
                        fontsize=6,
                        rotation=90,
                    )
        ax.set_xticks(range(len(clients)), clients)
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * 1.35 if high > 0 else 1)
        ax.set_title(f"{_op_text(op)}, {_size_of(rows, kind)} {_kind_text(kind)}", fontsize=9)
        ax.set_ylabel("server CPU s per GiB")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Server CPU per GiB by Flight client (issue 67); bars annotated with GB/s")
    return _save(fig, path)


def _figures(rows: list[Row], plan: dict[str, object], out_dir: Path) -> list[Path]:
    if not _clients(rows) or not _kinds(rows):
        return []
    return [clients_cpu(rows, out_dir / "clients_cpu.png")]


def _goals_link(rows: list[Row]) -> list[str]:
    if not _rows(rows):
        return []
    return [
        "",
        "The goals of the Flight clients matrix (issue 67) are in "
        "[their section](#flight-clients-pyarrow-go-java-and-adbc-issue-67).",
    ]


SUITE = Suite(
    SUITE_NAME,
    run_clients,
    goals=lambda rows, plan: clients_goals(rows),
    goals_link=_goals_link,
    sections=(Section(_section),),
    figures=_figures,
)
