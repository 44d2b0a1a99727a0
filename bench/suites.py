"""The measurements: each suite runs its shapes against every server and records the rows.

Repetitions alternate between the servers (quiver, then the Arrow C++ peer, then quiver...)
so that a noisy moment of the machine does not favour one of them.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.flight as flight

from . import (
    ceilings,
    data,
    engines,
    flight_client,
    flight_worker,
    rust_client,
    scoring,
    servers,
    soak,
    sql_clients,
    sql_worker,
    taxi,
    tpch,
    workers,
    xgbatch,
)
from .peers import json_socket, postgres
from .plan import GIB, TPCH_ARROW_BYTES_PER_SF, TPCH_FULL_SCALES, Plan
from .results import (
    ARROW_CPP,
    DUCKDB,
    FASTAPI_JSON,
    FUNCTIONS_STREAM_ECHO,
    FUNCTIONS_STREAM_SQL,
    IN_PROCESS,
    IN_PROCESS_THREADS,
    JSON_SOCKET,
    PARQUET,
    POSTGRESQL,
    PYARROW,
    PYARROW_FLIGHT,
    QUIVER,
    QUIVER_1_WORKER,
    QUIVER_2_WORKERS,
    QUIVER_CLUSTER,
    QUIVER_CLUSTER_TLS,
    QUIVER_FILES,
    QUIVER_GRPC,
    QUIVER_PYTHON,
    QUIVER_PYTHON_SHM,
    SPARK_CACHE,
    SPARK_JVM,
    Measurement,
    ResultsFile,
)
from .servers import ServerProcess
from .summary import percentile

T = TypeVar("T")


@dataclass
class Run:
    """Everything the suites share: the plan, the servers, the CSV and the notes.

    Attributes
    ----------
    plan : Plan
        What to measure.
    flight_servers : list of ServerProcess
        quiver and the Arrow C++ peer.
    json_server : ServerProcess or None
        The JSON-over-socket peer.
    results : ResultsFile
        Where measurements go.
    binary : pathlib.Path
        The quiver binary (for ``quiver bench``).
    quiver_bench : bool
        Whether ``quiver bench`` is available.
    log_dir : pathlib.Path
        Where servers started by a suite write their logs.
    notes : list of str
        What was skipped, what failed, what is not comparable: printed in BENCHMARKS.md.
    failures : int
        Measurements that raised.
    software : dict of str to str
        Versions of what the ``sql`` suite measured (PostgreSQL, the drivers).
    out_dir : pathlib.Path or None
        The run's output directory (``--out``), where the tpch suite keeps its generated
        tables between runs (``None``: the parent of ``log_dir``).
    """

    plan: Plan
    flight_servers: list[ServerProcess]
    json_server: ServerProcess | None
    results: ResultsFile
    binary: Path
    quiver_bench: bool
    log_dir: Path
    notes: list[str] = field(default_factory=list)
    failures: int = 0
    software: dict[str, str] = field(default_factory=dict)
    out_dir: Path | None = None

    def add(self, measurement: Measurement) -> None:
        """Record a measurement."""
        self.results.add(measurement)

    def note(self, text: str) -> None:
        """Record a note for the report (once) and print it."""
        if text in self.notes:
            return
        self.notes.append(text)
        log(f"note: {text}")

    @contextlib.contextmanager
    def attempt(self, what: str) -> Iterator[None]:
        """Run a measurement; if it raises, note the failure and go on with the next one."""
        try:
            yield
        except Exception as e:
            self.failures += 1
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            self.note(f"FAILED: {what}: {type(e).__name__}: {first_line[:300]}")
            traceback.print_exc(file=sys.stderr)

    def restart_flight_servers(self) -> None:
        """Replace every Flight server by a fresh process (nothing stored, memory returned)."""
        for i, server in enumerate(self.flight_servers):
            with self.attempt(f"restart {server.name}"):
                self.flight_servers[i] = servers.restart(server, self.binary, self.log_dir)
                log(f"restarted {server.name}: {self.flight_servers[i].uri}")

    def servers_alive(self) -> list[ServerProcess]:
        """Return the Flight servers still running (a dead one is noted once)."""
        alive = []
        for server in self.flight_servers:
            if server.alive():
                alive.append(server)
            elif not any(n.startswith(f"{server.name} exited") for n in self.notes):
                self.note(
                    f"{server.name} exited with code {server.process.returncode} during the "
                    f"run; its log: {server.log_path}"
                )
        return alive


def log(text: str) -> None:
    """Print progress to stderr."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _order(group: list[T], rep: int) -> list[T]:
    """Return the servers (or clients) in an order that alternates with the repetition."""
    return group if rep % 2 == 0 else list(reversed(group))


def _shape_text(streams: int, rows: int, batch_rows: int) -> str:
    return f"{streams} stream(s) x {rows:,} rows, batches of {batch_rows:,}"


# --- ceilings -------------------------------------------------------------------------------


def run_ceilings(run: Run) -> None:
    """Loopback TCP (``quiver bench tcp``, iperf3) and memcpy: what the Flight numbers are
    read against.
    """  # noqa: D205
    plan = run.plan
    if not run.quiver_bench:
        run.note("ceilings tcp/memcpy skipped: quiver bench not available")
    else:
        for rep in range(plan.ceiling_reps):
            with run.attempt("ceiling tcp"):
                line = ceilings.quiver_tcp(run.binary, plan.tcp_seconds)
                run.add(
                    Measurement(
                        "ceilings",
                        "",
                        "quiver-bench",
                        "tcp",
                        bytes=line["bytes"],
                        seconds=line["seconds"],
                        rep=rep,
                    )
                )
            with run.attempt("ceiling memcpy"):
                for line in ceilings.quiver_memcpy(run.binary, plan.memcpy_bytes):
                    run.add(
                        Measurement(
                            "ceilings",
                            "",
                            "quiver-bench",
                            line["ceiling"],
                            bytes=line["bytes"],
                            seconds=line["seconds"],
                            rep=rep,
                        )
                    )
    if not ceilings.iperf3_available():
        run.note("ceiling iperf3 skipped: iperf3 is not installed")
        return
    for rep in range(plan.ceiling_reps):
        with run.attempt("ceiling iperf3"):
            line = ceilings.iperf3_tcp(max(1.0, plan.tcp_seconds))
            run.add(
                Measurement(
                    "ceilings",
                    "",
                    "iperf3",
                    "iperf3",
                    bytes=line["bytes"],
                    seconds=line["seconds"],
                    rep=rep,
                )
            )


# --- pyarrow client throughput ----------------------------------------------------------------


def measure(
    run: Run,
    suite: str,
    op: str,
    streams: int,
    rows: int,
    batch_rows: int,
    reps: int,
    clients: tuple[str, ...] = (PYARROW,),
) -> None:
    """Time ``reps`` gets or puts (``op``) of one shape on every server, by every client.

    Each client of each server is in a worker process of its own (:mod:`bench.flight_worker`),
    which prepares the data when it starts (a get's table stored on its server, a put's
    table made), makes the warm-up rounds, then one round per repetition, the servers and
    clients taking turns; it deletes what it stored when closed. The quiver Python client
    over shared memory (:data:`bench.results.QUIVER_PYTHON_SHM`) reads quiver only.
    The CPU seconds of the client's worker and of the server are read around each round.
    """
    shape = _shape_text(streams, rows, batch_rows)
    # Both ops move streams x rows records: a get of them split into streams partitions, a
    # put of rows records by each of streams clients.
    nbytes = streams * rows * data.RECORD_BYTES
    with contextlib.ExitStack() as stack:
        rounds: dict[tuple[str, str], workers.Worker] = {}
        pids: dict[str, int] = {}
        for client in clients:
            for server in run.servers_alive():
                if client == QUIVER_PYTHON_SHM and server.name != QUIVER:
                    continue
                with run.attempt(f"{suite} {op}: prepare the {client} worker of {server.name}"):
                    label = f"{suite} {op}, {client} client of {server.name}"
                    worker = flight_worker.start(
                        label, server.uri, op, streams, rows, batch_rows, client
                    )
                    rounds[client, server.name] = stack.enter_context(worker)
                    pids[server.name] = server.pid
        warm_ups = run.plan.warm_up_reps
        for (client, server), worker in rounds.items():
            with run.attempt(f"{suite} warm-up {op} {client} {server}"):
                for _ in range(warm_ups):
                    seconds = worker.call("round")["seconds"]
                    _note_warm_up(run, suite, server, client, op, nbytes, seconds)
        for rep in range(reps):
            for client, server in _order(list(rounds), rep):
                with run.attempt(f"{suite} {op} {client} {server} {shape}"):
                    worker = rounds[client, server]
                    before = workers.cpu_seconds(worker.pid), workers.cpu_seconds(pids[server])
                    got = worker.call("round")
                    after = workers.cpu_seconds(worker.pid), workers.cpu_seconds(pids[server])
                    run.add(
                        Measurement(
                            suite,
                            server,
                            client,
                            op,
                            streams,
                            rows,
                            batch_rows,
                            bytes=nbytes,
                            rep=rep,
                            client_cpu_seconds=after[0] - before[0],
                            server_cpu_seconds=after[1] - before[1],
                            **got,
                        )
                    )


def _note_warm_up(
    run: Run, suite: str, server: str, client: str, op: str, nbytes: int, seconds: float
) -> None:
    """Keep a headline warm-up's time in the notes: it is left out of the medians."""
    if suite == "headline":
        who = server if client == PYARROW else f"{server}, {client} client"
        run.note(
            f"headline {op} warm-up (untimed in the medians), {who}: "
            f"{nbytes / seconds / 1e9:.2f} GB/s"
        )


def run_get(run: Run) -> None:
    """Time the pyarrow client's gets over the grid, then of the headline table.

    The headline's gets are also made by the quiver Python client, over gRPC from both
    servers and over shared memory from quiver.
    """
    _run_throughput(run, "get")


def run_put(run: Run) -> None:
    """Time the pyarrow client's puts over the grid, then of the headline table.

    The headline's puts are also made by the quiver Python client, over gRPC.
    """
    _run_throughput(run, "put")


#: The clients of the headline, by op: pyarrow.flight and the quiver Python client (its Rust
#: core over gRPC; for gets, shared memory from quiver too), their rounds interleaved.
HEADLINE_CLIENTS = {
    "get": (PYARROW, QUIVER_PYTHON, QUIVER_PYTHON_SHM),
    "put": (PYARROW, QUIVER_PYTHON),
}


def _run_throughput(run: Run, op: str) -> None:
    plan = run.plan
    for streams, rows, batch_rows in plan.grid():
        log(f"{op}: {_shape_text(streams, rows, batch_rows)}")
        measure(run, op, op, streams, rows, batch_rows, plan.reps)
    log(f"{op}: headline, {_shape_text(1, plan.headline_rows, plan.batch_rows)}")
    measure(
        run,
        "headline",
        op,
        1,
        plan.headline_rows,
        plan.batch_rows,
        plan.headline_reps,
        HEADLINE_CLIENTS[op],
    )


