"""Client processes of their own: the throughput and sql clients run in worker processes.

The pyarrow gets and puts of the grid and the headline (:mod:`bench.flight_worker`), the
sql suite's fetches (:mod:`bench.sql_worker`) and the tpch suite's loads and queries
(:mod:`bench.tpch`) are measured in workers; the suites of small gets, JSON, memory, shared
memory and the soak keep their clients in the harness.

A :class:`Worker` is a process forked from a multiprocessing fork server that has imported
pyarrow, pandas, the bench's client modules and the drivers' Python modules
(:data:`PRELOAD`), and made no connection and holds no data. The worker builds one object
(a set of Flight clients, a SQL fetcher) and runs the calls the harness sends it, one at a
time, until it is closed.

Why: a measurement in the harness's own process is a measurement of that process's
history. Every client there kept what it had fetched and what its allocator held on to:
with the sql suite's clients in the harness, a pyarrow.flight fetch of 16M taxi rows took
6.3-6.8 s instead of 1.1-1.3 s, and in run 12 the headline DoGet from quiver measured 0.57x
the Arrow C++ server's, with the harness at 9.3 GiB after the grid, where the same gets in a
process of their own measured 0.91x (docs/performance.md). Forking from the fork server
costs milliseconds where starting a Python process and importing pyarrow and pandas costs
0.7 s.

Nothing that starts a Go runtime or gRPC's threads runs before the fork (neither survives
one): the preload starts only allocator and BLAS helper threads (jemalloc's background
threads, OpenBLAS, polars' through ADBC's DB-API), which have fork handlers; every client
connects in the worker, and the ADBC drivers load their Go runtimes there.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import resource
import select
import signal
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

#: What the fork server imports before it forks workers (a missing one is skipped): the
#: bench's client modules with pyarrow and pandas (not xgboost: the functions suite's
#: in-process scorer imports it in its worker), and the drivers' Python modules, which load
#: libpq, unixODBC and DuckDB's engine.
PRELOAD = [
    "bench.flight_worker",
    "bench.scoring",
    "bench.sql_worker",
    "bench.tpch",
    "adbc_driver_flightsql.dbapi",
    "adbc_driver_postgresql.dbapi",
    "psycopg",
    "pyodbc",
    "duckdb",
]

#: The call every worker answers besides its object's methods: its peak RSS in bytes.
PEAK_RSS = "peak_rss"

_context: Any = None


def _fork_server() -> Any:
    """Return the multiprocessing context of the fork server (started on first use)."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


#: Clock ticks per second, the unit of /proc/PID/stat's times.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_table() -> dict[int, tuple[int, float]]:
    """Return every process's parent and CPU seconds (its own and its reaped children's)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (field 2) may hold spaces: the fields after it follow its ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        # ppid is field 4 of proc(5); utime, stime, cutime, cstime fields 14-17.
        ticks = sum(int(v) for v in fields[11:15])
        found[int(entry.name)] = (int(fields[1]), ticks / CLOCK_TICKS)
    return found


def cpu_seconds(pid: int) -> float:
    """Return the CPU seconds (user + system, every thread) ``pid`` has used so far.

    ``utime`` and ``stime`` of ``/proc/PID/stat``, in clock ticks (10 ms): the process's
    own, not its children's.
    """
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    # utime and stime are fields 14 and 15 of proc(5); the list starts at field 3.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def descendants(pid: int, table: dict[int, tuple[int, float]] | None = None) -> list[int]:
    """Return the processes below ``pid`` (its children, their children...)."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_descendants(pid: int) -> int:
    """SIGKILL every process below ``pid``; return how many there were."""
    found = descendants(pid)
    for child in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    return len(found)


def _die_with(harness: int) -> None:
    """Kill this worker, and what it started, when the harness ``harness`` ends, however.

    The worker's parent is the fork server, not the harness, so a parent-death signal
    would fire only when the fork server ends, and the fork server does not kill its
    children when it ends: a thread waits on the harness's pidfd instead. The processes the
    worker started go first, while they are still below it: an engine's (the engines
    suite's Ray) outlived a worker killed alone, reparented to init.
    """
    try:
        pidfd = os.pidfd_open(harness)
    except ProcessLookupError:
        os._exit(1)

    def wait() -> None:
        select.select([pidfd], [], [])
        with contextlib.suppress(Exception):
            kill_descendants(os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait, name="harness watch", daemon=True).start()


