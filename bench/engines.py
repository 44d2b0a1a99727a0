"""The ``engines`` suite's clients: Spark, Dask and Ray, each in a worker process of its own.

The BID'22 paper's Figure 10 reads a table into Spark through Flight and through Spark's own
JDBC reader from PostgreSQL. This module runs one engine per worker process
(:mod:`bench.workers`) for the whole suite: the worker starts the engine once (a local
SparkSession, a Dask ``LocalCluster``, a local Ray instance) and then answers the harness's
calls, one per measurement: :meth:`EngineClient.read` reads a source (quiver through the
engine's quiver connector, PostgreSQL through Spark's JDBC reader, a local Parquet directory,
Spark's cache) and aggregates it, :meth:`EngineClient.write` writes Spark's cached DataFrame
to a sink (quiver, PostgreSQL through JDBC). Each answers its own wall time and a summary of
the result, which the harness checks against the table it generated.

The aggregation (:data:`KEY`, :data:`COUNTED`) groups the trips by ``passenger_count``
(eight groups, the trips without a passenger count among them) and counts the trips, sums
the fares, and counts the non-null values of each of the other 18 columns: every column is
read whatever the source can prune (Spark's JDBC reader and its Parquet reader read only the
columns a query needs), and the counts check each column arrived whole.

Everything an engine prints, and every process it starts (Spark's JVM and its Python workers,
Dask's nannies and workers, Ray's raylet, GCS and workers), writes to the engine's log file,
not to the harness's output. :func:`tree_cpu_seconds` reads the CPU time of a process and of
everything below it, for the worker (the engine) and for the servers.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import math
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import taxi
from .results import DASK, PARQUET, POSTGRESQL, QUIVER, RAY, SPARK, SPARK_CACHE, SPARK_JVM
from .workers import descendants, kill_descendants, process_table

#: The engines, in the order the suite runs them (one at a time).
ENGINES = (SPARK, SPARK_JVM, DASK, RAY)
#: The two Sparks: the same Spark, with the Python connector and with the JVM one.
SPARKS = (SPARK, SPARK_JVM)
#: What each engine needs importable, and the quiver connector it is measured through (the
#: JVM one's jar is on its Spark's classpath; quiver.spark's register() then leaves it be).
PACKAGES = {
    SPARK: ("pyspark",),
    SPARK_JVM: ("pyspark",),
    DASK: ("dask.dataframe", "distributed"),
    RAY: ("ray.data",),
}
CONNECTORS = {
    SPARK: "quiver.spark",
    SPARK_JVM: "quiver.spark",
    DASK: "quiver.dask",
    RAY: "quiver.ray",
}
#: The distributions whose versions the report shows.
DISTRIBUTIONS = {
    SPARK: ("pyspark",),
    SPARK_JVM: ("pyspark",),
    DASK: ("dask", "distributed"),
    RAY: ("ray",),
}

#: The column the aggregation groups by, and the columns whose non-null values it counts.
KEY = "passenger_count"
COUNTED = tuple(f.name for f in taxi.SCHEMA if f.name != KEY)
#: The column the aggregation sums.
SUMMED = "fare_amount"
#: The tables the suite stores in quiver: the same rows with 1 and with N endpoints, and the
#: table Spark writes; PostgreSQL's tables.
TRIPS_ONE = "trips_1"
TRIPS_MANY = "trips_n"
WRITTEN = "written"
PG_TRIPS = "trips"
#: Spark's JDBC reads: the rows fetched per round trip, and the partitioned read's column
#: and bounds (the pickup zone, 1-265, spread evenly), split over this many connections.
JDBC_FETCH_SIZE = 10_000
JDBC_PARTITION_COLUMN = "PULocationID"
JDBC_BOUNDS = (1, 266)
JDBC_PARTITIONS = 2
#: Spark's JDBC writes: rows per batch, sent as multi-row INSERTs (the PostgreSQL driver's
#: reWriteBatchedInserts, the faster of its two ways: 2.3 s against 3.6 s for 500k rows here).
JDBC_BATCH_SIZE = 10_000
JDBC_WRITE_OPTIONS = "reWriteBatchedInserts=true"
#: The engines' parallelism: Spark ``local[2]``, 2 Dask worker processes of one thread, Ray
#: with 2 CPUs.
SLOTS = 2
#: The relative difference the fare sums may have (each engine adds them in its own order).
SUM_TOLERANCE = 1e-9
#: How long an engine's processes get to end after it is stopped, before they are killed.
STOP_GRACE_S = 10.0


def missing(engine: str) -> str | None:
    """Return why ``engine`` cannot run here (a package not importable), or ``None``."""
    for module in PACKAGES[engine]:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as e:
            return f"{module} is not importable ({type(e).__name__}: {e})"
        if found is None:
            return f"{module} is not installed"
    return None


def connector_missing(engine: str) -> str | None:
    """Return why quiver's connector for ``engine`` is absent, or ``None`` (not imported)."""
    module = CONNECTORS[engine]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        return f"{module} is not importable ({type(e).__name__}: {e})"
    return None if found is not None else f"{module} does not exist"