def run_memory(run: Run) -> None:
    """Resident memory of a fresh server of each kind holding the headline table.

    Each server is started for this alone, so that what earlier measurements left in its
    allocator does not count: its RSS when started, after the put, during gets (sampled), and
    after the table is deleted.
    """
    plan = run.plan
    rows = plan.headline_rows
    table = data.records(rows, plan.batch_rows)
    log(f"memory: fresh servers holding {table.nbytes / 2**20:,.0f} MiB")
    starters = {
        QUIVER: lambda: servers.start_quiver(run.binary, run.log_dir / "memory"),
        ARROW_CPP: lambda: servers.start_arrow_cpp(run.log_dir / "memory"),
    }
    for name, start in starters.items():
        with run.attempt(f"memory {name}"):
            server = start()
            try:
                _measure_memory(run, server, table, rows)
            finally:
                code = server.stop()
            if code != 0:
                run.note(f"{name} (memory suite) exited with code {code} after SIGTERM")


def _measure_memory(run: Run, server: ServerProcess, table: pa.Table, rows: int) -> None:
    batch_rows = run.plan.batch_rows

    def record(op: str, rss: int, hwm: int, rep: int = 0, seconds: float = 0.0) -> None:
        run.add(
            Measurement(
                "memory",
                server.name,
                "pyarrow",
                op,
                1,
                rows,
                batch_rows,
                bytes=table.nbytes,
                seconds=seconds,
                rep=rep,
                rss_bytes=rss,
                hwm_bytes=hwm,
            )
        )

    record("rss_started", *server.memory())
    client = flight_client.connect(server.uri)
    try:
        flight_client.put(client, "memory", table, batch_rows, {"partitions": 1})
        record("rss_after_put", *server.memory())
        for rep in range(run.plan.reps):
            sampler = _MemorySampler(server)
            got = flight_client.timed_get([client], "memory")
            rss, hwm = sampler.stop()
            if got.rows != table.num_rows:
                raise RuntimeError(f"got {got.rows} rows, expected {table.num_rows}")
            del got
            record("rss", rss, hwm, rep)
        flight_client.delete(client, "memory")
        time.sleep(0.2)
        record("rss_after_delete", *server.memory())
    finally:
        client.close()


