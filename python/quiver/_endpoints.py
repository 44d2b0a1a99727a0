"""Reading every endpoint of a FlightInfo, in parallel, into one table in endpoint order."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait

import pyarrow as pa
import pyarrow.flight as flight

from ._progress import RowCounter
from .errors import translated_errors

#: Threads used when the caller does not say: enough to keep a few cores busy decoding.
DEFAULT_MAX_WORKERS = min(8, os.cpu_count() or 1) * 2

#: Returns the client to read an endpoint from.
ClientForEndpoint = Callable[[flight.FlightEndpoint], flight.FlightClient]


class _Stopped(Exception):
    """Another endpoint failed, so this one stopped reading."""


def read_endpoints(
    endpoints: Sequence[flight.FlightEndpoint],
    schema: pa.Schema,
    client_for: ClientForEndpoint,
    options: flight.FlightCallOptions,
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
    client_for : callable
        Returns the client connected to an endpoint's location.
    options : pyarrow.flight.FlightCallOptions
        Options for every DoGet.
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
        parts = [_read_endpoint(endpoints[0], client_for, options, count_rows, stop)]
    else:
        workers = max(1, min(len(endpoints), max_workers or DEFAULT_MAX_WORKERS))
        with ThreadPoolExecutor(workers, thread_name_prefix="quiver-get") as pool:
            futures = [
                pool.submit(_read_endpoint, endpoint, client_for, options, count_rows, stop)
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
    client_for: ClientForEndpoint,
    options: flight.FlightCallOptions,
    count_rows: RowCounter,
    stop: threading.Event,
) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    batches: list[pa.RecordBatch] = []
    with translated_errors():
        reader = client_for(endpoint).do_get(endpoint.ticket, options)
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
