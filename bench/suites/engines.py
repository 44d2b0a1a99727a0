"""The engines suite: Spark, Dask and Ray through quiver (the paper's Figure 10)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt

from .. import engines, servers, taxi, workers
from ..peers import postgres
from ..plots import _save, _seconds, rows_text
from ..report import Goal, _figure, _goal_rows, _rate, _ratio, _size, _times
from ..results import (
    DASK,
    PARQUET,
    POSTGRESQL,
    QUIVER,
    QUIVER_GRPC,
    RAY,
    SPARK,
    SPARK_CACHE,
    SPARK_JVM,
    Measurement,
)
from ..run import Run, Section, Suite, alternating, log, stop_postgres
from ..servers import ServerProcess
from ..summary import Row, Spread, select, spread


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
            stack.callback(stop_postgres, run, pg)
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
            for peer, partitions in alternating(ready, rep):
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


#: The engines suite's goals (issue 25): Spark through quiver at least this many times faster
#: than Spark's JDBC reader and writer from and to PostgreSQL...
ENGINES_VS_JDBC = 10.0


#: ...at least as fast as Spark on the same rows in local Parquet files...
ENGINES_VS_PARQUET = 1.0


#: ...and a table of N endpoints read at least this many times faster than one of 1.
ENGINES_N_VS_ONE = 1.5


#: The run's software entries the engines suite added (shown in its section, not the sql's).
ENGINES_SOFTWARE = (
    "pyspark",
    "dask",
    "distributed",
    "ray",
    "PostgreSQL JDBC",
    "Java",
    "Java (Spark, JVM connector)",
)


def _engine_ratio(
    rows: list[Row], engine: str, op: str, theirs: tuple[str, int], ours: tuple[str, int]
) -> tuple[float | None, str]:
    """Return how many times ``ours`` is faster than ``theirs``, and it as text."""
    a = engine_seconds(rows, engine, op, *ours)
    b = engine_seconds(rows, engine, op, *theirs)
    ratio = _ratio(b, a)
    if ratio is None or a is None or b is None:
        return None, "—"
    return ratio, f"{_times(ratio)} ({b.median:.3f} s vs {a.median:.3f} s)"


def engines_goals(rows: list[Row]) -> list[Goal]:
    """Evaluate the engines suite's goals (none when it did not run)."""
    if not select(rows, suite="engines", op=("read", "write")):
        return []
    out = []

    def goal(text: str, threshold: float, found: tuple[float | None, str]) -> None:
        ratio, shown = found
        target = f"≥ {threshold:g}×"
        out.append(Goal(text, target, ratio, None if ratio is None else ratio >= threshold, shown))

    for spark, name in ((SPARK, "Spark"), (SPARK_JVM, "Spark, JVM connector")):
        if spark == SPARK_JVM and not select(rows, suite="engines", client=spark, op="read"):
            continue  # not measured here (no JDK or Maven): the run's notes say why
        reference = engine_reference(rows, spark, "read")
        many = f"{reference[1]} endpoints" if reference else "N endpoints"
        if reference is not None:
            for server, endpoints in engine_peers(rows, spark, "read"):
                if server == POSTGRESQL:
                    label = engine_peer_label(server, endpoints)
                    goal(
                        f"{name} read + aggregate: quiver ({many}) / Spark's JDBC reader ({label})",
                        ENGINES_VS_JDBC,
                        _engine_ratio(rows, spark, "read", (server, endpoints), reference),
                    )
        else:
            goal(
                f"{name} read + aggregate: quiver ({many}) / Spark's JDBC reader",
                ENGINES_VS_JDBC,
                (None, "—"),
            )
        writes = engine_peers(rows, spark, "write")
        ours = next((p for p in writes if p[0] == QUIVER), None)
        theirs = next((p for p in writes if p[0] == POSTGRESQL), None)
        goal(
            f"{name} write (overwrite): quiver / Spark's JDBC writer to PostgreSQL",
            ENGINES_VS_JDBC,
            (None, "—")
            if ours is None or theirs is None
            else _engine_ratio(rows, spark, "write", theirs, ours),
        )
        parquet = next((p for p in engine_peers(rows, spark, "read") if p[0] == PARQUET), None)
        goal(
            f"{name} read + aggregate: quiver ({many}) / local Parquet"
            + (f" ({parquet[1]} files)" if parquet else ""),
            ENGINES_VS_PARQUET,
            (None, "—")
            if parquet is None or reference is None
            else _engine_ratio(rows, spark, "read", parquet, reference),
        )
    for engine, name in ENGINE_NAMES:
        quivers = [p for p in engine_peers(rows, engine, "read") if p[0] == QUIVER]
        if not quivers:
            continue
        one = next((p for p in quivers if p[1] == 1), None)
        top = quivers[-1]
        goal(
            f"{name} read + aggregate: quiver, {top[1]} endpoints / 1 endpoint",
            ENGINES_N_VS_ONE,
            (None, "—")
            if one is None or one == top
            else _engine_ratio(rows, engine, "read", one, top),
        )
    return out


