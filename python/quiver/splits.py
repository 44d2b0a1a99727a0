"""Reads and writes split over parallel tasks: the engine-neutral core of the connectors.

Spark, Dask and Ray all work the same way: plan once, on the driver, then run
one task per piece, anywhere. This module is that plan for quiver, and the
engine shims (:mod:`quiver.spark`, :mod:`quiver.dask`, :mod:`quiver.ray`) are thin
layers over it.

**Reading.** :func:`plan_read` asks the server for a table's (or a query's)
FlightInfo and returns a :class:`ReadPlan`: the schema and one :class:`Split` per
endpoint, each with its ticket and every location that can serve it. Plans
and splits are plain picklable values. :func:`read_split` reads one split in any
process: from its first location that answers, failing over to the next (a
table split resumes where the failed location stopped), by shared memory when
the location is a server on this host.

Column selection and filters are pushed to the server. For a stored table, they
ride in each endpoint's ticket (docs/protocol.md, "Tickets"): the server
filters and projects that endpoint's rows, the splits stay one per endpoint, and
a split can be read again (a task retried by the engine reads the same rows).
A query runs through Flight SQL, one split per partition of its plan; such a
split can be read once.

**Writing.** :class:`WriteJob` stages each task's rows as a table of its own and
publishes them all into the target in one atomic step (the server's ``publish``
action) when the job commits. A job that fails or is aborted leaves the target
as it was and deletes its staging tables.

>>> from quiver.splits import Connection, plan_read, read_split
>>> plan = plan_read(Connection("127.0.0.1:8815"), "trips",
...                  columns=["fare"], filters=[("fare", ">", 10)])  # doctest: +SKIP
>>> parts = [read_split(plan, split) for split in plan.splits]  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import ipaddress
import json
import math
import os
import socket
import threading
import uuid
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.flight as flight

from . import _protocol, _sql
from ._planes import DataPlane, location_uri, shm_location
from ._protocol import PutPlace, Transport
from ._shm import ShmUnavailableError
from .client import PARTITION_PREFIX, STAGING_PREFIX, Client
from .errors import (
    InvalidArgumentError,
    NotFoundError,
    QuiverError,
    ServerUnavailableError,
    TableNotFoundError,
    UnimplementedError,
    VersionConflictError,
    translated_errors,
)
from .results import PutResult

__all__ = [
    "Connection",
    "Filter",
    "Filters",
    "ReadPlan",
    "Split",
    "TaskWrite",
    "WriteJob",
    "as_connection",
    "filters_to_sql",
    "plan_read",
    "quote_identifier",
    "read_schema",
    "read_split",
    "sql_literal",
]

#: One condition: ``(column, op, value)``, with ``op`` one of ``=``, ``==``, ``!=``,
#: ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``, ``is``, ``is not`` (with ``None``:
#: null tests), ``<=>`` (equal, nulls equal), ``starts_with``, ``ends_with``, ``contains``.
Filter = tuple[str, str, Any]
#: Conditions ANDed together (``[f1, f2]``), or several such lists ORed
#: (``[[f1, f2], [f3]]``): the form pyarrow's and Dask's ``filters`` take.
Filters = Sequence[Filter] | Sequence[Sequence[Filter]]

_COMPARISONS = {"=": "=", "==": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_TICKET_KEYS = ("t", "v", "p", "n")


# -- connecting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    """How every task connects: a picklable, hashable form of :func:`quiver.connect`'s arguments.

    Parameters
    ----------
    uri : str
        The server to plan with (``grpc+tcp://host:port``, ``grpc+tls://...``
        or ``host:port``). Splits are read from their own locations.
    username, password, token : str, optional
        Credentials, as for :func:`quiver.connect`.
    tls_root_certs, cert_chain, private_key : bytes, optional
        PEM bytes: the CA of a ``grpc+tls://`` server, and a client certificate
        and key for mutual TLS.
    override_hostname : str, optional
        The name to check the server's certificate against.
    disable_server_verification : bool, default False
        Do not check the server's certificate (testing only).
    timeout : float, optional
        Seconds each call may take.
    transport : {"auto", "shm", "grpc"}, default "auto"
        ``"auto"``: a split whose location is a server on this host is read
        through shared memory when the server offers it. ``"grpc"``: always
        DoGet. ``"shm"``: shared memory or an error.
    """

    uri: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    tls_root_certs: bytes | None = field(default=None, repr=False)
    cert_chain: bytes | None = field(default=None, repr=False)
    private_key: bytes | None = field(default=None, repr=False)
    override_hostname: str | None = None
    disable_server_verification: bool = False
    timeout: float | None = None
    transport: Transport = "auto"

    def __post_init__(self) -> None:  # noqa: D105
        object.__setattr__(self, "uri", _protocol.normalize_uri(self.uri))
        if self.transport not in ("auto", "shm", "grpc"):
            raise ValueError(f"transport must be 'auto', 'shm' or 'grpc', not {self.transport!r}")

    def client(self, uri: str | None = None) -> Client:
        """Return a client of ``uri`` (default: the planning server) with these settings.

        Clients are kept per process and reused by every task that runs there;
        a forked process makes its own.
        """
        return _clients.get(self, _protocol.normalize_uri(uri) if uri else self.uri)

    def _open(self, uri: str) -> Client:
        kwargs: dict[str, Any] = {}
        for name in ("tls_root_certs", "cert_chain", "private_key", "override_hostname"):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        if self.disable_server_verification:
            kwargs["disable_server_verification"] = True
        return Client(
            uri,
            timeout=self.timeout,
            username=self.username,
            password=self.password,
            token=self.token,
            # "auto": a write job's in-memory rows go through shared memory when
            # the server is on this host (reads take read_split's own path).
            transport=self.transport,
            **kwargs,
        )


class _Clients:
    """The clients of this process, by connection settings and server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._clients: dict[tuple[Connection, str], Client] = {}

    def get(self, connection: Connection, uri: str) -> Client:
        with self._lock:
            if self._pid != os.getpid():
                # A fork shares no connections with its parent.
                self._clients = {}
                self._pid = os.getpid()
            client = self._clients.get((connection, uri))
            if client is None:
                client = connection._open(uri)
                self._clients[(connection, uri)] = client
            return client

    def drop(self, connection: Connection, uri: str) -> None:
        with self._lock:
            client = self._clients.pop((connection, uri), None)
        if client is not None:
            client.close()


