"""A checker in the style of Jepsen for the cluster's writes, and the faults it runs under.

Writers append rows tagged ``(writer, seq)`` to one table through every node, each
append with its own ``seq``, and record what they attempted and what was acknowledged.
Meanwhile a nemesis pauses, kills and restarts nodes. At the end :func:`check` reads the
table through every node and every listed copy of every partition, and reports what
breaks the rules: an acknowledged append missing, an append present in part or more
than once, a row nobody attempted, a copy the catalog lists that is not there.

The test command runs a short form (test_cluster_faults.py); each step is bounded in
count and time. The benchmark's nemesis suite (bench/nemesis_worker.py) judges its reads
with the same rules: it imports this module.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

import quiver

#: Rows per append: an append present with fewer rows is torn.
ROWS_PER_APPEND = 20

LOG_SCHEMA = pa.schema([("writer", pa.int64()), ("seq", pa.int64())])

#: How a quiver client of a URI is made (``quiver.connect``, or a cluster's
#: ``Cluster.client`` with its TLS and credentials), with keyword arguments such as
#: ``timeout``.
Connect = Callable[..., quiver.Client]

#: How a plain pyarrow client of a URI is made.
OpenFlight = Callable[[str], flight.FlightClient]


@dataclasses.dataclass
class Record:
    """What the writers did, and how long each append took.

    ``failed`` holds, per failed append, when it started, its writer, its error and
    when it ended (``time.monotonic()``).
    """

    attempted: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    acknowledged: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    failed: list[tuple[float, int, str, float]] = dataclasses.field(default_factory=list)
    latencies: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def failures_between(self, start: float, end: float) -> list[tuple[float, int, str, float]]:
        """The failed appends that started from ``start`` to ``end``."""
        return [f for f in self.failed if start <= f[0] <= end]


def append_rows(writer: int, seq: int) -> pa.Table:
    """The rows of append ``seq`` of ``writer``: :data:`ROWS_PER_APPEND` of ``(writer, seq)``."""
    return pa.table(
        {
            "writer": pa.array([writer] * ROWS_PER_APPEND, pa.int64()),
            "seq": pa.array([seq] * ROWS_PER_APPEND, pa.int64()),
        }
    )


_Threads = TypeVar("_Threads", bound="Threads")


class Threads:
    """Threads started on entry; on exit told to stop (:attr:`stop`) and joined, each for
    at most :attr:`join_timeout` seconds."""

    join_timeout = 120.0

    def __init__(self, threads: list[threading.Thread]) -> None:
        self.stop = threading.Event()
        self.threads = threads

    def __enter__(self: _Threads) -> _Threads:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=self.join_timeout)

    def hung(self) -> list[str]:
        """Return the threads still running after :meth:`__exit__`."""
        return [t.name for t in self.threads if t.is_alive()]


class Writers(Threads):
    """``count`` threads appending to ``table``, append ``seq`` of writer ``w`` through
    ``uris(w, seq)``, each with a client from ``connect``."""

    def __init__(
        self,
        table: str,
        uris: Callable[[int, int], str],
        count: int = 3,
        every: float = 0.1,
        max_appends: int = 2000,
        connect: Connect = quiver.connect,
    ) -> None:
        self.table = table
        self.uris = uris
        self.connect = connect
        self.record = Record()
        self.every = every
        self.max_appends = max_appends
        super().__init__([threading.Thread(target=self._run, args=(w,)) for w in range(count)])

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        assert not self.hung(), "a writer hung"

    def _run(self, writer: int) -> None:
        record = self.record
        for seq in range(self.max_appends):  # bounded in count
            if self.stop.is_set():
                return
            with record.lock:
                record.attempted.add((writer, seq))
            started = time.monotonic()
            try:
                with self.connect(self.uris(writer, seq), timeout=15) as c:
                    c.put(self.table, append_rows(writer, seq), mode="append")
            except quiver.QuiverError as error:
                with record.lock:
                    record.failed.append((started, writer, str(error)[:300], time.monotonic()))
            else:
                with record.lock:
                    record.acknowledged.add((writer, seq))
                    record.latencies.append((started, time.monotonic() - started))
            time.sleep(max(0.0, self.every - (time.monotonic() - started)))


def counts(table: pa.Table) -> dict[tuple[int, int], int]:
    """Rows per ``(writer, seq)``."""
    if table.num_rows == 0:
        return {}
    # value_counts of one int64 key rather than group_by, which warns of unaligned buffers
    # (Flight's) on every call.
    key = pc.add(pc.multiply(table.column("writer"), 1 << 32), table.column("seq"))
    found = pc.value_counts(key)
    keys = found.field("values").to_pylist()
    rows = found.field("counts").to_pylist()
    return {(k >> 32, k & 0xFFFFFFFF): n for k, n in zip(keys, rows, strict=True)}


@dataclasses.dataclass
class Violations:
    """What breaks the rules in one read of the table."""

    #: Acknowledged appends missing.
    lost: set[tuple[int, int]]
    #: Appends present with other than :data:`ROWS_PER_APPEND` rows, and their rows.
    torn_or_doubled: dict[tuple[int, int], int]
    #: Rows of appends never attempted.
    invented: set[tuple[int, int]]

    def problems(self, where: str) -> list[str]:
        """Say each kind of violation found, with a few examples."""
        found = []
        if self.lost:
            found.append(
                f"{where}: {len(self.lost)} acknowledged appends missing, e.g. "
                f"{sorted(self.lost)[:5]}"
            )
        if self.torn_or_doubled:
            found.append(
                f"{where}: {len(self.torn_or_doubled)} appends torn or doubled (rows each), "
                f"e.g. {dict(sorted(self.torn_or_doubled.items())[:5])}"
            )
        if self.invented:
            found.append(
                f"{where}: {len(self.invented)} rows never attempted, e.g. "
                f"{sorted(self.invented)[:5]}"
            )
        return found


def violations(
    seen: dict[tuple[int, int], int],
    acknowledged: set[tuple[int, int]],
    attempted: set[tuple[int, int]],
) -> Violations:
    """Judge one read of the table (:func:`counts`) against what the writers did."""
    return Violations(
        lost=acknowledged - set(seen),
        torn_or_doubled={k: n for k, n in seen.items() if n != ROWS_PER_APPEND},
        invented=set(seen) - attempted,
    )


def problems_in(seen: dict[tuple[int, int], int], record: Record, where: str) -> list[str]:
    """What breaks the rules in one read of the table."""
    return violations(seen, record.acknowledged, record.attempted).problems(where)


def every_copy(
    uri: str, name: str, flight_client: OpenFlight = flight.FlightClient
) -> Iterable[tuple[str, pa.Table | str]]:
    """Each listed copy of each partition of ``name``: its location and rows (or error),
    read with clients from ``flight_client``."""
    client = flight_client(uri)
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_path(name))
    except flight.FlightError as error:
        yield uri, f"GetFlightInfo failed: {type(error).__name__}: {error}"
        return
    finally:
        client.close()
    for endpoint in info.endpoints:
        for location in endpoint.locations:
            at = location.uri.decode()
            replica = flight_client(at)
            try:
                yield at, replica.do_get(endpoint.ticket).read_all()
            except (flight.FlightError, pa.ArrowException) as error:
                yield at, f"{type(error).__name__}: {error}"
            finally:
                replica.close()


def check(
    uris: Iterable[str],
    table: str,
    record: Record,
    connect: Connect = quiver.connect,
    flight_client: OpenFlight = flight.FlightClient,
) -> list[str]:
    """Everything wrong with ``table`` as read through each of ``uris``, and each copy,
    with clients from ``connect`` and ``flight_client``."""
    found: list[str] = []
    uris = list(uris)
    for uri in uris:
        try:
            with connect(uri) as c:
                read = c.get(table)
        except quiver.QuiverError as error:
            found.append(f"read through {uri} failed: {error}")
            continue
        found += problems_in(counts(read), record, f"through {uri}")
    for at, copy in every_copy(uris[0], table, flight_client):
        if isinstance(copy, str):
            found.append(f"a listed copy at {at} is not readable: {copy}")
    return found


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0
