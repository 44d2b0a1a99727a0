"""The pyarrow gets and puts of the throughput suites, each server's client in a process.

For one measurement (a shape of the grid, or the headline) each server gets a worker
process of its own (:mod:`bench.workers`) holding its pyarrow clients, one per stream. The
worker makes the table it puts itself (:func:`bench.data.records`, the same values in every
worker), so no data crosses the pipe: the harness sends "get" or "put" and gets the times
back. Repetitions still alternate between the servers, one call to each worker at a time.
"""

from __future__ import annotations

from dataclasses import asdict

import pyarrow as pa

from . import data, flight_client, workers

#: Longest a worker may take to connect or to answer one call (a put or get of the largest
#: table of the grid at the slowest rate seen, 0.3 GB/s, takes under a minute).
WORKER_TIMEOUT_S = 600.0


class FlightClients:
    """In the worker: ``count`` pyarrow clients of one server, and the table to put.

    Parameters
    ----------
    uri : str
        The server.
    count : int
        Clients, each on its own connection (one per stream).
    """

    def __init__(self, uri: str, count: int) -> None:
        self.clients = flight_client.connect_many(uri, count)
        self.table: pa.Table | None = None

    def store(self, name: str, rows: int, batch_rows: int, partitions: int) -> int:
        """Put ``rows`` records as ``name``, split over ``partitions``; return its bytes."""
        table = data.records(rows, batch_rows)
        options = {"mode": "replace", "partitions": partitions}
        flight_client.put(self.clients[0], name, table, batch_rows, options)
        return table.nbytes

    def get(self, name: str) -> dict:
        """Time a get of ``name`` (:func:`bench.flight_client.timed_get`), without its data."""
        got = flight_client.timed_get(self.clients, name)
        return asdict(got)

    def make(self, rows: int, batch_rows: int) -> int:
        """Make the table :meth:`put` sends: ``rows`` records; return its bytes."""
        self.table = data.records(rows, batch_rows)
        return self.table.nbytes

    def put(self, batch_rows: int) -> float:
        """Time parallel puts of the table as ``t0``, ``t1``... (one per client)."""
        if self.table is None:
            raise RuntimeError("no table to put: make() was not called")
        return flight_client.timed_put(self.clients, self.table, batch_rows)

    def delete(self, names: list[str]) -> None:
        """Delete tables (one that is not there is no error)."""
        for name in names:
            flight_client.delete(self.clients[0], name)

    def close(self) -> None:
        """Close every client."""
        flight_client.close_all(self.clients)


def start(label: str, uri: str, count: int) -> workers.Worker:
    """Start a worker with ``count`` clients of the server at ``uri``."""
    return workers.Worker(label, FlightClients, (uri, count), WORKER_TIMEOUT_S)