_clients = _Clients()


def as_connection(connection: Connection | str, **settings: Any) -> Connection:
    """Return ``connection`` as a :class:`Connection`: a URI with ``settings``, or itself.

    Raises
    ------
    TypeError
        ``settings`` given with a :class:`Connection`.
    """
    if isinstance(connection, Connection):
        if settings:
            raise TypeError("give connection settings in the Connection, not as keywords")
        return connection
    return Connection(connection, **settings)


# -- planning --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """One endpoint of a read: what one task fetches.

    Attributes
    ----------
    index : int
        Its place in the plan; reading the splits in index order gives the
        table's rows in order.
    ticket : bytes
        The endpoint's ticket (with the pushed columns and filter, for a table).
    locations : tuple of str
        Every location that can serve it, in the order to try; empty means the
        planning server.
    rows : int or None
        Rows it holds before any filter, when the server says (table splits).
    bytes : int or None
        About how many bytes it holds, when the server says.
    """

    index: int
    ticket: bytes
    locations: tuple[str, ...]
    rows: int | None = None
    bytes: int | None = None

    @property
    def pinned(self) -> dict[str, Any] | None:
        """The table, version and partition a table split reads; ``None`` for a query's."""
        return _protocol.pinned_ticket(self.ticket)


@dataclass(frozen=True)
class ReadPlan:
    """A planned read: the result's schema and one :class:`Split` per endpoint.

    Attributes
    ----------
    connection : Connection
        How tasks connect.
    schema : pyarrow.Schema
        The schema every split's batches have.
    splits : tuple of Split
        One per endpoint, in order.
    table : str or None
        The table read, or ``None`` for a query.
    version : int or None
        The table version every split reads.
    columns : tuple of str or None
        The columns pushed to the server (``None``: all).
    filter : str or None
        The SQL predicate pushed to the server.
    query : str or None
        The SQL query, for a query's plan.
    """

    connection: Connection
    schema: pa.Schema
    splits: tuple[Split, ...]
    table: str | None = None
    version: int | None = None
    columns: tuple[str, ...] | None = None
    filter: str | None = None
    query: str | None = None

    @property
    def rows(self) -> int | None:
        """Rows before any filter, if every split says."""
        counts = [s.rows for s in self.splits]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def read(self) -> pa.Table:
        """Read every split here, one after another, into one table (for tests and small reads)."""
        batches = [b for split in self.splits for b in read_split(self, split)]
        return pa.Table.from_batches(batches, schema=self.schema)


