"""The ``sql`` suite's clients: each fetches a query's result into a pandas DataFrame.

One fetcher per client, all timed the same way: from sending the query to holding the
DataFrame, on a connection opened beforehand.

- quiver Flight SQL through ADBC (``adbc_driver_flightsql``): ``execute``, then
  ``fetch_arrow_table().to_pandas()``;
- quiver Flight SQL through plain ``pyarrow.flight``: GetFlightInfo of a
  ``CommandStatementQuery`` (encoded here by hand), DoGet of every endpoint in parallel,
  ``to_pandas()``: the harness's get path (:func:`bench.flight_client.timed_get`) with a
  query for descriptor;
- raw DoGet of the same stored table, from quiver and from the Arrow C++ peer: the same
  path with the table's path descriptor, the reference Flight SQL is read against;
- PostgreSQL through psycopg 3 (``fetchall()`` then ``pd.DataFrame.from_records``), through
  ODBC (psqlODBC and pyodbc, the same) and through ADBC (``adbc_driver_postgresql``,
  ``fetch_arrow_table().to_pandas()``);
- DuckDB reading a local Parquet file of the table (``.df()``), the floor.

The drivers are imported when a fetcher opens, so that a missing one fails its own
measurements only. The suite runs each fetch in a worker process of its own
(:mod:`bench.sql_worker`), which builds its fetcher with :func:`make_fetcher`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq

from . import flight_client
from .peers.postgres import PostgresServer
from .results import ARROW_CPP, DUCKDB, POSTGRESQL, QUIVER

#: ``Any.type_url`` of a Flight SQL query.
STATEMENT_QUERY_TYPE = "type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
#: psqlODBC's Unicode driver, where Debian's ``odbc-postgresql`` puts it.
ODBC_DRIVER_GLOB = "/usr/lib/*/odbc/psqlodbcw.so"
ODBC_DRIVER_NAME = "PostgreSQL Unicode"


@dataclass(frozen=True)
class SqlPeer:
    """A client of the comparison, as its rows in results.csv name it.

    Attributes
    ----------
    server : str
        The ``server`` column: ``quiver``, ``arrow-cpp``, ``postgresql``, ``duckdb``.
    client : str
        The ``client`` column: the driver.
    op : str
        ``sql+to_pandas`` (a query) or ``get+to_pandas`` (a raw DoGet of the table).
    label : str
        How the report and the figure name it.
    row_based : bool
        Whether the client builds a Python object per value (capped in size by the plan).
    """

    server: str
    client: str
    op: str
    label: str
    row_based: bool = False


QUIVER_ADBC = SqlPeer(QUIVER, "adbc-flightsql", "sql+to_pandas", "quiver Flight SQL, ADBC")
QUIVER_FLIGHT_SQL = SqlPeer(
    QUIVER, "pyarrow-flightsql", "sql+to_pandas", "quiver Flight SQL, pyarrow.flight"
)
QUIVER_DOGET = SqlPeer(QUIVER, "pyarrow", "get+to_pandas", "quiver raw DoGet, pyarrow.flight")
ARROW_CPP_DOGET = SqlPeer(ARROW_CPP, "pyarrow", "get+to_pandas", "Arrow C++ raw DoGet, pyarrow")
POSTGRES_ADBC = SqlPeer(POSTGRESQL, "adbc-postgresql", "sql+to_pandas", "PostgreSQL, ADBC")
POSTGRES_PSYCOPG = SqlPeer(
    POSTGRESQL, "psycopg", "sql+to_pandas", "PostgreSQL, psycopg 3", row_based=True
)
POSTGRES_ODBC = SqlPeer(
    POSTGRESQL, "pyodbc", "sql+to_pandas", "PostgreSQL, ODBC (psqlODBC, pyodbc)", row_based=True
)
DUCKDB_PARQUET = SqlPeer(DUCKDB, "duckdb", "sql+to_pandas", "DuckDB, local Parquet")
#: Every client, in the order of the report and the figure.
SQL_PEERS = (
    QUIVER_ADBC,
    QUIVER_FLIGHT_SQL,
    QUIVER_DOGET,
    ARROW_CPP_DOGET,
    POSTGRES_ADBC,
    POSTGRES_PSYCOPG,
    POSTGRES_ODBC,
    DUCKDB_PARQUET,
)


def select_all(name: str) -> str:
    """Return the suite's query of a table: ``SELECT * FROM name`` (quoted when needed)."""
    plain = name.isidentifier() and name == name.lower() and name.isascii()
    quoted = name if plain else '"' + name.replace('"', '""') + '"'
    return f"SELECT * FROM {quoted}"


