"""How a client's table data moves: its data plane, chosen once from ``transport``.

Three planes, stacked by :func:`choose` when the client is made:

- :class:`PyarrowPlane`: pyarrow's Flight client, DoGet and DoPut, a thread per
  endpoint. Always there: the bottom of every chain, and the plane of every call
  that is not table data (GetFlightInfo, actions).
- :class:`CorePlane`: the Rust core (``quiver._core``, docs/python-core.md), when it
  is built, not turned off (``QUIVER_CORE=0``) and can honour every setting given.
  A read whose locations it cannot connect to goes to pyarrow, call by call.
- :class:`ShmPlane`: shared memory (docs/shm.md) for whole tables, a get mapping
  the server's copy and a put of in-memory data handing it sealed memfds, over one
  of the two others for everything else: ``transport="auto"`` falls back to that
  plane when shared memory does not work here (another host, no socket, no memory
  for the server's export), ``"shm"`` raises instead.

``transport="grpc"`` is the core, else pyarrow; ``"auto"`` and ``"shm"`` are shared
memory over that. The client (and :mod:`quiver.splits`, through
:attr:`quiver.Client.data_plane`) calls the chosen plane and never asks which it is.
"""

from __future__ import annotations

import base64
import builtins
import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.flight as flight

from . import _native, _protocol, _shm
from ._convert import MESSAGE_TARGET_BYTES, BatchSource, message_slices
from ._endpoints import DEFAULT_MAX_WORKERS, first_reachable, read_endpoints
from ._progress import RowCounter, ignore_rows
from ._protocol import JsonObject, PutMode, Transport
from .errors import QuiverError, translated_errors
from .results import PutResult

if TYPE_CHECKING:
    from . import _core

__all__ = [
    "CorePlane",
    "DataPlane",
    "PyarrowPlane",
    "ShmPlane",
    "choose",
    "location_uri",
    "shm_location",
]

#: Errors of the shared-memory path after which ``transport="auto"`` uses gRPC: the
#: socket is not reachable from here, or the server has no memory for its export.
SHM_FALLBACK_CODES = ("UNAVAILABLE", "UNIMPLEMENTED")
SHM_GET_FALLBACK_CODES = (*SHM_FALLBACK_CODES, "RESOURCE_EXHAUSTED")

#: Keyword arguments of :class:`pyarrow.flight.FlightClient` the Rust core applies
#: itself. With any other (``middleware``, ``generic_options``, ...), pyarrow makes the
#: data calls too, so that what they set applies to every call.
CORE_KWARGS = frozenset({"tls_root_certs", "cert_chain", "private_key", "override_hostname"})

#: Location schemes the Rust core connects to.
CORE_SCHEMES = ("grpc+tcp://", "grpc://", "grpc+tls://")

Endpoints = builtins.list[flight.FlightEndpoint]


class DataPlane(Protocol):
    """What moves a client's table data: the operations that differ by plane."""

    @property
    def transport(self) -> Transport:
        """The ``transport`` this plane was chosen for: ``"auto"``, ``"shm"`` or ``"grpc"``."""
        ...

    @property
    def core(self) -> _core.Connection | None:
        """The Rust core's connection that moves the data, or ``None`` (pyarrow does)."""
        ...

    @property
    def maps(self) -> bool:
        """Whether whole tables are read through shared memory (mapped) when offered."""
        ...

    @property
    def shm_only(self) -> bool:
        """Whether a whole-table call that cannot use shared memory raises (``"shm"``)."""
        ...

    def info(self, name: str) -> flight.FlightInfo:
        """GetFlightInfo of table ``name``, listing shared-memory endpoints if :attr:`maps`."""
        ...

    def takes_whole(self, source: BatchSource, request_id: str | None) -> bool:
        """Whether a put of ``source`` reads it whole and tries :meth:`put_whole` first.

        Raises :class:`ValueError` for a put this plane cannot make at all.
        """
        ...

    def put_whole(
        self, name: str, table: pa.Table, mode: PutMode, partitions: int | None
    ) -> PutResult | None:
        """Put ``table`` in one piece; ``None`` if it must be streamed instead."""
        ...

    def put_stream(
        self, name: str, source: BatchSource, options: bytes, count: RowCounter
    ) -> PutResult:
        """Send one DoPut of ``source``; raise the error reading it raised, if any."""
        ...

    def map_table(
        self, name: str, max_workers: int | None
    ) -> tuple[pa.Table | None, flight.FlightInfo, Endpoints]:
        """Map table ``name`` whole if this plane can here; else say what to :meth:`read`.

        Returns the table (or ``None``), the FlightInfo asked for, and the endpoints
        left to read.
        """
        ...

    def map(self, endpoints: Endpoints) -> tuple[pa.Table | None, Endpoints]:
        """Map the table an endpoint offers over shared memory; else return the others."""
        ...

    def read(
        self,
        endpoints: Endpoints,
        schema: pa.Schema,
        count_rows: RowCounter,
        max_workers: int | None,
    ) -> pa.Table:
        """Read every endpoint in parallel into one table, in endpoint order."""
        ...

    def stream(self, endpoint: flight.FlightEndpoint) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """DoGet one endpoint, from the first of its locations that answers.

        Returns its schema (the call has started) and its batches.
        """
        ...

    def close(self) -> None:
        """Release what this plane holds of its own (the core's connections)."""
        ...