def plan_read(
    connection: Connection | str,
    table: str | None = None,
    *,
    query: str | None = None,
    columns: Sequence[str] | None = None,
    filters: Filters | None = None,
) -> ReadPlan:
    """Plan a parallel read of ``table`` or of a SQL ``query``.

    Parameters
    ----------
    connection : Connection or str
        The server to plan with, or its URI.
    table : str, optional
        A stored table. Give ``table`` or ``query``.
    query : str, optional
        A SQL query (Flight SQL); its result is split by the partitions of its plan.
    columns : sequence of str, optional
        The columns to read, in this order; all by default.
    filters : Filters, optional
        Rows to keep, as ``(column, op, value)`` conditions (see :data:`Filter`);
        evaluated by the server.

    Returns
    -------
    ReadPlan
        The schema and the splits.

    Raises
    ------
    TableNotFoundError
        ``table`` does not exist.
    InvalidArgumentError
        A column, filter or the query is not valid.
    ValueError
        Neither or both of ``table`` and ``query``; a filter this module
        cannot express in SQL.
    """
    conn = as_connection(connection)
    if (table is None) == (query is None):
        raise ValueError("give a table or a query, not both or neither")
    cols = None if columns is None else tuple(_column_names(columns))
    predicate = filters_to_sql(filters) if filters else None
    client = conn.client()
    if query is not None:
        sql = _wrap_query(query, cols, predicate)
        info = _flight_info(client, flight.FlightDescriptor.for_command(_sql.statement_query(sql)))
        splits = tuple(
            Split(i, e.ticket.ticket, _locations(e)) for i, e in enumerate(info.endpoints)
        )
        return ReadPlan(conn, info.schema, splits, columns=cols, filter=predicate, query=query)
    assert table is not None
    info = _flight_info(client, _protocol.descriptor(table))
    schema = info.schema
    if cols is not None and list(cols) == schema.names:
        cols = None  # every column, as stored: nothing to push
    if cols is not None:
        schema = _projected(schema, table, cols)
    version = _protocol.json_int(_protocol.json_object(info.app_metadata), "version")
    total_rows, total_bytes = info.total_records, info.total_bytes
    table_splits = []
    for i, endpoint in enumerate(info.endpoints):
        ticket = endpoint.ticket.ticket
        pinned = _protocol.pinned_ticket(ticket)
        rows = nbytes = None
        if pinned is not None:
            rows = _partition_rows(pinned, total_rows)
            if rows is not None and total_rows > 0 and total_bytes >= 0:
                nbytes = total_bytes * rows // total_rows
            ticket = _pushed_ticket(pinned, cols, predicate)
        elif cols is not None or predicate is not None:
            raise QuiverError(
                f"the server's tickets for {table!r} cannot carry columns or filters "
                "(not a quiver server, or too old)",
                "UNIMPLEMENTED",
            )
        table_splits.append(Split(i, ticket, _locations(endpoint), rows, nbytes))
    return ReadPlan(
        conn,
        schema,
        tuple(table_splits),
        table=table,
        version=version,
        columns=cols,
        filter=predicate,
    )


def read_schema(
    connection: Connection | str,
    table: str | None = None,
    *,
    query: str | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Schema:
    """Return the schema :func:`plan_read` would plan, without planning (GetSchema).

    A query is planned by the server but not run, and nothing is kept for it.
    """
    conn = as_connection(connection)
    if (table is None) == (query is None):
        raise ValueError("give a table or a query, not both or neither")
    cols = None if columns is None else tuple(_column_names(columns))
    if query is not None:
        command = _sql.statement_query(_wrap_query(query, cols, None))
        descriptor = flight.FlightDescriptor.for_command(command)
    else:
        assert table is not None
        descriptor = _protocol.descriptor(table)
    client = conn.client()
    try:
        with translated_errors():
            schema = client.flight_client.get_schema(descriptor, client.call_options).schema
    except (UnimplementedError, pa.ArrowNotImplementedError):
        if table is None:
            raise
        # A Flight server without GetSchema (it is optional): the FlightInfo says it too.
        schema = _flight_info(client, descriptor).schema
    if table is not None and cols is not None:
        schema = _projected(schema, table, cols)
    return schema


def _projected(schema: pa.Schema, table: str, columns: tuple[str, ...]) -> pa.Schema:
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        raise InvalidArgumentError(
            f"table {table!r} has no column {missing[0]!r} (it has: {', '.join(schema.names)})",
            "INVALID_ARGUMENT",
        )
    return pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)


