"""What the client's calls return: :class:`PutResult`, :class:`TableInfo`,
:class:`ServerStats`, :class:`ServerHealth`, :class:`FunctionInfo` and
:class:`ApplyResult`.
"""  # noqa: D205

from __future__ import annotations

import base64
import binascii
import dataclasses
import warnings
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.flight as flight

from . import _protocol

__all__ = [
    "ApplyResult",
    "FunctionInfo",
    "PutResult",
    "ServerHealth",
    "ServerStats",
    "TableInfo",
]


@dataclass(frozen=True)
class PutResult:
    """The server's answer to a put.

    Attributes
    ----------
    table : str
        The table written.
    version : int
        The table's version after the put; every put, rename or delete makes a
        new one.
    rows : int
        The rows the table holds after the put (for an append, old and new).
    bytes : int
        The bytes of the table's Arrow buffers after the put.
    """

    table: str
    version: int
    rows: int
    bytes: int

    @classmethod
    def from_json(cls, obj: _protocol.JsonObject) -> PutResult:
        """Build a result from the server's PutResult JSON."""
        return cls(
            table=str(obj.get("table", "")),
            version=_protocol.json_int(obj, "version") or 0,
            rows=_protocol.json_int(obj, "rows") or 0,
            bytes=_protocol.json_int(obj, "bytes") or 0,
        )


@dataclass(frozen=True)
class TableInfo:
    """A table as GetFlightInfo or ListFlights describes it.

    Attributes
    ----------
    name : str
        The table's name.
    schema : pyarrow.Schema
        The table's schema.
    num_rows : int
        Rows in the table.
    num_bytes : int
        Bytes of the table's Arrow buffers.
    version : int or None
        The version described (``None`` if the server did not say).
    partitions : int
        How many endpoints a read of the table is split over.
    endpoints : tuple of pyarrow.flight.FlightEndpoint
        Where to read each partition, in table order. Their tickets pin
        ``version``.
    """

    name: str
    schema: pa.Schema
    num_rows: int
    num_bytes: int
    version: int | None
    partitions: int
    endpoints: tuple[flight.FlightEndpoint, ...]

    @classmethod
    def from_flight_info(cls, info: flight.FlightInfo) -> TableInfo:
        """Build a table description from a ``FlightInfo`` sent by a quiver server."""
        metadata = _protocol.json_object(getattr(info, "app_metadata", b"") or b"")
        version = _protocol.json_int(metadata, "version")
        partitions = _protocol.json_int(metadata, "partitions")
        if version is None and info.endpoints:
            # pyarrow without FlightInfo.app_metadata: the tickets say the same.
            pinned = _protocol.pinned_ticket(info.endpoints[0].ticket.ticket) or {}
            version = _protocol.json_int(pinned, "v")
            partitions = partitions or _protocol.json_int(pinned, "n")
        return cls(
            name=_protocol.descriptor_name(info.descriptor),
            schema=info.schema,
            num_rows=info.total_records,
            num_bytes=info.total_bytes,
            version=version,
            partitions=partitions or len(info.endpoints),
            endpoints=tuple(info.endpoints),
        )


class _ReadAsDict:
    """``result["key"]`` as before these results were dataclasses, with a DeprecationWarning."""

    def __getitem__(self, key: str) -> object:
        """Return attribute ``key``; deprecated, use ``result.key``."""
        if key not in {f.name for f in dataclasses.fields(self)}:  # type: ignore[arg-type]
            raise KeyError(key)
        warnings.warn(
            f"{type(self).__name__} is a dataclass: use .{key} instead of [{key!r}]",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self, key)