def choose(
    transport: Transport,
    flight_plane: PyarrowPlane,
    *,
    flight_kwargs: dict[str, Any],
    headers: builtins.list[tuple[bytes, bytes]],
    timeout: float | None,
) -> DataPlane:
    """Return the data plane of a client: the one place ``transport`` is looked at.

    ``flight_kwargs`` are the caller's keyword arguments of the pyarrow client (with
    ``middleware`` only if some was given), ``headers`` those of every call.
    """
    core = _core_connection(flight_plane.uri, flight_kwargs, headers, timeout)
    stream: DataPlane = flight_plane if core is None else CorePlane(core, flight_plane)
    if transport == "grpc":
        return stream
    # GetFlightInfo asking for a shared-memory endpoint too.
    options = flight.FlightCallOptions(timeout=timeout, headers=[*headers, _shm.TRANSPORT_HEADER])
    return ShmPlane(stream, flight_plane, options, only=transport == "shm")


class _StreamPlane:
    """What the planes that stream every table (gRPC) share: no shared memory."""

    transport: Transport = "grpc"
    maps = False
    shm_only = False

    def info(self, name: str) -> flight.FlightInfo:
        raise NotImplementedError

    def takes_whole(self, source: BatchSource, request_id: str | None) -> bool:
        return False

    def put_whole(
        self, name: str, table: pa.Table, mode: PutMode, partitions: int | None
    ) -> PutResult | None:
        return None

    def map_table(
        self, name: str, max_workers: int | None
    ) -> tuple[pa.Table | None, flight.FlightInfo, Endpoints]:
        info = self.info(name)
        return None, info, info.endpoints

    def map(self, endpoints: Endpoints) -> tuple[pa.Table | None, Endpoints]:
        return None, endpoints


