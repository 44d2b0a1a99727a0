"""The ``sql`` suite's fetches, each in a fresh worker process.

A :class:`ProcessFetcher` runs every fetch of its client in a process of its own, forked
from a fork server that has imported pyarrow, pandas, the fetchers and the drivers'
Python modules (:data:`PRELOAD`), and made no connection and holds no data. The
worker connects, fetches the result untimed as often as it is told (twice for columnar
clients: ``bench.suites.SQL_WARM_UPS``) and once timed, reports the timed fetch and its
peak RSS through a pipe, and exits.

So each measurement is of a client process that holds its own connection and result and
no other client's, warmed up by fetches of the same result. In the harness's own process,
every client kept what it had fetched: the ADBC Flight SQL driver's Go heap alone kept
4.6-6.8 GB after a 16M-row fetch; with every client in the harness, a pyarrow.flight
fetch of 16M rows took 6.3-6.8 s instead of 1.1-1.3 s, and the harness went to 17-19 GB,
twice into the kernel's OOM killer (docs/performance.md). Forking from the fork server
costs milliseconds where starting a Python process and importing pyarrow and pandas
costs 0.7 s.

Nothing that starts a Go runtime or gRPC's threads runs before the fork (neither survives
one): the ADBC drivers are loaded and every client connects in the worker.
"""

from __future__ import annotations

import dataclasses
import gc
import multiprocessing
import os
import resource
import select
import signal
import threading
import traceback
from multiprocessing.connection import Connection
from typing import Any

from . import sql_clients
from .sql_clients import Fetched, Fetcher, SqlPeer

#: Longest a worker may take: its warm-up fetches and the timed one (ODBC fetched 4M rows in
#: 49 s; 16M rows through ADBC from PostgreSQL took 31 s).
WORKER_TIMEOUT_S = 900.0
#: What the fork server imports before it forks workers (a missing one is skipped): the
#: fetchers with pyarrow and pandas, and the drivers' Python modules. These load libpq,
#: unixODBC and DuckDB's engine, and start only allocator and BLAS helper threads (jemalloc's
#: background threads, OpenBLAS, polars' through ADBC's DB-API), which have fork handlers;
#: the ADBC drivers' Go runtimes and gRPC's threads start at connect, in the worker.
PRELOAD = [
    "bench.sql_worker",
    "adbc_driver_flightsql.dbapi",
    "adbc_driver_postgresql.dbapi",
    "psycopg",
    "pyodbc",
    "duckdb",
]

_context: Any = None


def _fork_server() -> Any:
    """Return the multiprocessing context of the fork server (started on first use)."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _die_with(harness: int) -> None:
    """Kill this worker when the harness process ``harness`` ends, however it ends.

    The worker's parent is the fork server, which outlives a killed harness until its
    children end, so the kernel's parent-death signal does not reach it: a thread waits on
    the harness's pidfd instead.
    """
    try:
        pidfd = os.pidfd_open(harness)
    except ProcessLookupError:
        os._exit(1)

    def wait() -> None:
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait, name="harness watch", daemon=True).start()


def _serve(
    harness: int, peer: SqlPeer, target: str, name: str | None, warm_ups: int, out: Connection
) -> None:
    """In the worker: connect, fetch ``warm_ups`` times then once timed, send the result.

    With no ``name`` it only connects. It sends ``("ok", Fetched as dict)`` or
    ``("error", traceback)``.
    """
    try:
        _die_with(harness)
        fetcher = sql_clients.make_fetcher(peer, target)
        fetcher.open()
        try:
            if name is None:
                got = Fetched(0.0, 0, 0)
            else:
                for _ in range(warm_ups):
                    fetcher.fetch(name)
                    gc.collect()
                got = fetcher.fetch(name)
        finally:
            fetcher.close()
        # ru_maxrss is in KiB on Linux.
        got.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out.send(("ok", dataclasses.asdict(got)))
    except BaseException:
        out.send(("error", traceback.format_exc()))
    finally:
        out.close()


class ProcessFetcher(Fetcher):
    """A client of the sql suite whose every fetch runs in a fresh worker process.

    Parameters
    ----------
    peer : SqlPeer
        Which client.
    target : str
        What :func:`bench.sql_clients.make_fetcher` connects it to.
    warm_ups : int
        Untimed fetches of the same result before the timed one, in the same worker.
    """

    def __init__(self, peer: SqlPeer, target: str, warm_ups: int) -> None:
        self.peer = peer
        self.target = target
        self.warm_ups = warm_ups

    def _run(self, name: str | None) -> dict[str, Any]:
        context = _fork_server()
        receiving, sending = context.Pipe(duplex=False)
        worker = context.Process(
            target=_serve,
            args=(os.getpid(), self.peer, self.target, name, self.warm_ups, sending),
            name=f"sql worker: {self.peer.label}",
        )
        worker.start()
        sending.close()
        try:
            if not receiving.poll(WORKER_TIMEOUT_S):
                raise RuntimeError(
                    f"{self.peer.label}: the worker did not finish in {WORKER_TIMEOUT_S:.0f} s"
                )
            try:
                status, payload = receiving.recv()
            except EOFError:
                worker.join(10)
                raise RuntimeError(
                    f"{self.peer.label}: the worker died (exit code {worker.exitcode})"
                ) from None
        finally:
            receiving.close()
            if worker.is_alive():
                worker.kill()
            worker.join()
        if status != "ok":
            last = payload.strip().splitlines()[-1]
            error = RuntimeError(f"{self.peer.label}: the worker failed: {last}")
            error.add_note(f"the worker's traceback:\n{payload}")
            raise error
        return payload

    def open(self) -> None:
        """Check that a worker connects (it fetches nothing)."""
        self._run(None)

    def fetch(self, name: str) -> Fetched:
        """Fetch in a new worker: the warm-up fetches, then the timed one."""
        return Fetched(**self._run(name))
