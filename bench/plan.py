"""What each mode measures: the shapes, sizes and repetitions, scaled to the machine."""

from __future__ import annotations

from dataclasses import dataclass

from .data import RECORD_BYTES

KI = 1024
MI = 1024 * 1024
GIB = 1024**3

#: Arrow bytes of the TPC-H tables per scale factor, as tpchgen-cli writes them
#: (``string_view`` columns) and pyarrow reads them: 1,699 MiB at scale factor 1.
TPCH_ARROW_BYTES_PER_SF = 1.8e9
#: The scale factors full mode chooses from, the largest first (:func:`tpch_full_scale`).
TPCH_FULL_SCALES = (10.0, 3.0, 1.0)
#: The largest share of the machine's RAM full mode's TPC-H tables may take in Arrow.
TPCH_RAM_SHARE = 1 / 3


@dataclass(frozen=True)
class Plan:
    """The measurements of one run.

    Attributes
    ----------
    mode : str
        ``quick``, ``full`` or ``smoke``.
    reps : int
        Repetitions of every throughput measurement (the pyarrow headline's:
        ``headline_reps``).
    headline_reps : int
        Repetitions of the pyarrow and quiver Python clients' headline get and put (and
        the quiver client's shared-memory get), on which the goals are read. The
        single-stream 1 GiB gets and puts spread over 2x from one round to the next on
        this machine, and a round costs seconds.
    warm_up_reps : int
        Untimed rounds of each pyarrow get and put measurement before its ``reps``, per
        server: the first puts into a server fault in fresh memory (quiver's body pool and
        the Arrow C++ server's allocator have nothing to recycle yet), which a long-running
        service pays once, and so does each measurement's fresh client worker. With one
        warm-up round (run 13), the first timed round was still the slowest or close to it in
        most shapes, for both servers: the headline puts 0.75 and 0.73 GB/s, the rounds
        after 1.1-3.4. Full mode makes two. The headline's warm-up times are kept in the
        run's notes.
    streams : tuple of int
        Parallel streams of the grid (the paper's 1, 2, 4, 8, 16).
    rows_per_stream : tuple of int
        Records per stream of the grid.
    batch_rows : int
        Rows per record batch of the grid.
    batch_sweep : tuple of int
        Rows per batch swept at one stream of ``batch_sweep_rows`` records.
    batch_sweep_rows : int
        Records of the batch-size sweep.
    max_table_bytes : int
        Largest table one measurement holds in a server (grid shapes above it are skipped).
    headline_bytes : int
        The single-stream table the goals are measured on (1 GiB in full mode).
    small_rows : int
        Rows of the small-object table (32 rows of 32 bytes: 1 KiB).
    small_gets : int
        Gets timed one by one for the small-object latency, per server.
    json_rows : tuple of int
        Rows of the mixed table sent as JSON and over Flight.
    bytes_rows : int
        Rows of each one-column table the ``bytes`` suite puts, gets and stores (one
        table per column kind).
    ceiling_reps : int
        Repetitions of each ceiling.
    tcp_seconds : float
        How long each loopback TCP measurement sends.
    memcpy_bytes : int
        Bytes copied by each memcpy measurement.
    sql_rows : tuple of int
        Rows of the taxi tables whose ``SELECT *`` the ``sql`` suite fetches into pandas.
    sql_reps : int
        Repetitions of each ``sql`` fetch.
    sql_row_clients_max_rows : int
        Largest result the row-based clients (psycopg, ODBC) fetch: each value becomes a
        Python object, and 16M rows would take minutes per repetition and over 10 GB.
    soak_clients : int
        Concurrent clients of the ``soak`` suite (each its own connection).
    soak_seconds : float
        How long the ``soak`` suite's clients mix puts, gets, listings and deletes.
    soak_rows : int
        Rows of the table each soak put sends.
    shm_bytes : tuple of int
        Table sizes the ``shm`` suite gets and puts over shared memory and over gRPC.
    shm_puts_in_a_row : int
        Puts the ``shm`` suite makes back to back per client and repetition, each
        replacing the table the one before stored: each is timed.
    functions_rows : int
        Rows of 20 float32 features each peer of the ``functions`` suite scores per
        repetition, in 65,536-row requests (the paper's XGBatch scenario: 10M).
    functions_json_rows : int
        Rows the JSON scoring service scores per repetition instead: a row costs it
        about a hundred times what it costs the others.
    functions_calls : int
        Sequential requests timed per peer and request size (1 and 1,000 rows) for the
        ``functions`` suite's latencies...
    functions_warm_ups : int
        ...after this many untimed ones.
    functions_stream_bytes : int
        Bytes of feature rows each stream of the ``functions`` suite's SQL over a stream
        sends (the echo's and each statement's)...
    functions_stream_max_memory : int
        ...to a quiver started with this ``--max-memory``: a fraction of a stream, so a
        server that held the stream would refuse it.
    engines_rows : int
        Rows of the taxi table the ``engines`` suite's engines read and Spark writes.
    engines_endpoints : int
        N, the endpoints of the table read through N endpoints (beside 1), and the files of
        the Parquet directory: twice the engines' 2 slots (Spark ``local[2]``, 2 Dask
        workers, Ray with 2 CPUs), whatever the machine.
    engines_spark_memory : str
        Spark's driver memory (``local[2]`` runs its executors in the driver's JVM, which
        caches the table for the writes).
    cluster_bytes : int
        Arrow bytes of the table the ``cluster`` suite reads over 1, 2 and 3 nodes and
        copies again after a node is lost.
    cluster_reps : int
        Repetitions of each of the ``cluster`` suite's reads and re-replications.
    cluster_appends : int
        1-row appends to one cluster table, whose last ones are timed against its first
        (past 64 partitions the small ones are merged).
    cluster_rate : str
        Each cluster node's link in the ``cluster`` suite, as ``tc`` takes it.
    nemesis_seconds : float
        How long the ``nemesis`` suite injects faults into three cluster nodes under
        appends and queries (at least one of each kind of fault, whatever this says).
    nemesis_calm_s : float
        Seconds of calm after each of its faults.
    engines_timeout_s : float
        Longest an engine may take to start or to answer one read or write.
    engines_warm_ups : int
        Untimed rounds of every peer of an engine before its timed repetitions: an
        engine's first reads pay for its JIT, its Python workers' start and its caches
        (Spark's first Parquet read took 3.8 s, the next 0.6 s).
    tpch_scale : float
        The TPC-H scale factor of the ``tpch`` suite's tables (1: lineitem's 6M rows),
        whose 22 queries run ``reps`` times on each engine after one untimed, checked run:
        0.01 in smoke mode, 1 in quick mode, 10 in full mode on a machine that holds it
        (:func:`tpch_full_scale`).
    lake_scale : float
        The TPC-H scale factor of the ``lake`` suite's tables in S3 (issue 66; 0.01 in
        smoke mode, 1 otherwise: its queries cross a 1 Gbit/s link)...
    lake_parts : int
        ...each table as this many Parquet files under its prefix (``tpchgen-cli
        --parts``), and the DoGet table too.
    lake_reps : int
        Timed runs of each query per engine in the ``lake`` suite, after its checked run.
    lake_warm_cache : str
        The warm quiver's ``--cache-size`` (on disk, ``--cache-dir``): all the tables.
    lake_doget_scale : float
        The scale factor of the lineitem table the ``lake`` suite reads whole by DoGet
        from S3 (about 222 MB of Parquet per unit: 4.5, about 1 GiB, in full mode)...
    lake_doget_reps : int
        ...this many times, a fresh server each.
    clients_bytes : int
        Arrow bytes of each of the ``clients`` suite's two tables (issue 67: 1 GiB), which
        every client gets and puts, from and into each server...
    clients_reps : int
        ...this many timed rounds each, the servers alternating round by round, after
        ``clients_warm_ups`` untimed ones (a JVM's JIT, fresh memory in the servers).
    clients_warm_ups : int
        See ``clients_reps``.
    clients_latency_calls : int
        Gets of a 1-row table each client times one after another per server and round.
    lake_memory_copies : int
        Copies of that table's objects (under other keys) that make the table a server
        with a tenth of its size as ``--cache-size`` reads while its RSS is sampled: about
        3 GiB in full mode (10 GiB would take this 2-core machine's disk and minutes).
    console_rows : int
        Rows of the table whose sample the ``console`` suite's page shows (issue 69: 1M;
        100k in smoke mode)...
    console_result_rows : int
        ...and of the result it shows, ``SELECT * ... WHERE id <`` this (100k; 10k in smoke
        mode), with 100 rows a page and with all in one: a page size the console offers
        (100, 1,000, 10,000 or 100,000). ``reps`` repetitions, each in a fresh browser.
    console_idle_seconds : float
        Each idle window of the ``console`` suite, no page open, over which the CPU of the
        quiver serving the console and of one without it are read (``reps`` + 1 windows).
    """

    mode: str
    reps: int
    headline_reps: int
    streams: tuple[int, ...]
    rows_per_stream: tuple[int, ...]
    batch_rows: int
    batch_sweep: tuple[int, ...]
    batch_sweep_rows: int
    max_table_bytes: int
    headline_bytes: int
    small_rows: int
    small_gets: int
    json_rows: tuple[int, ...]
    ceiling_reps: int
    tcp_seconds: float
    memcpy_bytes: int
    sql_rows: tuple[int, ...]
    sql_reps: int
    sql_row_clients_max_rows: int
    bytes_rows: int = 200_000
    soak_clients: int = 64
    soak_seconds: float = 10.0
    soak_rows: int = 10_000
    shm_bytes: tuple[int, ...] = (64 * MI, 256 * MI)
    shm_puts_in_a_row: int = 5
    warm_up_reps: int = 0
    functions_rows: int = 524_288
    functions_json_rows: int = 20_000
    functions_calls: int = 100
    functions_warm_ups: int = 10
    functions_stream_bytes: int = 512 * MI
    functions_stream_max_memory: int = 128 * MI
    engines_rows: int = 500_000
    cluster_bytes: int = 128 * MI
    cluster_reps: int = 2
    cluster_appends: int = 2_000
    cluster_rate: str = "1gbit"
    nemesis_seconds: float = 150.0
    nemesis_calm_s: float = 5.0
    engines_endpoints: int = 4
    engines_spark_memory: str = "2g"
    engines_timeout_s: float = 600.0
    engines_warm_ups: int = 1
    tpch_scale: float = 1.0
    lake_scale: float = 1.0
    lake_parts: int = 4
    lake_reps: int = 2
    lake_warm_cache: str = "4GiB"
    lake_doget_scale: float = 1.0
    lake_doget_reps: int = 2
    lake_memory_copies: int = 3
    clients_bytes: int = 128 * MI
    clients_reps: int = 1
    clients_warm_ups: int = 1
    clients_latency_calls: int = 50
    console_rows: int = 1_000_000
    console_result_rows: int = 100_000
    console_idle_seconds: float = 5.0

    @property
    def headline_rows(self) -> int:
        """Records in the headline table."""
        return self.headline_bytes // RECORD_BYTES

    def grid(self) -> list[tuple[int, int, int]]:
        """Return the ``(streams, rows_per_stream, batch_rows)`` shapes to measure.

        The streams x records grid at the default batch size, then the batch-size sweep;
        shapes whose table would pass ``max_table_bytes`` are left out.
        """
        shapes = [
            (s, r, self.batch_rows)
            for r in self.rows_per_stream
            for s in self.streams
            if s * r * RECORD_BYTES <= self.max_table_bytes
        ]
        shapes += [(1, self.batch_sweep_rows, b) for b in self.batch_sweep]
        return list(dict.fromkeys(shapes))


