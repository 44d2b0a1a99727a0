"""What the client's calls return: :class:`PutResult` and :class:`TableInfo`."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.flight as flight

from . import _protocol

__all__ = ["PutResult", "TableInfo"]


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
