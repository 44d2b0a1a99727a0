"""The gets and puts of the throughput suites, each server's client in a process.

For one measurement (a shape of the grid, or the headline) each server gets a worker
process of its own (:mod:`bench.workers`) per client measured: a :class:`FlightRounds`
holds its pyarrow clients, one per stream, and the data the rounds move; a
:class:`QuiverRounds` (the headline only) holds the quiver Python client, whose Rust core
(``quiver._core``) moves the data, over gRPC or, to quiver, over shared memory. The worker
makes that data itself (:func:`bench.data.records`, the same values in every worker), so no
data crosses the pipe: the harness asks for a round and gets its times back. Repetitions
still alternate between the servers and clients, one round of one worker at a time.
"""

from __future__ import annotations

import contextlib
import time

from . import data, flight_client, workers
from .results import PYARROW, QUIVER_PYTHON, QUIVER_PYTHON_SHM

#: Longest a worker may take to connect and prepare, or to run one round (a put or get of
#: the largest table of the grid at the slowest rate seen, 0.3 GB/s, takes under a minute).
WORKER_TIMEOUT_S = 600.0
#: The table a get measurement stores and reads back.
GET_TABLE = "bench-get"
#: The quiver client's transport, by client label.
TRANSPORTS = {QUIVER_PYTHON: "grpc", QUIVER_PYTHON_SHM: "shm"}
#: The note on the quiver client's rows when it moved the data without its core (not built,
#: or ``QUIVER_CORE=0``): those rows are left out of the ratios and goals.
NO_CORE = "without its Rust core (quiver._core not built, or QUIVER_CORE=0)"


class FlightRounds:
    """In the worker: timed gets or puts of one shape against one server.

    Built, it connects ``streams`` clients and prepares: for ``get``, it puts
    ``streams * rows`` records split into ``streams`` partitions; for ``put``, it makes the
    table of ``rows`` records that each client puts. Closed, it deletes what it stored.

    Parameters
    ----------
    uri : str
        The server.
    op : str
        ``get`` or ``put``.
    streams, rows, batch_rows : int
        The shape: parallel streams, records per stream, rows per record batch.
    """

    def __init__(self, uri: str, op: str, streams: int, rows: int, batch_rows: int) -> None:
        if op not in ("get", "put"):
            raise ValueError(f"not a throughput op: {op!r}")
        self.op = op
        self.streams = streams
        self.batch_rows = batch_rows
        self.clients = flight_client.connect_many(uri, streams)
        if op == "get":
            self.names = [GET_TABLE]
            self.total_rows = streams * rows
            table = data.records(self.total_rows, batch_rows)
            options = {"mode": "replace", "partitions": streams}
            flight_client.put(self.clients[0], GET_TABLE, table, batch_rows, options)
            self.table = None
        else:
            self.names = [f"t{i}" for i in range(streams)]
            self.table = data.records(rows, batch_rows)

    def round(self) -> dict:
        """Time one get or put; return the :class:`bench.results.Measurement` fields it sets.

        Raises
        ------
        RuntimeError
            A get read another number of rows than was stored.
        """
        if self.table is not None:
            return {"seconds": flight_client.timed_put(self.clients, self.table, self.batch_rows)}
        got = flight_client.timed_get(self.clients, GET_TABLE)
        if got.rows != self.total_rows:
            raise RuntimeError(f"got {got.rows} rows, expected {self.total_rows}")
        return {
            "seconds": got.seconds,
            "ttfb_seconds": got.ttfb_seconds,
            "endpoints": got.endpoints,
            "note": "" if got.endpoints == self.streams else f"{got.endpoints} endpoint(s)",
        }

    def close(self) -> None:
        """Delete what the rounds stored, and close every client."""
        try:
            for name in self.names:
                flight_client.delete(self.clients[0], name)
        finally:
            flight_client.close_all(self.clients)