# --- Flight SQL on the wire ---------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    """Return a length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def statement_query(query: str) -> bytes:
    """Return ``Any{type_url, CommandStatementQuery{query}}``, serialized.

    ``google.protobuf.Any`` has ``type_url`` (field 1) and ``value`` (field 2);
    ``CommandStatementQuery`` has ``query`` (field 1).
    """
    command = _bytes_field(1, query.encode())
    return _bytes_field(1, STATEMENT_QUERY_TYPE.encode()) + _bytes_field(2, command)


def flight_sql_descriptor(query: str) -> flight.FlightDescriptor:
    """Return the descriptor whose GetFlightInfo runs ``query`` on a Flight SQL server."""
    return flight.FlightDescriptor.for_command(statement_query(query))


def grpc_uri(uri: str) -> str:
    """Return ``grpc://host:port`` for a ``grpc+tcp://`` URI (what ADBC is given)."""
    return "grpc://" + uri.split("://", 1)[1]


# --- the fetchers -----------------------------------------------------------------------------


@dataclass
class Fetched:
    """One timed fetch.

    Attributes
    ----------
    seconds : float
        From sending the query to holding the DataFrame.
    rows, columns : int
        The DataFrame's shape.
    ttfb_seconds : float or None
        From sending the query to the first record batch (Flight paths only).
    endpoints : int or None
        Endpoints read (Flight paths only).
    peak_rss_bytes : int or None
        The peak RSS of the worker process that fetched (:mod:`bench.sql_worker`), over its
        warm-up and timed fetches.
    """

    seconds: float
    rows: int
    columns: int
    ttfb_seconds: float | None = None
    endpoints: int | None = None
    peak_rss_bytes: int | None = None


class Fetcher:
    """Fetches the result of ``SELECT * FROM <table>`` into pandas, over one connection."""

    peer: SqlPeer

    def open(self) -> None:
        """Connect (not timed)."""

    def fetch(self, name: str) -> Fetched:
        """Fetch all of table ``name`` into a DataFrame, timed."""
        raise NotImplementedError

    def close(self) -> None:
        """Disconnect."""


def _shape(frame: pd.DataFrame) -> tuple[int, int]:
    return len(frame), len(frame.columns)


class FlightFetcher(Fetcher):
    """GetFlightInfo and parallel DoGets with ``pyarrow.flight``, then ``to_pandas()``.

    Parameters
    ----------
    peer : SqlPeer
        :data:`QUIVER_FLIGHT_SQL` (a query's command descriptor) or a raw DoGet peer (the
        table's path descriptor).
    uri : str
        The server.
    """

    def __init__(self, peer: SqlPeer, uri: str) -> None:
        self.peer = peer
        self.uri = uri
        self.clients: list[flight.FlightClient] = []

    def open(self) -> None:
        """Open a connection per core (endpoints are read in parallel, one per thread)."""
        count = max(2, os.cpu_count() or 1)
        self.clients = flight_client.connect_many(self.uri, count)

    def fetch(self, name: str) -> Fetched:
        """Get the table or the query's result, then convert it."""
        wanted: str | flight.FlightDescriptor = name
        if self.peer.op == "sql+to_pandas":
            wanted = flight_sql_descriptor(select_all(name))
        started = time.perf_counter()
        got = flight_client.timed_get(self.clients, wanted, keep=True)
        assert got.table is not None
        frame = got.table.to_pandas()
        seconds = time.perf_counter() - started
        return Fetched(seconds, *_shape(frame), got.ttfb_seconds, got.endpoints)

    def close(self) -> None:
        """Close the connections."""
        flight_client.close_all(self.clients)


class DbapiFetcher(Fetcher):
    """A DB-API connection: ADBC (Arrow results) or psycopg and pyodbc (Python rows).

    Parameters
    ----------
    peer : SqlPeer
        Which client.
    connect : callable
        Returns the open connection.
    """

    def __init__(self, peer: SqlPeer, connect: Any) -> None:
        self.peer = peer
        self._connect = connect
        self.connection: Any = None

    def open(self) -> None:
        """Connect."""
        self.connection = self._connect()

    def fetch(self, name: str) -> Fetched:
        """Run the query, fetch every row, build the DataFrame."""
        query = select_all(name)
        started = time.perf_counter()
        cursor = self.connection.cursor()
        try:
            cursor.execute(query)
            if self.peer.row_based:
                rows = cursor.fetchall()
                columns = [d[0] for d in cursor.description]
                if rows and not isinstance(rows[0], tuple):
                    rows = [tuple(row) for row in rows]  # pyodbc.Row
                frame = pd.DataFrame.from_records(rows, columns=columns)
            else:
                frame = cursor.fetch_arrow_table().to_pandas()
        finally:
            cursor.close()
        seconds = time.perf_counter() - started
        return Fetched(seconds, *_shape(frame))

    def close(self) -> None:
        """Close the connection."""
        if self.connection is not None:
            with contextlib.suppress(Exception):
                self.connection.close()


