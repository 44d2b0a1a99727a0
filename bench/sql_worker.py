"""The ``sql`` suite's fetches, each in a fresh worker process (:mod:`bench.workers`).

A :class:`ProcessFetcher` runs every fetch of its client in a process of its own: the
worker connects, fetches the result untimed as often as it is told (twice for columnar
clients: ``bench.suites.SQL_WARM_UPS``) and once timed, reports the timed fetch and its peak
RSS, and exits. So each measurement is of a client process that holds its own connection
and result and no other client's, warmed up by fetches of the same result. In the harness's
own process, every client kept what it had fetched: the ADBC Flight SQL driver's Go heap
alone kept 4.6-6.8 GB after a 16M-row fetch, and the harness went to 17-19 GB, twice into
the kernel's OOM killer (docs/performance.md).
"""

from __future__ import annotations

from . import sql_clients, workers
from .sql_clients import Fetched, Fetcher, SqlPeer

#: Longest a worker may take to connect or to answer one fetch (ODBC fetched 4M rows in
#: 49 s; 16M rows through ADBC from PostgreSQL took 31 s).
WORKER_TIMEOUT_S = 900.0


def _connected(peer: SqlPeer, target: str) -> Fetcher:
    """In the worker: the client's fetcher, connected."""
    fetcher = sql_clients.make_fetcher(peer, target)
    fetcher.open()
    return fetcher


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

    def _worker(self) -> workers.Worker:
        return workers.Worker(
            self.peer.label, _connected, (self.peer, self.target), WORKER_TIMEOUT_S
        )

    def open(self) -> None:
        """Check that a worker connects (it fetches nothing)."""
        with self._worker():
            pass

    def fetch(self, name: str) -> Fetched:
        """Fetch in a new worker: the warm-up fetches, then the timed one."""
        with self._worker() as worker:
            for _ in range(self.warm_ups):
                worker.call("fetch", name)
            got = worker.call("fetch", name)
            got.peak_rss_bytes = worker.peak_rss()
        return got