class QuiverRounds:
    """In the worker: timed gets or puts of one stream by the quiver Python client.

    ``quiver.connect(uri, transport=...)``, then ``client.get(name)`` (GetFlightInfo, then
    DoGet of every endpoint, through the Rust core; or, with ``transport="shm"``, a map of
    the server's memfd) or ``client.put(name, table, mode="replace")`` (a DoPut through the
    core). Built, it stores the table a get reads the way :class:`FlightRounds` does (a
    pyarrow.flight DoPut of the same batches, one partition) under a name of its own, and
    warms the client's connection up with a put and a get of a small table; for shared
    memory, it also makes one untimed get: the first shm get of a version put over gRPC
    writes it into its memfd, once (the shm suite times that). Closed, it deletes what it
    stored.

    Parameters
    ----------
    uri : str
        The server.
    op : str
        ``get`` or ``put``.
    rows, batch_rows : int
        Records, rows per record batch.
    client : str
        :data:`QUIVER_PYTHON` (gRPC) or :data:`QUIVER_PYTHON_SHM` (shared memory).
    """

    def __init__(self, uri: str, op: str, rows: int, batch_rows: int, client: str) -> None:
        if op not in ("get", "put"):
            raise ValueError(f"not a throughput op: {op!r}")
        # Imported here, not in the fork server's preload: the core's runtime starts in
        # the worker.
        import quiver

        self.op = op
        self.rows = rows
        self.name = f"bench-{op}-{client}"
        self.client = quiver.connect(uri, transport=TRANSPORTS[client])
        self.note = "" if self.client.data_plane.core is not None else NO_CORE
        self.names = [self.name, f"{self.name}-warm-up"]
        self.endpoints: int | None = None
        small = data.records(1024, 1024)
        self.client.put(self.names[1], small, mode="replace")
        if self.client.get(self.names[1]).num_rows != small.num_rows:
            raise RuntimeError("the warm-up get read another number of rows than was put")
        if op == "get":
            table = data.records(rows, batch_rows)
            pyclient = flight_client.connect(uri)
            try:
                flight_client.put(
                    pyclient, self.name, table, batch_rows, {"mode": "replace", "partitions": 1}
                )
                info = pyclient.get_flight_info(flight_client.descriptor(self.name))
                self.endpoints = len(info.endpoints)
            finally:
                pyclient.close()
            del table
            if client == QUIVER_PYTHON_SHM:
                self._get()
            self.table = None
        else:
            self.table = data.records(rows, batch_rows)

    def _get(self) -> float:
        started = time.perf_counter()
        got = self.client.get(self.name)
        seconds = time.perf_counter() - started
        if got.num_rows != self.rows:
            raise RuntimeError(f"got {got.num_rows} rows, expected {self.rows}")
        return seconds

    def round(self) -> dict:
        """Time one get or put; return the :class:`bench.results.Measurement` fields it sets.

        A get's table is freed after the clock stops (its CPU time counts, not its wall time).

        Raises
        ------
        RuntimeError
            A get read another number of rows than was stored.
        """
        if self.table is not None:
            started = time.perf_counter()
            self.client.put(self.name, self.table, mode="replace")
            return {"seconds": time.perf_counter() - started, "note": self.note}
        note = self.note
        if self.endpoints != 1 and not note:
            note = f"{self.endpoints} endpoint(s)"
        return {"seconds": self._get(), "endpoints": self.endpoints, "note": note}

    def close(self) -> None:
        """Delete what the rounds stored, and close the client."""
        try:
            for name in self.names:
                with contextlib.suppress(Exception):
                    self.client.delete(name)
        finally:
            self.client.close()


def start(
    label: str,
    uri: str,
    op: str,
    streams: int,
    rows: int,
    batch_rows: int,
    client: str = PYARROW,
) -> workers.Worker:
    """Start a worker with the rounds of ``client`` against the server at ``uri``.

    A :class:`FlightRounds` for :data:`PYARROW`; a :class:`QuiverRounds` (one stream) for
    the quiver client.
    """
    if client == PYARROW:
        args: tuple = (uri, op, streams, rows, batch_rows)
        return workers.Worker(label, FlightRounds, args, WORKER_TIMEOUT_S)
    if client not in TRANSPORTS or streams != 1:
        raise ValueError(f"no rounds of client {client!r} with {streams} stream(s)")
    args = (uri, op, rows, batch_rows, client)
    return workers.Worker(label, QuiverRounds, args, WORKER_TIMEOUT_S)