def _flight_info(client: Client, descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
    with translated_errors():
        return client.flight_client.get_flight_info(descriptor, client.call_options)


def _locations(endpoint: flight.FlightEndpoint) -> tuple[str, ...]:
    uris = (location_uri(loc) for loc in endpoint.locations)
    return tuple(u for u in uris if u != _protocol.REUSE_CONNECTION_URI)


def _partition_rows(pinned: dict[str, Any], total_rows: int) -> int | None:
    p, n = pinned.get("p"), pinned.get("n")
    if not isinstance(p, int) or not isinstance(n, int) or n < 1 or total_rows < 0:
        return None
    return _partition_slice(p, n, total_rows)[1]


def _partition_slice(p: int, n: int, rows: int) -> tuple[int, int]:
    """Return the first row and the row count of partition ``p`` of ``n`` (docs/protocol.md)."""
    start = p * rows // n
    return start, (p + 1) * rows // n - start


def _pushed_ticket(
    pinned: dict[str, Any], columns: tuple[str, ...] | None, predicate: str | None
) -> bytes:
    body: dict[str, Any] = {k: pinned[k] for k in _TICKET_KEYS if k in pinned}
    if columns is not None:
        body["c"] = list(columns)
    if predicate is not None:
        body["f"] = predicate
    return _protocol.TICKET_PREFIX + json.dumps(body, separators=(",", ":")).encode()


def _wrap_query(query: str, columns: tuple[str, ...] | None, predicate: str | None) -> str:
    if columns is None and predicate is None:
        return query
    select = "*" if columns is None else ", ".join(quote_identifier(c) for c in columns)
    where = "" if predicate is None else f" WHERE {predicate}"
    return f"SELECT {select} FROM ({query}) AS q{where}"


def _column_names(columns: Sequence[str]) -> list[str]:
    if isinstance(columns, str):
        raise TypeError("columns is a sequence of names, not one str")
    names = list(columns)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"a column name is a str, not {type(name).__name__}")
    if len(set(names)) != len(names):
        raise ValueError(f"columns repeat a name: {names}")
    return names


# -- filters as SQL --------------------------------------------------------------------------


def quote_identifier(name: str) -> str:
    """Quote a column or table name for DataFusion SQL (case kept, any characters)."""
    return '"' + name.replace('"', '""') + '"'


