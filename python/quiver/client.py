"""The quiver client: named Arrow tables over Arrow Flight."""

from __future__ import annotations

import builtins
import contextlib
import inspect
import json
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

import pyarrow as pa
import pyarrow.flight as flight

from . import _planes, _protocol, _sql, _status
from ._convert import BatchSource, batch_source
from ._endpoints import first_reachable, unreachable
from ._exchange import DEFAULT_BATCH_ROWS, ExchangeReader, cast_source, check_batch_rows
from ._progress import RowCounter, row_progress
from ._protocol import (
    ACTION_LIST_FUNCTIONS,
    DEFAULT_URI,
    JsonObject,
    PutMode,
    PutPlace,
    Transport,
)
from .errors import QuiverError, TableNotFoundError, VersionConflictError, translated_errors
from .results import ApplyResult, FunctionInfo, PutResult, ServerHealth, ServerStats, TableInfo

if TYPE_CHECKING:
    import pandas
    import polars


__all__ = ["Client", "connect"]

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: How many times :meth:`Client.get` asks for a new FlightInfo when the table
#: changed under it.
GET_RETRIES = 3

#: Where a replace from a stream that can fail is written before it is renamed
#: over the target (see :meth:`Client.put`).
STAGING_PREFIX = ".quiver-staging/"

#: The storage names of a cluster node's partitions, which a cluster endpoint's ticket
#: names; never a table's name.
PARTITION_PREFIX = ".quiver-part/"