class _MemorySampler:
    """Samples a server's VmRSS every few milliseconds in a thread, until stopped."""

    INTERVAL_S = 0.01

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.peak = server.memory()[0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            with contextlib.suppress(OSError):
                self.peak = max(self.peak, self.server.memory()[0])

    def stop(self) -> tuple[int, int]:
        """Stop sampling; return the largest VmRSS seen and the VmHWM now."""
        self._stop.set()
        self._thread.join()
        rss, hwm = self.server.memory()
        return max(self.peak, rss), hwm


# --- Rust client ------------------------------------------------------------------------------


def run_rust(run: Run) -> None:
    """``quiver bench client`` (arrow-rs) over the grid and the headline, against each server."""
    if not run.quiver_bench:
        run.note("Rust client skipped: quiver bench not available")
        return
    plan = run.plan
    shapes = [("rust", *shape) for shape in plan.grid()]
    shapes.append(("headline", 1, plan.headline_rows, plan.batch_rows))
    for op in ("get", "put"):
        for suite, streams, rows, batch_rows in shapes:
            log(f"rust {op}: {_shape_text(streams, rows, batch_rows)}")
            for server in run.servers_alive():
                what = f"rust {op} {server.name} {_shape_text(streams, rows, batch_rows)}"
                with run.attempt(what):
                    lines = rust_client.measure(
                        run.binary, server.uri, op, streams, rows, batch_rows, plan.reps
                    )
                    odd_endpoints = set()
                    for line in lines:
                        endpoints = line.get("endpoints")
                        note = ""
                        if op == "get" and endpoints is not None and endpoints != streams:
                            note = f"{endpoints} endpoint(s)"
                            odd_endpoints.add(endpoints)
                        run.add(
                            Measurement(
                                suite,
                                server.name,
                                "rust",
                                op,
                                streams,
                                rows,
                                batch_rows,
                                bytes=line["bytes"],
                                seconds=line["seconds"],
                                rep=line.get("rep", 0),
                                endpoints=endpoints,
                                note=note,
                            )
                        )
                    if odd_endpoints:
                        run.note(
                            f"rust get from {server.name}, {streams} streams: the server split "
                            f"the table into {sorted(odd_endpoints)} endpoint(s), not {streams} "
                            "(it did not see the partitions option); excluded from the ratios"
                        )
                with run.attempt(f"rust cleanup {server.name}"):
                    client = flight_client.connect(server.uri)
                    for name in rust_client.table_names(op, streams):
                        flight_client.delete(client, name)
                    client.close()


# --- small objects ----------------------------------------------------------------------------


def run_small(run: Run) -> None:
    """Latency of GetFlightInfo + DoGet of a 1 KiB table, one get at a time."""
    plan = run.plan
    alive = run.servers_alive()
    table = data.records(plan.small_rows, plan.small_rows)
    clients = {}
    for server in alive:
        with run.attempt(f"small put {server.name}"):
            client = flight_client.connect(server.uri)
            flight_client.put(client, "small", table, plan.small_rows, {"partitions": 1})
            for _ in range(10):  # warm up
                flight_client.timed_get([client], "small")
            clients[server.name] = client
    log(f"small: {plan.small_gets} gets of a {table.nbytes} B table per server")
    for rep in range(plan.small_gets):
        for server in _order([s for s in alive if s.name in clients], rep):
            with run.attempt(f"small get {server.name}"):
                got = flight_client.timed_get([clients[server.name]], "small")
                run.add(
                    Measurement(
                        "small",
                        server.name,
                        "pyarrow",
                        "get",
                        1,
                        plan.small_rows,
                        plan.small_rows,
                        bytes=table.nbytes,
                        seconds=got.seconds,
                        rep=rep,
                        ttfb_seconds=got.ttfb_seconds,
                        endpoints=got.endpoints,
                    )
                )
    for client in clients.values():
        flight_client.delete(client, "small")
        client.close()


# --- bytes stored and sent --------------------------------------------------------------------

#: The query whose result the ``bytes`` suite counts, per table, through quiver's Flight SQL.
BYTES_LIMIT_QUERY = "SELECT c FROM {table} LIMIT 3"


def run_bytes(run: Run) -> None:
    """Bytes each server stores and sends for one column of each kind, against its Arrow size.

    A server that keeps what it was given as it came can hold, and send back, far more
    than the rows need: a slice of an array keeps every buffer of the array, and the IPC
    writer cannot trim a ``string_view`` slice's data buffers, so each of ten slices of one
    ``string_view`` array travels with all of its data. For each kind of
    :data:`bench.data.BYTES_KINDS` (``Plan.bytes_rows`` rows), the table is put by pyarrow's
    DoPut with its batches as they are into quiver and the Arrow C++ peer; then, per server,
    the bytes stored (FlightInfo ``total_bytes``) and the bytes a pyarrow DoGet of the whole
    table received (``get_total_buffer_size()`` of each batch, summed: a buffer several
    batches share, a dictionary, counts once per batch; also each buffer once,
    ``sent_once``), and for quiver the bytes of a 3-row ``LIMIT`` through Flight SQL, each
    against the tight Arrow size of the same rows (``pa.table({"c": array}).nbytes`` of a
    fresh array of their values). The values received are checked against those put.
    Sizes, not times: one measurement each.
    """
    rows = run.plan.bytes_rows
    alive = run.servers_alive()
    log(f"bytes: {len(data.BYTES_KINDS)} column kinds of {rows:,} rows, stored and sent")
    for kind in data.BYTES_KINDS:
        with run.attempt(f"bytes {kind}"):
            _measure_bytes(run, kind, rows, alive)


def _bytes_table_name(kind: str) -> str:
    return "bytes_" + kind.replace(" ", "_")


#: How a ``bytes`` row is recorded: ``(op, server, bytes, rows=..., **columns)``.
_BytesRecord = Callable[..., None]


def _decoded(array: pa.Array) -> pa.Array:
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


class _SameRows:
    """Checks, batch by batch, that a DoGet brings ``column``'s values back in order.

    A dictionary is compared by its values (a server may rebuild it); a batch of another
    type than ``column``'s is cast to it first (the type is noted apart).
    """

    def __init__(self, column: pa.Array) -> None:
        self.want = _decoded(column)
        self.offset = 0
        self.types: set[pa.DataType] = set()
        self.differs = False

    def __call__(self, batch: pa.RecordBatch) -> None:
        got = batch.column(0)
        self.types.add(got.type)
        got = _decoded(got)
        expected = self.want.slice(self.offset, len(got))
        self.offset += len(got)
        try:
            same = got.cast(expected.type).equals(expected)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            same = False
        self.differs = self.differs or not same


def _measure_bytes(run: Run, kind: str, rows: int, alive: list[ServerProcess]) -> None:
    """Put ``kind``'s table into every server; record its Arrow size, stored and sent bytes."""
    column = data.bytes_column(kind, data.bytes_values(kind, rows))
    table = data.bytes_table(kind, column)
    batch_rows = max(b.num_rows for b in table.to_batches())
    name = _bytes_table_name(kind)

    def record(op: str, server: str, nbytes: int, count: int = rows, **extra: object) -> None:
        run.add(
            Measurement(
                "bytes", server, PYARROW, f"{op}:{kind}", 1, count, batch_rows,
                bytes=nbytes, **extra,  # type: ignore[arg-type]
            )
        )  # fmt: skip

    record("arrow", "", pa.table({"c": column}).nbytes)
    for server in alive:
        with run.attempt(f"bytes {kind} {server.name}"):
            client = flight_client.connect(server.uri)
            try:
                # The batches as they are: none cut further (max_chunksize, the largest).
                flight_client.put(client, name, table, batch_rows)
                info = client.get_flight_info(flight_client.descriptor(name))
                if info.total_bytes is not None and info.total_bytes >= 0:
                    record("stored", server.name, info.total_bytes)
                else:
                    run.note(f"bytes: {server.name}'s FlightInfo reports no total_bytes")
                check = _SameRows(column)
                got = flight_client.received(client, info, check)
                if got.rows != rows or check.differs:
                    raise RuntimeError(f"{server.name} sent back {got.rows} rows, not those put")
                note = _type_note(run, kind, server.name, check.types, column.type)
                record(
                    "sent", server.name, got.buffer_bytes, ops=got.batches,
                    endpoints=got.endpoints, note=note,
                )  # fmt: skip
                record("sent_once", server.name, got.distinct_bytes, ops=got.batches, note=note)
                if server.name == QUIVER:
                    _record_limit(run, kind, client, column, record)
            finally:
                flight_client.delete(client, name)
                client.close()


def _type_note(run: Run, kind: str, server: str, types: set[pa.DataType], want: pa.DataType) -> str:
    """Return a row's note when a server sent another type than it was given (noted too)."""
    other = sorted(str(t) for t in types if t != want)
    if not other:
        return ""
    run.note(f"bytes {kind}: {server} sent the column as {', '.join(other)}, not {want}")
    return f"sent as {', '.join(other)}"


def _record_limit(
    run: Run, kind: str, client: flight.FlightClient, column: pa.Array, record: _BytesRecord
) -> None:
    """Run the 3-row ``LIMIT`` through quiver's Flight SQL; record its bytes and tight size."""
    query = BYTES_LIMIT_QUERY.format(table=_bytes_table_name(kind))
    info = client.get_flight_info(sql_clients.flight_sql_descriptor(query))
    batches: list[pa.RecordBatch] = []
    got = flight_client.received(client, info, batches.append)
    if got.rows != 3:
        raise RuntimeError(f"{query!r} returned {got.rows} rows, not 3")
    types = {b.column(0).type for b in batches}
    note = _type_note(run, kind, QUIVER, types, column.type)
    values = [v for b in batches for v in _decoded(b.column(0)).to_pylist()]
    tight = data.bytes_column(kind, values)
    record("arrow_limit3", "", pa.table({"c": tight}).nbytes, count=3)
    record(
        "limit3", QUIVER, got.buffer_bytes, count=3, ops=got.batches, endpoints=got.endpoints,
        note=note,
    )  # fmt: skip


# --- JSON over a socket -----------------------------------------------------------------------


def run_json(run: Run) -> None:
    """Compare, as the blog did, a mixed table as JSON over a socket and over Flight."""
    if run.json_server is None:
        run.note("JSON comparison skipped: the JSON peer did not start")
        return
    port = int(run.json_server.uri.rsplit(":", 1)[1])
    for rows in run.plan.json_rows:
        log(f"json: {rows:,} rows of a mixed table")
        table = data.mixed_table(rows)
        clients = {}
        for server in run.servers_alive():
            with run.attempt(f"json put {server.name}"):
                client = flight_client.connect(server.uri)
                flight_client.put(client, "mixed", table, 64 * 1024, {"partitions": 1})
                clients[server.name] = client
        json_socket.fetch(port, rows, prepare=True)
        for rep in range(run.plan.reps):
            for name in _order([JSON_SOCKET, *clients], rep):
                with run.attempt(f"json {name} {rows} rows"):
                    if name == JSON_SOCKET:
                        _json_get(run, port, table, rows, rep)
                    else:
                        _flight_get_pandas(run, name, clients[name], table, rows, rep)
        for client in clients.values():
            flight_client.delete(client, "mixed")
            client.close()


def _json_get(run: Run, port: int, table: pa.Table, rows: int, rep: int) -> None:
    started = time.perf_counter()
    body, first_byte_at = json_socket.fetch(port, rows)
    frame = pd.read_json(io.BytesIO(body), orient="records")
    seconds = time.perf_counter() - started
    if len(frame) != rows:
        raise RuntimeError(f"got {len(frame)} rows, expected {rows}")
    run.add(
        Measurement(
            "json",
            JSON_SOCKET,
            "socket",
            "get+to_pandas",
            1,
            rows,
            rows,
            bytes=table.nbytes,
            seconds=seconds,
            rep=rep,
            ttfb_seconds=first_byte_at - started,
            wire_bytes=len(body),
        )
    )


def _flight_get_pandas(
    run: Run, server: str, client: flight.FlightClient, table: pa.Table, rows: int, rep: int
) -> None:
    started = time.perf_counter()
    got = flight_client.timed_get([client], "mixed", keep=True)
    assert got.table is not None
    frame = got.table.to_pandas()
    seconds = time.perf_counter() - started
    if len(frame) != rows:
        raise RuntimeError(f"got {len(frame)} rows, expected {rows}")
    run.add(
        Measurement(
            "json",
            server,
            "pyarrow",
            "get+to_pandas",
            1,
            rows,
            rows,
            bytes=table.nbytes,
            seconds=seconds,
            rep=rep,
            ttfb_seconds=got.ttfb_seconds,
        )
    )


# --- query results into pandas (the paper's Figure 8) ------------------------------------------

#: The Python packages of the sql suite's clients, whose versions the report shows.
SQL_PACKAGES = (
    "adbc-driver-flightsql",
    "adbc-driver-postgresql",
    "psycopg",
    "pyodbc",
    "duckdb",
)


def run_sql(run: Run) -> None:
    """Time ``SELECT *`` of a taxi table into a pandas DataFrame, per client and size.

    Every size is a table of its own (``taxi_1m``...), stored in quiver and the Arrow C++
    peer by a plain DoPut, loaded into a PostgreSQL server started for this suite, and
    written to a Parquet file for DuckDB; each client then fetches all of it, the clients
    taking turns within a repetition (their order alternating).
    """
    # Fresh servers: the get and put suites leave the Arrow C++ peer holding gigabytes
    # its allocator does not return, and the 16M-row fetches need that memory.
    run.restart_flight_servers()
    for package in SQL_PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            run.software[package] = importlib.metadata.version(package)
    odbc = sql_clients.odbc_driver()
    if odbc is None:
        run.note("sql: ODBC not measured: psqlODBC is not installed (scripts/install-postgres.sh)")
    with contextlib.ExitStack() as stack:
        pg = _start_postgres(run)
        if pg is not None:
            stack.callback(_stop_postgres, run, pg)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quiver-sql-")))
        for rows in run.plan.sql_rows:
            _measure_sql(run, rows, pg, odbc, workdir)


def _start_postgres(run: Run) -> postgres.PostgresServer | None:
    why = postgres.available()
    if why is not None:
        run.note(f"sql: PostgreSQL not measured: {why}")
        return None
    with run.attempt("sql: start PostgreSQL"):
        pg = postgres.start(run.log_dir)
        run.software["PostgreSQL"] = pg.version
        log(f"sql: PostgreSQL {pg.version} on 127.0.0.1:{pg.port}")
        return pg
    return None


def _stop_postgres(run: Run, pg: postgres.PostgresServer) -> None:
    code = pg.stop()
    if code != 0:
        run.note(f"PostgreSQL exited with code {code} at its stop; its log: {run.log_dir}")


def _sql_fetchers(
    run: Run,
    name: str,
    table: pa.Table,
    pg: postgres.PostgresServer | None,
    odbc: str | None,
    workdir: Path,
) -> list[sql_clients.Fetcher]:
    """Store ``table`` as ``name`` in every peer; return the fetchers of those that have it.

    Each fetcher runs its fetches in worker processes (:mod:`bench.sql_worker`).
    """
    batch_rows = run.plan.batch_rows
    clients: list[tuple[sql_clients.SqlPeer, str]] = []
    for server in run.servers_alive():
        with run.attempt(f"sql put {name} {server.name}"):
            client = flight_client.connect(server.uri)
            try:
                flight_client.put(client, name, table, batch_rows)
            finally:
                client.close()
            clients += sql_clients.flight_clients(server.name, server.uri)
    if pg is not None:
        with run.attempt(f"sql load {name} into PostgreSQL"):
            started = time.perf_counter()
            pg.load(name, table)
            log(f"sql: loaded {name} into PostgreSQL in {time.perf_counter() - started:.1f} s")
            clients += sql_clients.postgres_clients(pg, odbc)
    with run.attempt(f"sql write {name}.parquet"):
        sql_clients.DuckDBFetcher(workdir).write(name, table)
        clients.append((sql_clients.DUCKDB_PARQUET, str(workdir)))
    opened = []
    for peer, target in clients:
        warm_ups = 0 if peer.row_based else SQL_WARM_UPS
        fetcher = sql_worker.ProcessFetcher(peer, target, warm_ups)
        with run.attempt(f"sql connect {fetcher.peer.label}"):
            fetcher.open()
            opened.append(fetcher)
    return opened


def _drop_sql_table(run: Run, name: str, pg: postgres.PostgresServer | None, workdir: Path) -> None:
    for server in run.servers_alive():
        with run.attempt(f"sql delete {name} {server.name}"):
            client = flight_client.connect(server.uri)
            flight_client.delete(client, name)
            client.close()
    if pg is not None:
        with run.attempt(f"sql drop {name} in PostgreSQL"):
            pg.drop(name)
    sql_clients.DuckDBFetcher(workdir).remove(name)


def _measure_sql(
    run: Run,
    rows: int,
    pg: postgres.PostgresServer | None,
    odbc: str | None,
    workdir: Path,
) -> None:
    """Store the taxi table of ``rows`` rows in every peer, time each client's fetches of it.

    Every fetch runs in a worker process of its own, after untimed fetches of the same
    result in that worker for columnar clients (:class:`bench.sql_worker.ProcessFetcher`).
    """
    plan = run.plan
    name = taxi.table_name(rows)
    table = taxi.table(rows, plan.batch_rows)
    log(f"sql: SELECT * FROM {name} ({rows:,} rows, {table.nbytes / 2**20:,.0f} MiB) into pandas")
    fetchers = _sql_fetchers(run, name, table, pg, odbc, workdir)
    shape, nbytes = (rows, table.num_columns), table.nbytes
    del table  # every peer has its copy: leave the memory to the fetches
    gc.collect()
    try:
        measured = []
        for fetcher in fetchers:
            if fetcher.peer.row_based and rows > plan.sql_row_clients_max_rows:
                run.note(
                    f"sql: {fetcher.peer.label} not measured above "
                    f"{plan.sql_row_clients_max_rows:,} rows (a row-based client: a Python "
                    "object per value, minutes per repetition and over 10 GB at 16M rows)"
                )
            else:
                measured.append(fetcher)
        reps = [_sql_reps(plan, f, rows) for f in measured]
        for rep in range(max(reps, default=0)):
            taking_part = [f for f, n in zip(measured, reps, strict=True) if rep < n]
            for fetcher in _order(taking_part, rep):
                with run.attempt(f"sql {fetcher.peer.label} {rows:,} rows"):
                    _sql_fetch(run, fetcher, name, shape, nbytes, rep)
    finally:
        _drop_sql_table(run, name, pg, workdir)


# Columnar fetches of results up to this many rows take a tenth of a second, where one
# scheduling hiccup moves a median: they are repeated SMALL_RESULT_REP_FACTOR times as often.
SMALL_RESULT_ROWS = 2_000_000
SMALL_RESULT_REP_FACTOR = 3


#: Untimed fetches of the same result before each timed one of a columnar client, in the same
#: worker process. A fresh process's first two fetches of 16M taxi rows each faulted in
#: 550-930 thousand pages, the next ones 4-130 thousand (pyarrow.flight: 3.5-5.5 s, then
#: 2.4-3.2 s, then 1.4-3.4 s; ADBC: 4.8-5.4 s, then 8.9-9.1 s, then 2.3-3.2 s): the timed
#: fetch is the third. Row-based clients get none, which would triple the suite's longest
#: fetches: in a fresh process, ODBC's first fetch of 1M rows was no slower than the next two
#: (11.4 s then 12.8 and 12.5; 10.8 then 9.9 and 11.7), psycopg's 3-20% slower (7.35 s then
#: 6.14 and 6.98; 7.29 then 7.09 and 7.04). That favours quiver in psycopg's ratio by a few
#: percent (a fifth at most), against a goal it clears twice over (25x; measured 51-56x).
SQL_WARM_UPS = 2


def _sql_reps(plan: Plan, fetcher: sql_clients.Fetcher, rows: int) -> int:
    """Repetitions of ``fetcher`` at ``rows``: more for quick columnar fetches."""
    if fetcher.peer.row_based or rows > SMALL_RESULT_ROWS:
        return plan.sql_reps
    return plan.sql_reps * SMALL_RESULT_REP_FACTOR


def _sql_fetch(
    run: Run,
    fetcher: sql_clients.Fetcher,
    name: str,
    shape: tuple[int, int],
    nbytes: int,
    rep: int,
) -> None:
    """Time one fetch of table ``name`` and record it; its DataFrame must be ``shape``."""
    got = fetcher.fetch(name)
    if (got.rows, got.columns) != shape:
        raise RuntimeError(
            f"got a DataFrame of {got.rows} x {got.columns}, expected {shape[0]} x {shape[1]}"
        )
    rows = shape[0]
    peer = fetcher.peer
    run.add(
        Measurement(
            "sql",
            peer.server,
            peer.client,
            peer.op,
            1,
            rows,
            run.plan.batch_rows,
            bytes=nbytes,
            seconds=got.seconds,
            rep=rep,
            ttfb_seconds=got.ttfb_seconds,
            endpoints=got.endpoints,
            hwm_bytes=got.peak_rss_bytes,
        )
    )


# --- Shared memory ----------------------------------------------------------------------------


def run_shm(run: Run) -> None:
    """Time gets and puts of the same table by the same client over shared memory and gRPC.

    The quiver client with ``transport="shm"`` against ``transport="grpc"``, both to quiver,
    taking turns within each repetition; each client's puts come back to back
    (``Plan.shm_puts_in_a_row``), each replacing the last. Each result is checked equal to
    the table once. Also the server's RSS after one reader and after eight readers holding
    the table.
    """
    import quiver

    server = next((s for s in run.servers_alive() if s.name == QUIVER), None)
    if server is None:
        run.note("shm: quiver is not running")
        return
    clients = {
        "pyarrow-shm": quiver.connect(server.uri, transport="shm"),
        "pyarrow-grpc": quiver.connect(server.uri, transport="grpc"),
    }
    try:
        for nbytes in run.plan.shm_bytes:
            rows = nbytes // data.RECORD_BYTES
            table = data.records(rows, run.plan.batch_rows)
            log(f"shm: {table.nbytes / 2**20:,.0f} MiB, {rows:,} rows")
            with run.attempt(f"shm {rows:,} rows"):
                _measure_shm(run, server, clients, table)
            del table
            gc.collect()
    finally:
        for client in clients.values():
            client.close()


def _measure_shm(run: Run, server: ServerProcess, clients: dict, table: pa.Table) -> None:
    rows, batch_rows, nbytes = table.num_rows, run.plan.batch_rows, table.nbytes
    name = "shm_table"

    def record(client: str, op: str, seconds: float, rep: int) -> None:
        run.add(
            Measurement(
                "shm",
                QUIVER,
                client,
                op,
                1,
                rows,
                batch_rows,
                bytes=nbytes,
                seconds=seconds,
                rep=rep,
            )
        )

    in_a_row = run.plan.shm_puts_in_a_row
    for rep in range(run.plan.reps):
        for label, client in _order_items(clients, rep):
            # Back to back, each replacing the version the one before stored, as a
            # client refreshing a table does: a put pays for whatever the one before left
            # under way (the free of the version it replaced), and its fresh pages are
            # those just freed or others.
            for i in range(in_a_row):
                started = time.perf_counter()
                client.put(name, table)
                record(label, "put", time.perf_counter() - started, rep * in_a_row + i)
        # The first shm get of a version put over gRPC writes the version into its
        # memfd (once per version); later ones, and those of a version put over shm,
        # only map it.
        clients["pyarrow-grpc"].put(name, table)
        started = time.perf_counter()
        got = clients["pyarrow-shm"].get(name)
        record("pyarrow-shm", "get_first", time.perf_counter() - started, rep)
        del got
        gc.collect()
        for label, client in _order_items(clients, rep):
            started = time.perf_counter()
            got = client.get(name)
            record(label, "get", time.perf_counter() - started, rep)
            if rep == 0 and not got.equals(table):
                raise RuntimeError(f"{label}: the table read back differs from the one put")
            del got
            gc.collect()
    # The server's memory with one and with eight readers holding the table.
    shm = clients["pyarrow-shm"]
    shm.put(name, table)
    held = [shm.get(name)]
    one = server.memory()[0]
    held += [shm.get(name) for _ in range(7)]
    eight = server.memory()[0]
    run.add(
        Measurement(
            "shm",
            QUIVER,
            "pyarrow-shm",
            "rss_1_reader",
            1,
            rows,
            batch_rows,
            bytes=nbytes,
            seconds=0.0,
            rep=0,
            rss_bytes=one,
        )
    )
    run.add(
        Measurement(
            "shm",
            QUIVER,
            "pyarrow-shm",
            "rss_8_readers",
            1,
            rows,
            batch_rows,
            bytes=nbytes,
            seconds=0.0,
            rep=0,
            rss_bytes=eight,
        )
    )
    del held
    gc.collect()
    clients["pyarrow-grpc"].delete(name)


def _order_items(clients: dict, rep: int) -> list:
    items = list(clients.items())
    return items if rep % 2 == 0 else items[::-1]


#: The suites by name, in the order they run.
# --- Soak -------------------------------------------------------------------------------------


def run_soak(run: Run) -> None:
    """Many clients mixing puts, gets, listings and deletes on a fresh quiver (bench/soak.py).

    The server is started for this alone, so its RSS before, at the peak and after every
    table is deleted is the soak's own.
    """
    plan = run.plan
    log(f"soak: {plan.soak_clients} clients for {plan.soak_seconds:.0f} s")
    server = servers.start_quiver(run.binary, run.log_dir / "soak")
    try:
        outcome = soak.run(
            server.uri, server.pid, plan.soak_seconds, plan.soak_clients, plan.soak_rows
        )
    finally:
        code = server.stop()
    if code != 0:
        run.note(f"quiver (soak suite) exited with code {code} after SIGTERM")
    if outcome.errors:
        run.note(f"soak: {len(outcome.errors)} errors, the first: {outcome.errors[0]}")

    def record(op: str, **values: object) -> None:
        run.add(
            Measurement(
                "soak",
                QUIVER,
                "pyarrow",
                op,
                plan.soak_clients,
                plan.soak_rows,
                plan.soak_rows,
                **values,  # type: ignore[arg-type]
            )
        )

    record(
        "all",
        seconds=outcome.seconds,
        ops=outcome.ops,
        errors=len(outcome.errors),
        p99_seconds=outcome.percentile_ms(99) / 1000,
    )
    for op, latencies in sorted(outcome.latencies_ms.items()):
        record(
            op,
            seconds=outcome.percentile_ms(50, op) / 1000,
            ops=len(latencies),
            p99_seconds=outcome.percentile_ms(99, op) / 1000,
        )
    for op, rss in [
        ("rss_before", outcome.rss_before),
        ("rss_peak", outcome.rss_peak),
        ("rss_after_deletes", outcome.rss_after),
    ]:
        record(op, rss_bytes=rss)


# --- Functions: the XGBatch scenario ------------------------------------------------------------

#: Longest a scoring client worker may take to start (making its rows) or to answer one call
#: (the JSON service's 2,000 requests of 1,000 rows in full mode take about a minute).
FUNCTIONS_TIMEOUT_S = 900.0
#: Rows per request of the two latency measurements.
FUNCTIONS_LATENCY_ROWS = (1, 1000)
#: Untimed requests of 1,000 rows each peer answers before its first bulk repetition (a
#: quiver server holds calls until its workers have loaded the model).
FUNCTIONS_WARM_UPS = 5
#: How far a peer's checksum of its scores may be from the in-process one, relatively (the
#: same booster scores the same rows identically: any difference is a wrong or moved score).
FUNCTIONS_CHECK_TOLERANCE = 1e-9


@dataclass
class FunctionsPeer:
    """One peer of the ``functions`` suite: its label, server (if any) and client worker.

    Attributes
    ----------
    label : str
        The ``server`` column (:data:`bench.results.IN_PROCESS`...).
    client : str
        The ``client`` column: ``in-process``, ``pyarrow`` or ``http-json``.
    rows : int
        Rows of each bulk repetition.
    server : ServerProcess or None
        The scoring server (none in process).
    worker : workers.Worker or None
        The client's worker process, once started.
    latency : bool
        Whether its request latencies are measured.
    """

    label: str
    client: str
    rows: int
    server: ServerProcess | None = None
    worker: workers.Worker | None = None
    latency: bool = True


def run_functions(run: Run) -> None:
    """Score the same rows with the same xgboost model through every peer (XGBatch).

    The harness trains the booster once (in a worker process) and saves it to a temporary
    file that every peer loads: the client's own process (the limit, one thread and all
    of xgboost's), the XGBatch-style pyarrow Flight server, the FastAPI JSON service, and
    quiver serving ``bench.peers.quiver_scoring`` with 1 and 2 workers, each server a
    process of its own. Each peer's client is a worker process (:mod:`bench.scoring`).
    Bulk repetitions alternate between the peers; the CPU time of the server, of quiver's
    workers and of the client is read from ``/proc`` around each. Then each peer's
    latency: sequential requests of 1 and of 1,000 rows. Last, with the scoring servers
    stopped, SQL over a stream against the echo (:func:`_functions_sql_stream`).
    """
    plan = run.plan
    log_dir = run.log_dir / "functions"
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quiver-functions-")))
        model = tmp / "xgbatch.ubj"
        log(
            f"functions: training the booster ({xgbatch.TREES} trees of depth "
            f"{xgbatch.DEPTH} on {xgbatch.TRAIN_ROWS:,} rows)"
        )
        started = time.perf_counter()
        workers.Worker(
            "xgbatch training", xgbatch.train, (str(model),), FUNCTIONS_TIMEOUT_S
        ).close()
        log(f"functions: trained in {time.perf_counter() - started:.1f} s")
        peers = _functions_peers(run, stack, model, log_dir)
        for peer in peers:
            _start_scoring_client(run, stack, peer, model)
        peers = [p for p in peers if p.worker is not None]
        log(
            f"functions: {plan.functions_rows:,} rows ({plan.functions_json_rows:,} for JSON) "
            f"through {', '.join(p.label for p in peers)}"
        )
        expected: dict[int, float] = {}
        for rep in range(plan.reps):
            for peer in _order(peers, rep):
                with run.attempt(f"functions bulk {peer.label}"):
                    checks = _functions_bulk(run, peer, rep)
                    if peer.label == IN_PROCESS:
                        for count, check in checks.items():
                            expected.setdefault(count, check)
                    for count, check in checks.items():
                        want = expected.get(count)
                        if want is not None and not math.isclose(
                            check, want, rel_tol=FUNCTIONS_CHECK_TOLERANCE
                        ):
                            raise RuntimeError(
                                f"{peer.label}'s scores differ from the in-process ones, or "
                                f"come in another order: the checksum of the first {count:,} "
                                f"is {check:.6f}, not {want:.6f}"
                            )
        for rows in FUNCTIONS_LATENCY_ROWS:
            log(
                f"functions: latency of {rows:,}-row requests, {plan.functions_calls:,} per "
                f"peer after {plan.functions_warm_ups:,} untimed"
            )
            for peer in peers:
                if peer.latency:
                    with run.attempt(f"functions latency {peer.label} {rows} rows"):
                        _functions_latency(run, peer, rows)
    with run.attempt("functions: SQL over a stream"):
        _functions_sql_stream(run, log_dir)


def _functions_peers(
    run: Run, stack: contextlib.ExitStack, model: Path, log_dir: Path
) -> list[FunctionsPeer]:
    """Start the scoring servers; return every peer (one whose server failed is left out)."""
    plan = run.plan
    rows, threads = plan.functions_rows, os.cpu_count() or 1
    peers = [
        FunctionsPeer(IN_PROCESS, "in-process", rows),
        FunctionsPeer(IN_PROCESS_THREADS, "in-process", rows, latency=False),
    ]
    starters = [
        (PYARROW_FLIGHT, "pyarrow", rows, lambda: servers.start_xgbatch_server(log_dir, model)),
        (
            FASTAPI_JSON,
            "http-json",
            min(rows, plan.functions_json_rows),
            lambda: servers.start_json_scoring(log_dir, model),
        ),
    ]
    for label, workers_ in ((QUIVER_1_WORKER, 1), (QUIVER_2_WORKERS, 2)):
        starters.append(
            (
                label,
                "pyarrow",
                rows,
                lambda label=label, n=workers_: servers.start_quiver_functions(
                    run.binary, log_dir, label, n, model
                ),
            )
        )
    for label, client, count, start in starters:
        with run.attempt(f"functions: start {label}"):
            server = start()
            stack.callback(_stop_functions_server, run, server)
            peers.append(FunctionsPeer(label, client, count, server))
    if threads == 1:
        peers = [p for p in peers if p.label != IN_PROCESS_THREADS]
    return peers


def _stop_functions_server(run: Run, server: ServerProcess) -> None:
    code = server.stop()
    if code != 0:
        run.note(f"{server.name} (functions suite) exited with code {code} after SIGTERM")


def _start_scoring_client(
    run: Run, stack: contextlib.ExitStack, peer: FunctionsPeer, model: Path
) -> None:
    """Start the client worker of ``peer`` and warm the peer up with a few requests."""
    with run.attempt(f"functions: client of {peer.label}"):
        if peer.server is None:
            kind, target = "in-process", str(model)
            threads = 1 if peer.label == IN_PROCESS else os.cpu_count() or 1
        else:
            kind = "json" if peer.client == "http-json" else "flight"
            target, threads = peer.server.uri, 1
        worker = workers.Worker(
            f"functions, client of {peer.label}",
            scoring.ScoringClient,
            (kind, target, peer.rows, threads),
            FUNCTIONS_TIMEOUT_S,
        )
        stack.enter_context(worker)
        worker.call("latency", 1000, 0, FUNCTIONS_WARM_UPS)
        peer.worker = worker


def _functions_bulk(run: Run, peer: FunctionsPeer, rep: int) -> dict[int, float]:
    """Time one bulk repetition of ``peer`` and its CPU; record them; return its checks.

    The checks are :func:`bench.scoring.checksum` of the scores, by how many first rows
    each covers.
    """
    assert peer.worker is not None
    server = peer.server
    quiver = peer.label in (QUIVER_1_WORKER, QUIVER_2_WORKERS)

    def cpu() -> tuple[float, dict[int, float], float]:
        assert peer.worker is not None
        return (
            scoring.cpu_seconds(server.pid) if server is not None else 0.0,
            scoring.cpu_of_children(server.pid) if server is not None and quiver else {},
            scoring.cpu_seconds(peer.worker.pid),
        )

    before = cpu()
    got = peer.worker.call("bulk")
    after = cpu()
    nbytes = peer.rows * xgbatch.ROW_BYTES

    def record(op: str, seconds: float) -> None:
        run.add(
            Measurement(
                "functions",
                peer.label,
                peer.client,
                op,
                1,
                peer.rows,
                xgbatch.BATCH_ROWS,
                bytes=nbytes,
                seconds=seconds,
                rep=rep,
            )
        )

    record("bulk", got["seconds"])
    if server is not None:
        record("cpu_server", after[0] - before[0])
    if quiver:
        record("cpu_workers", sum(t - before[1].get(pid, 0.0) for pid, t in after[1].items()))
    record("cpu_client", after[2] - before[2])
    return {int(count): float(check) for count, check in got["checks"].items()}


def _functions_latency(run: Run, peer: FunctionsPeer, rows: int) -> None:
    """Time ``peer``'s sequential requests of ``rows`` rows; record p50 and p99."""
    assert peer.worker is not None
    plan = run.plan
    times = peer.worker.call("latency", rows, plan.functions_calls, plan.functions_warm_ups)
    run.add(
        Measurement(
            "functions",
            peer.label,
            peer.client,
            "latency",
            1,
            rows,
            rows,
            bytes=rows * xgbatch.ROW_BYTES,
            seconds=percentile(times, 50),
            ops=len(times),
            p99_seconds=percentile(times, 99),
        )
    )


#: How often the harness reads the server's ``quiver_memory_used_bytes`` during a stream.
MEMORY_POLL_S = 0.01
#: The gauge of the memory quiver's pool holds (``--max-memory``), from its /metrics.
MEMORY_USED_METRIC = "quiver_memory_used_bytes"


def _functions_sql_stream(run: Run, log_dir: Path) -> None:
    """Time SQL over a stream against the echo of the same stream, on a fresh quiver.

    The server is capped at ``Plan.functions_stream_max_memory`` (``--max-memory``) and
    gets ``Plan.functions_stream_bytes`` per stream, several times its cap, so a server
    that held the stream would refuse it; the harness polls its ``/metrics`` for the peak
    of ``quiver_memory_used_bytes`` during each stream. A server that answers SQL over a
    stream with ``UNIMPLEMENTED`` gets its echo measured and the SQL rows recorded as not
    available (a note on each row), not as a failure.
    """
    plan = run.plan
    server = servers.start_quiver_stream(run.binary, log_dir, plan.functions_stream_max_memory)
    try:
        metrics = server.metrics_url()
        with workers.Worker(
            "functions, stream client", scoring.StreamClient, (server.uri,), FUNCTIONS_TIMEOUT_S
        ) as worker:
            ops: dict[str, str | None] = {FUNCTIONS_STREAM_ECHO: None}
            # A probe that fails otherwise is a failure of the SQL rows only: the echo is
            # still measured.
            unavailable: str | None = ""
            with run.attempt("functions: SQL over a stream, a first small statement"):
                unavailable = worker.call("probe", FUNCTIONS_STREAM_SQL["stream_filter"])
            if unavailable is None:
                ops.update(FUNCTIONS_STREAM_SQL)
            elif unavailable:
                for op in FUNCTIONS_STREAM_SQL:
                    run.add(
                        Measurement(
                            "functions", QUIVER, "pyarrow", op, 1, 0, xgbatch.BATCH_ROWS,
                            note=f"not available: {unavailable}",
                        )
                    )  # fmt: skip
                run.note(
                    "functions: SQL over a stream is not available from this server "
                    f"(it answered UNIMPLEMENTED: {unavailable}); its echo was measured alone"
                )
            log(
                f"functions: SQL over a stream, {_size(plan.functions_stream_bytes)} per "
                f"stream through a quiver of --max-memory "
                f"{_size(plan.functions_stream_max_memory)}: {', '.join(ops)}"
            )
            worker.call("stream", None, plan.functions_stream_bytes // 8)  # warm-up
            for rep in range(plan.reps):
                for op in _order(list(ops), rep):
                    with run.attempt(f"functions {op}"):
                        _functions_stream(run, worker, server, metrics, op, ops[op], rep)
    finally:
        code = server.stop()
        if code != 0:
            run.note(f"{server.name} (functions suite) exited with code {code} after SIGTERM")


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:g} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:g} MiB"