@dataclass(frozen=True)
class ServerStats(_ReadAsDict):
    """The server's counters, as :meth:`quiver.Client.stats` returns them.

    Attributes
    ----------
    tables : int
        Tables stored.
    rows : int
        Rows of all tables.
    bytes : int
        Bytes of all tables' Arrow buffers.
    memory_used : int
        Bytes charged against the memory limit (tables and puts in progress).
    memory_limit : int
        The server's memory limit in bytes (``--max-memory``).
    put_buffer_pool_bytes : int
        Bytes held for reuse by later puts (``--put-buffer-pool``).
    uptime_seconds : float
        Seconds since the server started.
    version : str
        The server's version.
    """

    tables: int
    rows: int
    bytes: int
    memory_used: int
    memory_limit: int
    put_buffer_pool_bytes: int
    uptime_seconds: float
    version: str

    @classmethod
    def from_json(cls, obj: _protocol.JsonObject) -> ServerStats:
        """Build the counters from the ``stats`` action's JSON (missing numbers are 0)."""
        return cls(
            tables=_protocol.json_int(obj, "tables") or 0,
            rows=_protocol.json_int(obj, "rows") or 0,
            bytes=_protocol.json_int(obj, "bytes") or 0,
            memory_used=_protocol.json_int(obj, "memory_used") or 0,
            memory_limit=_protocol.json_int(obj, "memory_limit") or 0,
            put_buffer_pool_bytes=_protocol.json_int(obj, "put_buffer_pool_bytes") or 0,
            uptime_seconds=_protocol.json_float(obj, "uptime_seconds") or 0.0,
            version=str(obj.get("version", "")),
        )


@dataclass(frozen=True)
class ServerHealth(_ReadAsDict):
    """The answer to :meth:`quiver.Client.health`.

    Attributes
    ----------
    status : str
        ``"ok"`` from a server that serves.
    uptime_seconds : float
        Seconds since the server started.
    """

    status: str
    uptime_seconds: float

    @property
    def ok(self) -> bool:
        """Whether the status is ``"ok"``."""
        return self.status == "ok"

    @classmethod
    def from_json(cls, obj: _protocol.JsonObject) -> ServerHealth:
        """Build the answer from the ``health`` action's JSON."""
        return cls(
            status=str(obj.get("status", "")),
            uptime_seconds=_protocol.json_float(obj, "uptime_seconds") or 0.0,
        )


@dataclass(frozen=True)
class FunctionInfo:
    """A function the server serves, as :meth:`quiver.Client.functions` lists it.

    Attributes
    ----------
    name : str
        The name to call it by (:meth:`quiver.Client.exchange`).
    module : str
        The Python module that defines it.
    description : str
        What it does.
    input_schema : pyarrow.Schema or None
        The schema every input must have (field names and types, in order), if declared.
    output_schema : pyarrow.Schema or None
        The schema of its results, if declared.
    pandas : bool
        Whether it works on pandas DataFrames (the server converts; clients send Arrow).
    sql : bool
        Whether SQL may call it.
    """

    name: str
    module: str
    description: str
    input_schema: pa.Schema | None
    output_schema: pa.Schema | None
    pandas: bool
    sql: bool

    @classmethod
    def from_json(cls, obj: _protocol.JsonObject) -> FunctionInfo:
        """Build a description from one entry of the ``list-functions`` action's JSON."""
        return cls(
            name=str(obj.get("name", "")),
            module=str(obj.get("module", "")),
            description=str(obj.get("description", "") or ""),
            input_schema=_schema(obj.get("input_schema")),
            output_schema=_schema(obj.get("output_schema")),
            pandas=obj.get("pandas") is True,
            sql=obj.get("sql") is not False,
        )


def _schema(encoded: object) -> pa.Schema | None:
    """Decode a schema sent as base64 of its IPC message; ``None`` for null or garbage."""
    if not isinstance(encoded, str) or not encoded:
        return None
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded, validate=True)))
    except (binascii.Error, ValueError, pa.ArrowException):
        return None


@dataclass(frozen=True)
class ApplyResult:
    """The server's answer to :meth:`quiver.Client.apply` with ``into``.

    Attributes
    ----------
    table : str
        The table written.
    version : int
        Its version after the apply.
    rows : int
        The rows it holds (for an append, old and new).
    bytes : int
        The bytes of its Arrow buffers.
    source_version : int
        The version of the source table the function ran over.
    """

    table: str
    version: int
    rows: int
    bytes: int
    source_version: int

    @classmethod
    def from_json(cls, obj: _protocol.JsonObject) -> ApplyResult:
        """Build a result from the apply's last ``app_metadata``."""
        return cls(
            table=str(obj.get("table", "")),
            version=_protocol.json_int(obj, "version") or 0,
            rows=_protocol.json_int(obj, "rows") or 0,
            bytes=_protocol.json_int(obj, "bytes") or 0,
            source_version=_protocol.json_int(obj, "source_version") or 0,
        )