class Client:
    """A connection to a quiver server.

    Thread-safe: calls may be made from several threads at once. Use it as a
    context manager, or call :meth:`close`, to release its connections. No
    connection is made until the first call. :func:`connect` makes one.

    Parameters
    ----------
    uri : str, default "grpc+tcp://127.0.0.1:8815"
        The server's address: a Flight URI (``grpc+tcp://host:port``,
        ``grpc+tls://host:port``) or a bare ``host:port``.
    timeout : float, optional
        Seconds each call may take; no limit by default.
    username, password : str, optional
        Log in with these (the Flight Handshake); every call then sends the
        bearer token the server returned. For a server started with ``--users``.
    token : str, optional
        A bearer token to send with every call instead: an API token made by
        ``quiver user token``, or one a Handshake gave.
    transport : {"auto", "shm", "grpc"}, default "auto"
        How :meth:`Client.get` and :meth:`Client.put` move table data.
        ``"shm"``: through shared memory (the server must be on this host;
        docs/shm.md): a get maps the server's copy of the table instead of
        receiving it, a put hands the server a sealed memfd. ``"grpc"``: Flight
        DoGet/DoPut. ``"auto"``: shared memory when the server offers it and
        it is reachable, else gRPC. With ``"shm"``, a call that cannot use
        shared memory raises :class:`~quiver.errors.QuiverError`.
    **flight_kwargs
        Keyword arguments of :class:`pyarrow.flight.FlightClient`, used for the
        connection to ``uri`` and for any other location an endpoint names:
        ``tls_root_certs`` (PEM bytes of the CA that signed a ``grpc+tls://``
        server's certificate), ``cert_chain`` and ``private_key`` (PEM bytes of
        a client certificate, for mutual TLS), ``generic_options``, ...
        ``middleware`` is kept, and quiver's own is added after it: it reads the
        kind of each error from the server's status (:mod:`quiver.errors`).

    Examples
    --------
    >>> import pyarrow as pa, quiver
    >>> with quiver.connect("127.0.0.1:8815") as client:  # doctest: +SKIP
    ...     client.put("trips", pa.table({"fare": [7.5, 12.0]}))
    ...     client.get("trips").num_rows
    2
    """

    def __init__(
        self,
        uri: str = DEFAULT_URI,
        *,
        timeout: float | None = None,
        username: str | None = None,
        password: str | None = None,
        token: str | None = None,
        transport: Transport = "auto",
        **flight_kwargs: Any,
    ) -> None:
        if transport not in ("auto", "shm", "grpc"):
            raise ValueError(f"transport must be 'auto', 'shm' or 'grpc', not {transport!r}")
        if token is not None and username is not None:
            raise ValueError("give username and password, or token, not both")
        if (username is None) != (password is None):
            raise ValueError("username and password go together")
        self._uri = _protocol.normalize_uri(uri)
        # Every connection captures the server's rich error status (quiver.errors).
        user_middleware = list(flight_kwargs.pop("middleware", None) or ())
        middleware = [*user_middleware, _status.CAPTURE]
        self._flight_kwargs: dict[str, Any] = {**flight_kwargs, "middleware": middleware}
        self._options = flight.FlightCallOptions(timeout=timeout)
        with translated_errors():
            self._flight = flight.FlightClient(self._uri, **self._flight_kwargs)
            headers: list[tuple[bytes, bytes]] = []
            if username is not None and password is not None:
                try:
                    headers = [
                        self._flight.authenticate_basic_token(username, password, self._options)
                    ]
                except BaseException:
                    self._flight.close()
                    raise
            elif token is not None:
                headers = [(b"authorization", b"Bearer " + token.encode())]
        # Every call (the parallel endpoint fetches and SQL too) uses these options.
        self._options = flight.FlightCallOptions(timeout=timeout, headers=headers)
        self._peers: dict[str, flight.FlightClient] = {}
        self._peers_lock = threading.Lock()
        # A cluster's live nodes, as a node's last SQL answer named them.
        self._nodes: tuple[str, ...] = ()
        # pyarrow's Flight client makes every call that is not table data; the data
        # plane, chosen here once, moves the data of gets and puts (quiver._planes).
        self._pyarrow = _planes.PyarrowPlane(self._uri, self._options, self._client_at)
        self._plane = _planes.choose(
            transport,
            self._pyarrow,
            flight_kwargs={**flight_kwargs, "middleware": user_middleware}
            if user_middleware
            else flight_kwargs,
            headers=headers,
            timeout=timeout,
        )

    @property
    def transport(self) -> Transport:
        """How table data moves: ``"auto"``, ``"shm"`` or ``"grpc"``."""
        return self._plane.transport

    @property
    def data_plane(self) -> _planes.DataPlane:
        """What moves this client's table data, chosen from ``transport`` when it was made.

        For quiver's own connectors (:mod:`quiver.splits`); its methods are not a
        stable API.
        """
        return self._plane

    @property
    def call_options(self) -> flight.FlightCallOptions:
        """The options of every call (timeout, credentials), for :attr:`flight_client`'s calls."""
        return self._options

    @property
    def uri(self) -> str:
        """The server's URI, with its scheme."""
        return self._uri

    @property
    def flight_client(self) -> flight.FlightClient:
        """The underlying :class:`pyarrow.flight.FlightClient`, for calls quiver does not wrap."""
        return self._flight

    def __repr__(self) -> str:
        """Return ``Client('grpc+tcp://host:port')``."""
        return f"{type(self).__name__}({self._uri!r})"

    def __enter__(self) -> Client:
        """Return the client itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the client."""
        self.close()

    def close(self) -> None:
        """Close the connection to the server and to any other endpoint location."""
        with self._peers_lock:
            peers, self._peers = list(self._peers.values()), {}
        for peer in peers:
            peer.close()
        self._plane.close()
        self._flight.close()

    # -- writing ----------------------------------------------------------------------------

    def put(
        self,
        name: str,
        data: object,
        mode: PutMode = "replace",
        *,
        partitions: int | None = None,
        progress: bool = False,
        request_id: str | None = None,
        place: PutPlace = "spread",
    ) -> PutResult:
        """Store ``data`` as table ``name``, replacing it or appending to it.

        The batches are streamed to the server as they are read; a reader is
        never loaded into memory whole. The put is atomic: readers see the
        table as it was until the server has received the whole stream.

        Parameters
        ----------
        name : str
            The table's name (1 to 1024 bytes of UTF-8; ``/`` is allowed).
        data : table-like
            A :class:`pyarrow.Table`, :class:`pyarrow.RecordBatch` or
            :class:`pyarrow.RecordBatchReader`; a pandas DataFrame (its index is
            dropped); a polars DataFrame or LazyFrame; any object with
            ``__arrow_c_stream__`` or ``__arrow_c_array__``; or an iterable of
            record batches sharing one schema.
        mode : {"replace", "append"}, default "replace"
            ``"replace"`` makes ``data`` the whole table, creating it if
            missing. ``"append"`` adds the rows after the table's rows; the
            schemas' fields must be equal.
        partitions : int, optional
            How many endpoints reads of this table are split over (1 to 1024).
            By default the server's setting for a new table; an append keeps
            the table's.
        progress : bool, default False
            Show a tqdm progress bar counting rows sent.
        request_id : str, optional
            The put's id (1 to 128 printable ASCII characters); by default a new
            random one. A cluster answers a put whose id it has committed in the
            last 5 minutes (or more, up to 10) with that commit's result instead
            of applying it again: give the same id when retrying a put whose
            outcome is unknown (a timeout, a lost connection), and an append is
            not applied twice. A single server remembers the ids of its last
            100,000 puts for 10 minutes, while it runs. A put with a
            ``request_id`` goes over gRPC, not shared memory.
        place : {"spread", "here"}, default "spread"
            On a cluster node: ``"spread"`` places the table's partitions round
            the live nodes; ``"here"`` keeps each partition's first copy on the
            node this client is connected to, in one partition unless
            ``partitions`` says otherwise (what :class:`quiver.splits.WriteJob`
            does with each task, sent to one of :meth:`nodes`). A single server
            holds every put itself.

        Returns
        -------
        PutResult
            The table's new version and size.

        Raises
        ------
        TableNotFoundError
            ``mode="append"`` and the table does not exist.
        InvalidArgumentError
            A bad name or option, or an append whose schema does not match.
        ResourceExhaustedError
            The server's memory limit would be passed; nothing was stored.
        TypeError
            ``data`` is not table-like.

        Notes
        -----
        Over gRPC each record batch is one message, and the server refuses
        messages over its ``--max-message-size`` (1 GiB by default). So a batch
        holding more than 64 MiB of rows is sent as consecutive zero-copy
        slices of at most 64 MiB each, cut by the rows' bytes (string and list
        rows of uneven sizes give slices of uneven row counts); the table is
        stored in those batches. A row of more than 64 MiB on its own is sent
        whole, in a slice of one row.

        pyarrow cannot cancel a DoPut: ending the stream early commits what was
        sent. So when ``data`` is a stream that may fail while being read (a
        reader, an iterator, a C stream) and ``mode="replace"``, the batches are
        first stored under a name beginning with ``.quiver-staging/`` and then
        renamed over ``name``; if reading ``data`` fails, the staged table is
        deleted and ``name`` is left as it was. An append from such a stream
        that fails half-way, or any put interrupted by a signal
        (``KeyboardInterrupt``) while sending in-memory data, keeps the batches
        sent before the failure.
        """
        request = request_id if request_id is not None else uuid.uuid4().hex
        options = _protocol.put_options(mode, partitions, request, place)
        source = batch_source(data)
        if self._plane.takes_whole(source, request_id):
            table = source.reader.read_all()
            with row_progress(progress, total=table.num_rows, description=f"put {name}") as count:
                result = self._plane.put_whole(name, table, mode, partitions)
                if result is not None:
                    count(table.num_rows)
                    return result
            source = batch_source(table)
        with row_progress(progress, total=source.num_rows, description=f"put {name}") as count:
            if mode == "replace" and source.may_fail:
                # The request is the rename's: a replace repeated is the same table.
                staged = _protocol.put_options(mode, partitions, place=place)
                return self._put_staged(name, source, staged, count)
            return self._plane.put_stream(name, source, options, count)

    def _put_staged(
        self, name: str, source: BatchSource, options: bytes, count: RowCounter
    ) -> PutResult:
        staging = f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        try:
            staged = self._plane.put_stream(staging, source, options, count)
            version = self.rename(staging, name, overwrite=True)
        except BaseException:
            with contextlib.suppress(TableNotFoundError):
                self.delete(staging)
            raise
        return PutResult(table=name, version=version, rows=staged.rows, bytes=staged.bytes)

    # -- reading ----------------------------------------------------------------------------

    def get(self, name: str, *, progress: bool = False, max_workers: int | None = None) -> pa.Table:
        """Read the whole of table ``name``.

        Asks for the table's FlightInfo, then reads its endpoints in parallel
        threads, each from its own location, and concatenates them in endpoint
        order, which is the table's row order. If the table changes between
        the two steps, the read starts again (up to 3 times), so the result is
        always one version of the table.

        Parameters
        ----------
        name : str
            The table's name.
        progress : bool, default False
            Show a tqdm progress bar counting rows received.
        max_workers : int, optional
            Most endpoints read at once; by default up to 16.

        Returns
        -------
        pyarrow.Table
            The table.

        Raises
        ------
        TableNotFoundError
            The table does not exist.
        VersionConflictError
            The table kept changing during 4 attempts.
        """
        for attempt in range(GET_RETRIES + 1):
            table, info, endpoints = self._plane.map_table(name, max_workers)
            if table is not None:
                with row_progress(progress, total=table.num_rows, description=f"get {name}") as c:
                    c(table.num_rows)
                return table
            with row_progress(progress, total=info.total_records, description=f"get {name}") as c:
                try:
                    return self._plane.read(endpoints, info.schema, c, max_workers)
                except VersionConflictError:
                    if attempt == GET_RETRIES:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    def get_reader(self, name: str) -> pa.RecordBatchReader:
        """Stream table ``name`` batch by batch, over one connection.

        The stream is one consistent version of the table, even if it is
        replaced while being read.

        Parameters
        ----------
        name : str
            The table's name.

        Returns
        -------
        pyarrow.RecordBatchReader
            The table's batches, in order.

        Raises
        ------
        TableNotFoundError
            The table does not exist.
        """
        endpoint = flight.FlightEndpoint(name.encode(), [])
        schema, batches = self._plane.stream(endpoint)
        return pa.RecordBatchReader.from_batches(schema, batches)

    # -- SQL ------------------------------------------------------------------------------

    def sql(
        self, query: str, *, progress: bool = False, max_workers: int | None = None
    ) -> pa.Table:
        """Run a SQL query (Flight SQL) and read its whole result.

        Stored tables are SQL tables of the same name; so are tables over files
        the server registered. The result's partitions are read in parallel, in
        endpoint order. On a cluster, a query whose node stops answering (killed,
        cut off) before its result is read runs again on another live node.

        Parameters
        ----------
        query : str
            The query, e.g. ``SELECT VendorID, avg(fare_amount) FROM taxi GROUP BY 1``.
            Names are as stored (case-sensitive); quote those that are not plain
            identifiers: ``SELECT * FROM "taxi/2024"``.
        progress : bool, default False
            Show a tqdm progress bar counting rows received.
        max_workers : int, optional
            Most partitions read at once; by default up to 16.

        Returns
        -------
        pyarrow.Table
            The result.

        Raises
        ------
        InvalidArgumentError
            The query does not parse, names what does not exist, or fails on the data.
        ResourceExhaustedError
            The query needed more memory than the server's per-query limit.
        """
        with row_progress(progress, total=None, description="sql") as counter:

            def run(uri: str) -> pa.Table:
                info = self._sql_info_at(uri, query)
                return self._plane.read(info.endpoints, info.schema, counter, max_workers)

            return self._on_any_node(run)

    def sql_reader(self, query: str) -> pa.RecordBatchReader:
        """Run a SQL query and stream its result batch by batch, as the server makes it.

        Partitions are read one after another, so nothing is held whole; use
        :meth:`sql` to read them in parallel.

        Parameters
        ----------
        query : str
            The query.

        Returns
        -------
        pyarrow.RecordBatchReader
            The result's batches.
        """
        info = self._sql_info(query)

        def batches() -> Iterator[pa.RecordBatch]:
            for endpoint in info.endpoints:
                yield from self._plane.stream(endpoint)[1]

        return pa.RecordBatchReader.from_batches(info.schema, batches())

    def execute_update(self, statement: str) -> int:
        """Run a SQL statement that changes tables (DDL or DML); return the rows it wrote.

        This is ADBC's ``Statement.execute_update`` (Flight SQL's
        ``CommandStatementUpdate``): ``CREATE TABLE t AS SELECT ...`` and ``INSERT
        INTO t ...`` write stored tables and count the rows written; ``DROP TABLE
        t`` and ``CREATE EXTERNAL TABLE`` write none (0). A query's result is not
        returned: run queries with :meth:`sql` or :meth:`sql_reader`.

        Parameters
        ----------
        statement : str
            The statement.

        Returns
        -------
        int
            Rows written; -1 if the server does not know (as in ADBC).

        Raises
        ------
        InvalidArgumentError
            The statement does not parse, or names what does not exist.
        UnimplementedError
            The server does not run statements of this kind.
        ResourceExhaustedError
            A table limit or the memory limit would be passed; nothing was written.
        """
        if not isinstance(statement, str):
            raise TypeError(f"a statement is a str, not {type(statement).__name__}")
        descriptor = flight.FlightDescriptor.for_command(_sql.statement_update(statement))
        with translated_errors():
            writer, reader = self._flight.do_put(descriptor, pa.schema([]), self._options)
            writer.done_writing()
            answer = reader.read()
            writer.close()
        return _sql.update_count(_protocol.buffer_bytes(answer))

    def execute(self, statement: str) -> int:
        """Run a statement that changes tables; deprecated alias of :meth:`execute_update`.

        .. deprecated:: 0.1.0
           ``execute`` suggested DB-API's ``Cursor.execute``, which also runs queries;
           use :meth:`execute_update` for statements and :meth:`sql` for queries.
        """
        warnings.warn(
            "Client.execute is deprecated: use Client.execute_update for statements "
            "and Client.sql for queries",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.execute_update(statement)

    def _sql_info(self, query: str) -> flight.FlightInfo:
        """Plan ``query`` on this server, or on another cluster node (:meth:`_on_any_node`)."""
        return self._on_any_node(lambda uri: self._sql_info_at(uri, query))

    def _sql_info_at(self, uri: str, query: str) -> flight.FlightInfo:
        """Plan ``query`` on the server at ``uri``; learn the cluster's nodes from its answer."""
        if not isinstance(query, str):
            raise TypeError(f"a query is a str, not {type(query).__name__}")
        descriptor = flight.FlightDescriptor.for_command(_sql.statement_query(query))
        with translated_errors():
            info = self._client_at(uri).get_flight_info(descriptor, self._options)
        self._learn_nodes(info)
        return info

    def _learn_nodes(self, info: flight.FlightInfo) -> None:
        """Keep the live nodes a cluster node's SQL answer names (docs/protocol.md)."""
        try:
            metadata = json.loads(info.app_metadata or b"{}")
        except ValueError:
            return
        nodes = metadata.get("nodes") if isinstance(metadata, dict) else None
        if isinstance(nodes, list) and all(isinstance(n, str) for n in nodes):
            self._nodes = tuple(nodes)

    def _on_any_node(self, attempt: Callable[[str], _T]) -> _T:
        """Return ``attempt(uri)`` on this server, or else on another cluster node.

        Should this client's server not answer (UNAVAILABLE: killed, cut off) and be
        a cluster node, the attempt is made on each other live node its last SQL
        answer named, until one answers. Only queries go here: a cluster node runs
        no statement that writes, and one that could not be reached ran nothing.
        """
        try:
            return attempt(self._uri)
        except Exception as error:
            # Read after the first attempt, which may have taught them. On one
            # server, or for an error that is not its node's, it stands as it is.
            others = [uri for uri in self._nodes if uri != self._uri]
            if not others or not unreachable(error):
                raise
        return first_reachable(others, attempt)

    def to_pandas(self, name: str, **kwargs: Any) -> pandas.DataFrame:
        """Read table ``name`` into a pandas DataFrame.

        Parameters
        ----------
        name : str
            The table's name.
        **kwargs
            Passed to :meth:`pyarrow.Table.to_pandas`.

        Returns
        -------
        pandas.DataFrame
            The table.
        """
        return self.get(name).to_pandas(**kwargs)

    def to_polars(self, name: str) -> polars.DataFrame:
        """Read table ``name`` into a polars DataFrame.

        Parameters
        ----------
        name : str
            The table's name.

        Returns
        -------
        polars.DataFrame
            The table.
        """
        try:
            import polars
        except ImportError as error:
            raise ImportError(
                "to_polars needs polars: pip install 'quiver-client[polars]'"
            ) from error
        frame = polars.from_arrow(self.get(name))
        assert isinstance(frame, polars.DataFrame)
        return frame

    # -- functions --------------------------------------------------------------------------

    def functions(self) -> builtins.list[FunctionInfo]:
        """List the Python functions the server serves (``quiver serve --functions``).

        Returns
        -------
        list of FunctionInfo
            One description per function, with its declared schemas; empty when the
            server serves none.
        """
        listing = self._action(ACTION_LIST_FUNCTIONS)
        entries = listing.get("functions")
        if not isinstance(entries, builtins.list):
            return []
        return [FunctionInfo.from_json(entry) for entry in entries if isinstance(entry, dict)]

    def exchange(
        self,
        name: str,
        data: object,
        *,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        cast: bool = False,
        progress: bool = False,
    ) -> pa.Table:
        """Stream ``data`` through the server's function ``name``; return its results.

        The batches are sent while the results are read (DoExchange), so neither
        side holds the whole input. Several batches run at once, one per worker
        process; the results come back in input order.

        Parameters
        ----------
        name : str
            The function's name (:meth:`functions` lists them).
        data : table-like
            Anything :meth:`put` takes: a pyarrow Table, RecordBatch or
            RecordBatchReader, a pandas or polars DataFrame, an Arrow C stream, or
            an iterable of record batches.
        batch_rows : int, default 65536
            Most rows per batch sent (longer batches are sliced, without copying):
            the unit of work one call of the function gets.
        cast : bool, default False
            Select and cast the columns to the function's declared input schema
            first (pandas' ``float64`` to a declared ``float32``, say).
        progress : bool, default False
            Show a tqdm progress bar counting input rows whose results arrived.

        Returns
        -------
        pyarrow.Table
            The results, in input order: the function's declared output schema, or
            that of its first result.

        Raises
        ------
        FunctionNotFoundError
            The server serves no function ``name`` (the message lists those it does).
        InvalidArgumentError
            ``data`` does not match the function's declared input schema (kind
            ``SCHEMA_MISMATCH``).
        FunctionError
            The function raised (:attr:`~FunctionError.python_type` names the
            exception), or returned what its output schema does not allow.
        FunctionTimeoutError
            A batch ran past the server's ``--function-timeout``.
        WorkerDiedError
            The worker process running a batch died.
        """
        with self.exchange_reader(
            name, data, batch_rows=batch_rows, cast=cast, progress=progress
        ) as results:
            return results.read_all()

    def exchange_reader(
        self,
        name: str,
        data: object,
        *,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        cast: bool = False,
        progress: bool = False,
    ) -> ExchangeReader:
        """Stream ``data`` through function ``name``; read the results as they arrive.

        Takes the arguments of :meth:`exchange`. Closing the reader before its end
        (or leaving its ``with`` block, or dropping it) cancels the call, and the
        server stops running the function for it.

        Returns
        -------
        ExchangeReader
            The results' record batches, in input order: iterate over it, or call
            ``read_all()``; it is an Arrow C stream too.

        Examples
        --------
        >>> with client.exchange_reader("score", trips) as results:  # doctest: +SKIP
        ...     for batch in results:
        ...         if found(batch):
        ...             break  # cancels the rest
        """
        check_batch_rows(batch_rows)
        source = batch_source(data)
        if cast:
            source = self._cast_to_input(name, source)
        return self._exchange(
            {"function": name},
            source,
            batch_rows=batch_rows,
            tag_rows=True,
            progress=progress,
            total=source.num_rows,
            description=name,
        )

    def exchange_sql(
        self,
        query: str,
        data: object,
        *,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        progress: bool = False,
    ) -> pa.Table:
        """Run a SQL query over ``data`` streamed to the server; return its result.

        The stream is the table ``input`` of the query (``SELECT * FROM input WHERE
        fare > 10``); the query may join stored tables and call the server's
        functions. Nothing is stored.

        Parameters
        ----------
        query : str
            The query, reading table ``input``.
        data : table-like
            Anything :meth:`put` takes.
        batch_rows : int, default 65536
            Most rows per batch sent.
        progress : bool, default False
            Show a tqdm progress bar counting input rows sent.

        Returns
        -------
        pyarrow.Table
            The query's result.

        Raises
        ------
        InvalidArgumentError
            The query does not parse, is not a query, or fails on the data.
        UnimplementedError
            The server does not run SQL over a stream.
        """
        with self.exchange_sql_reader(
            query, data, batch_rows=batch_rows, progress=progress
        ) as results:
            return results.read_all()

    def exchange_sql_reader(
        self,
        query: str,
        data: object,
        *,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        progress: bool = False,
    ) -> ExchangeReader:
        """Run a SQL query over ``data`` streamed to the server; read its result as it comes.

        Takes the arguments of :meth:`exchange_sql`; closing the reader early
        cancels the query.

        Returns
        -------
        ExchangeReader
            The result's record batches.
        """
        if not isinstance(query, str):
            raise TypeError(f"a query is a str, not {type(query).__name__}")
        check_batch_rows(batch_rows)
        source = batch_source(data)
        return self._exchange(
            {"sql": query},
            source,
            batch_rows=batch_rows,
            tag_rows=False,
            progress=progress,
            total=source.num_rows,
            description="sql",
        )

    @overload
    def apply(
        self,
        name: str,
        *,
        source: str,
        into: str,
        mode: PutMode = "replace",
        partitions: int | None = None,
        progress: bool = False,
    ) -> ApplyResult: ...

    @overload
    def apply(
        self,
        name: str,
        *,
        source: str,
        into: None = None,
        mode: PutMode = "replace",
        partitions: int | None = None,
        progress: bool = False,
    ) -> pa.Table: ...

    def apply(
        self,
        name: str,
        *,
        source: str,
        into: str | None = None,
        mode: PutMode = "replace",
        partitions: int | None = None,
        progress: bool = False,
    ) -> ApplyResult | pa.Table:
        """Run function ``name`` over stored table ``source`` on the server.

        The table's rows never leave the server: its batches go through the
        function's workers in parallel. With ``into``, the results are stored as
        that table, atomically (readers see it as it was until the apply is done);
        without, they come back.

        Parameters
        ----------
        name : str
            The function's name.
        source : str
            The stored table the function runs over (one version of it, even if
            it changes meanwhile).
        into : str, optional
            Store the results as this table.
        mode : {"replace", "append"}, default "replace"
            How ``into`` is written, as for :meth:`put`.
        partitions : int, optional
            Endpoints to split a new ``into`` table over, as for :meth:`put`.
        progress : bool, default False
            Show a tqdm progress bar counting result rows received (without ``into``).

        Returns
        -------
        ApplyResult or pyarrow.Table
            With ``into``: the table written, its new version and size, and the
            version of ``source`` read. Without: the results.

        Raises
        ------
        TableNotFoundError
            ``source`` does not exist, or ``mode="append"`` and ``into`` does not.
        FunctionNotFoundError
            The server serves no function ``name``.
        InvalidArgumentError
            ``source`` does not match the function's declared input schema.
        PermissionDeniedError
            ``into`` was given and the user may not write tables.
        FunctionError, FunctionTimeoutError, WorkerDiedError
            As for :meth:`exchange`; nothing was stored.
        """
        command: JsonObject = {"apply": name, "source": source}
        if into is None:
            if mode != "replace" or partitions is not None:
                raise ValueError("mode and partitions are options of apply into a table")
        else:
            command.update(json.loads(_protocol.put_options(mode, partitions)))
            command["into"] = into
        with self._exchange(
            command,
            None,
            batch_rows=DEFAULT_BATCH_ROWS,
            tag_rows=False,
            progress=progress and into is None,
            total=None,
            description=f"apply {name}",
        ) as results:
            table = results.read_all()
            if into is None:
                return table
            summary = results.last_app_metadata
        if summary is None:
            raise QuiverError("the server ended the apply without its summary")
        return ApplyResult.from_json(_protocol.json_object(summary))

    def _exchange(
        self,
        command: JsonObject,
        source: BatchSource | None,
        *,
        batch_rows: int,
        tag_rows: bool,
        progress: bool,
        total: int | None,
        description: str,
    ) -> ExchangeReader:
        """Start a DoExchange of ``command``; the progress bar lives as long as the call."""
        bar = contextlib.ExitStack()
        count = bar.enter_context(row_progress(progress, total=total, description=description))
        try:
            return ExchangeReader(
                self._flight,
                self._options,
                command,
                source,
                batch_rows=batch_rows,
                tag_rows=tag_rows,
                count_sent=None if tag_rows or source is None else count,
                count_received=count if tag_rows or source is None else None,
                on_close=bar.close,
            )
        except BaseException:
            bar.close()
            raise

    def _cast_to_input(self, name: str, source: BatchSource) -> BatchSource:
        """``source`` with its columns selected and cast to ``name``'s declared input schema."""
        declared = next((f for f in self.functions() if f.name == name), None)
        if declared is None or declared.input_schema is None:
            # Unknown: the call itself says so; undeclared: nothing to cast to.
            return source
        return cast_source(source, declared.input_schema)

    # -- metadata ---------------------------------------------------------------------------

    def info(self, name: str) -> TableInfo:
        """Describe table ``name``: schema, size, version and endpoints.

        Raises
        ------
        TableNotFoundError
            The table does not exist.
        """
        return TableInfo.from_flight_info(self._flight_info(name))

    def exists(self, name: str) -> bool:
        """Return whether table ``name`` exists."""
        try:
            self._flight_info(name)
        except TableNotFoundError:
            return False
        return True

    def delete(self, name: str) -> None:
        """Delete table ``name``.

        Raises
        ------
        TableNotFoundError
            The table does not exist.
        """
        self._action(_protocol.ACTION_DELETE, name.encode())

    def rename(self, old: str, new: str, *, overwrite: bool = False) -> int:
        """Rename table ``old`` to ``new``.

        Parameters
        ----------
        old : str
            The table's current name.
        new : str
            Its new name.
        overwrite : bool, default False
            Replace a table already named ``new``.

        Returns
        -------
        int
            The version of the table under its new name.

        Raises
        ------
        TableNotFoundError
            ``old`` does not exist.
        AlreadyExistsError
            ``new`` exists and ``overwrite`` is false.
        """
        body = _protocol.rename_body(old, new, overwrite)
        result = self._action(_protocol.ACTION_RENAME, body)
        return _protocol.json_int(result, "version") or 0

    def publish(
        self,
        name: str,
        sources: Sequence[str],
        *,
        mode: PutMode = "replace",
        partitions: int | None = None,
    ) -> PutResult:
        """Move the rows of tables ``sources`` into table ``name``, atomically.

        In one step the server makes a new version of ``name`` from the sources'
        rows, in the order given (after its own rows, for an append), and
        deletes the sources; nothing is copied. Readers see the table as it was
        or with every source's rows, never a part. This is how the engine
        connectors publish a parallel write (:class:`quiver.splits.WriteJob`).

        Parameters
        ----------
        name : str
            The target table.
        sources : sequence of str
            One or more tables whose fields equal each other's (and the
            target's, for an append).
        mode : {"replace", "append"}, default "replace"
            Replace the target (creating it if missing) or append to it.
        partitions : int, optional
            As for :meth:`put`.

        Returns
        -------
        PutResult
            The target's new version and size.

        Raises
        ------
        TableNotFoundError
            A source, or the target of an append, does not exist.
        InvalidArgumentError
            The schemas differ, or ``sources`` is empty or names ``name``.
        """
        if isinstance(sources, str):
            raise TypeError("sources is a sequence of table names, not one str")
        _protocol.put_options(mode, partitions)  # validates both
        body = _protocol.publish_body(name, list(sources), mode, partitions)
        return PutResult.from_json(self._action(_protocol.ACTION_PUBLISH, body))

    def stats(self) -> ServerStats:
        """Return the server's counters.

        Returns
        -------
        ServerStats
            Tables, rows and bytes stored, memory used and its limit, uptime and
            the server's version.
        """
        return ServerStats.from_json(self._action(_protocol.ACTION_STATS))

    def health(self) -> ServerHealth:
        """Check that the server answers.

        Returns
        -------
        ServerHealth
            ``status`` (``"ok"``) and ``uptime_seconds``.

        Raises
        ------
        ServerUnavailableError
            The server cannot be reached.
        """
        return ServerHealth.from_json(self._action(_protocol.ACTION_HEALTH))

    def nodes(self) -> dict[str, str]:
        """Return the cluster's live nodes a put may be sent to, by id: their locations.

        The nodes as the server last read the catalog, less those that failed a call
        lately; empty on a single server. An engine's write sends each task to one of
        them with ``place="here"``, so the nodes share the job.
        """
        answer = self._action(_protocol.ACTION_NODES)
        nodes = answer.get("nodes")
        if not isinstance(nodes, builtins.list):
            raise QuiverError(f"the nodes action answered {answer!r}", "INTERNAL")
        return {str(n["id"]): str(n["location"]) for n in nodes}

    def list_tables(self, prefix: str = "") -> builtins.list[TableInfo]:
        """List the tables whose names start with ``prefix``, ordered by name.

        Parameters
        ----------
        prefix : str, default ""
            A name prefix, e.g. ``"taxi/"``; all tables when empty.

        Returns
        -------
        list of TableInfo
            One description per table.
        """
        with translated_errors():
            infos = self._flight.list_flights(prefix.encode(), self._options)
            return [TableInfo.from_flight_info(info) for info in infos]

    def list(self, prefix: str = "") -> builtins.list[TableInfo]:
        """List tables; deprecated alias of :meth:`list_tables`.

        .. deprecated:: 0.1.0
           ``list`` shadowed the builtin inside the class; use :meth:`list_tables`.
        """
        warnings.warn(
            "Client.list is deprecated: use Client.list_tables", DeprecationWarning, stacklevel=2
        )
        return self.list_tables(prefix)

    # -- helpers ----------------------------------------------------------------------------

    def _flight_info(self, name: str) -> flight.FlightInfo:
        return self._pyarrow.info(name)

    def _action(self, kind: str, body: bytes = b"") -> JsonObject:
        return self._pyarrow.action(kind, body)

    def _client_at(self, uri: str) -> flight.FlightClient:
        """Return the pyarrow client of location ``uri`` (this one's for this server)."""
        if uri == self._uri:
            return self._flight
        with self._peers_lock:
            peer = self._peers.get(uri)
            if peer is None:
                with translated_errors():
                    peer = flight.FlightClient(uri, **self._flight_kwargs)
                self._peers[uri] = peer
            return peer


def _parameters_of(
    cls: Callable[_P, Client],
) -> Callable[[Callable[..., Client]], Callable[_P, Client]]:
    """Give a function ``cls``'s parameters, and the docstring that describes them.

    Type checkers see ``cls``'s parameters (a :class:`~typing.ParamSpec`); at run
    time the signature is set too, for :func:`help` and :func:`inspect.signature`,
    and the sections of ``cls``'s docstring from "Parameters" on follow the
    function's own summary.
    """

    def decorate(function: Callable[..., Client]) -> Callable[_P, Client]:
        signature = inspect.signature(cls)
        function.__signature__ = signature.replace(  # type: ignore[attr-defined]
            return_annotation=cls.__name__
        )
        doc = inspect.cleandoc(cls.__doc__ or "")
        sections = doc[doc.index("Parameters\n") :]
        function.__doc__ = f"{inspect.cleandoc(function.__doc__ or '')}\n\n{sections}"
        return function

    return decorate


@_parameters_of(Client)
def connect(*args: Any, **kwargs: Any) -> Client:
    """Connect to a quiver server: return a :class:`Client`, which connects at its first call."""
    return Client(*args, **kwargs)