def _functions_stream(
    run: Run,
    worker: workers.Worker,
    server: ServerProcess,
    metrics: str,
    op: str,
    sql: str | None,
    rep: int,
) -> None:
    """Time one stream through ``sql`` (``None``: the echo) and record it with its peak."""
    peak = [0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError, ValueError):
                peak[0] = max(peak[0], _memory_used(metrics))
            done.wait(MEMORY_POLL_S)

    poller = threading.Thread(target=poll, name="memory poll", daemon=True)
    poller.start()
    try:
        got = worker.call("stream", sql, run.plan.functions_stream_bytes)
    finally:
        done.set()
        poller.join()
    run.add(
        Measurement(
            "functions",
            QUIVER,
            "pyarrow",
            op,
            1,
            int(got["rows"]),
            xgbatch.BATCH_ROWS,
            bytes=int(got["bytes"]),
            seconds=float(got["seconds"]),
            rep=rep,
            wire_bytes=int(got["bytes_out"]),
            rss_bytes=peak[0],
            hwm_bytes=_hwm(server),
        )
    )


def _hwm(server: ServerProcess) -> int | None:
    """Return the server's ``VmHWM`` (its peak RSS since it started), or ``None``."""
    try:
        return server.memory()[1]
    except OSError:
        return None


def _memory_used(metrics: str) -> int:
    """Return the server's ``quiver_memory_used_bytes`` now, from its ``/metrics``."""
    with urllib.request.urlopen(metrics, timeout=5) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith(MEMORY_USED_METRIC + " ") or line.startswith(MEMORY_USED_METRIC + "{"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise ValueError(f"no {MEMORY_USED_METRIC} in {metrics}")


# --- Engines: Spark, Dask and Ray through quiver (the paper's Figure 10) -----------------------


@dataclass(frozen=True)
class EnginePeer:
    """One read or write of the ``engines`` suite: an engine and a source or sink.

    Attributes
    ----------
    engine : str
        ``spark``, ``dask`` or ``ray`` (the ``client`` column).
    op : str
        ``read`` (read and aggregate) or ``write`` (Spark's cached rows, mode overwrite).
    server : str
        The source or sink: ``quiver``, ``postgresql``, ``parquet``, ``spark-cache``.
    endpoints : int
        Its endpoints (quiver), JDBC connections (PostgreSQL) or files (Parquet).
    spec : dict
        What :meth:`bench.engines.EngineClient.read` or ``write`` is given.
    """

    engine: str
    op: str
    server: str
    endpoints: int
    spec: dict = field(hash=False, compare=False)

    @property
    def label(self) -> str:
        """Say which peer this is, for logs and notes."""
        return f"{self.engine} {self.op} {self.server} ({self.endpoints})"


@dataclass
class EnginesSetup:
    """What the engines suite stored where, and how to check what the engines did."""

    rows: int
    nbytes: int
    expected: engines.Expected
    endpoints: int
    quiver: ServerProcess
    parquet: Path
    log_dir: Path
    pg: postgres.PostgresServer | None = None
    jar: Path | None = None
    spark_jars: str | None = None
    #: The JDK 22+ the JVM connector's Spark runs on, which reads shared memory; ``None``:
    #: the ``java`` on the ``PATH``, over gRPC.
    jvm_home: Path | None = None

    def server_pid(self, server: str) -> int | None:
        """Return the process whose tree serves ``server`` (``None``: the engine alone)."""
        if server in (QUIVER, QUIVER_GRPC):
            return self.quiver.pid
        if server == POSTGRESQL and self.pg is not None:
            return self.pg.process.pid
        return None


def _engine_peers(engine: str, endpoints: int, jdbc: bool, jvm_shm: bool) -> list[EnginePeer]:
    """Return ``engine``'s reads (and Spark's writes), quiver's first.

    quiver is read with the connectors' default transport (shared memory, on this host)
    through 1 and N endpoints, and through N over gRPC, as a server elsewhere is. The JVM
    connector reads shared memory on Java 22+ alone (``jvm_shm``; else every read of it is
    over gRPC) and writes over gRPC: it has one quiver write.
    """
    many = {"kind": QUIVER, "table": engines.TRIPS_MANY}
    grpc = engine != SPARK_JVM
    reads = [
        EnginePeer(engine, "read", QUIVER, 1, {"kind": QUIVER, "table": engines.TRIPS_ONE}),
        EnginePeer(engine, "read", QUIVER, endpoints, many),
    ]
    if grpc or jvm_shm:
        reads.append(
            EnginePeer(engine, "read", QUIVER_GRPC, endpoints, {**many, "transport": "grpc"})
        )
    if engine in engines.SPARKS and jdbc:
        reads += [
            EnginePeer(engine, "read", POSTGRESQL, n, {"kind": POSTGRESQL, "partitions": n})
            for n in (1, engines.JDBC_PARTITIONS)
        ]
    reads.append(EnginePeer(engine, "read", PARQUET, endpoints, {"kind": PARQUET}))
    if engine not in engines.SPARKS:
        return reads
    reads.append(EnginePeer(engine, "read", SPARK_CACHE, endpoints, {"kind": SPARK_CACHE}))
    written = {"kind": QUIVER, "table": engines.WRITTEN}
    writes = [EnginePeer(engine, "write", QUIVER, endpoints, written)]
    if grpc:
        writes.append(
            EnginePeer(engine, "write", QUIVER_GRPC, endpoints, {**written, "transport": "grpc"})
        )
    if jdbc:
        writes.append(
            EnginePeer(
                engine,
                "write",
                POSTGRESQL,
                endpoints,
                {"kind": POSTGRESQL, "table": engines.WRITTEN},
            )
        )
    return reads + writes


def run_engines(run: Run) -> None:
    """Read the taxi table into Spark, Dask and Ray through quiver and through their peers.

    The paper's Figure 10. The harness generates the taxi table once, stores it in a quiver
    started for this suite with 1 and with N endpoints (``Plan.engines_endpoints``), writes
    it to a Parquet directory of N files, and loads it into a PostgreSQL server started for
    the suite (COPY, as the sql suite does). Each engine then runs in a worker process of its
    own for the whole suite (:mod:`bench.engines`), started once (its start-up time recorded
    once), one engine at a time: every read aggregates the whole table
    (:data:`bench.engines.KEY`), and Spark writes its cached copy of the rows to quiver and
    through JDBC to PostgreSQL. ``Plan.engines_warm_ups`` untimed rounds of every peer, then
    the repetitions, alternating; the CPU time of the engine's process tree and of the
    server's is read from ``/proc`` around each.
    """
    usable = []
    for engine in engines.ENGINES:
        why = engines.missing(engine)
        if why is not None:
            run.note(f"engines: {engine} not measured: {why}")
            continue
        usable.append(engine)
        for package in engines.DISTRIBUTIONS[engine]:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                run.software[package] = importlib.metadata.version(package)
    if not usable:
        return
    if SPARK_JVM in usable:
        jars, why = engines.spark_jvm_jars()
        if jars is None:
            run.note(f"engines: {SPARK_JVM} not measured: {why}")
            usable.remove(SPARK_JVM)
    else:
        jars = None
    sparks = [e for e in usable if e in engines.SPARKS]
    if sparks:
        run.software["Java"] = _java_version("java")
    jvm_home = engines.spark_jvm_java22() if SPARK_JVM in usable else None
    if jvm_home is not None:
        run.software["Java (Spark, JVM connector)"] = _java_version(str(jvm_home / "bin/java"))
    elif SPARK_JVM in usable:
        run.note(
            f"engines: {SPARK_JVM} runs on the Java above, which has no foreign-function API: "
            "it reads quiver over gRPC (shared memory needs a JDK 22+)"
        )
    log_dir = run.log_dir / "engines"
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quiver-engines-")))
        server = servers.start_quiver(run.binary, log_dir)
        stack.callback(_stop_engines_server, run, server)
        setup = _engines_load(run, stack, server, tmp, bool(sparks), log_dir)
        setup.spark_jars = jars
        setup.jvm_home = jvm_home
        for engine in usable:
            with run.attempt(f"engines: {engine}"):
                _measure_engine(run, engine, setup)


def _java_version(java: str) -> str:
    """Return the first line of ``JAVA -version`` (the JVM Spark starts), or why not."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({type(e).__name__})"
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def _stop_engines_server(run: Run, server: ServerProcess) -> None:
    code = server.stop()
    if code != 0:
        run.note(f"{server.name} (engines suite) exited with code {code} after SIGTERM")


def _jdbc_missing() -> str | None:
    """Return why Spark's JDBC peers cannot run here, or ``None``."""
    jar = engines.jdbc_jar()
    if not jar.is_file():
        return f"the PostgreSQL JDBC driver is not at {jar}: run scripts/setup-java.sh"
    return postgres.available()


def _engines_load(
    run: Run,
    stack: contextlib.ExitStack,
    server: ServerProcess,
    tmp: Path,
    jdbc: bool,
    log_dir: Path,
) -> EnginesSetup:
    """Make the table and store it in every source; return where it is."""
    import quiver

    plan = run.plan
    rows, endpoints = plan.engines_rows, plan.engines_endpoints
    table = taxi.table(rows, plan.batch_rows)
    setup = EnginesSetup(
        rows=rows,
        nbytes=table.nbytes,
        expected=engines.Expected.of(table),
        endpoints=endpoints,
        quiver=server,
        parquet=tmp / "trips.parquet",
        log_dir=log_dir,
    )
    log(
        f"engines: a taxi table of {rows:,} rows ({table.nbytes / 2**20:,.0f} MiB) into "
        f"quiver (1 and {endpoints} endpoints), {endpoints} Parquet files"
        + (" and PostgreSQL" if jdbc else "")
    )

    def record(target: str, client: str, count: int, seconds: float) -> None:
        run.add(
            Measurement(
                "engines", target, client, "load", 1, rows, plan.batch_rows,
                bytes=table.nbytes, seconds=seconds, endpoints=count,
            )
        )  # fmt: skip

    client = quiver.connect(server.uri)
    try:
        for name, count in ((engines.TRIPS_ONE, 1), (engines.TRIPS_MANY, endpoints)):
            started = time.perf_counter()
            client.put(name, table, partitions=count)
            record(QUIVER, "quiver-python", count, time.perf_counter() - started)
            info = client.info(name)
            if (info.num_rows, info.partitions) != (rows, count):
                raise RuntimeError(
                    f"quiver holds {name} as {info.num_rows} rows in {info.partitions} "
                    f"endpoint(s), not {rows} in {count}"
                )
    finally:
        client.close()
    started = time.perf_counter()
    engines.write_parquet(table, setup.parquet, endpoints)
    record(PARQUET, "pyarrow", endpoints, time.perf_counter() - started)
    why = _jdbc_missing() if jdbc else None
    if why is not None:
        run.note(f"engines: Spark's JDBC reads and writes (PostgreSQL) not measured: {why}")
    elif jdbc:
        with run.attempt("engines: start PostgreSQL and load the table"):
            pg = postgres.start(log_dir)
            stack.callback(_stop_postgres, run, pg)
            run.software["PostgreSQL"] = pg.version
            started = time.perf_counter()
            pg.load(engines.PG_TRIPS, table)
            record(POSTGRESQL, "psycopg-copy", 1, time.perf_counter() - started)
            setup.pg, setup.jar = pg, engines.jdbc_jar()
            run.software["PostgreSQL JDBC"] = setup.jar.stem.removeprefix("postgresql-")
    return setup


def _measure_engine(run: Run, engine: str, setup: EnginesSetup) -> None:
    """Start ``engine`` in a worker, warm every peer up once, then time the repetitions."""
    plan = run.plan
    pg = setup.pg
    config = engines.EngineConfig(
        engine=engine,
        log_path=str(setup.log_dir / f"{engine}.log"),
        parquet=str(setup.parquet),
        parquet_files=setup.endpoints,
        quiver_uri=setup.quiver.uri,
        spark_memory=plan.engines_spark_memory,
        jdbc_jar=None if setup.jar is None else str(setup.jar),
        jdbc_url=None
        if pg is None
        else f"jdbc:postgresql://127.0.0.1:{pg.port}/{postgres.DATABASE}",
        cache_partitions=setup.endpoints,
        spark_jars=setup.spark_jars,
        java_home=None if setup.jvm_home is None else str(setup.jvm_home),
    )
    log(f"engines: starting {engine} (its output: {config.log_path})")
    with workers.Worker(
        f"engines, {engine}", engines.EngineClient, (config,), plan.engines_timeout_s
    ) as worker:
        startup = float(worker.call("started"))
        log(f"engines: {engine} started in {startup:.1f} s")
        run.add(Measurement("engines", "", engine, "startup", seconds=startup))
        peers = _engine_peers(engine, setup.endpoints, pg is not None, setup.jvm_home is not None)
        broken = worker.call("connector_status")
        if broken is not None:
            run.failures += 1
            run.note(
                f"FAILED: engines: {engine} through quiver not measured: "
                f"{engines.CONNECTORS[engine]} could not be loaded: {broken[:300]}"
            )
            peers = [p for p in peers if p.server not in (QUIVER, QUIVER_GRPC)]
        ready: list[tuple[EnginePeer, int | None]] = []
        for peer in peers:
            with run.attempt(f"engines: {peer.label}, untimed"):
                partitions = setup.endpoints if peer.op == "write" else None
                if peer.op == "read":
                    partitions = worker.call("partitions", peer.spec)
                for _ in range(plan.engines_warm_ups):
                    _engine_round(run, worker, peer, setup, partitions, None)
                ready.append((peer, partitions))
        log(
            f"engines: {engine}, {plan.reps} repetition(s) of "
            + ", ".join(p.label for p, _ in ready)
        )
        for rep in range(plan.reps):
            for peer, partitions in _order(ready, rep):
                with run.attempt(f"engines: {peer.label}"):
                    _engine_round(run, worker, peer, setup, partitions, rep)


def _engine_round(
    run: Run,
    worker: workers.Worker,
    peer: EnginePeer,
    setup: EnginesSetup,
    partitions: int | None,
    rep: int | None,
) -> None:
    """Run one read or write of ``peer``, check it, and record it (unless ``rep`` is None)."""
    server_pid = setup.server_pid(peer.server)

    def cpu() -> tuple[float, float]:
        ours = engines.tree_cpu_seconds(worker.pid)
        return ours, engines.tree_cpu_seconds(server_pid) if server_pid is not None else 0.0

    before = cpu()
    got = worker.call(peer.op, peer.spec)
    after = cpu()
    if peer.op == "read":
        setup.expected.check(got)
    else:
        written = _written_rows(setup, peer)
        if written != setup.rows:
            raise RuntimeError(
                f"{peer.server} holds {written} rows after the write, not {setup.rows}"
            )
    if rep is None:
        return

    def record(op: str, seconds: float) -> None:
        run.add(
            Measurement(
                "engines", peer.server, peer.engine, op, partitions or 0, setup.rows, 0,
                bytes=setup.nbytes, seconds=seconds, rep=rep, endpoints=peer.endpoints,
            )
        )  # fmt: skip

    record(peer.op, float(got["seconds"]))
    record(f"{peer.op}_cpu_engine", after[0] - before[0])
    if server_pid is not None:
        record(f"{peer.op}_cpu_server", after[1] - before[1])


def _written_rows(setup: EnginesSetup, peer: EnginePeer) -> int:
    """Count the rows a write left in its sink."""
    name = peer.spec["table"]
    if peer.server in (QUIVER, QUIVER_GRPC):
        import quiver

        client = quiver.connect(setup.quiver.uri)
        try:
            return int(client.info(name).num_rows)
        finally:
            client.close()
    assert setup.pg is not None
    with setup.pg.connect() as conn:
        (count,) = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()
    return int(count)


# --- TPC-H against DuckDB (issue 38) ------------------------------------------------------------

#: Longest the tpch suite's workers may take to start or to answer one call (a table's put, a
#: query's run); the server's own ``--query-timeout`` (300 s) ends a query before.
TPCH_TIMEOUT_S = 1800.0
#: The packages whose versions the tpch section shows (beside the generator's).
TPCH_PACKAGES = ("duckdb", "adbc-driver-flightsql")


def run_tpch(run: Run) -> None:
    """Time the 22 TPC-H queries on quiver, stored tables and files in place, and DuckDB.

    The tables are generated at ``Plan.tpch_scale`` by tpchgen-cli into ``OUT/tpch/``
    (kept there for the next run at that scale: :func:`bench.tpch.generate`). Two fresh
    quivers: one holding the tables, put by the quiver Python client (in a worker), the
    other serving the same files in place (``--table NAME=PATH``); the first with a
    ``--max-memory`` of the usual 16 GiB, or twice the tables' expected Arrow size if more
    (:data:`bench.plan.TPCH_ARROW_BYTES_PER_SF`), the query settings the server's defaults
    (``--query-memory-limit``...). One worker runs every
    query on each engine: first once each, untimed, DuckDB first, each quiver result
    compared with DuckDB's; then ``Plan.reps`` timed runs per engine, the engines taking
    turns. The servers' VmRSS is sampled while the queries run.

    Raises
    ------
    RuntimeError
        After every query was run, when a quiver result differed from DuckDB's or a query
        failed: the suite fails, whatever it measured.
    """
    plan = run.plan
    # Fresh servers: earlier suites leave the Arrow C++ peer holding memory its allocator
    # does not return, which the tables and the queries' joins need.
    run.restart_flight_servers()
    for package in TPCH_PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            run.software[package] = importlib.metadata.version(package)
    run.software["tpchgen-cli"] = tpch.tpchgen_version().removeprefix(tpch.TPCHGEN).strip()
    scale = tpch.scale_text(plan.tpch_scale)
    if plan.mode == "full" and plan.tpch_scale < TPCH_FULL_SCALES[0]:
        run.note(
            f"tpch: scale factor {scale}, not {TPCH_FULL_SCALES[0]:g}: its tables (about "
            f"{TPCH_FULL_SCALES[0] * TPCH_ARROW_BYTES_PER_SF / 1e9:.0f} GB of Arrow data) "
            "take more than a third of this machine's RAM (bench/plan.py, tpch_full_scale; "
            "--tpch-scale chooses any)"
        )
    root = (run.out_dir or run.log_dir.parent) / "tpch"
    directory, seconds = tpch.generate(root, plan.tpch_scale)
    if seconds is None:
        log(f"tpch: SF {scale} tables reused from {directory}")
        run.note(f"tpch: the SF {scale} tables were generated by an earlier run ({directory})")
    else:
        log(f"tpch: generated the SF {scale} tables in {seconds:.1f} s into {directory}")
        run.add(Measurement("tpch", "", tpch.TPCHGEN, "generate", seconds=seconds))
    log_dir = run.log_dir / "tpch"
    in_place = [f"--table={t}={tpch.table_path(directory, t)}" for t in tpch.TABLES]
    started: list[ServerProcess] = []
    failures: list[str] = []
    try:
        max_memory = str(max(16 * GIB, int(2 * plan.tpch_scale * TPCH_ARROW_BYTES_PER_SF)))
        stored = servers.start_quiver(run.binary, log_dir, "quiver-stored", (), max_memory)
        started.append(stored)
        files = servers.start_quiver(run.binary, log_dir, "quiver-files", in_place)
        started.append(files)
        _tpch_load(run, stored, directory)
        uris = {QUIVER: stored.uri, QUIVER_FILES: files.uri}
        log(f"tpch: the 22 queries, {plan.reps} timed run(s) each on every engine")
        with workers.Worker(
            "tpch client", tpch.TpchClient, (str(directory), uris), TPCH_TIMEOUT_S
        ) as client:
            samplers = {QUIVER: _MemorySampler(stored), QUIVER_FILES: _MemorySampler(files)}
            try:
                for qid in tpch.QUERY_IDS:
                    failures += _tpch_query(run, client, qid)
            finally:
                for setup, sampler in samplers.items():
                    with run.attempt(f"tpch: RSS of {tpch.LABELS[setup]}"):
                        rss, hwm = sampler.stop()
                        run.add(
                            Measurement(
                                "tpch", setup, tpch.CLIENTS[setup], "rss",
                                rss_bytes=rss, hwm_bytes=hwm,
                            )
                        )  # fmt: skip
    finally:
        for server in started:
            code = server.stop()
            if code != 0:
                run.note(f"{server.name} (tpch suite) exited with code {code} after SIGTERM")
    if failures:
        raise RuntimeError(
            f"{len(failures)} of {len(tpch.QUERY_IDS) * len(tpch.SETUPS)} quiver results "
            f"differ from DuckDB's or failed: {', '.join(failures)}"
        )


def _tpch_load(run: Run, server: ServerProcess, directory: Path) -> None:
    """Put the 8 tables into ``server`` with the quiver Python client, in a worker; record
    each put, the Arrow size of all, what the server stores and its RSS after.
    """  # noqa: D205
    rows = nbytes = 0
    started = time.perf_counter()
    with workers.Worker("tpch load", tpch.Loader, (server.uri,), TPCH_TIMEOUT_S) as loader:
        for table in tpch.TABLES:
            got = loader.call("put", table, str(tpch.table_path(directory, table)))
            run.add(
                Measurement(
                    "tpch", QUIVER, QUIVER_PYTHON, f"load:{table}", 1, int(got["rows"]),
                    tpch.LOAD_BATCH_ROWS, bytes=int(got["bytes"]), seconds=float(got["seconds"]),
                    ops=int(got["batches"]),
                )
            )  # fmt: skip
            rows += int(got["rows"])
            nbytes += int(got["bytes"])
        stored = int(loader.call("stored_bytes"))
    seconds = time.perf_counter() - started
    run.add(Measurement("tpch", "", "pyarrow", "arrow", 1, rows, bytes=nbytes))
    run.add(Measurement("tpch", QUIVER, QUIVER_PYTHON, "stored", 1, rows, bytes=stored))
    rss, hwm = server.memory()
    run.add(
        Measurement(
            "tpch", QUIVER, QUIVER_PYTHON, "rss_loaded", 1, rows, bytes=nbytes,
            seconds=seconds, rss_bytes=rss, hwm_bytes=hwm,
        )
    )  # fmt: skip
    mib = 2**20
    log(
        f"tpch: put {rows:,} rows ({nbytes / mib:,.1f} MiB of Arrow data; the server stores "
        f"{stored / mib:,.1f} MiB) in {seconds:.1f} s; server RSS {rss / mib:,.1f} MiB"
    )


def _tpch_query(run: Run, client: workers.Worker, qid: str) -> list[str]:
    """Run query ``qid`` on every engine: once checked, then ``Plan.reps`` times timed.

    Returns
    -------
    list of str
        The quiver setups whose first result differed from DuckDB's, or failed
        (``q05 (quiver, files in place)``).
    """
    why: dict[str, str | None] = {}
    running = []
    for engine in tpch.ENGINES:  # DuckDB first: its result is the one compared with
        try:
            got = client.call("run", engine, qid, True)
        except RuntimeError as e:
            first_line = str(e).strip().splitlines()[0]
            first_line = first_line.removeprefix("tpch client: the worker failed: ")[:500]
            why[engine] = f"failed: {first_line}"
            run.note(f"tpch: {qid} failed on {tpch.LABELS[engine]}: {first_line}")
            continue
        running.append(engine)
        why[engine] = got["mismatch"]
    failures = []
    for setup in tpch.SETUPS:
        found = why[setup]
        run.add(
            Measurement(
                "tpch", setup, tpch.CLIENTS[setup], f"check:{qid}",
                errors=0 if found is None else 1, note=found or "",
            )
        )  # fmt: skip
        if found is not None:
            failures.append(f"{qid} ({tpch.LABELS[setup]})")
            if not found.startswith("failed: "):
                run.note(
                    f"tpch: {qid} on {tpch.LABELS[setup]}: the result differs from DuckDB's: "
                    f"{found}"
                )
    times: dict[str, list[float]] = {engine: [] for engine in running}
    for rep in range(run.plan.reps):
        for engine in _order(running, rep):
            with run.attempt(f"tpch {qid} on {tpch.LABELS[engine]}"):
                got = client.call("run", engine, qid, False)
                run.add(
                    Measurement(
                        "tpch", engine, tpch.CLIENTS[engine], qid, 1, int(got["rows"]),
                        seconds=float(got["seconds"]), rep=rep,
                    )
                )  # fmt: skip
                times[engine].append(float(got["seconds"]))
    medians = {e: statistics.median(t) for e, t in times.items() if t}
    duckdb = medians.get(DUCKDB)
    shown = []
    for engine, seconds in medians.items():
        ratio = f" ({seconds / duckdb:.2f}×)" if duckdb and engine != DUCKDB else ""
        shown.append(f"{tpch.LABELS[engine]} {seconds * 1e3:.0f} ms{ratio}")
    log(f"tpch {qid}: {', '.join(shown)}")
    return failures


# --- tables in S3 (issue 66) -------------------------------------------------------------------


def run_lake(run: Run) -> None:
    """TPC-H, a DoGet and the server's memory over tables in S3: :func:`bench.lake.measure`."""
    from . import lake

    lake.measure(run)


# --- several nodes -----------------------------------------------------------------------------


def _cluster_unavailable() -> str | None:
    """Why the cluster suite cannot run here, or ``None``."""
    import shutil

    if os.geteuid() != 0:
        return "it needs root, for a network namespace and tc"
    missing = [tool for tool in ("ip", "tc", "etcd") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found (scripts/install-cluster-tools.sh installs etcd)"
    return None


def run_cluster(run: Run) -> None:
    """Measure reads over 1-3 nodes behind limited links, put latency, re-replication, SQL.

    Runs :mod:`bench.cluster_worker` in a network namespace of its own (``ip netns``),
    whose loopback device ``tc`` shapes into one link per node.
    """
    plan = run.plan
    why = _cluster_unavailable()
    if why is not None:
        run.note(f"cluster suite skipped: {why}")
        return
    namespace = f"quiver-bench-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        log(f"cluster: {plan.cluster_bytes >> 20} MiB over 1-3 nodes, links of {plan.cluster_rate}")
        done = subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, "-m", "bench.cluster_worker",
             "--binary", str(run.binary), "--bytes", str(plan.cluster_bytes),
             "--reps", str(plan.cluster_reps), "--rate", plan.cluster_rate,
             "--appends", str(plan.cluster_appends)],
            capture_output=True, text=True, timeout=3600, check=False,
            cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    for line in done.stdout.splitlines():
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        op = m["op"]
        if op == "read":
            server = QUIVER_CLUSTER_TLS if m.get("tls") else QUIVER_CLUSTER
            run.add(Measurement("cluster", server, QUIVER_PYTHON, "read",
                                streams=m["nodes"], bytes=m["bytes"], seconds=m["seconds"],
                                rep=m["rep"], endpoints=m["endpoints"]))  # fmt: skip
        elif op == "put_latency":
            server = QUIVER_CLUSTER if m["server"] == "cluster" else QUIVER
            run.add(Measurement("cluster", server, QUIVER_PYTHON, "put_latency",
                                seconds=m["seconds"], ops=m["ops"]))  # fmt: skip
        elif op == "append_latency":
            run.add(Measurement("cluster", QUIVER_CLUSTER, QUIVER_PYTHON, "append_latency",
                                seconds=m["seconds"], ops=m["ops"],
                                rows_per_stream=m["appends"]))  # fmt: skip
        elif op == "write_job":
            run.add(Measurement("cluster", QUIVER_CLUSTER, QUIVER_PYTHON, "write_job",
                                streams=m["tasks"], bytes=m["bytes"], seconds=m["seconds"],
                                rep=m["rep"], note=m["place"]))  # fmt: skip
        elif op == "rereplicate":
            server = QUIVER_CLUSTER_TLS if m.get("tls") else QUIVER_CLUSTER
            run.add(Measurement("cluster", server, "", "rereplicate",
                                bytes=m["bytes"], seconds=m["seconds"], rep=m["rep"],
                                endpoints=m["partitions"]))  # fmt: skip
        elif op == "sql":
            server = QUIVER_CLUSTER if m["server"] == "cluster" else QUIVER
            run.add(Measurement("cluster", server, QUIVER_PYTHON, "sql", bytes=m["bytes"],
                                seconds=m["seconds"], rep=m["rep"]))  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"cluster worker failed ({done.returncode}): {done.stderr[-2000:]}")