class DuckDBFetcher(Fetcher):
    """DuckDB, in process, reading the table from a Parquet file: ``.df()``.

    Parameters
    ----------
    directory : pathlib.Path
        Where :meth:`write` puts the Parquet files (``<name>.parquet``).
    """

    peer = DUCKDB_PARQUET

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.connection: Any = None

    def path(self, name: str) -> Path:
        """Return the Parquet file of table ``name``."""
        return self.directory / f"{name}.parquet"

    def write(self, name: str, table: pa.Table) -> None:
        """Write ``table`` as ``name``'s Parquet file (pyarrow's defaults: snappy)."""
        pq.write_table(table, self.path(name))

    def remove(self, name: str) -> None:
        """Remove ``name``'s Parquet file."""
        self.path(name).unlink(missing_ok=True)

    def open(self) -> None:
        """Open an in-memory database."""
        import duckdb

        self.connection = duckdb.connect()
        # No progress bar: it would print to the harness's log while timed.
        self.connection.execute("SET enable_progress_bar = false")

    def fetch(self, name: str) -> Fetched:
        """Read the whole file into a DataFrame."""
        path = str(self.path(name)).replace("'", "''")
        started = time.perf_counter()
        frame = self.connection.sql(f"SELECT * FROM read_parquet('{path}')").df()
        seconds = time.perf_counter() - started
        return Fetched(seconds, *_shape(frame))

    def close(self) -> None:
        """Close the database."""
        if self.connection is not None:
            self.connection.close()


def flight_clients(server: str, uri: str) -> list[tuple[SqlPeer, str]]:
    """Return the clients of a Flight server and their targets: raw DoGet, quiver's SQL too."""
    if server == QUIVER:
        return [(QUIVER_ADBC, uri), (QUIVER_FLIGHT_SQL, uri), (QUIVER_DOGET, uri)]
    if server == ARROW_CPP:
        return [(ARROW_CPP_DOGET, uri)]
    return []


def adbc_flight_sql(uri: str) -> Any:
    """Return an ADBC Flight SQL connection (DB-API, autocommit) to quiver at ``uri``."""
    import adbc_driver_flightsql.dbapi

    return adbc_driver_flightsql.dbapi.connect(grpc_uri(uri), autocommit=True)


def _adbc_postgres(uri: str) -> Any:
    import adbc_driver_postgresql.dbapi

    return adbc_driver_postgresql.dbapi.connect(uri, autocommit=True)


def _psycopg(uri: str) -> Any:
    import psycopg

    return psycopg.connect(uri, autocommit=True)


def _pyodbc(connection_string: str) -> Any:
    import pyodbc

    return pyodbc.connect(connection_string, autocommit=True)


#: How each DB-API client connects, given its target (a URI or an ODBC connection string).
_DBAPI_CONNECT = {
    QUIVER_ADBC: adbc_flight_sql,
    POSTGRES_ADBC: _adbc_postgres,
    POSTGRES_PSYCOPG: _psycopg,
    POSTGRES_ODBC: _pyodbc,
}


def make_fetcher(peer: SqlPeer, target: str) -> Fetcher:
    """Return ``peer``'s fetcher of ``target``, in this process.

    ``target`` is the server's URI, PostgreSQL's ODBC connection string for ODBC, or the
    directory of the Parquet files for DuckDB.
    """
    if peer in _DBAPI_CONNECT:
        connect = _DBAPI_CONNECT[peer]
        return DbapiFetcher(peer, lambda: connect(target))
    if peer == DUCKDB_PARQUET:
        return DuckDBFetcher(Path(target))
    if peer in SQL_PEERS:
        return FlightFetcher(peer, target)
    raise ValueError(f"not a client of the sql suite: {peer!r}")


def odbc_driver() -> str | None:
    """Return psqlODBC's Unicode driver: its library's path, else its registered name.

    ``None`` when it is not installed (``scripts/install-postgres.sh`` installs it).
    """
    found = sorted(glob.glob(ODBC_DRIVER_GLOB))
    if found:
        return found[0]
    try:
        listed = subprocess.run(
            ["odbcinst", "-q", "-d", "-n", ODBC_DRIVER_NAME],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in listed.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "Driver" and Path(value.strip()).is_file():
            return value.strip()
    return ODBC_DRIVER_NAME if listed.returncode == 0 and listed.stdout.strip() else None


def postgres_clients(server: PostgresServer, odbc: str | None) -> list[tuple[SqlPeer, str]]:
    """Return the clients of PostgreSQL and their targets: ADBC, psycopg, ODBC with a driver."""
    clients = [(POSTGRES_ADBC, server.uri), (POSTGRES_PSYCOPG, server.uri)]
    if odbc is not None:
        clients.append((POSTGRES_ODBC, server.odbc_connection_string(odbc)))
    return clients