class PyarrowPlane(_StreamPlane):
    """pyarrow's Flight client moves the data: DoGet and DoPut, a thread per endpoint.

    ``client_at`` returns the pyarrow client of a location (the client's own for its
    server), ``options`` are every call's.
    """

    def __init__(
        self,
        uri: str,
        options: flight.FlightCallOptions,
        client_at: Callable[[str], flight.FlightClient],
    ) -> None:
        self.uri = uri
        self.options = options
        self.client_at = client_at

    @property
    def core(self) -> _core.Connection | None:
        return None

    def info(self, name: str, options: flight.FlightCallOptions | None = None) -> flight.FlightInfo:
        with translated_errors():
            return self.client_at(self.uri).get_flight_info(
                _protocol.descriptor(name), options or self.options
            )

    def action(self, kind: str, body: bytes = b"") -> JsonObject:
        """Run action ``kind``; return its first result's JSON object."""
        with translated_errors():
            results = self.client_at(self.uri).do_action(flight.Action(kind, body), self.options)
            bodies = [result.body.to_pybytes() for result in results]
        return _protocol.json_object(bodies[0] if bodies else b"")

    def put_stream(
        self, name: str, source: BatchSource, options: bytes, count: RowCounter
    ) -> PutResult:
        """Send one DoPut of ``source``; raise the error reading it raised, if any.

        pyarrow cannot cancel a DoPut: the batches sent before a failure of the
        source are stored.
        """
        reader = source.reader
        with translated_errors():
            writer, results = self.client_at(self.uri).do_put(
                _protocol.descriptor(name), reader.schema, self.options
            )
            source_error: BaseException | None = None
            try:
                writer.write_metadata(options)
                batches = iter(reader)
                while True:
                    try:
                        batch = next(batches)
                    except StopIteration:
                        break
                    except BaseException as error:  # the caller's stream failed
                        source_error = error
                        break
                    for piece in message_slices(batch):
                        writer.write_batch(piece)
                        count(piece.num_rows)
                writer.done_writing()
                answer = results.read()
            except pa.ArrowException:
                # The server ended the call; closing the writer yields its status.
                writer.close()
                raise
            writer.close()
        if source_error is not None:
            raise source_error
        return PutResult.from_json(_protocol.json_object(_protocol.buffer_bytes(answer)))

    def read(
        self,
        endpoints: Endpoints,
        schema: pa.Schema,
        count_rows: RowCounter,
        max_workers: int | None,
    ) -> pa.Table:
        return read_endpoints(endpoints, schema, self.do_get, count_rows, max_workers)

    def stream(self, endpoint: flight.FlightEndpoint) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        stream = self.do_get(endpoint)
        return stream.schema, _batches(stream)

    def close(self) -> None:
        """Nothing of its own: the client closes its pyarrow clients."""

    def endpoint_uris(self, endpoint: flight.FlightEndpoint) -> builtins.list[str]:
        """Return the locations to read ``endpoint`` from, in the order to try them.

        An endpoint that lists none is read from this client's server, as is
        Flight's reuse-connection location.
        """
        uris: builtins.list[str] = []
        for location in endpoint.locations:
            uri = location_uri(location)
            if uri == _protocol.REUSE_CONNECTION_URI:
                uri = self.uri
            if uri not in uris:
                uris.append(uri)
        return uris or [self.uri]

    def do_get(self, endpoint: flight.FlightEndpoint) -> flight.FlightStreamReader:
        """DoGet ``endpoint`` through pyarrow, from the first of its locations that answers.

        Returns the stream once its schema has arrived: a location that cannot
        be reached fails before that, and the next one is tried
        (:func:`~quiver._endpoints.first_reachable`).
        """

        def attempt(uri: str) -> flight.FlightStreamReader:
            with translated_errors():
                stream = self.client_at(uri).do_get(endpoint.ticket, self.options)
                _ = stream.schema  # waits for the first message
            return stream

        return first_reachable(self.endpoint_uris(endpoint), attempt)


class CorePlane(_StreamPlane):
    """The Rust core moves the data; pyarrow reads what the core cannot connect to.

    After :meth:`close`, pyarrow makes every call (and fails, its client closed).
    """

    def __init__(self, core: _core.Connection, flight_plane: PyarrowPlane) -> None:
        self._core: _core.Connection | None = core
        self._flight = flight_plane

    @property
    def core(self) -> _core.Connection | None:
        return self._core

    def info(self, name: str) -> flight.FlightInfo:
        return self._flight.info(name)

    def put_stream(
        self, name: str, source: BatchSource, options: bytes, count: RowCounter
    ) -> PutResult:
        """Send one DoPut of ``source``, whose batches the core frames by reference.

        A source that fails cancels the call and nothing is stored.
        """
        core = self._core
        if core is None:
            return self._flight.put_stream(name, source, options, count)
        reader = source.reader
        failed: builtins.list[BaseException] = []

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                for batch in reader:
                    yield batch
                    count(batch.num_rows)
            except BaseException as error:  # the caller's stream failed
                failed.append(error)
                raise

        stream = reader
        if source.may_fail or count is not ignore_rows:
            stream = pa.RecordBatchReader.from_batches(reader.schema, batches())
        try:
            with translated_errors():
                answer = core.put(self._flight.uri, [name], stream, options, MESSAGE_TARGET_BYTES)
        except QuiverError:
            if failed:
                raise failed[0] from None
            raise
        return PutResult.from_json(_protocol.json_object(answer))

    def read(
        self,
        endpoints: Endpoints,
        schema: pa.Schema,
        count_rows: RowCounter,
        max_workers: int | None,
    ) -> pa.Table:
        """Read through the core when it can reach every location; else through pyarrow."""
        core = self._core
        uris = [self._flight.endpoint_uris(e) for e in endpoints]
        if core is None or not endpoints or not all(map(_core_reads, uris)):
            return self._flight.read(endpoints, schema, count_rows, max_workers)
        work = [(u, e.ticket.ticket) for u, e in zip(uris, endpoints, strict=True)]
        with translated_errors():
            table = core.get(work, max_workers or DEFAULT_MAX_WORKERS).read_all()
        count_rows(table.num_rows)
        return table

    def stream(self, endpoint: flight.FlightEndpoint) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        core = self._core
        uris = self._flight.endpoint_uris(endpoint)
        if core is None or not _core_reads(uris):
            return self._flight.stream(endpoint)
        with translated_errors():
            reader, status = core.get_stream(uris, endpoint.ticket.ticket)
        return reader.schema, _core_batches(reader, status)

    def close(self) -> None:
        self._core = None