def run_nemesis(run: Run) -> None:
    """Three cluster nodes under faults, appends and queries: losses, failures, latency.

    Runs :mod:`bench.nemesis_worker` in a network namespace of its own (``ip netns``) for
    the plan's ``nemesis_seconds``; its progress goes to stderr as it runs, and the nodes'
    and etcd's logs to ``out/logs/nemesis/``, with its JSON lines (``nemesis.jsonl``: one
    per fault injected, when, and the first calls that failed in its window).
    """
    import shutil

    plan = run.plan
    why = _cluster_unavailable()
    if why is None and shutil.which("iptables") is None:
        why = "iptables not found (it cuts a node off the network)"
    if why is not None:
        run.note(f"nemesis suite skipped: {why}")
        return
    log_dir = run.log_dir / "nemesis"
    log(f"nemesis: faults for {plan.nemesis_seconds:.0f} s, logs in {log_dir}")
    namespace = f"quiver-nemesis-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    tail: list[str] = []

    def relay(stream: io.TextIOBase) -> None:
        for line in stream:
            sys.stderr.write(line)
            tail.append(line)
            del tail[:-60]

    try:
        with tempfile.TemporaryFile("w+") as stdout:
            worker = subprocess.Popen(
                ["ip", "netns", "exec", namespace, sys.executable, "-m", "bench.nemesis_worker",
                 "--binary", str(run.binary), "--seconds", str(plan.nemesis_seconds),
                 "--calm", str(plan.nemesis_calm_s), "--log-dir", str(log_dir)],
                stdout=stdout, stderr=subprocess.PIPE, text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )  # fmt: skip
            assert worker.stderr is not None
            relaying = threading.Thread(target=relay, args=(worker.stderr,), daemon=True)
            relaying.start()
            try:
                # Bounded: the faults, a last fault begun at the deadline, settling, checking.
                code = worker.wait(timeout=plan.nemesis_seconds + 900)
            except subprocess.TimeoutExpired:
                worker.kill()
                code = worker.wait()
            relaying.join(timeout=10)
            stdout.seek(0)
            lines = [json.loads(line) for line in stdout if line.startswith("{")]
        # Every line, the faults one by one included, for a closer look.
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "nemesis.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    _record_nemesis(run, lines)
    if code != 0:
        raise RuntimeError(f"nemesis worker failed ({code}): {''.join(tail)[-2000:]}")


