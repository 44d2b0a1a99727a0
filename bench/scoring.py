"""The functions suite's clients, each run in a worker process of its own (bench/workers.py).

One :class:`ScoringClient` per peer: it makes the rows itself (:func:`bench.xgbatch.features`,
the same values in every worker), so no data crosses the harness's pipe, and answers two
calls: :meth:`ScoringClient.bulk` (every row through the peer in 65,536-row requests, timed)
and :meth:`ScoringClient.latency` (sequential requests of a few rows, each timed). The
harness reads the CPU time of the client, the server and its workers from ``/proc`` around
each call (:func:`cpu_seconds`).

The kinds of client:

- ``in-process``: the booster in the worker itself, ``predict`` on the same batches (the
  limit; with ``threads`` > 1, xgboost's own threads);
- ``flight``: pyarrow.flight DoExchange with the command ``{"function": "score"}``, to
  quiver or to the XGBatch-style pyarrow server: for bulk, a writer thread sends the
  batches while the calling thread reads the scores; a latency request is one DoExchange
  of one batch;
- ``json``: HTTP/1.1 ``POST /score`` on one kept-alive connection, rows as lists of lists.

:class:`StreamClient` is the client of the suite's other measurement, SQL over a stream:
DoExchange of many batches through ``{"sql": "SELECT ... FROM input ..."}`` against the
same stream echoed.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from . import flight_client, xgbatch

#: The DoExchange command that calls quiver's function ``score`` (the pyarrow server
#: accepts any descriptor).
COMMAND = json.dumps({"function": "score"})
#: The first rows whose scores :meth:`ScoringClient.bulk` checks besides all of them, so
#: that the JSON service, which scores fewer rows, is checked against the others too.
CHECK_ROWS = 1000
#: Weights of a checksum that changes when scores change places: row i weighs i % 7 + 1.
CHECK_PERIOD = 7
#: Distinct slices a latency measurement cycles through.
LATENCY_SLICES = 8


class NoDelayHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection with Nagle's algorithm off, as requests' and httpx's are.

    ``http.client`` sends a request's headers and body in two writes: with Nagle on, the
    body waited for the server's delayed ACK, 40 ms per request.
    """

    def connect(self) -> None:
        """Connect, then set ``TCP_NODELAY``."""
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def descriptor() -> flight.FlightDescriptor:
    """Return the DoExchange descriptor of the function ``score``."""
    return flight.FlightDescriptor.for_command(COMMAND)