class ShmPlane:
    """Whole tables through shared memory, over ``stream`` for everything else.

    ``only`` (``transport="shm"``): a whole-table call that cannot use shared memory
    raises; else (``"auto"``) it goes to ``stream``. ``options`` are those of a
    GetFlightInfo that asks for shared-memory endpoints.
    """

    maps = True

    def __init__(
        self,
        stream: DataPlane,
        flight_plane: PyarrowPlane,
        options: flight.FlightCallOptions,
        *,
        only: bool,
    ) -> None:
        self._stream = stream
        self._flight = flight_plane
        self._options = options
        self._only = only

    @property
    def transport(self) -> Transport:
        return "shm" if self._only else "auto"

    @property
    def core(self) -> _core.Connection | None:
        return self._stream.core

    @property
    def shm_only(self) -> bool:
        return self._only

    def info(self, name: str) -> flight.FlightInfo:
        return self._flight.info(name, self._options)

    def takes_whole(self, source: BatchSource, request_id: str | None) -> bool:
        if request_id is not None and self._only:
            raise ValueError(
                "request_id needs a put over gRPC; this client puts over shared memory only "
                "(transport='shm')"
            )
        # In memory already (or shm required): the table is written once, into the
        # memfd the server adopts.
        return self._only or (not source.may_fail and request_id is None)

    def put_whole(
        self, name: str, table: pa.Table, mode: PutMode, partitions: int | None
    ) -> PutResult | None:
        """Put over shared memory; ``None`` if it is not available and the transport is auto."""
        put_options: dict[str, object] = {"mode": mode}
        if partitions is not None:
            put_options["partitions"] = partitions
        body = json.dumps({"table": name, "options": put_options}).encode()
        try:
            try:
                grant = self._flight.action("shm-put", body)
            except QuiverError as e:
                if e.code == "UNIMPLEMENTED":
                    raise _shm.ShmUnavailableError(str(e)) from e
                raise
            location = _shm.Location.parse(str(grant["location"]))
            if location is None:
                raise _shm.ShmUnavailableError(f"not a shared-memory location: {grant['location']}")
            ticket = base64.b64decode(str(grant["ticket"]))
            answer = _shm.put(location, ticket, table)
        except QuiverError as e:
            if self._only or e.code not in SHM_FALLBACK_CODES:
                raise
            return None
        return PutResult.from_json(_protocol.json_object(answer))

    def put_stream(
        self, name: str, source: BatchSource, options: bytes, count: RowCounter
    ) -> PutResult:
        return self._stream.put_stream(name, source, options, count)

    def map_table(
        self, name: str, max_workers: int | None
    ) -> tuple[pa.Table | None, flight.FlightInfo, Endpoints]:
        info = self.info(name)
        if _is_cluster(info):
            # A cluster table: the partitions this node holds over shared memory, the
            # others over gRPC from their replicas.
            table = self._map_cluster(info, max_workers)
            if table is None:
                info = self._stream.info(name)
            return table, info, info.endpoints
        table, endpoints = self.map(info.endpoints)
        return table, info, endpoints

    def map(self, endpoints: Endpoints) -> tuple[pa.Table | None, Endpoints]:
        """Read over shared memory if an endpoint offers it; else return the gRPC endpoints.

        With ``transport="shm"``, raise instead of returning no table.
        """
        grpc_endpoints: Endpoints = []
        shm_endpoint: tuple[_shm.Location, bytes] | None = None
        for endpoint in endpoints:
            location = shm_location(endpoint)
            if location is None:
                grpc_endpoints.append(endpoint)
            else:
                shm_endpoint = (location, endpoint.ticket.ticket)
        if shm_endpoint is None:
            if self._only:
                raise _shm.ShmUnavailableError(
                    "the server offers no shared-memory endpoint (started with "
                    "--shm-socket off, or too old)"
                )
            return None, grpc_endpoints
        try:
            return _shm.get(*shm_endpoint), grpc_endpoints
        except QuiverError as e:
            # Auto: anything that keeps shared memory from working here (another
            # host, no memory left for the server's export) means gRPC.
            if self._only or e.code not in SHM_GET_FALLBACK_CODES:
                raise
            return None, grpc_endpoints

    def _map_cluster(self, info: flight.FlightInfo, max_workers: int | None) -> pa.Table | None:
        """Read a cluster table whose local partitions the node offers over shared memory.

        Each endpoint over shared memory is read from it, the others over gRPC, all at
        once and in endpoint order. ``None`` when no endpoint is over shared memory or
        (in ``"auto"``) it cannot be used here: the caller asks for gRPC endpoints.
        """
        endpoints = info.endpoints
        locations = [shm_location(endpoint) for endpoint in endpoints]
        if not any(locations):
            if self._only:
                raise _shm.ShmUnavailableError(
                    "the cluster node holds no partition of the table here, or its "
                    "shared-memory data plane is off"
                )
            return None

        def read(index: int) -> pa.Table:
            endpoint, location = endpoints[index], locations[index]
            if location is None:
                return self._stream.read([endpoint], info.schema, ignore_rows, 1)
            return _shm.get(location, endpoint.ticket.ticket)

        workers = max(1, min(len(endpoints), max_workers or DEFAULT_MAX_WORKERS))
        try:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                parts = list(pool.map(read, range(len(endpoints))))
        except QuiverError as e:
            if self._only or e.code not in SHM_GET_FALLBACK_CODES:
                raise
            return None
        return pa.concat_tables(parts)

    def read(
        self,
        endpoints: Endpoints,
        schema: pa.Schema,
        count_rows: RowCounter,
        max_workers: int | None,
    ) -> pa.Table:
        return self._stream.read(endpoints, schema, count_rows, max_workers)

    def stream(self, endpoint: flight.FlightEndpoint) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        return self._stream.stream(endpoint)

    def close(self) -> None:
        self._stream.close()