def tpch_full_scale(ram_bytes: int) -> float:
    """Return full mode's TPC-H scale factor: 10, or less on a machine without the memory.

    The largest of :data:`TPCH_FULL_SCALES` whose tables take at most a third of the RAM in
    Arrow (:data:`TPCH_ARROW_BYTES_PER_SF`): the server holding them may reach 1.3 times
    that by the issue's goal (1.46 times measured at scale factor 1), while DuckDB and the
    files-in-place server run their joins beside it and the page cache holds the files.
    Scale factor 10 is about 18 GB of Arrow data: it needs 54 GB of RAM. ``--tpch-scale``
    chooses any scale, whatever the machine.
    """
    for scale in TPCH_FULL_SCALES:
        if scale * TPCH_ARROW_BYTES_PER_SF <= ram_bytes * TPCH_RAM_SHARE:
            return scale
    return TPCH_FULL_SCALES[-1]


def plan_for(mode: str, ram_bytes: int) -> Plan:
    """Return the plan of ``mode`` (``quick``, ``full`` or ``smoke``) for a machine's RAM.

    Full mode keeps the data of one measurement (all its streams) under a twelfth of the RAM
    and at most 2 GiB: a get holds it in each server and in each server's client worker as
    it is read, a put holds it in each server's client worker (each makes its own copy) and
    in each server, and the Arrow C++ peer's RSS reached 15 GiB holding 16 x 256 MiB tables
    (the kernel killed it at the 4 GiB cap this replaced). Its TPC-H scale factor is 10 on a
    machine of 54 GB or more, else less (:func:`tpch_full_scale`).
    """
    if mode == "smoke":
        return Plan(
            mode="smoke",
            reps=1,
            headline_reps=1,
            streams=(1,),
            rows_per_stream=(10_000,),
            batch_rows=4096,
            batch_sweep=(4096,),
            batch_sweep_rows=10_000,
            max_table_bytes=64 * MI,
            headline_bytes=10_000 * RECORD_BYTES,
            small_rows=32,
            small_gets=10,
            json_rows=(1000,),
            ceiling_reps=1,
            tcp_seconds=0.2,
            memcpy_bytes=16 * MI,
            sql_rows=(2_000,),
            sql_reps=1,
            sql_row_clients_max_rows=2_000,
            bytes_rows=20_000,
            soak_clients=8,
            soak_seconds=2.0,
            soak_rows=1_000,
            shm_bytes=(4 * MI,),
            shm_puts_in_a_row=2,
            warm_up_reps=1,
            functions_rows=20_000,
            functions_json_rows=2_000,
            functions_calls=20,
            functions_warm_ups=5,
            functions_stream_bytes=32 * MI,
            functions_stream_max_memory=16 * MI,
            engines_rows=20_000,
            cluster_bytes=8 * MI,
            cluster_reps=1,
            cluster_appends=400,
            nemesis_seconds=30.0,
            nemesis_calm_s=2.0,
            engines_timeout_s=180.0,
            engines_warm_ups=0,
            tpch_scale=0.01,
            lake_scale=0.01,
            lake_parts=2,
            lake_reps=1,
            lake_warm_cache="256MiB",
            lake_doget_scale=0.05,
            lake_doget_reps=1,
            lake_memory_copies=2,
            clients_bytes=4 * MI,
            clients_warm_ups=0,
            clients_latency_calls=10,
            console_rows=100_000,
            console_result_rows=10_000,
            console_idle_seconds=1.0,
        )
    if mode == "quick":
        return Plan(
            mode="quick",
            reps=3,
            headline_reps=3,
            streams=(1, 4),
            rows_per_stream=(1_000_000, 4_000_000),
            batch_rows=64 * KI,
            batch_sweep=(8 * KI, 64 * KI, 1 * MI),
            batch_sweep_rows=4_000_000,
            max_table_bytes=512 * MI,
            headline_bytes=256 * MI,
            small_rows=32,
            small_gets=100,
            json_rows=(100_000,),
            ceiling_reps=3,
            tcp_seconds=1.0,
            memcpy_bytes=256 * MI,
            sql_rows=(100_000,),
            sql_reps=3,
            sql_row_clients_max_rows=100_000,
            bytes_rows=200_000,
            soak_clients=64,
            soak_seconds=10.0,
            soak_rows=10_000,
            functions_rows=524_288,
            functions_json_rows=20_000,
            functions_calls=100,
            functions_warm_ups=10,
            functions_stream_bytes=512 * MI,
            functions_stream_max_memory=128 * MI,
            engines_rows=500_000,
            tpch_scale=1.0,
        )
    if mode == "full":
        return Plan(
            mode="full",
            reps=5,
            headline_reps=11,
            streams=(1, 2, 4, 8, 16),
            rows_per_stream=(1_000_000, 8_000_000, 30_000_000),
            batch_rows=64 * KI,
            batch_sweep=(4 * KI, 16 * KI, 64 * KI, 256 * KI, 1 * MI),
            batch_sweep_rows=8_000_000,
            max_table_bytes=min(2 * GIB, ram_bytes // 12),
            headline_bytes=1 * GIB,
            small_rows=32,
            small_gets=200,
            json_rows=(100_000, 1_000_000),
            ceiling_reps=5,
            tcp_seconds=3.0,
            memcpy_bytes=1 * GIB,
            sql_rows=(1_000_000, 4_000_000, 16_000_000),
            sql_reps=5,
            sql_row_clients_max_rows=4_000_000,
            bytes_rows=2_000_000,
            soak_clients=64,
            soak_seconds=60.0,
            soak_rows=10_000,
            shm_bytes=(64 * MI, 256 * MI, 1 * GIB),
            warm_up_reps=2,
            functions_rows=10_000_000,
            functions_json_rows=200_000,
            functions_calls=2_000,
            functions_warm_ups=200,
            functions_stream_bytes=10 * GIB,
            functions_stream_max_memory=1 * GIB,
            engines_rows=10_000_000,
            cluster_bytes=1 * GIB,
            cluster_reps=3,
            nemesis_seconds=1800.0,
            engines_spark_memory="8g",
            engines_timeout_s=1800.0,
            tpch_scale=tpch_full_scale(ram_bytes),
            lake_reps=3,
            lake_doget_scale=4.5,
            lake_doget_reps=3,
            clients_bytes=1 * GIB,
            clients_reps=5,
            clients_latency_calls=300,
        )
    raise ValueError(f"unknown mode {mode!r}: expected quick, full or smoke")