class ScoringClient:
    """In the worker: one peer's client, with the rows it sends.

    Parameters
    ----------
    kind : str
        ``in-process``, ``flight`` or ``json``.
    target : str
        The server's URI; for ``in-process``, the saved booster's path.
    rows : int
        Rows of the bulk measurement.
    threads : int
        ``in-process`` only: xgboost's threads (1 everywhere else).
    """

    def __init__(self, kind: str, target: str, rows: int, threads: int = 1) -> None:
        if kind not in ("in-process", "flight", "json"):
            raise ValueError(f"unknown kind of scoring client: {kind!r}")
        self.kind = kind
        self.table = xgbatch.features(rows)
        self.batches = self.table.to_batches()
        self.booster = None
        self.flight: flight.FlightClient | None = None
        self.http: http.client.HTTPConnection | None = None
        if kind == "in-process":
            self.booster = xgbatch.load(target)
            if threads != 1:
                self.booster.set_param({"nthread": threads})
        elif kind == "flight":
            # Not flight_client.connect: the XGBatch server has no actions to list.
            self.flight = flight.FlightClient(target, generic_options=flight_client.CHANNEL_OPTIONS)
        else:
            parts = urlsplit(target)
            self.http = NoDelayHTTPConnection(parts.hostname, parts.port)

    def bulk(self) -> dict:
        """Score every row in 65,536-row requests; return the time and a check of the scores.

        Returns
        -------
        dict
            ``seconds`` (wall time), ``rows`` (scores received) and ``checks``: the
            :func:`checksum` of the first :data:`CHECK_ROWS` scores and of all of them,
            by how many scores each covers.

        Raises
        ------
        RuntimeError
            The peer answered another number of scores than rows sent.
        """
        started = time.perf_counter()
        if self.kind == "in-process":
            scores = [xgbatch.score(self.booster, b) for b in self.batches]
        elif self.kind == "flight":
            scores = self._exchange(self.batches)
        else:
            scores = [self._post(b) for b in self.batches]
        seconds = time.perf_counter() - started
        got = sum(len(s) for s in scores)
        if got != self.table.num_rows:
            raise RuntimeError(f"{got} scores for {self.table.num_rows} rows")
        every = np.concatenate(scores) if scores else np.empty(0, "f4")
        counts = {min(CHECK_ROWS, len(every)), len(every)}
        return {"seconds": seconds, "rows": got, "checks": {n: checksum(every[:n]) for n in counts}}

    def latency(self, rows: int, calls: int, warm_ups: int) -> list[float]:
        """Time ``calls`` sequential requests of ``rows`` rows each, after ``warm_ups``.

        Each request is one DoExchange (``flight``), one HTTP request (``json``) or one
        ``predict`` (``in-process``); the requests cycle through a few slices of the rows.

        Returns
        -------
        list of float
            Seconds per timed request, in order.
        """
        first = self.batches[0]
        step = max(1, (first.num_rows - rows) // LATENCY_SLICES)
        slices = [
            first.slice(min(i * step, max(0, first.num_rows - rows)), rows)
            for i in range(LATENCY_SLICES)
        ]
        if self.kind == "in-process":

            def request(batch: pa.RecordBatch) -> int:
                return len(xgbatch.score(self.booster, batch))
        elif self.kind == "flight":

            def request(batch: pa.RecordBatch) -> int:
                return sum(len(s) for s in self._exchange([batch]))
        else:

            def request(batch: pa.RecordBatch) -> int:
                return len(self._post(batch))

        times = []
        for i in range(warm_ups + calls):
            batch = slices[i % LATENCY_SLICES]
            started = time.perf_counter()
            got = request(batch)
            elapsed = time.perf_counter() - started
            if got != batch.num_rows:
                raise RuntimeError(f"{got} scores for a request of {batch.num_rows} rows")
            if i >= warm_ups:
                times.append(elapsed)
        return times

    def _exchange(self, batches: list[pa.RecordBatch]) -> list[np.ndarray]:
        """One DoExchange of ``batches`` (:func:`exchange`); return the scores of each."""
        assert self.flight is not None
        scores: list[np.ndarray] = []
        exchange(
            self.flight,
            descriptor(),
            xgbatch.INPUT_SCHEMA,
            batches,
            lambda data: scores.append(data.column(0).to_numpy()),
        )
        return scores

    def _post(self, batch: pa.RecordBatch) -> np.ndarray:
        """One ``POST /score`` of ``batch``'s rows as lists of lists; return the scores."""
        assert self.http is not None
        body = json.dumps({"rows": xgbatch.matrix(batch).tolist()}).encode()
        try:
            self.http.request("POST", "/score", body, {"Content-Type": "application/json"})
            response = self.http.getresponse()
            payload = response.read()
        except Exception:
            # http.client leaves a failed connection unusable ("Request-sent"): closed, the
            # next request reconnects instead of failing for this one's reason.
            self.http.close()
            raise
        if response.status != 200:
            raise RuntimeError(f"POST /score: HTTP {response.status}: {payload[:300]!r}")
        return np.asarray(json.loads(payload)["scores"], dtype=np.float32)

    def close(self) -> None:
        """Close the connection."""
        if self.flight is not None:
            self.flight.close()
        if self.http is not None:
            self.http.close()


def checksum(scores: np.ndarray) -> float:
    """Return a position-weighted sum of ``scores``: equal for the same scores in order."""
    weights = np.arange(len(scores)) % CHECK_PERIOD + 1
    return float(np.dot(scores.astype("f8"), weights))


def exchange(
    client: flight.FlightClient,
    target: flight.FlightDescriptor,
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    receive: Callable[[pa.RecordBatch], None],
) -> None:
    """One DoExchange: send ``batches``, hand every result batch to ``receive``, in order.

    A writer thread sends while the calling thread reads, as a client of quiver must (the
    server holds a window of batches, then stops reading). A single batch is written
    before reading, without a thread: the window holds it.

    Raises
    ------
    Exception
        What the exchange raised: the reader's error, or the writer's when the reader's is
        only the cancellation that the writer's failure caused.
    """
    batches = list(batches)
    writer, reader = client.do_exchange(target)
    failed: list[BaseException] = []

    def write() -> None:
        try:
            writer.begin(schema)
            for batch in batches:
                writer.write_batch(batch)
            writer.done_writing()
        except BaseException as e:
            failed.append(e)
            reader.cancel()

    sender = None
    if len(batches) == 1:
        write()
    else:
        sender = threading.Thread(target=write, name="exchange writer")
        sender.start()
    read_error: BaseException | None = None
    try:
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            if chunk.data is not None:
                receive(chunk.data)
    except BaseException as e:
        read_error = e
        reader.cancel()
    finally:
        if sender is not None:
            sender.join()
        writer.close()
    if read_error is not None:
        if failed and isinstance(read_error, flight.FlightCancelledError):
            raise failed[0] from read_error
        raise read_error
    if failed:
        raise failed[0]


#: The descriptor quiver echoes: a command that is not a JSON object (docs/functions.md).
ECHO_COMMAND = b"echo"


def is_unimplemented(error: BaseException) -> bool:
    """Whether ``error`` is a server's ``UNIMPLEMENTED`` answer, as pyarrow.flight raises it."""
    text = str(error)
    return isinstance(error, NotImplementedError) or "UNIMPLEMENTED" in text


class StreamClient:
    """In the worker: streams of feature rows through quiver's DoExchange, echoed or SQL.

    Each stream sends the same 65,536-row batch of :func:`bench.xgbatch.features` (5 MiB)
    as many times as a size asks, from a writer thread, while this thread reads and counts
    what comes back: the echo (a descriptor that is not a command) or
    ``{"sql": "SELECT ... FROM input ..."}``.

    Parameters
    ----------
    uri : str
        The quiver server.
    """

    def __init__(self, uri: str) -> None:
        self.batch = xgbatch.features(xgbatch.BATCH_ROWS).to_batches()[0]
        self.client = flight.FlightClient(uri, generic_options=flight_client.CHANNEL_OPTIONS)

    def probe(self, sql: str) -> str | None:
        """Send one small batch through ``sql``; return why SQL over a stream is unavailable.

        Returns
        -------
        str or None
            ``None`` when the server answered; the server's message when it answered
            ``UNIMPLEMENTED``. Any other error is raised.
        """
        try:
            self.stream(sql, self.batch.slice(0, 1000).nbytes, self.batch.slice(0, 1000))
        except Exception as e:
            if is_unimplemented(e):
                return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise
        return None

    def stream(
        self, sql: str | None, nbytes: int, batch: pa.RecordBatch | None = None
    ) -> dict[str, float]:
        """Stream at least ``nbytes`` of rows through ``sql`` (``None``: the echo), timed.

        Returns
        -------
        dict
            ``seconds``, ``bytes`` and ``rows`` sent, ``rows_out`` and ``bytes_out``
            received.
        """
        batch = self.batch if batch is None else batch
        count = max(1, -(-nbytes // max(1, batch.nbytes)))
        if sql is None:
            target = flight.FlightDescriptor.for_command(ECHO_COMMAND)
        else:
            target = flight.FlightDescriptor.for_command(json.dumps({"sql": sql}))
        received = {"rows_out": 0, "bytes_out": 0}

        def receive(data: pa.RecordBatch) -> None:
            received["rows_out"] += data.num_rows
            received["bytes_out"] += data.nbytes

        started = time.perf_counter()
        exchange(self.client, target, batch.schema, [batch] * count, receive)
        seconds = time.perf_counter() - started
        return {
            "seconds": seconds,
            "bytes": count * batch.nbytes,
            "rows": count * batch.num_rows,
            **received,
        }

    def close(self) -> None:
        """Close the connection."""
        self.client.close()


#: Clock ticks per second of /proc's CPU times.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """Return the CPU time (user + system) process ``pid`` has used, from ``/proc/PID/stat``.

    Raises
    ------
    OSError
        The process is gone.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may hold spaces: the fields after it follow its ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLOCK_TICKS


def children(pid: int) -> list[int]:
    """Return the processes whose parent is ``pid`` (a quiver server's function workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def cpu_of_children(pid: int) -> dict[int, float]:
    """Return the CPU time of each child of ``pid``, by process id (gone ones left out)."""
    found = {}
    for child in children(pid):
        try:
            found[child] = cpu_seconds(child)
        except OSError:
            continue
    return found