def sql_literal(value: Any) -> str:
    """Return ``value`` as a DataFusion SQL literal.

    Supports ``None``, bool, int, float (finite or not), str, bytes,
    :class:`decimal.Decimal`, :class:`datetime.date`, :class:`datetime.datetime`
    (naive: as written; aware: the instant, in UTC) and
    :class:`datetime.time`.

    Raises
    ------
    ValueError
        A value of another type.
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(value):
            return f"CAST('{'-' if value < 0 else ''}Infinity' AS DOUBLE)"
        return repr(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(f"a decimal filter value must be finite, not {value}")
        _, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)
        scale = max(0, -exponent)
        precision = max(len(digits), scale + 1, 1)
        if precision > 38:
            raise ValueError(f"decimal {value} has more than 38 digits")
        return f"CAST('{value}' AS DECIMAL({precision}, {scale}))"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (bytes, bytearray)):
        return f"X'{bytes(value).hex()}'"
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            # A zoned instant, compared as one with a column of any zone (a plain
            # TIMESTAMP literal would be read in the column's zone).
            utc = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
            return f"arrow_cast('{utc.isoformat()}Z', 'Timestamp(Microsecond, Some(\"UTC\"))')"
        return f"CAST('{value.isoformat()}' AS TIMESTAMP)"
    if isinstance(value, datetime.date):
        return f"CAST('{value.isoformat()}' AS DATE)"
    if isinstance(value, datetime.time):
        return f"CAST('{value.isoformat()}' AS TIME)"
    raise ValueError(f"cannot write a {type(value).__name__} as a SQL literal: {value!r}")


def _condition(column: object, op: object, value: Any) -> str:
    if not isinstance(column, str):
        raise ValueError(f"a filter names its column with a str, not {column!r}")
    col = quote_identifier(column)
    if not isinstance(op, str):
        raise ValueError(f"a filter's operator is a str, not {op!r}")
    op = op.strip().lower()
    if op in _COMPARISONS:
        if value is None:
            raise ValueError(f"({column!r}, {op!r}, None) is never true: use 'is' None")
        return f"{col} {_COMPARISONS[op]} {sql_literal(value)}"
    if op in ("in", "not in"):
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise ValueError(f"{op!r} takes a list of values, not {value!r}")
        values = list(value)
        if not values:
            return "FALSE" if op == "in" else "TRUE"
        listed = ", ".join(sql_literal(v) for v in values)
        return f"{col} {op.upper()} ({listed})"
    if op in ("is", "is not"):
        if value is not None:
            raise ValueError(f"{op!r} takes None (a null test), not {value!r}")
        return f"{col} {op.upper()} NULL"
    if op == "<=>":
        return f"{col} IS NOT DISTINCT FROM {sql_literal(value)}"
    if op in ("starts_with", "ends_with"):
        return f"{op}({col}, {sql_literal(_text_value(op, value))})"
    if op == "contains":
        return f"strpos({col}, {sql_literal(_text_value(op, value))}) > 0"
    raise ValueError(f"unknown filter operator {op!r}")


def _text_value(op: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{op!r} takes a str, not {value!r}")
    return value


def filters_to_sql(filters: Filters) -> str:
    r"""Return ``filters`` (see :data:`Filters`) as one SQL predicate.

    >>> filters_to_sql([("fare", ">", 10), ("vendor", "in", ["a", "b"])])
    '("fare" > 10) AND ("vendor" IN (\\'a\\', \\'b\\'))'

    Raises
    ------
    ValueError
        A malformed condition or a value with no SQL literal.
    """
    items = list(filters)
    if not items:
        raise ValueError("filters is empty")
    groups = items if all(_is_group(i) for i in items) else [items]
    ors = []
    for group in groups:
        conditions = list(group)
        if not conditions:
            raise ValueError("an empty list of conditions in filters")
        ands = [f"({_condition(*_triple(c))})" for c in conditions]
        ors.append(" AND ".join(ands))
    return ors[0] if len(ors) == 1 else " OR ".join(f"({o})" for o in ors)


def _is_group(item: Any) -> bool:
    return isinstance(item, list) or (
        isinstance(item, tuple) and bool(item) and isinstance(item[0], (list, tuple))
    )


def _triple(condition: Any) -> tuple[str, str, Any]:
    if not isinstance(condition, (tuple, list)) or len(condition) != 3:
        raise ValueError(f"a filter is (column, op, value), not {condition!r}")
    column, op, value = condition
    return column, op, value


# -- reading ---------------------------------------------------------------------------------

#: Errors after which the next location of a split is tried.
_FAILOVER = (ServerUnavailableError, ConnectionError, OSError)


def read_split(plan: ReadPlan, split: Split) -> Iterator[pa.RecordBatch]:
    """Yield the record batches of ``split``, from its first location that answers.

    Tries the split's locations in order (the planning server if it lists
    none). If a location cannot be reached, fails while streaming, no longer
    holds a table split's rows (a cluster's copy moved), or cannot serve them
    over shared memory when the plan asks for nothing else, the next one is
    tried; a table split resumes after the rows already yielded, since
    every location serves the same rows of the same version. When a location
    is a server on this host that offers shared memory (and the plan's
    transport allows it), the split is read through shared memory.

    Raises
    ------
    ServerUnavailableError
        No location could serve the split (the last location's error).
    VersionConflictError
        The table changed since the plan was made: plan again.
    NotFoundError
        A query's split was already read or has expired: run the query again. Or no
        location holds a cluster split's partition any more (its copies moved since the
        plan, longer ago than the query timeout): plan again.
    quiver.QuiverError
        With ``transport="shm"``, no location serves the split over shared memory (code
        ``UNAVAILABLE``; the last location's reason).
    """
    conn = plan.connection
    uris = split.locations or (conn.uri,)
    done = 0
    last: BaseException | None = None
    for uri in uris:
        try:
            for batch in _read_from(plan, split, uri, skip=done):
                done += batch.num_rows
                yield batch
            return
        except _FAILOVER as error:
            if done and split.pinned is None:
                raise  # a query's partition cannot be resumed elsewhere
            _clients.drop(conn, _protocol.normalize_uri(uri))
            last = error
        except ShmUnavailableError as error:
            last = error  # the location answers, but not over shared memory
        except NotFoundError as error:
            if split.pinned is None:
                raise NotFoundError(
                    f"{error} (a query's result can be read once, within 10 minutes of "
                    "planning: plan the read again)",
                    error.code,
                ) from error
            if not _names_partition(split.pinned):
                raise
            # A cluster location keeps a partition it gave away (rebalancing) for the
            # plan's readers, for the query timeout; after that the next may hold it.
            last = NotFoundError(
                f"no location of split {split.index} of table {plan.table!r} holds its rows "
                f"any more (its copies moved since the plan; tried {', '.join(uris)}): plan "
                "the read again",
                error.code,
            )
    assert last is not None
    raise last


def _names_partition(pinned: dict[str, Any]) -> bool:
    """Whether a table split's ticket names one partition's storage (a cluster's)."""
    return str(pinned["t"]).startswith(PARTITION_PREFIX)


def _read_from(plan: ReadPlan, split: Split, uri: str, skip: int) -> Iterator[pa.RecordBatch]:
    pinned = split.pinned
    # The client's data plane: shared memory (transport "auto" or "shm") over the Rust
    # core when it has one (quiver._core), else pyarrow (quiver._planes).
    plane = plan.connection.client(uri).data_plane
    # The server filters what it streams: a filtered split always travels by gRPC.
    if pinned is not None and plan.filter is None and plane.maps and _is_local(uri):
        table = _read_shm(plan, split, pinned, uri, plane)
        if table is not None:
            yield from table.slice(skip).to_batches()
            return
    _, batches = plane.stream(flight.FlightEndpoint(split.ticket, []))
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        if skip:
            batch, skip = batch.slice(skip), 0
        yield batch


def _read_shm(
    plan: ReadPlan, split: Split, pinned: dict[str, Any], uri: str, plane: DataPlane
) -> pa.Table | None:
    """Read a table split through shared memory, or return ``None`` to use gRPC.

    A server's ticket pins a version and a slice of it: the whole version is mapped (no
    page is touched) and the split's rows sliced out, after checking it is the version the
    plan pinned. A cluster's ticket names one partition's storage, which only DoGet
    serves: the node's GetFlightInfo of the table lists the same partitions in the same
    order while the version is the plan's, and each one the node holds over shared memory
    (docs/cluster.md); the split's is mapped. A cluster holds a replaced version's
    partitions for the plan's readers, so there a newer version means gRPC, unless the
    plan asks for shared memory only. A node that no longer holds the split's copy (it
    moved, and the plan's hold on it ran out) lists no shared-memory endpoint for it: in
    ``"auto"`` the split goes to gRPC (and so on to the next location), in ``"shm"`` to
    the next location.
    """
    partition = _names_partition(pinned)
    name, planned = (plan.table, plan.version) if partition else (pinned["t"], pinned.get("v"))
    try:
        info = plane.info(str(name))
    except QuiverError as error:
        changed = isinstance(error, (TableNotFoundError, VersionConflictError))
        if (changed and not partition) or plane.shm_only:
            raise
        return None
    version = _protocol.json_int(_protocol.json_object(info.app_metadata), "version")
    if planned is not None and version != planned:
        if partition and not plane.shm_only:
            return None
        raise VersionConflictError(
            f"table {name!r} changed since the read was planned "
            f"(version {planned}, now {version}): plan again",
            "ABORTED",
        )
    endpoints = list(info.endpoints)
    if partition:
        endpoints = endpoints[split.index : split.index + 1]
        if plane.shm_only and shm_location(endpoints[0]) is None:
            raise ShmUnavailableError(
                f"{uri} holds no copy of split {split.index} of table {plan.table!r} any "
                'more (it moved since the plan): plan the read again, or use transport="auto"'
            )
    table, _ = plane.map(endpoints)
    if table is None:
        return None
    if not partition:
        table = table.slice(*_partition_slice(int(pinned["p"]), int(pinned["n"]), table.num_rows))
    if plan.columns is not None:
        table = table.select(list(plan.columns))
    return table


def _is_local(uri: str) -> bool:
    """Whether ``uri`` names a server on this host (a loopback address or this host's name)."""
    host = urlsplit(uri).hostname
    if host is None:
        return False
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- writing ---------------------------------------------------------------------------------

WriteMode = Literal["replace", "append"]


@dataclass(frozen=True)
class TaskWrite:
    """What one task wrote: its staging table, rows and bytes (picklable)."""

    table: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class WriteJob:
    """A parallel write into one table, published atomically on :meth:`commit`.

    Make it with :meth:`begin` on the driver; ship it (it pickles) to the tasks,
    which call :meth:`write`; collect what they return and call :meth:`commit`
    (or :meth:`abort`) on the driver.

    Attributes
    ----------
    connection : Connection
        How tasks connect.
    table : str
        The target table.
    mode : {"replace", "append"}
        Replace the target with the job's rows, or append them.
    job_id : str
        Names the job's staging tables (``.quiver-staging/<job_id>/...``).
    schema : pyarrow.Schema or None
        For an append, the target's schema: every task's rows are cast to it.
    partitions : int or None
        Endpoints of the published table (as :meth:`quiver.Client.put`'s).
    nodes : tuple of str
        On a cluster, the nodes' locations (:meth:`quiver.Client.nodes`, read once by
        :meth:`begin`): task ``i`` puts to node ``i`` modulo their number, which keeps
        its rows (``place="here"``), so the nodes share the job and a task's rows
        cross the network once less. Empty on a single server.
    """

    connection: Connection
    table: str
    mode: WriteMode
    job_id: str
    schema: pa.Schema | None = None
    partitions: int | None = None
    nodes: tuple[str, ...] = ()

    @classmethod
    def begin(
        cls,
        connection: Connection | str,
        table: str,
        mode: WriteMode = "replace",
        *,
        partitions: int | None = None,
    ) -> WriteJob:
        """Start a write job into ``table``.

        Raises
        ------
        TableNotFoundError
            An append to a table that does not exist.
        ValueError
            An unknown mode or partitions out of range.
        """
        conn = as_connection(connection)
        if mode not in ("replace", "append"):
            raise ValueError(f"mode must be 'replace' or 'append', not {mode!r}")
        _protocol.put_options(mode, partitions)  # validates partitions
        schema = None
        if mode == "append":
            client = conn.client()
            with translated_errors():
                schema = client.flight_client.get_schema(
                    _protocol.descriptor(table), client.call_options
                ).schema
        job = cls(conn, table, mode, uuid.uuid4().hex, schema, partitions, _put_nodes(conn))
        conn.client().put(job._open_marker, pa.table({}))
        return job

    def _client_for(self, task: int | str) -> tuple[Client, PutPlace]:
        """Return the client task ``task`` puts through, and where that node places the rows.

        The task's node (:attr:`nodes`) if it answers, keeping the rows there;
        else the job's server, which spreads them round the live nodes.
        """
        if self.nodes:
            key = task if isinstance(task, int) else zlib.crc32(str(task).encode())
            client = self.connection.client(self.nodes[key % len(self.nodes)])
            try:
                client.health()
            except QuiverError:
                pass  # gone since the job began: the job's server places the rows
            else:
                return client, "here"
        return self.connection.client(), "spread"

    @property
    def staging_prefix(self) -> str:
        """The name prefix of this job's staging tables."""
        return f"{STAGING_PREFIX}{self.job_id}/"

    @property
    def _open_marker(self) -> str:
        """An empty table that exists while the job is open: the fence against late tasks."""
        return f"{self.staging_prefix}open"

    def write(self, task: int | str, data: object, schema: pa.Schema | None = None) -> TaskWrite:
        """Stage one task's rows; return what to pass to :meth:`commit`.

        Parameters
        ----------
        task : int or str
            The task's number (its partition); names the staging table, with a
            suffix of its own so that a retried task never collides with an
            earlier attempt.
        data : table-like
            Anything :meth:`quiver.Client.put` takes: a table, record batches, a
            reader, a pandas DataFrame, ...
        schema : pyarrow.Schema, optional
            The schema of ``data`` when it may hold no batch at all (an
            iterable of batches).
        """
        name = f"{self.staging_prefix}{task}-{uuid.uuid4().hex[:8]}"
        source = _as_reader(data, self.schema or schema)
        if self.schema is not None:
            source = _cast_reader(source, self.schema)
        client, place = self._client_for(task)
        result = client.put(name, source, place=place)
        # A task that finishes after the job ended (an attempt the engine gave up on,
        # still running when the job failed) removes what it staged: the job's end
        # drops the marker before it deletes the job's tables, so either that
        # deletion saw this table or this check sees no marker.
        if not client.exists(self._open_marker):
            with contextlib.suppress(TableNotFoundError):
                client.delete(name)
            raise QuiverError(
                f"write job {self.job_id} into {self.table!r} ended before this task did",
                "ABORTED",
            )
        return TaskWrite(name, result.rows, result.bytes)

    def commit(
        self, writes: Iterable[TaskWrite | None], schema: pa.Schema | None = None
    ) -> PutResult:
        """Publish every task's rows into the target in one atomic step, in the order given.

        Deletes the staging tables of task attempts not among ``writes``
        (attempts an engine retried or abandoned). On failure, nothing is
        published and every staging table of the job is deleted.

        Parameters
        ----------
        writes : iterable of TaskWrite or None
            What the tasks returned (``None`` for a task that wrote nothing).
        schema : pyarrow.Schema, optional
            The rows' schema: a replace with no task output makes the target an
            empty table of this schema.
        """
        sources = [w.table for w in writes if w is not None]
        client = self.connection.client()
        try:
            if sources:
                result = client.publish(
                    self.table, sources, mode=self.mode, partitions=self.partitions
                )
            elif self.mode == "replace":
                if schema is None:
                    raise ValueError(
                        f"no task wrote rows and no schema was given: cannot replace {self.table!r}"
                    )
                result = client.put(self.table, schema.empty_table(), partitions=self.partitions)
            else:
                info = client.info(self.table)
                result = PutResult(self.table, info.version or 0, info.num_rows, info.num_bytes)
        except BaseException:
            self.abort()
            raise
        self.abort()  # what is left: attempts that did not count
        return result

    def abort(self) -> None:
        """End the job: delete every staging table of it; the target is not touched.

        Tasks still running stage nothing from then on (they remove what they put).
        """
        client = self.connection.client()
        with contextlib.suppress(TableNotFoundError):
            client.delete(self._open_marker)
        for info in client.list_tables(self.staging_prefix):
            with contextlib.suppress(TableNotFoundError):
                client.delete(info.name)


def _put_nodes(conn: Connection) -> tuple[str, ...]:
    """Return the locations of the cluster's nodes, by id.

    None on a single server, or on a server from before the ``nodes`` action.
    """
    try:
        nodes = conn.client().nodes()
    except QuiverError as e:
        if e.code == "UNIMPLEMENTED":
            return ()
        raise
    return tuple(nodes[node] for node in sorted(nodes))


def _as_reader(data: object, schema: pa.Schema | None) -> object:
    if isinstance(data, Iterator) and schema is not None:
        return pa.RecordBatchReader.from_batches(schema, data)
    return data


def _cast_reader(data: object, schema: pa.Schema) -> pa.RecordBatchReader:
    """Return ``data`` as record batches of ``schema`` (an append's target schema)."""
    from ._convert import batch_source

    reader = batch_source(data).reader

    def cast() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            if batch.schema.equals(schema):
                yield batch
                continue
            try:
                yield batch.select(schema.names).cast(schema)
            except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InvalidArgumentError(
                    f"rows do not fit the target table's schema: {e}", "SCHEMA_MISMATCH"
                ) from e

    return pa.RecordBatchReader.from_batches(schema, cast())
