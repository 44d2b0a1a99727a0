"""The pyarrow gets and puts of the throughput suites, each server's client in a process.

For one measurement (a shape of the grid, or the headline) each server gets a worker
process of its own (:mod:`bench.workers`) holding a :class:`FlightRounds`: its pyarrow
clients, one per stream, and the data the rounds move. The worker makes that data itself
(:func:`bench.data.records`, the same values in every worker), so no data crosses the pipe:
the harness asks for a round and gets its times back. Repetitions still alternate between
the servers, one round of one worker at a time.
"""

from __future__ import annotations

from . import data, flight_client, workers

#: Longest a worker may take to connect and prepare, or to run one round (a put or get of
#: the largest table of the grid at the slowest rate seen, 0.3 GB/s, takes under a minute).
WORKER_TIMEOUT_S = 600.0
#: The table a get measurement stores and reads back.
GET_TABLE = "bench-get"


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


def start(
    label: str, uri: str, op: str, streams: int, rows: int, batch_rows: int
) -> workers.Worker:
    """Start a worker with a :class:`FlightRounds` of the server at ``uri``."""
    args = (uri, op, streams, rows, batch_rows)
    return workers.Worker(label, FlightRounds, args, WORKER_TIMEOUT_S)
