"""The pyarrow Flight client side of the measurements: the same code for every Flight server."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.flight as flight

#: gRPC channel options of every client: its own TCP connection (by default gRPC shares one
#: connection between the channels of a process that go to the same address).
CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


#: Most endpoints a get reads at once (the suites' most streams).
MAX_READERS = 16

_readers: ThreadPoolExecutor | None = None


def readers() -> ThreadPoolExecutor:
    """Return the threads that read the endpoints of multi-endpoint gets and run parallel puts.

    One pool for the whole process, not one per client: each thread keeps the glibc heap it
    read into, so a pool per client kept a copy of the largest result per client.
    """
    global _readers
    if _readers is None:
        _readers = ThreadPoolExecutor(max_workers=MAX_READERS, thread_name_prefix="reader")
    return _readers


def connect(uri: str) -> flight.FlightClient:
    """Return a client on its own connection, already connected."""
    client = flight.FlightClient(uri, generic_options=CHANNEL_OPTIONS)
    list(client.list_actions())
    return client


def connect_many(uri: str, count: int) -> list[flight.FlightClient]:
    """Return ``count`` clients, each on its own connection."""
    return [connect(uri) for _ in range(count)]


def close_all(clients: list[flight.FlightClient]) -> None:
    """Close every client."""
    for client in clients:
        client.close()


def descriptor(name: str) -> flight.FlightDescriptor:
    """Return the path descriptor of a table."""
    return flight.FlightDescriptor.for_path(name)


def put(
    client: flight.FlightClient,
    name: str,
    table: pa.Table,
    batch_rows: int,
    options: dict | None = None,
) -> None:
    """DoPut ``table`` as ``name``, options in a metadata message before the first batch."""
    writer, _ = client.do_put(descriptor(name), table.schema)
    writer.write_metadata(json.dumps(options or {"mode": "replace"}).encode())
    writer.write_table(table, max_chunksize=batch_rows)
    writer.close()


def delete(client: flight.FlightClient, name: str) -> None:
    """Delete a table; one that is not there is no error."""
    with contextlib.suppress(flight.FlightError):
        list(client.do_action(flight.Action("delete", name.encode())))


@dataclass
class GetResult:
    """What one timed get read.

    Attributes
    ----------
    seconds : float
        From GetFlightInfo to the last batch of the last endpoint.
    ttfb_seconds : float
        From GetFlightInfo to the first record batch of any endpoint.
    rows : int
        Rows read.
    nbytes : int
        Arrow bytes read.
    endpoints : int
        Endpoints read in parallel.
    table : pyarrow.Table or None
        The data read, when asked for.
    """

    seconds: float
    ttfb_seconds: float
    rows: int
    nbytes: int
    endpoints: int
    table: pa.Table | None = None


def _read_endpoint(client: flight.FlightClient, ticket: flight.Ticket) -> tuple[float, pa.Table]:
    reader = client.do_get(ticket)
    first_batch = None
    first_at = time.perf_counter()
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        if chunk.data is not None:
            first_at = time.perf_counter()
            first_batch = chunk.data
            break
    rest = reader.read_all()
    if first_batch is None:
        return first_at, rest
    return first_at, pa.Table.from_batches([first_batch, *rest.to_batches()], rest.schema)


def timed_get(
    clients: list[flight.FlightClient],
    name: str | flight.FlightDescriptor,
    keep: bool = False,
) -> GetResult:
    """GetFlightInfo, then DoGet every endpoint in parallel (one reader thread and client each).

    A single endpoint is read in the calling thread.

    Parameters
    ----------
    clients : list of pyarrow.flight.FlightClient
        Endpoint ``i`` is read with ``clients[i % len(clients)]``.
    name : str or pyarrow.flight.FlightDescriptor
        The table, or any descriptor (e.g. a Flight SQL query's command).
    keep : bool
        Return the table read (the endpoints' data in their order) in
        :attr:`GetResult.table`.
    """
    started = time.perf_counter()
    wanted = descriptor(name) if isinstance(name, str) else name
    info = clients[0].get_flight_info(wanted)
    endpoints = info.endpoints
    if len(endpoints) == 1:
        # A single endpoint is read in the calling thread. Reader threads keep the heaps they
        # read into, which made gets faster alone (fewer page faults) but took the harness,
        # when it held every client of the sql suite, to 18.7 GB and the kernel's OOM killer
        # at 16M taxi rows (docs/performance.md).
        parts = [_read_endpoint(clients[0], endpoints[0].ticket)]
    else:
        futures = [
            readers().submit(_read_endpoint, clients[i % len(clients)], e.ticket)
            for i, e in enumerate(endpoints)
        ]
        parts = [f.result() for f in futures]
    seconds = time.perf_counter() - started
    ttfb = min(first for first, _ in parts) - started
    rows = sum(t.num_rows for _, t in parts)
    nbytes = sum(t.nbytes for _, t in parts)
    table = None
    if keep:
        table = parts[0][1] if len(parts) == 1 else pa.concat_tables(t for _, t in parts)
    return GetResult(seconds, ttfb, rows, nbytes, len(endpoints), table)


@dataclass
class Received:
    """What a DoGet of every endpoint of a FlightInfo brought, batch by batch.

    Attributes
    ----------
    rows : int
        Rows received.
    batches : int
        Record batches received.
    buffer_bytes : int
        ``get_total_buffer_size()`` summed over the received batches, each counted on its
        own: every buffer a batch references, whole (a buffer two batches share, such as
        a dictionary, counts once per batch).
    endpoints : int
        Endpoints read (one after another).
    distinct_bytes : int
        The same bytes with each buffer counted once however many batches reference it
        (a buffer is its address and size): what the reader holds.
    """

    rows: int
    batches: int
    buffer_bytes: int
    endpoints: int
    distinct_bytes: int


def _buffers(array: pa.Array) -> list[pa.Buffer]:
    """Return every buffer ``array`` references: its own, its children's, its dictionary's."""
    found = [b for b in array.buffers() if b is not None]
    if pa.types.is_dictionary(array.type):
        found += _buffers(array.dictionary)
    return found


def received(
    client: flight.FlightClient,
    info: flight.FlightInfo,
    each: Callable[[pa.RecordBatch], None] | None = None,
) -> Received:
    """DoGet every endpoint of ``info`` in turn; count the rows, batches and buffer bytes.

    ``each`` is called with every batch, in order. Every buffer received is held until the
    end (so that no later buffer takes a freed one's address and passes for it), not the
    batches.
    """
    rows = batches = buffer_bytes = 0
    seen: dict[tuple[int, int], pa.Buffer] = {}
    for endpoint in info.endpoints:
        for chunk in client.do_get(endpoint.ticket):
            if chunk.data is None:
                continue
            rows += chunk.data.num_rows
            batches += 1
            buffer_bytes += chunk.data.get_total_buffer_size()
            for column in chunk.data.columns:
                seen.update(((b.address, b.size), b) for b in _buffers(column))
            if each is not None:
                each(chunk.data)
    distinct = sum(b.size for b in seen.values())
    return Received(rows, batches, buffer_bytes, len(info.endpoints), distinct)


def timed_put(clients: list[flight.FlightClient], table: pa.Table, batch_rows: int) -> float:
    """DoPut ``table`` as ``t0``, ``t1``... in parallel, one per client; return the seconds."""
    started = time.perf_counter()
    if len(clients) == 1:
        put(clients[0], "t0", table, batch_rows)
    else:
        futures = [
            readers().submit(put, client, f"t{i}", table, batch_rows)
            for i, client in enumerate(clients)
        ]
        for f in futures:
            f.result()
    return time.perf_counter() - started