def spark_jvm_jars() -> tuple[str | None, str]:
    """Build the JVM connector for this Python's PySpark, if it is not built already.

    Runs ``scripts/setup-spark-jvm.sh`` (which caches what it builds); returns ``spark.jars``
    for the connector and its output, or ``None`` and why not.
    """
    script = Path(__file__).resolve().parent.parent / "scripts" / "setup-spark-jvm.sh"
    try:
        done = subprocess.run(
            ["bash", str(script), sys.executable],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{script.name} did not run: {e}"
    if done.returncode != 0:
        return None, f"{script.name} failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return (java_cache() / "spark" / "jars.txt").read_text().strip(), done.stdout


def spark_jvm_java22() -> Path | None:
    """Return the Java 22+ the JVM connector's shared-memory reads were built for.

    ``scripts/setup-spark-jvm.sh`` records it beside the jar; ``None`` when there is none:
    then the connector reads over gRPC alone.
    """
    recorded = java_cache() / "spark" / "java22-home"
    return Path(recorded.read_text().strip()) if recorded.is_file() else None


def jdbc_jar() -> Path:
    """Return where ``scripts/setup-java.sh`` puts the PostgreSQL JDBC driver's jar."""
    version = (Path(__file__).parent / "postgresql-jdbc.version").read_text().strip()
    return java_cache() / "lib" / f"postgresql-{version}.jar"


def java_cache() -> Path:
    """Return where the scripts/setup-*.sh of Java keep what they build and fetch."""
    return Path(os.environ.get("QUIVER_JAVA_CACHE") or Path.home() / ".cache/quiver/java")


@dataclass(frozen=True)
class Expected:
    """What the aggregation of the table gives, computed by pyarrow in the harness.

    Attributes
    ----------
    rows : int
        Trips (the sum of the groups' counts).
    groups : int
        Distinct passenger counts, the missing one included.
    fare : float
        The sum of the fares.
    cells : int
        The non-null values of the counted columns.
    """

    rows: int
    groups: int
    fare: float
    cells: int

    @classmethod
    def of(cls, table: pa.Table) -> Expected:
        """Aggregate ``table`` as every engine does."""
        cells = sum(len(table[c]) - table[c].null_count for c in COUNTED)
        return cls(
            table.num_rows,
            len(pc.unique(table[KEY])),
            float(pc.sum(table[SUMMED]).as_py() or 0.0),
            cells,
        )

    def check(self, got: dict[str, Any]) -> None:
        """Raise if an engine's summary of its aggregation differs from this one."""
        want = {"rows": self.rows, "groups": self.groups, "cells": self.cells}
        for key, value in want.items():
            if int(got[key]) != value:
                raise RuntimeError(f"the aggregation found {key} = {got[key]}, expected {value}")
        if not math.isclose(float(got["fare"]), self.fare, rel_tol=SUM_TOLERANCE):
            raise RuntimeError(f"the aggregation's fares sum to {got['fare']}, not {self.fare}")


def write_parquet(table: pa.Table, directory: Path, files: int) -> None:
    """Write ``table`` into ``directory`` as ``files`` Parquet files of one row group each.

    The files split the rows as quiver's endpoints do (contiguous, even), so a directory of
    N files is the Parquet counterpart of a table of N endpoints. pyarrow's defaults
    otherwise (snappy compression, dictionary encoding).
    """
    directory.mkdir(parents=True, exist_ok=True)
    rows = table.num_rows
    for i in range(files):
        start, end = rows * i // files, rows * (i + 1) // files
        part = table.slice(start, end - start)
        pq.write_table(part, directory / f"part-{i:05d}.parquet", row_group_size=max(1, len(part)))


# --- processes and their CPU time ----------------------------------------------------------------


def tree_cpu_seconds(pid: int) -> float:
    """Return the CPU seconds (user + system) of ``pid`` and every process below it.

    Each process's own time and that of its children it has reaped (``cutime``,
    ``cstime``): a process that ended during a measurement and was waited for by its parent
    in the tree still counts. One that was not (reparented to init) is lost.
    """
    table = process_table()
    return sum(table[p][1] for p in [pid, *descendants(pid, table)] if p in table)


# --- the engines, in their worker processes ----------------------------------------------------


@dataclass
class EngineConfig:
    """What a worker needs to start its engine and reach the sources.

    Attributes
    ----------
    engine : str
        :data:`SPARK`, :data:`DASK` or :data:`RAY`.
    log_path : str
        The file the engine and its processes write their output to.
    parquet : str
        The Parquet directory.
    parquet_files : int
        Its files (the Ray reader reads as many blocks).
    quiver_uri : str
        The quiver server's URI.
    spark_memory : str
        Spark's driver memory (``local[2]``: the executors are in the driver's JVM).
    jdbc_jar : str or None
        The PostgreSQL JDBC driver's jar (Spark only; ``None``: no JDBC peers).
    jdbc_url : str or None
        The PostgreSQL server's JDBC URL.
    java_home : str or None
        The JDK the JVM connector's Spark runs on (``None``: ``java`` on the ``PATH``): a
        JDK 22+ reads quiver's shared memory.
    cache_partitions : int
        Partitions of Spark's cached DataFrame (the writes write as many).
    """

    engine: str
    log_path: str
    parquet: str
    parquet_files: int
    quiver_uri: str
    spark_memory: str = "2g"
    jdbc_jar: str | None = None
    jdbc_url: str | None = None
    spark_jars: str | None = None
    cache_partitions: int = 4
    java_home: str | None = None


class EngineClient:
    """One engine, started in the worker when built; the harness calls its methods.

    Parameters
    ----------
    config : EngineConfig
        Which engine and where everything is.
    """

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.engine = config.engine
        _redirect_output(config.log_path)
        self.connector_error: str | None = None
        self._cached: Any = None
        started = time.perf_counter()
        if self.engine in SPARKS:
            self._start_spark()
        elif self.engine == DASK:
            self._start_dask()
        elif self.engine == RAY:
            self._start_ray()
        else:
            raise ValueError(f"unknown engine {self.engine!r}")
        self.startup_seconds = time.perf_counter() - started
        try:
            self.connector = importlib.import_module(CONNECTORS[self.engine])
            if self.engine in SPARKS:
                self.connector.register(self.spark)
            jvm = self.connector.jvm_source_loaded(self.spark) if self.engine in SPARKS else False
            if self.engine == SPARK_JVM and not jvm:
                raise RuntimeError("the JVM connector's jar is not on Spark's classpath")
            if self.engine == SPARK and jvm:
                raise RuntimeError("the JVM connector's jar took the Python connector's place")
        except Exception as e:
            self.connector = None
            self.connector_error = f"{type(e).__name__}: {e}"
            traceback.print_exc()

    # -- starting and stopping -----------------------------------------------------------------

    def _start_spark(self) -> None:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        builder = (
            SparkSession.builder.master(f"local[{SLOTS}]")
            .appName("quiver-bench-engines")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", self.config.spark_memory)
            .config("spark.sql.session.timeZone", "UTC")
        )
        jars = [self.config.jdbc_jar]
        if self.engine == SPARK_JVM:
            jars.append(self.config.spark_jars)
            if self.config.java_home is not None:
                # PySpark starts its JVM from JAVA_HOME. The connector calls libc through
                # the foreign-function API, which warns unless native access is enabled.
                os.environ["JAVA_HOME"] = self.config.java_home
                builder = builder.config(
                    "spark.driver.extraJavaOptions", "--enable-native-access=ALL-UNNAMED"
                )
        if any(jars):
            builder = builder.config("spark.jars", ",".join(j for j in jars if j))
        self.spark = builder.getOrCreate()
        self.spark.sparkContext.setLogLevel("WARN")

    def _start_dask(self) -> None:
        from distributed import Client, LocalCluster

        self.cluster = LocalCluster(
            n_workers=SLOTS,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.WARNING,
        )
        self.client = Client(self.cluster)

    def _start_ray(self) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import ray
        import ray.data

        ray.init(
            address="local",
            num_cpus=SLOTS,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        from ray.data.context import ShuffleStrategy

        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        # The default hash shuffle starts aggregator actors for every group-by: 7-10 s per
        # aggregation of 500k rows here, against 2.1-2.4 s for the task-based sort shuffle.
        context.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED

    def connector_status(self) -> str | None:
        """Return why the quiver connector could not be loaded, or ``None``."""
        return self.connector_error

    def started(self) -> float:
        """Return the seconds the engine took to start (in the worker)."""
        return self.startup_seconds

    def close(self) -> None:
        """Stop the engine; kill whatever of its processes outlives the stop."""
        with contextlib.suppress(Exception):
            if self.engine in SPARKS:
                if self._cached is not None:
                    self._cached.unpersist()
                self.spark.stop()
            elif self.engine == DASK:
                self.client.close()
                self.cluster.close()
            elif self.engine == RAY:
                import ray

                ray.shutdown()
        # Spark's JVM stays up after spark.stop() until its driver exits: no grace for it.
        deadline = time.monotonic() + (0.0 if self.engine in SPARKS else STOP_GRACE_S)
        while descendants(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.1)
        kill_descendants(os.getpid())

    # -- reads ---------------------------------------------------------------------------------

    def partitions(self, source: dict[str, Any]) -> int | None:
        """Return how many partitions the engine reads ``source`` in (untimed)."""
        if self.engine in SPARKS:
            return int(self._spark_frame(source).rdd.getNumPartitions())
        if self.engine == DASK:
            return int(self._dask_frame(source).npartitions)
        return None

    def read(self, source: dict[str, Any]) -> dict[str, Any]:
        """Read ``source`` and aggregate it; return the seconds and the result's summary.

        ``source`` has ``kind`` (:data:`QUIVER`, :data:`POSTGRESQL`, :data:`PARQUET`,
        :data:`SPARK_CACHE`) and, for quiver, ``table`` and ``transport`` (the connector's
        ``"auto"`` by default, or ``"grpc"``); for PostgreSQL, ``partitions`` (1: Spark's
        default single-connection read).
        """
        with _the_cause():
            started = time.perf_counter()
            if self.engine in SPARKS:
                summary = _spark_aggregate(self._spark_frame(source))
            elif self.engine == DASK:
                summary = _dask_aggregate(self._dask_frame(source))
            else:
                summary = _ray_aggregate(self._ray_dataset(source))
            return {"seconds": time.perf_counter() - started, **summary}

    def _need_connector(self) -> Any:
        if self.connector is None:
            raise RuntimeError(f"{CONNECTORS[self.engine]}: {self.connector_error}")
        return self.connector

    def _spark_frame(self, source: dict[str, Any]) -> Any:
        kind = source["kind"]
        if kind == QUIVER:
            self._need_connector()
            return (
                self.spark.read.format("quiver")
                .option("uri", self.config.quiver_uri)
                .option("transport", source.get("transport", "auto"))
                .load(source["table"])
            )
        if kind == PARQUET:
            return self.spark.read.parquet(self.config.parquet)
        if kind == SPARK_CACHE:
            return self.cached()
        if kind == POSTGRESQL:
            reader = self._jdbc().option("dbtable", PG_TRIPS).option("fetchsize", JDBC_FETCH_SIZE)
            if int(source.get("partitions", 1)) > 1:
                reader = (
                    reader.option("partitionColumn", JDBC_PARTITION_COLUMN)
                    .option("lowerBound", JDBC_BOUNDS[0])
                    .option("upperBound", JDBC_BOUNDS[1])
                    .option("numPartitions", int(source["partitions"]))
                )
            return reader.load()
        raise ValueError(f"Spark cannot read {kind!r}")

    def _jdbc(self, url_options: str = "") -> Any:
        if not self.config.jdbc_url:
            raise RuntimeError("no PostgreSQL server or JDBC driver for this run")
        url = self.config.jdbc_url + (f"?{url_options}" if url_options else "")
        return (
            self.spark.read.format("jdbc")
            .option("url", url)
            .option("user", "postgres")
            .option("driver", "org.postgresql.Driver")
        )

    def _dask_frame(self, source: dict[str, Any]) -> Any:
        kind = source["kind"]
        if kind == QUIVER:
            return self._need_connector().read_table(
                self.config.quiver_uri, source["table"], transport=source.get("transport", "auto")
            )
        if kind == PARQUET:
            import dask.dataframe as dd

            return dd.read_parquet(self.config.parquet)
        raise ValueError(f"Dask cannot read {kind!r}")

    def _ray_dataset(self, source: dict[str, Any]) -> Any:
        kind = source["kind"]
        if kind == QUIVER:
            return self._need_connector().read_table(
                self.config.quiver_uri, source["table"], transport=source.get("transport", "auto")
            )
        if kind == PARQUET:
            import ray.data

            return ray.data.read_parquet(
                self.config.parquet, override_num_blocks=self.config.parquet_files
            )
        raise ValueError(f"Ray cannot read {kind!r}")

    # -- Spark's writes ------------------------------------------------------------------------

    def cached(self) -> Any:
        """Return the taxi rows as a DataFrame cached in Spark's memory (made once).

        Read from the Parquet directory and repartitioned into ``cache_partitions``
        partitions, so that a write is of ``cache_partitions`` tasks whatever the sink.
        """
        if self._cached is None:
            frame = self.spark.read.parquet(self.config.parquet)
            frame = frame.repartition(self.config.cache_partitions).cache()
            frame.count()
            self._cached = frame
        return self._cached

    def write(self, sink: dict[str, Any]) -> dict[str, Any]:
        """Write the cached DataFrame to ``sink`` (mode overwrite); return the seconds."""
        if self.engine not in SPARKS:
            raise ValueError("only the Spark engines write")
        with _the_cause():
            return self._write(sink)

    def _write(self, sink: dict[str, Any]) -> dict[str, Any]:
        frame = self.cached()
        kind = sink["kind"]
        started = time.perf_counter()
        if kind == QUIVER:
            self._need_connector()
            (
                frame.write.format("quiver")
                .option("uri", self.config.quiver_uri)
                .option("transport", sink.get("transport", "auto"))
                .mode("overwrite")
                .save(sink["table"])
            )
        elif kind == POSTGRESQL:
            url = f"{self.config.jdbc_url}?{JDBC_WRITE_OPTIONS}"
            (
                frame.write.format("jdbc")
                .option("url", url)
                .option("user", "postgres")
                .option("driver", "org.postgresql.Driver")
                .option("dbtable", sink["table"])
                .option("batchsize", JDBC_BATCH_SIZE)
                .mode("overwrite")
                .save()
            )
        else:
            raise ValueError(f"Spark does not write to {kind!r} here")
        return {"seconds": time.perf_counter() - started}


#: A line of an error's text that names an exception: ``quiver.errors.XError: ...``.
_EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Exit)): \S")