def location_uri(location: flight.Location) -> str:
    """Return a Flight location's URI as a string."""
    uri = location.uri
    return uri.decode() if isinstance(uri, bytes) else str(uri)


def shm_location(endpoint: flight.FlightEndpoint) -> _shm.Location | None:
    """Return the endpoint's shared-memory location (``shm+unix://``), if it lists one."""
    return next(
        (
            _shm.Location.parse(uri)
            for uri in map(location_uri, endpoint.locations)
            if uri.startswith("shm+")
        ),
        None,
    )


def _is_cluster(info: flight.FlightInfo) -> bool:
    """Whether ``info`` describes a cluster table (its app metadata says so)."""
    try:
        metadata = json.loads(info.app_metadata or b"{}")
    except ValueError:
        return False
    return isinstance(metadata, dict) and metadata.get("cluster") is True


def _batches(stream: flight.FlightStreamReader) -> Iterator[pa.RecordBatch]:
    """Yield the record batches of a DoGet stream (skipping metadata-only messages)."""
    with translated_errors():
        while True:
            try:
                chunk = stream.read_chunk()
            except StopIteration:
                return
            if chunk.data is not None:
                yield chunk.data


def _core_reads(uris: Sequence[str]) -> bool:
    """Whether the Rust core can connect to every one of these locations."""
    return all(uri.startswith(CORE_SCHEMES) for uri in uris)


def _core_batches(
    reader: pa.RecordBatchReader, status: _core.StreamStatus
) -> Iterator[pa.RecordBatch]:
    """Yield a core stream's batches; its failure raised as the call's :class:`QuiverError`."""
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except pa.ArrowException:
            # Through the C stream interface the error is a message alone: the
            # status has the call's code and details.
            with translated_errors():
                status.check()
            raise
        yield batch


def _core_connection(
    uri: str,
    flight_kwargs: dict[str, Any],
    headers: builtins.list[tuple[bytes, bytes]],
    timeout: float | None,
) -> _core.Connection | None:
    """Return the Rust core's connection for these settings; ``None`` if pyarrow must do it.

    pyarrow moves the data when the core is not built (or ``QUIVER_CORE=0``), when
    a setting is one the core does not apply, and for ``grpc+tls`` without
    ``tls_root_certs`` (pyarrow then verifies with the system's CA certificates).
    """
    core = _native.core()
    if core is None or not set(flight_kwargs) <= CORE_KWARGS or not uri.startswith(CORE_SCHEMES):
        return None
    if uri.startswith("grpc+tls://") and flight_kwargs.get("tls_root_certs") is None:
        return None

    def pem(value: str | bytes | None) -> bytes | None:
        return value.encode() if isinstance(value, str) else value

    connection: _core.Connection = core.Connection(
        tls_root_certs=pem(flight_kwargs.get("tls_root_certs")),
        cert_chain=pem(flight_kwargs.get("cert_chain")),
        private_key=pem(flight_kwargs.get("private_key")),
        override_hostname=flight_kwargs.get("override_hostname"),
        headers=headers,
        timeout=timeout,
    )
    return connection