def _engine_cpu(rows: list[Row], engine: str, op: str, peer: tuple[str, int], who: str) -> str:
    found = select(
        rows,
        suite="engines",
        client=engine,
        op=f"{op}_cpu_{who}",
        server=peer[0],
        endpoints=peer[1],
    )
    cpu = spread(found, "seconds")
    return "—" if cpu is None else f"{cpu.median:.2f}"


def _engines_table(rows: list[Row]) -> list[str]:
    lines = [
        "| engine | op | source or sink | engine partitions | seconds | rows/s | "
        "× quiver's time | CPU s: engine | server |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for engine, name in ENGINE_NAMES:
        for op in ("read", "write"):
            reference = engine_reference(rows, engine, op)
            ours = None if reference is None else engine_seconds(rows, engine, op, *reference)
            for peer in engine_peers(rows, engine, op):
                found = engine_seconds(rows, engine, op, *peer)
                if found is None:
                    continue
                group = select(
                    rows,
                    suite="engines",
                    client=engine,
                    op=op,
                    server=peer[0],
                    endpoints=peer[1],
                )
                count = int(group[0]["rows_per_stream"])
                partitions = sorted({int(r["streams"] or 0) for r in group})
                shown = ", ".join(str(p) for p in partitions if p) or "—"
                lines.append(
                    f"| {name} | {op} | {engine_peer_label(*peer, op)} | {shown} | "
                    f"{found.median:.3f} ({found.low:.3f}–{found.high:.3f}) | "
                    f"{_rate(count / found.median)} | "
                    f"{_times(_ratio(found, ours))} | "
                    f"{_engine_cpu(rows, engine, op, peer, 'engine')} | "
                    f"{_engine_cpu(rows, engine, op, peer, 'server')} |"
                )
    return lines


def _engines_floor(rows: list[Row]) -> list[str]:
    """Say how much faster than Spark's JDBC reader any read through Spark could be here."""
    reads = engine_peers(rows, SPARK, "read")
    cache = next((p for p in reads if p[0] == SPARK_CACHE), None)
    jdbc = [p for p in reads if p[0] == POSTGRESQL]
    floor = None if cache is None else engine_seconds(rows, SPARK, "read", *cache)
    if floor is None or not jdbc or floor.median <= 0:
        return []
    bounds = []
    for peer in jdbc:
        found = engine_seconds(rows, SPARK, "read", *peer)
        if found is not None:
            bounds.append(
                f"{found.median / floor.median:.1f}× over {engine_peer_label(*peer)} "
                f"({found.median:.3f} s)"
            )
    return [
        f"Spark's own aggregation of its cached rows, with no I/O, took {floor.median:.3f} s: "
        "a read through Spark can gain at most " + " and ".join(bounds) + " here, "
        "however fast its source."
    ]


def _engines_setup_lines(rows: list[Row]) -> list[str]:
    """Say how long each engine took to start and each source took to load."""
    lines = []
    starts = [
        f"{name} {float(r['seconds']):.1f} s"
        for engine, name in ENGINE_NAMES
        for r in select(rows, suite="engines", client=engine, op="startup")[:1]
    ]
    if starts:
        lines.append(f"Engine start-up (once per run, not in the timings): {', '.join(starts)}.")
    loads = []
    for r in select(rows, suite="engines", op="load"):
        server, endpoints = str(r["server"]), int(r["endpoints"] or 0)
        what = {
            QUIVER: f"quiver put, {endpoints} endpoint{'s' if endpoints != 1 else ''}",
            PARQUET: f"Parquet, {endpoints} files (pyarrow)",
            POSTGRESQL: "PostgreSQL COPY (psycopg)",
        }.get(server, server)
        loads.append(f"{what} {float(r['seconds']):.2f} s")
    if loads:
        lines.append(f"Loading the table, once: {', '.join(loads)}.")
    return lines


def _engines_section(
    rows: list[Row], run: dict[str, object], plot: Path | None, report_dir: Path
) -> list[str]:
    measured = select(rows, suite="engines", op=("read", "write"))
    if not measured:
        return []
    count = int(measured[0]["rows_per_stream"])
    nbytes = float(measured[0]["bytes"])
    software = run.get("sql_software") or {}
    assert isinstance(software, dict)
    versions = ", ".join(f"{k} {v}" for k, v in software.items() if k in ENGINES_SOFTWARE)
    if "PostgreSQL" in software:
        versions += f", PostgreSQL {software['PostgreSQL']}"
    plan = run.get("plan") or {}
    assert isinstance(plan, dict)
    warm_ups = plan.get("engines_warm_ups", 1)
    reference = engine_reference(rows, SPARK, "read") or engine_reference(rows, DASK, "read")
    many = reference[1] if reference else "N"
    lines = [
        "## Engines: Spark, Dask and Ray through quiver (the paper's Figure 10)",
        "",
        f"{count:,} rows of the taxi table ({_size(nbytes)} of Arrow data; `bench/taxi.py`) "
        f"stored in a quiver started for the suite twice, with 1 endpoint and with {many} "
        f"(`put(..., partitions=N)`), written to a local directory of {many} Parquet files "
        "of one row group each (pyarrow, snappy; contiguous slices of the rows, as the "
        "endpoints split them), and loaded into a PostgreSQL server started for the suite "
        "(COPY; durability off, as in the sql suite). Each engine runs in a worker process of "
        "its own, started once (its start-up is not in the timings), one engine at a time: "
        "Spark 4 `local[2]` (UI off, `spark.driver.memory` per mode), Dask "
        "`LocalCluster(n_workers=2, threads_per_worker=1, processes=True)`, Ray "
        "`ray.init(num_cpus=2)`. Every engine has two slots, whatever the machine: "
        f"{many} endpoints is twice that.",
        "",
        "Each read aggregates the whole table: group by `passenger_count` (8 groups, the "
        "missing count among them), count the trips, sum `fare_amount`, and count the "
        "non-null values of each of the other 18 columns, so that every column is read "
        "whatever a reader can prune (Spark's JDBC and Parquet readers read only the "
        "columns a query uses); the result is checked against pyarrow's. The sources:",
        "",
        "- quiver through the engine's connector: Spark's Python data source "
        '`spark.read.format("quiver")` (`quiver.spark`, a Spark partition per endpoint), '
        "`quiver.dask.read_table`, `quiver.ray.read_table`; with the connectors' default "
        'transport (`"auto"`: the server is on this host, so its endpoints are read through '
        f"shared memory, docs/shm.md) through 1 and {many} endpoints, and through {many} "
        'with `transport="grpc"` (Flight DoGet over loopback TCP, as a server on another '
        "host is read);",
        "- the same Spark with quiver's JVM connector (`java/spark`, `Spark, JVM connector`): "
        "run on the JDK 22+ `scripts/setup-spark-jvm.sh` built it with, when there is one "
        "(`Java (Spark, JVM connector)` below), whose "
        "foreign-function API lets it map a server's memfds on this host as the Python "
        "connector does, with the same three quiver reads; on an older Java it reads over "
        "gRPC alone. Its writes go over gRPC;",
        "- PostgreSQL through Spark's own JDBC reader (the paper's baseline; PostgreSQL JDBC "
        "driver, `fetchsize` 10,000), in its default single partition and in 2 "
        "(`partitionColumn` `PULocationID` over 1–265, `numPartitions` 2);",
        "- the local Parquet files: `spark.read.parquet` (Spark decides its partitions), "
        f"`dd.read_parquet` (a partition per file), `ray.data.read_parquet` "
        f"(`override_num_blocks` {many});",
        "- Spark only: its cache, the same rows cached in Spark's memory, aggregated with no "
        "I/O: the floor.",
        "",
        "Spark's writes write that cached DataFrame (repartitioned into "
        f"{many} partitions, `.cache()`d and counted first) with mode overwrite: to quiver "
        '(`df.write.format("quiver")`, default transport and gRPC) and through Spark\'s JDBC '
        "writer to PostgreSQL "
        "(`batchsize` 10,000, `reWriteBatchedInserts=true`: multi-row INSERTs, the faster "
        "of the driver's two ways); the rows are counted in the sink after each. Ray's "
        "group-by uses the pull-based sort shuffle: the default hash shuffle starts "
        "aggregator actors for every query, seconds on this machine.",
        "",
        f"{warm_ups} untimed round(s) of every peer, then the repetitions, the peers taking "
        "turns. "
        "Seconds: median (min–max), in the engine's process, from the call to the collected "
        "result. × quiver's time: the peer's median over quiver's (the most endpoints; "
        "above 1, quiver is faster). CPU seconds, medians: the engine's process tree (the "
        "driver, Spark's JVM and Python workers, Dask's scheduler and workers, Ray's raylet "
        "and workers; `/proc/PID/stat` before and after, children reaped included) and the "
        "server's (quiver; PostgreSQL with its backends).",
        "",
        "| goal | target | measured | result |",
        "| --- | --- | --- | --- |",
        *_goal_rows(engines_goals(rows)),
        "",
        *[line for text in _engines_floor(rows) for line in (text, "")],
        *_figure("Engines through quiver", plot, report_dir),
        *_engines_table(rows),
    ]
    for line in _engines_setup_lines(rows):
        lines += ["", line]
    if versions:
        lines += ["", f"- **Engines and peers**: {versions}"]
    return [*lines, ""]


#: The engines in the order shown, with their names.
ENGINE_NAMES = (
    (SPARK, "Spark"),
    (SPARK_JVM, "Spark, JVM connector"),
    (DASK, "Dask"),
    (RAY, "Ray"),
)


#: The sources and sinks in the order shown, with their colours (one endpoint, several).
ENGINE_SOURCE_COLORS = {
    QUIVER: ("#7fb2e5", "tab:blue"),
    QUIVER_GRPC: ("navy", "navy"),
    POSTGRESQL: ("tab:green", "#98df8a"),
    PARQUET: ("tab:purple", "tab:purple"),
    SPARK_CACHE: ("tab:gray", "tab:gray"),
}


def engine_peers(rows: list[Row], engine: str, op: str) -> list[tuple[str, int]]:
    """Return the ``(server, endpoints)`` the engines suite measured for ``engine``'s ``op``.

    In the order shown: quiver (fewest endpoints first), PostgreSQL, Parquet, Spark's cache.
    """
    found = {
        (str(r["server"]), int(r["endpoints"] or 0))
        for r in select(rows, suite="engines", client=engine, op=op)
    }
    order = list(ENGINE_SOURCE_COLORS)
    return sorted(found, key=lambda p: (order.index(p[0]) if p[0] in order else 99, p[1]))


def engine_peer_label(server: str, endpoints: int, op: str = "read") -> str:
    """Name a source or sink of the engines suite: ``quiver, 4 endpoints``..."""
    if server in (QUIVER, QUIVER_GRPC):
        grpc = ", gRPC" if server == QUIVER_GRPC else ""
        if op == "write":
            return f"quiver{grpc}"
        return f"quiver, {endpoints} endpoint{'s' if endpoints != 1 else ''}{grpc}"
    if server == POSTGRESQL:
        if op == "write":
            return "PostgreSQL, JDBC"
        return "PostgreSQL, JDBC" + (f", {endpoints} partitions" if endpoints > 1 else "")
    if server == PARQUET:
        return f"local Parquet, {endpoints} file{'s' if endpoints != 1 else ''}"
    if server == SPARK_CACHE:
        return "Spark's cache (no I/O)"
    return server


def engine_seconds(
    rows: list[Row], engine: str, op: str, server: str, endpoints: int
) -> Spread | None:
    """Return the spread of the seconds of one read or write of the engines suite."""
    found = select(rows, suite="engines", client=engine, op=op, server=server, endpoints=endpoints)
    return spread(found, "seconds")


def engine_reference(rows: list[Row], engine: str, op: str) -> tuple[str, int] | None:
    """Return the peer the others are compared with: quiver with the most endpoints."""
    ours = [p for p in engine_peers(rows, engine, op) if p[0] == QUIVER]
    return ours[-1] if ours else None


def engines_figure(rows: list[Row], path: Path) -> Path:
    """Seconds per source or sink, a panel per engine and op (reads, Spark's writes)."""
    panels = [
        (engine, name, op)
        for engine, name in ENGINE_NAMES
        for op in ("read", "write")
        if engine_peers(rows, engine, op)
    ]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(9, 1.2 + 0.55 * sum(
            len(engine_peers(rows, e, o)) + 1 for e, _, o in panels
        )), squeeze=False,
        gridspec_kw={"height_ratios": [len(engine_peers(rows, e, o)) + 1 for e, _, o in panels]},
    )  # fmt: skip
    table_rows = next(
        (int(r["rows_per_stream"]) for r in select(rows, suite="engines", op="read")), 0
    )
    for ax, (engine, name, op) in zip(axes[:, 0], panels, strict=True):
        peers = engine_peers(rows, engine, op)
        reference = engine_reference(rows, engine, op)
        ours = None if reference is None else engine_seconds(rows, engine, op, *reference)
        found = [(p, engine_seconds(rows, engine, op, *p)) for p in peers]
        top = max((s.high for _, s in found if s is not None), default=1.0)
        for y, ((server, endpoints), seconds) in enumerate(found):
            if seconds is None:
                continue
            colors = ENGINE_SOURCE_COLORS.get(server, ("black", "black"))
            ax.barh(
                y,
                seconds.median,
                xerr=[[seconds.median - seconds.low], [seconds.high - seconds.median]],
                capsize=3,
                color=colors[0 if endpoints <= 1 else 1],
            )
            text = _seconds(seconds.median)
            if ours is not None and (server, endpoints) != reference and ours.median > 0:
                text += f"  ({seconds.median / ours.median:.2f}× quiver's time)"
            ax.annotate(
                text,
                xy=(seconds.high, y),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
        ax.set_yticks(
            range(len(found)), [engine_peer_label(s, e, op) for (s, e), _ in found], fontsize=8
        )
        ax.invert_yaxis()
        ax.set_xlim(0, top * 1.6)
        what = "read and aggregate"
        if op == "write":
            tasks = {p[1] for p in peers}
            what = f"write its cached rows ({', '.join(map(str, sorted(tasks)))} tasks, overwrite)"
        ax.set_title(f"{name}: {what}", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1][0].set_xlabel("seconds (median; whiskers: min–max)")
    fig.suptitle(
        f"Engines through quiver and their peers, {rows_text(table_rows)} taxi rows "
        "(the paper's Figure 10)",
        fontsize=10,
    )
    return _save(fig, path)


def _goals_link(rows: list[Row]) -> list[str]:
    if not select(rows, suite="engines", op=("read", "write")):
        return []
    return [
        "",
        "The goals of Spark, Dask and Ray through quiver are in "
        "[their section](#engines-spark-dask-and-ray-through-quiver-the-papers-figure-10).",
    ]


def _figures(rows: list[Row], plan: dict[str, object], out_dir: Path) -> list[Path]:
    if not select(rows, suite="engines", op=("read", "write")):
        return []
    return [engines_figure(rows, out_dir / "engines.png")]


SUITE = Suite(
    "engines",
    run_engines,
    goals=lambda rows, plan: engines_goals(rows),
    goals_rank=70,
    goals_link=_goals_link,
    sections=(
        Section(
            lambda rows, run, plots, at: _engines_section(rows, run, plots.get("engines"), at),
            rank=140,
        ),
    ),
    figures=_figures,
)