@contextlib.contextmanager
def _the_cause() -> Iterator[None]:
    """Re-raise an engine's error with the innermost exception it reports on its first line.

    Spark wraps an error of a Python data source in an ``AnalysisException`` whose text is
    the Python worker's traceback followed by ``SQLSTATE: ...``; Ray wraps a task's in a
    ``RayTaskError``. The worker reports the last line of its traceback to the harness,
    which then said ``SQLSTATE: 38000`` and nothing of the cause.
    """
    try:
        yield
    except Exception as e:
        lines = str(e).splitlines()
        named = [line.strip() for line in lines if _EXCEPTION_LINE.match(line)]
        first = named[-1] if named else next((x.strip() for x in lines if x.strip()), "")
        raise RuntimeError(f"{type(e).__name__}: {first[:500]}") from e


def _redirect_output(path: str) -> None:
    """Send this process's stdout and stderr (and its children's) to the file ``path``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _spark_aggregate(frame: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F

    aggregates = [F.count(F.lit(1)).alias("_rows"), F.sum(SUMMED).alias("_fare")]
    aggregates += [F.count(c).alias(c) for c in COUNTED]
    found = frame.groupBy(KEY).agg(*aggregates).collect()
    return {
        "groups": len(found),
        "rows": sum(int(r["_rows"]) for r in found),
        "fare": sum(float(r["_fare"] or 0.0) for r in found),
        "cells": sum(int(r[c]) for r in found for c in COUNTED),
    }


def _dask_aggregate(frame: Any) -> dict[str, Any]:
    spec: dict[str, Any] = dict.fromkeys(COUNTED, "count")
    spec[SUMMED] = ["count", "sum"]
    spec[COUNTED[0]] = ["count", "size"]
    found = frame.groupby(KEY, dropna=False).agg(spec).compute()
    return {
        "groups": len(found),
        "rows": int(found[(COUNTED[0], "size")].sum()),
        "fare": float(found[(SUMMED, "sum")].sum()),
        "cells": int(sum(found[(c, "count")].sum() for c in COUNTED)),
    }


def _ray_aggregate(dataset: Any) -> dict[str, Any]:
    from ray.data.aggregate import Count, Sum

    aggregates = [Count(alias_name="_rows"), Sum(SUMMED, alias_name="_fare")]
    aggregates += [Count(c, ignore_nulls=True, alias_name=c) for c in COUNTED]
    found = dataset.groupby(KEY).aggregate(*aggregates).to_pandas()
    return {
        "groups": len(found),
        "rows": int(found["_rows"].sum()),
        "fare": float(found["_fare"].sum()),
        "cells": int(sum(found[c].sum() for c in COUNTED)),
    }