def _serve(harness: int, build: Callable[..., Any], args: tuple, conn: Connection) -> None:
    """In the worker: build the object, then answer calls until told to stop.

    Every answer is ``("ok", result)`` or ``("error", traceback)``; a ``None`` request (or
    the harness's end of the pipe closing) ends the worker, after the object's ``close``.
    After each call the worker collects garbage before it answers, so that a call's data is
    freed before the next call, and no collection runs while the harness times another
    worker; what the build and the preload made is frozen out of the collections.
    """
    target = None
    try:
        _die_with(harness)
        target = build(*args)
        gc.collect()
        gc.freeze()
        conn.send(("ok", None))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        conn.close()
        return
    try:
        while True:
            try:
                request = conn.recv()
            except EOFError:
                break
            if request is None:
                break
            method, call_args = request
            try:
                if method == PEAK_RSS:
                    # ru_maxrss is in KiB on Linux.
                    answer = ("ok", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
                else:
                    answer = ("ok", getattr(target, method)(*call_args))
            except BaseException:
                answer = ("error", traceback.format_exc())
            gc.collect()
            conn.send(answer)
    finally:
        close = getattr(target, "close", None)
        if close is not None:
            close()
        conn.close()


class Worker:
    """A process of its own that builds ``build(*args)`` and runs calls of its methods.

    Parameters
    ----------
    label : str
        Who the worker is, at the start of every error it raises (e.g. a client's name).
    build : callable
        A module-level callable (it is pickled to the worker) returning the object.
    args : tuple
        Its arguments (pickled too).
    timeout : float
        Longest the worker may take to build the object or to answer one call.

    Raises
    ------
    RuntimeError
        When building fails: the label and the failure's last line, with the worker's
        traceback attached as a note.
    """

    def __init__(self, label: str, build: Callable[..., Any], args: tuple, timeout: float):
        self.label = label
        self.timeout = timeout
        self._dead: str | None = None
        context = _fork_server()
        self._conn, theirs = context.Pipe(duplex=True)
        self._process = context.Process(
            target=_serve, args=(os.getpid(), build, args, theirs), name=f"worker: {label}"
        )
        try:
            self._process.start()
        except BaseException:
            self._conn.close()
            raise
        finally:
            theirs.close()
        try:
            self._answer("its start")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Worker:
        """Return the worker; it is closed at the end of the ``with`` block."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the worker (:meth:`close`)."""
        self.close()

    def call(self, method: str, *args: Any) -> Any:
        """Run ``method(*args)`` on the worker's object; return its result.

        Raises
        ------
        RuntimeError
            When the call raised in the worker, the worker died, or it did not answer in
            time (the worker is then killed): the label, what happened and, for a raise,
            the worker's traceback as a note. After a death or a timeout every later call
            raises at once.
        """
        if self._dead is not None:
            raise RuntimeError(f"{self.label}: {self._dead}")
        try:
            self._conn.send((method, args))
        except OSError:
            raise self._died() from None
        return self._answer(method)

    @property
    def pid(self) -> int:
        """The worker's process id."""
        return self._process.pid

    def peak_rss(self) -> int:
        """Return the worker's peak RSS so far, in bytes (with the libraries it loaded)."""
        return self.call(PEAK_RSS)

    def _died(self) -> RuntimeError:
        self._process.join(10)
        self._dead = f"the worker died (exit code {self._process.exitcode})"
        return RuntimeError(f"{self.label}: {self._dead}")

    def _answer(self, what: str) -> Any:
        try:
            answered = self._conn.poll(self.timeout)
        except OSError:
            raise self._died() from None
        if not answered:
            self._process.kill()
            self._dead = f"the worker did not finish {what} in {self.timeout:.0f} s"
            raise RuntimeError(f"{self.label}: {self._dead}")
        try:
            status, payload = self._conn.recv()
        except (EOFError, OSError):
            raise self._died() from None
        if status != "ok":
            last = payload.strip().splitlines()[-1]
            error = RuntimeError(f"{self.label}: the worker failed: {last}")
            error.add_note(f"the worker's traceback:\n{payload}")
            raise error
        return payload

    def close(self) -> None:
        """Ask the worker to close its object and end; kill it if it does not in 30 s."""
        if self._process.is_alive():
            with contextlib.suppress(OSError):
                self._conn.send(None)
            self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        self._conn.close()
