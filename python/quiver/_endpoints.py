"""Reading every endpoint of a FlightInfo, in parallel, into one table in endpoint order.

Each endpoint is read from the first of its locations that can be reached
(:func:`first_reachable`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from ._progress import RowCounter
from .errors import QuiverError, ServerUnavailableError, translated_errors

#: Threads used when the caller does not say: enough to keep a few cores busy decoding.
DEFAULT_MAX_WORKERS = min(8, os.cpu_count() or 1) * 2

#: Starts the DoGet of an endpoint and returns its stream once the schema has arrived.
OpenEndpoint = Callable[[flight.FlightEndpoint], flight.FlightStreamReader]

_T = TypeVar("_T")


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` says that a location cannot be reached, so another may serve.

    That is ``UNAVAILABLE`` (no connection, or one that broke before the server
    answered) or a socket's own error (a refused connection); the server's answers
    (``NOT_FOUND``, ``ABORTED``, ``PERMISSION_DENIED``, ``DEADLINE_EXCEEDED``, ...)
    are not.
    """
    if isinstance(error, QuiverError):
        return error.code == "UNAVAILABLE"
    return isinstance(error, OSError)


def first_reachable(uris: Sequence[str], attempt: Callable[[str], _T]) -> _T:
    """Return ``attempt(uri)`` for the first of ``uris`` that can be reached.

    A location whose error is :func:`unreachable` passes the call to the next
    one; any other error is raised at once. The Rust core reads endpoints by
    the same rule (crates/quiver-python/src/get.rs).

    Raises
    ------
    ServerUnavailableError
        Every location was unreachable: the last one's error, its message naming
        the locations tried (as the core words it).
    """
    last: BaseException | None = None
    for uri in uris:
        try:
            return attempt(uri)
        except Exception as error:
            if not unreachable(error):
                raise
            last = error
    if last is None:
        raise ValueError("an endpoint to read with no location")
    suffix = f" (locations tried: {', '.join(uris)})"
    raised: QuiverError
    if isinstance(last, QuiverError):
        raised = type(last)(last.message + suffix, last.code, last.kind)
        cause = last.__cause__ or last
    else:
        raised, cause = ServerUnavailableError(f"{last}{suffix}", "UNAVAILABLE"), last
    # Chained as the last location's own error was: to the Flight call's failure.
    raise raised from cause


class _Stopped(Exception):
    """Another endpoint failed, so this one stopped reading."""


def read_endpoints(
    endpoints: Sequence[flight.FlightEndpoint],
    schema: pa.Schema,
    open_endpoint: OpenEndpoint,
    count_rows: RowCounter,
    max_workers: int | None = None,
) -> pa.Table:
    """DoGet every endpoint, in parallel threads, and concatenate them in endpoint order.

    Parameters
    ----------
    endpoints : sequence of pyarrow.flight.FlightEndpoint
        The endpoints of one FlightInfo, in order.
    schema : pyarrow.Schema
        The FlightInfo's schema, used when the table has no endpoints.
    open_endpoint : callable
        Starts an endpoint's DoGet, from the first of its locations that answers,
        and returns its stream once the schema has arrived.
    count_rows : callable
        Called with the rows of each batch received, from any thread.
    max_workers : int, optional
        Most endpoints read at once; by default up to 16.

    Raises
    ------
    QuiverError
        The first endpoint (in order) that failed, once the others have stopped.
    """
    if not endpoints:
        return schema.empty_table()
    stop = threading.Event()
    if len(endpoints) == 1:
        parts = [_read_endpoint(endpoints[0], open_endpoint, count_rows, stop)]
    else:
        workers = max(1, min(len(endpoints), max_workers or DEFAULT_MAX_WORKERS))
        with ThreadPoolExecutor(workers, thread_name_prefix="quiver-get") as pool:
            futures = [
                pool.submit(_read_endpoint, endpoint, open_endpoint, count_rows, stop)
                for endpoint in endpoints
            ]
            wait(futures, return_when=FIRST_EXCEPTION)
            if any(f.done() and f.exception() is not None for f in futures):
                stop.set()
        parts = _result(futures)
    batches = [batch for _, part in parts for batch in part]
    return pa.Table.from_batches(batches, schema=parts[0][0])


def _result(
    futures: list[Future[tuple[pa.Schema, list[pa.RecordBatch]]]],
) -> list[tuple[pa.Schema, list[pa.RecordBatch]]]:
    errors = [f.exception() for f in futures]
    first = next((e for e in errors if e is not None and not isinstance(e, _Stopped)), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]


def _read_endpoint(
    endpoint: flight.FlightEndpoint,
    open_endpoint: OpenEndpoint,
    count_rows: RowCounter,
    stop: threading.Event,
) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    batches: list[pa.RecordBatch] = []
    reader = open_endpoint(endpoint)
    with translated_errors():
        while True:
            if stop.is_set():
                reader.cancel()
                raise _Stopped
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            if chunk.data is not None:
                batches.append(chunk.data)
                count_rows(chunk.data.num_rows)
        return reader.schema, batches