def _record_nemesis(run: Run, lines: list[dict]) -> None:
    """Turn the nemesis worker's JSON lines into rows and notes."""

    def add(op: str, client: str = QUIVER_PYTHON, **values: object) -> None:
        run.add(Measurement("nemesis", QUIVER_CLUSTER, client, op, **values))  # type: ignore[arg-type]

    for m in lines:
        if m["op"] == "fault":
            kind = m["kind"]
            add(f"append:{kind}", streams=m["injected"], ops=m["ops"], errors=m["failed"],
                seconds=m["p50"] or 0.0, p99_seconds=m["p99"])  # fmt: skip
            add(f"append_worst_client:{kind}", streams=m["injected"],
                errors=m["failed_max_per_client"])  # fmt: skip
            add(f"query:{kind}", client="query", streams=m["injected"], ops=m["queries"],
                errors=m["queries_failed"])  # fmt: skip
            add(f"query_stale:{kind}", client="query", streams=m["injected"],
                ops=m["queries"], errors=m["queries_stale"])  # fmt: skip
            for error in m["errors"][:3]:
                run.note(f"nemesis, {kind}: a failed append: {error}")
            for error in m["query_errors"][:3]:
                run.note(f"nemesis, {kind}: a failed query: {error}")
        elif m["op"] == "summary":
            add("appends", ops=m["attempted"], errors=m["failed"], seconds=m["p50"] or 0.0,
                p99_seconds=m["p99"])  # fmt: skip
            add("acknowledged", ops=m["acknowledged"])
            add("queries", client="query", ops=m["queries"], errors=m["queries_failed"])
            for op in ("lost", "torn_or_doubled", "invented"):
                add(op, ops=m["acknowledged"], errors=m[op])
            add("problems", errors=len(m["problems"]))
            add("faults", ops=m["faults"], seconds=m["seconds"])
            add("settle", seconds=m["settle_seconds"], errors=0 if m["settled"] else 1)
            for problem in m["problems"][:20]:
                run.note(f"nemesis: {problem}")
            if m["node_log_errors"]:
                run.note(
                    f"nemesis: {m['node_log_errors']} ERROR or panic lines in the nodes' logs, "
                    f"e.g. {m['node_log_samples'][:3]}"
                )


SUITE_FUNCTIONS = {
    "ceilings": run_ceilings,
    "get": run_get,
    "put": run_put,
    "memory": run_memory,
    "rust": run_rust,
    "small": run_small,
    "bytes": run_bytes,
    "json": run_json,
    "sql": run_sql,
    "soak": run_soak,
    "shm": run_shm,
    "functions": run_functions,
    "engines": run_engines,
    "tpch": run_tpch,
    "lake": run_lake,
    "cluster": run_cluster,
    "nemesis": run_nemesis,
}

__all__ = ["ARROW_CPP", "QUIVER", "SUITE_FUNCTIONS", "Run", "log"]
