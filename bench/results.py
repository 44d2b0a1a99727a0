"""One row per measurement: the CSV the plots and BENCHMARKS.md are made from."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import platform
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

#: Server labels, as they appear in the CSV.
QUIVER = "quiver"
ARROW_CPP = "arrow-cpp"
JSON_SOCKET = "json-socket"
POSTGRESQL = "postgresql"
DUCKDB = "duckdb"
#: The tpch suite's higher peer: DuckDB on its own in-memory tables (``CREATE TABLE t AS
#: SELECT * FROM read_parquet(...)``), where the ``duckdb`` rows query views of the files.
DUCKDB_MEMORY = "duckdb-memory"
#: The engines suite's engines (the ``client`` column) and the sources and sinks beside
#: quiver and PostgreSQL (the ``server`` column): a local Parquet directory, and Spark's
#: own cache (the DataFrame the writes write, held in Spark's memory: a read's floor).
SPARK = "spark"
#: Spark reading and writing quiver through the JVM connector (java/spark) instead of the
#: Python one; its other sources are Spark's own, as for ``spark``.
SPARK_JVM = "spark-jvm"
DASK = "dask"
RAY = "ray"
PARQUET = "parquet"
SPARK_CACHE = "spark-cache"
#: quiver read or written by the connectors with ``transport="grpc"`` (Flight DoGet and DoPut
#: over loopback TCP), where the ``quiver`` rows use their default, ``"auto"``: shared
#: memory, the server being on this host.
QUIVER_GRPC = "quiver-grpc"
#: The clients of the throughput measurements (the ``client`` column): pyarrow.flight, and
#: the quiver Python client with its Rust core over gRPC and over shared memory.
PYARROW = "pyarrow"
QUIVER_PYTHON = "quiver-python"
QUIVER_PYTHON_SHM = "quiver-python-shm"
#: The tpch suite's quiver over the Parquet files in place (``quiver serve --table
#: NAME=PATH``), where the ``quiver`` rows are its tables stored by ``put``.
QUIVER_FILES = "quiver-files"
#: The cluster suite's nodes with ``--cluster`` (``quiver``: the single node it compares to).
QUIVER_CLUSTER = "quiver-cluster"
#: The same nodes with TLS between them and to the client (mutual TLS, the cluster's CA).
QUIVER_CLUSTER_TLS = "quiver-cluster-tls"
#: The functions suite's peers (the ``server`` column): the booster in the client's own
#: process (one thread, and all of xgboost's threads), the XGBatch-style pyarrow Flight
#: server, the FastAPI JSON service, and quiver serving the function with 1 and 2 workers.
IN_PROCESS = "in-process"
IN_PROCESS_THREADS = "in-process-all-threads"
PYARROW_FLIGHT = "pyarrow-flight"
FASTAPI_JSON = "fastapi-json"
QUIVER_1_WORKER = "quiver-1-worker"
QUIVER_2_WORKERS = "quiver-2-workers"
#: The functions suite's SQL over a stream (the ``op`` column): the echo of the stream, and
#: the statements timed against it: a filter that keeps a tenth of the rows and a
#: projection of 4 of the 20 columns (docs/functions.md, "SQL over a stream").
FUNCTIONS_STREAM_ECHO = "stream_echo"
FUNCTIONS_STREAM_SQL = {
    "stream_filter": "SELECT * FROM input WHERE f0 > 0.9",
    "stream_project": "SELECT f0, f1, f2, f3 FROM input",
}
#: The nemesis suite's kinds of fault (bench/nemesis_worker.py), in the order it injects
#: them, and what each does; its rows' ``op`` is ``append:KIND``, ``query:KIND``... The
#: calls in no fault's window are its ``calm`` rows.
NEMESIS_FAULTS = {
    "kill": "SIGKILL a node, restart it (same id and data) 4 s later",
    "pause-short": "SIGSTOP a node for 1 s (shorter than its 2 s lease)",
    "pause-long": "SIGSTOP a node for 5 s (longer than its lease)",
    "etcd-restart": "stop etcd for 3 s, start it again on its data",
    "partition": "cut a node off the network for 8 s (iptables)",
}
NEMESIS_CALM = "calm"


@dataclass
class Measurement:
    """One repetition of one benchmark.

    Attributes
    ----------
    suite : str
        ``get``, ``put``, ``headline``, ``rust``, ``small``, ``bytes``, ``json``,
        ``memory``, ``ceilings``, ``sql``, ``soak``, ``shm``, ``functions``, ``engines``,
        ``tpch``, ``lake``, ``cluster``, ``nemesis``, ``clients``, ``console``.
    server : str
        ``quiver``, ``arrow-cpp``, ``json-socket``, ``postgresql``, ``duckdb``, empty for
        ceilings; for ``functions`` the peer (``in-process``, ``quiver-1-worker``...); for
        ``engines`` the source or sink (``quiver``, ``quiver-grpc``, ``postgresql``,
        ``parquet``, ``spark-cache``; empty for an engine's ``startup``); for ``tpch``
        ``quiver`` (the tables stored by ``put``), ``quiver-files`` (the Parquet files in
        place) or ``duckdb``.
    client : str
        ``pyarrow``, ``rust``, ``socket``, ``quiver-python`` (the quiver Python client,
        its Rust core moving the data over gRPC), ``quiver-python-shm`` (the same, with
        ``transport="shm"``); for ``sql`` the driver (``adbc-flightsql``,
        ``pyarrow-flightsql``, ``psycopg``...); for ceilings the tool that measured; for
        ``engines`` the engine (``spark``, ``dask``, ``ray``), or for a ``load`` what
        loaded the source (``quiver-python``, ``pyarrow``, ``psycopg-copy``).
    op : str
        ``get``, ``put``, ``get+to_pandas``, ``sql+to_pandas``, ``rss``; for ceilings which
        one (``tcp``...); for ``functions``: ``bulk`` (``rows_per_stream`` rows scored in
        ``seconds``), ``cpu_server``, ``cpu_workers`` and ``cpu_client`` (the CPU seconds
        of that bulk repetition, of ``bytes`` of input), ``latency`` (requests of
        ``rows_per_stream`` rows: ``seconds`` the median, ``p99_seconds``, ``ops`` timed),
        ``stream_echo``, ``stream_filter`` and ``stream_project`` (SQL over a stream:
        ``bytes`` of input in ``seconds``, ``wire_bytes`` the Arrow bytes received; a
        ``note`` when the server did not implement it); for ``engines``: ``read`` (the
        source read and aggregated, ``rows_per_stream`` rows in ``seconds``), ``write``
        (Spark's cached rows written to the sink), ``read_cpu_engine``,
        ``read_cpu_server``, ``write_cpu_engine``, ``write_cpu_server`` (the CPU seconds of
        that repetition: the engine's process tree, the server's), ``startup`` (the
        engine's, once) and ``load`` (the source made from the generated table, once); for
        ``nemesis``, per kind of fault (``calm``: the calls in no fault's window):
        ``append:KIND`` (the appends in flight during its windows: ``ops``, ``errors`` the
        failed ones, ``seconds`` and ``p99_seconds`` the median and 99th percentile
        latency of the acknowledged ones, ``streams`` the faults injected),
        ``append_worst_client:KIND`` (``errors``: the most failed appends of one writer in
        one window), ``query:KIND`` (queries: ``ops``, ``errors`` the failed ones) and
        ``query_stale:KIND`` (``errors``: queries that counted fewer rows than the appends
        acknowledged before they started); and for the whole run ``appends`` (``ops``
        attempted, ``errors`` failed, latencies as above), ``queries`` (``ops``, ``errors``
        failed), ``acknowledged`` (``ops``),
        ``lost``, ``torn_or_doubled``, ``invented``, ``problems`` (``errors`` each, the
        checker's counts), ``faults`` (``ops`` injected over ``seconds``) and ``settle``
        (``seconds`` until three nodes and full replication after the load).
        For ``clients`` (``client``: ``pyarrow``, ``go``, ``java``, ``adbc``, ``jdbc``):
        ``get:KIND``, ``put:KIND`` and ``sql:KIND`` (``KIND`` ``ints`` or ``strings``: one
        transfer of the table, ``bytes`` in ``seconds``, ``server_cpu_seconds`` and
        ``client_cpu_seconds`` around it), ``OP:KIND:writes`` and ``OP:KIND:reads`` (``ops``:
        the server's write-side and read-side syscalls during one more transfer, ``note``
        the counter, perf or strace) and ``latency`` (1-row gets: ``seconds`` the p50,
        ``p99_seconds``, ``ops`` the calls).
        For ``tpch``: ``q01`` ... ``q22`` and the window and rollup set's ``w01`` ...
        ``w10`` (one timed run of the query: ``seconds`` from the call to the whole Arrow
        result, ``rows_per_stream`` the result's rows), ``check:qNN`` (the quiver setup's
        first result compared with DuckDB's: ``errors``
        1 when it differs or the query failed, ``note`` how), ``generate`` (tpchgen-cli's
        ``seconds``, when it ran), ``load:TABLE`` (the table's put: ``rows_per_stream``
        rows, ``bytes`` their Arrow size, ``ops`` the batches), ``arrow`` (the Arrow size
        of the 8 tables put, ``bytes``), ``stored`` (the server's ``stats().bytes``),
        ``load:duckdb-memory`` (``server`` ``duckdb-memory``: DuckDB's ``CREATE TABLE`` of
        the 8 tables, ``seconds``), ``rss_loaded`` (the server's VmRSS and VmHWM after the
        load) and ``rss`` (the
        largest VmRSS sampled while the queries ran, and the VmHWM after them).
        For ``lake`` (:mod:`bench.suites.lake`; ``server`` ``duckdb-httpfs``, ``quiver-s3-cold``,
        ``quiver-s3-warm``, ``quiver-local``, ``quiver-s3``, ``s3``): ``qNN`` and
        ``first:qNN`` (a timed run, and the checked first run: ``bytes`` what quiver read
        from S3 by its counter, ``wire_bytes`` what the link's veth received), ``check:qNN``
        as for ``tpch``, ``rss``, ``generate``, ``upload``, ``link`` (``seconds`` an HTTP
        request's round trip, ``bytes`` the shaped rate in bytes/s or 0, ``note`` what the
        link is), ``s3_get`` (pyarrow's GETs of the DoGet table's objects), ``doget_table``
        and ``memory_table`` (``bytes`` of Parquet, ``streams`` objects), ``doget`` and
        ``memory`` (``bytes`` read from S3, ``wire_bytes`` the Arrow bytes received, the
        memory run's peak VmRSS and VmHWM) and ``memory_cache`` (``bytes``: its
        ``--cache-size``).
        For ``bytes``, per column kind (:data:`bench.data.BYTES_KINDS`): ``arrow:KIND``
        (``bytes`` the tight Arrow size of the rows, ``pa.table({"c": array}).nbytes`` of a
        fresh array of their values; no server), ``stored:KIND`` (the server's FlightInfo
        ``total_bytes`` after the put), ``sent:KIND`` (``get_total_buffer_size()`` summed
        over the record batches a pyarrow DoGet of the whole table received, ``ops`` those
        batches), ``sent_once:KIND`` (the same bytes, each buffer counted once however many
        batches reference it, such as a dictionary), ``limit3:KIND`` (quiver only: the
        same for ``SELECT c FROM t LIMIT 3`` through Flight SQL) and ``arrow_limit3:KIND``
        (the tight Arrow size of those 3 rows); ``rows_per_stream`` the rows,
        ``batch_rows`` the rows per batch put.
        For ``console`` (:mod:`bench.suites.console`; ``server`` ``quiver-console``, the
        quiver serving it, or ``quiver``, one without it): ``sample`` (``client``
        ``chromium``: the page's ``data-ms`` of a table's sample in ``seconds``,
        ``rows_per_stream`` the table's rows), ``shown:PAGE`` and ``run:PAGE`` (the
        result's ``data-ms``, after it arrived, and ``data-total-ms``, after Run, with
        ``PAGE`` = ``batch_rows`` rows a page; ``rows_per_stream`` the result's rows),
        ``api_query`` (``client`` ``http``: ``POST /api/query`` from the harness,
        ``wire_bytes`` the JSON) and ``idle_cpu`` (no page open: ``server_cpu_seconds``
        over ``seconds``, ``rep`` the window, both servers in the same window).
    streams, rows_per_stream, batch_rows : int
        The shape: parallel streams, records per stream, rows per record batch; for
        ``engines``: ``streams`` the partitions the engine read or wrote, and
        ``rows_per_stream`` every row of the table.
    bytes : int
        Arrow bytes moved (the table's ``nbytes``), or stored bytes for ``memory``; for
        ``bytes``, the bytes measured (``op`` says which).
    seconds : float
        Wall time of the repetition.
    rep : int
        Repetition number, from 0.
    ttfb_seconds : float or None
        Gets: time from the request to the first record batch.
    wire_bytes : int or None
        Bytes on the wire when they differ from ``bytes`` (JSON).
    endpoints : int or None
        Endpoints the server split a get over; for ``engines`` the source's or sink's
        endpoints (quiver), JDBC connections (PostgreSQL) or files (Parquet).
    rss_bytes, hwm_bytes : int or None
        ``memory``: the server's largest VmRSS seen during the repetition, and its VmHWM;
        ``sql``: ``hwm_bytes`` is the peak RSS of the client's worker process;
        ``functions`` streams: ``rss_bytes`` is the peak of the server's
        ``quiver_memory_used_bytes`` during the stream, ``hwm_bytes`` its VmHWM after it.
    note : str
        Anything that makes the row not comparable.
    ops, errors : int or None
        ``soak``: operations done (of ``op``, or of all for ``op`` ``all``) and failed;
        ``functions``: ``ops`` the requests timed of a ``latency`` row.
    p99_seconds : float or None
        ``soak``, ``functions``: the 99th percentile latency of ``op`` (``seconds`` holds
        the median).
    client_cpu_seconds, server_cpu_seconds : float or None
        ``get``, ``put``, ``headline`` (the pyarrow and quiver Python clients): the CPU
        seconds (user + system, ``/proc/PID/stat``, 10 ms ticks) the client's worker
        process and the server process used during the repetition.
    """

    suite: str
    server: str
    client: str
    op: str
    streams: int = 1
    rows_per_stream: int = 0
    batch_rows: int = 0
    bytes: int = 0
    seconds: float = 0.0
    rep: int = 0
    ttfb_seconds: float | None = None
    wire_bytes: int | None = None
    endpoints: int | None = None
    rss_bytes: int | None = None
    hwm_bytes: int | None = None
    note: str = ""
    ops: int | None = None
    errors: int | None = None
    p99_seconds: float | None = None
    client_cpu_seconds: float | None = None
    server_cpu_seconds: float | None = None
    gbps: float = field(init=False)

    def __post_init__(self) -> None:
        """Derive the throughput, GB/s (1e9 bytes per second)."""
        self.gbps = self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0


#: CSV columns, in order: the measurement, then the run and the machine.
RUN_COLUMNS = ("mode", "timestamp", "nproc", "ram_gib", "cpu_model", "kernel")
COLUMNS = (
    *[f.name for f in dataclasses.fields(Measurement) if f.name != "gbps"][:9],
    "gbps",
    *[f.name for f in dataclasses.fields(Measurement) if f.name != "gbps"][9:],
    *RUN_COLUMNS,
)


def machine_info() -> dict[str, object]:
    """Return what the numbers depend on: CPUs, RAM, CPU model, kernel."""
    cpu_model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gib = round(int(line.split()[1]) * 1024 / 2**30, 1)
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count() or 0,
        "ram_gib": ram_gib,
        "cpu_model": cpu_model,
        "kernel": f"{platform.system()} {platform.release()}",
    }


def git_revision(repo: Path) -> str:
    """Return the repository's commit, with ``+dirty`` when the work tree has changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def now() -> str:
    """Return the current UTC time, ISO 8601, to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


class ResultsFile:
    """Appends measurements to ``results.csv`` as they are made.

    Parameters
    ----------
    path : pathlib.Path
        The CSV to create (an existing one is replaced).
    run : dict
        The run's columns (``RUN_COLUMNS`` but ``timestamp``), repeated on every row.
    """

    def __init__(self, path: Path, run: dict[str, object]) -> None:
        self.path = path
        self.run = run
        self.rows: list[dict[str, object]] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            csv.writer(f).writerow(COLUMNS)

    def add(self, measurement: Measurement) -> None:
        """Write one row (flushed at once: a run that dies keeps what it measured)."""
        row = {**dataclasses.asdict(measurement), **self.run, "timestamp": now()}
        self.rows.append(row)
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow(["" if row[c] is None else row[c] for c in COLUMNS])


def read_results(path: Path) -> list[dict[str, object]]:
    """Read ``results.csv`` back, numbers as numbers and empty fields as ``None``."""
    numeric = {f.name: f.type for f in dataclasses.fields(Measurement)}
    rows = []
    with path.open(newline="") as f:
        for raw in csv.DictReader(f):
            row: dict[str, object] = {}
            for key, value in raw.items():
                kind = str(numeric.get(key, "str"))
                if value == "":
                    row[key] = None if key != "note" else ""
                elif kind.startswith("int"):
                    row[key] = int(value)
                elif kind.startswith("float"):
                    row[key] = float(value)
                else:
                    row[key] = value
            rows.append(row)
    return rows


def write_run_info(path: Path, info: dict[str, object]) -> None:
    """Write the run's description (mode, machine, versions, notes) as JSON."""
    path.write_text(json.dumps(info, indent=2) + "\n")


def read_run_info(path: Path) -> dict[str, object]:
    """Read what :func:`write_run_info` wrote."""
    return json.loads(path.read_text())
