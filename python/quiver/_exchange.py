"""DoExchange calls: a stream through a served function or SQL, or a stored table through one.

One call is an :class:`ExchangeReader`. A writer thread sends the input's batches
while the caller's thread reads the results: the server holds only a few batches of
a call between their arrival and their results (docs/functions.md), so a client
that wrote everything before reading would stall on a large input. Anything that
ends the reading early (an error, closing the reader, abandoning it) cancels the
call, so the server stops too.
"""

from __future__ import annotations

import contextlib
import json
import operator
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.flight as flight

from . import _status
from ._convert import BatchSource, message_slices
from ._progress import RowCounter
from ._protocol import JsonObject
from .errors import translate

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "ExchangeReader",
    "cast_source",
    "check_batch_rows",
    "command_descriptor",
]

#: Most rows per batch sent unless told: the unit of work one function call gets
#: on the server, and that its results are matched to.
DEFAULT_BATCH_ROWS = 65_536

#: Seconds to wait for the writer thread once the call has ended. It only waits
#: longer when it is blocked reading the caller's own stream, which cannot be
#: interrupted; it is then left to finish by itself (it writes nothing more).
WRITER_JOIN_TIMEOUT_S = 5.0

#: The ``app_metadata`` of the message by which the server says it reads no more
#: input (the results ended first: an error, a query's ``LIMIT``): the client stops
#: sending and half-closes, and the call's status follows (docs/protocol.md).
STOP_INPUT = b'{"input":"stop"}'


def command_descriptor(command: JsonObject) -> flight.FlightDescriptor:
    """Return the ``CMD`` descriptor of a DoExchange command (a JSON object)."""
    return flight.FlightDescriptor.for_command(json.dumps(command).encode())


def check_batch_rows(batch_rows: int) -> int:
    """Return ``batch_rows`` if it is a positive int.

    Raises
    ------
    TypeError
        It is not an int.
    ValueError
        It is not positive.
    """
    if isinstance(batch_rows, bool) or operator.index(batch_rows) < 1:
        raise ValueError(f"batch_rows must be a positive int, not {batch_rows!r}")
    return batch_rows


def cast_source(source: BatchSource, schema: pa.Schema) -> BatchSource:
    """Return ``source``'s batches with the columns of ``schema``, in order, cast to its types.

    Raises
    ------
    ValueError
        The input lacks a column ``schema`` names.
    """
    names = source.reader.schema.names
    missing = [field.name for field in schema if field.name not in names]
    if missing:
        raise ValueError(
            f"cannot cast the input to the function's input schema: it has no column "
            f"{', '.join(map(repr, missing))} (it has {', '.join(map(repr, names))})"
        )

    def cast(batch: pa.RecordBatch) -> pa.RecordBatch:
        columns = [
            batch.column(batch.schema.get_field_index(field.name)).cast(field.type)
            for field in schema
        ]
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    batches = (cast(batch) for batch in source.reader)
    reader = pa.RecordBatchReader.from_batches(schema, batches)
    return BatchSource(reader, source.num_rows, source.may_fail)


def _tag(rows: int) -> pa.Buffer:
    """Return the ``app_metadata`` a batch is sent with: its row count, in decimal.

    A function call returns it on the first result message of that batch, so the
    rows whose results arrived are counted exactly (results come in input order).
    """
    return pa.py_buffer(str(rows).encode())


def _tagged_rows(metadata: pa.Buffer | None) -> int:
    """Return the row count in a result's ``app_metadata`` (0 if it is not a tag)."""
    if metadata is None:
        return 0
    text = metadata.to_pybytes()
    return int(text) if text.isdigit() else 0


class _Sender(threading.Thread):
    """Sends the input's batches (or, for an apply, nothing) and half-closes the call.

    Attributes
    ----------
    source_error : BaseException or None
        What reading the caller's input raised; the call was then cancelled.
    """

    def __init__(
        self,
        writer: flight.FlightStreamWriter,
        cancel: Callable[[], None],
        source: BatchSource | None,
        batch_rows: int,
        tag: bool,
        count_sent: RowCounter,
    ) -> None:
        super().__init__(name="quiver-exchange-writer", daemon=True)
        self._writer = writer
        self._cancel = cancel
        self._source = source
        self._batch_rows = batch_rows
        self._tag = tag
        self._count_sent = count_sent
        #: Set when the call ends early: send nothing more, not even the half-close.
        self.stop = threading.Event()
        #: Set when the server reads no more input: send nothing more, half-close.
        self.halt = threading.Event()
        self.source_error: BaseException | None = None

    def run(self) -> None:
        # An error writing means the call ended (the server's error, or a cancel):
        # the reading thread receives its status and raises it.
        with contextlib.suppress(pa.ArrowException):
            self._send()

    def _send(self) -> None:
        if self._source is None:
            # The descriptor alone (an apply reads a stored table, not a stream).
            self._writer.done_writing()
            return
        reader = self._source.reader
        self._writer.begin(reader.schema)
        while not self._stopped():
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except BaseException as error:  # the caller's input failed
                self.source_error = error
                self._cancel()
                return
            for piece in self._pieces(batch):
                if self._stopped():
                    break
                if self._tag:
                    self._writer.write_with_metadata(piece, _tag(piece.num_rows))
                else:
                    self._writer.write_batch(piece)
                self._count_sent(piece.num_rows)
        if not self.stop.is_set():
            self._writer.done_writing()

    def _stopped(self) -> bool:
        return self.stop.is_set() or self.halt.is_set()

    def _pieces(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """``batch`` as zero-copy slices of at most ``batch_rows`` rows and 64 MiB."""
        if batch.num_rows <= self._batch_rows:
            yield from message_slices(batch)
            return
        for start in range(0, batch.num_rows, self._batch_rows):
            yield from message_slices(batch.slice(start, self._batch_rows))


class ExchangeReader:
    """The results of a DoExchange call, batch by batch, as the server sends them.

    Iterate over it for :class:`pyarrow.RecordBatch` es, or call :meth:`read_all`.
    It is also an Arrow C stream (``pa.table(reader)``, polars, DuckDB read it).
    Closing it before the end, or leaving a ``with`` block early, cancels the
    call: the server stops running the function. Not thread-safe: read it from
    one thread.

    Made by :meth:`quiver.Client.exchange_reader` and its relatives; not created
    directly.
    """

    def __init__(
        self,
        client: flight.FlightClient,
        options: flight.FlightCallOptions,
        command: JsonObject,
        source: BatchSource | None,
        *,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        tag_rows: bool = False,
        count_sent: RowCounter | None = None,
        count_received: RowCounter | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._count_received = count_received
        self._tag_rows = tag_rows
        self._on_close = on_close
        self._closed = False
        self._ended = False
        self._last_metadata: bytes | None = None
        self._call: _status.CallStatus | None = None
        self._pending: pa.RecordBatch | None = None
        self._schema: pa.Schema | None = None
        with self._translated(), _status.calls_started() as started:
            self._writer, self._reader = client.do_exchange(command_descriptor(command), options)
        self._call = started[0] if started else None
        self._sender = _Sender(
            self._writer,
            self._reader.cancel,
            source,
            batch_rows,
            tag_rows,
            count_sent or _ignore,
        )
        self._sender.start()

    # -- the stream -------------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The results' schema; waits for the first result (or the end) if need be.

        It is that of the results: the function's declared output schema, or its
        first result's. A call that ends without results has the declared schema, or
        an empty one if none was declared.
        """
        if self._schema is None:
            self._pending = self._next()
            if self._pending is not None:
                self._schema = self._pending.schema
            else:
                self._schema = self._stream_schema()
        return self._schema

    @property
    def last_app_metadata(self) -> bytes | None:
        """The ``app_metadata`` of the last message received that had one.

        An apply ``into`` a table ends with its summary there.
        """
        return self._last_metadata

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """Yield the result batches in order."""
        return self

    def __next__(self) -> pa.RecordBatch:
        """Return the next result batch.

        Raises
        ------
        StopIteration
            The call ended and every result was read.
        QuiverError
            The call failed (the function raised, its worker died, ...). The error
            of reading the input is raised as it was.
        """
        if self._pending is not None:
            batch, self._pending = self._pending, None
            return batch
        batch = self._next()
        if batch is None:
            raise StopIteration
        if self._schema is None:
            self._schema = batch.schema
        return batch

    def read_next_batch(self) -> pa.RecordBatch:
        """Return the next result batch, as :class:`pyarrow.RecordBatchReader` does."""
        return next(self)

    def read_all(self) -> pa.Table:
        """Read the remaining results into a table (the declared schema if there are none)."""
        batches = list(self)
        return pa.Table.from_batches(batches, schema=self.schema)

    def __arrow_c_stream__(self, requested_schema: object = None) -> Any:
        """Export the remaining results as an Arrow C stream (the PyCapsule protocol)."""
        reader = pa.RecordBatchReader.from_batches(self.schema, self)
        return reader.__arrow_c_stream__(requested_schema)

    def _next(self) -> pa.RecordBatch | None:
        """Read up to the next record batch; ``None`` at the end of the call."""
        if self._ended:
            return None
        if self._closed:
            raise ValueError("the exchange reader is closed")
        while True:
            try:
                chunk = self._reader.read_chunk()
            except StopIteration:
                self._end()
                return None
            except BaseException as error:
                self._fail(error)
            metadata = chunk.app_metadata
            if chunk.data is None and metadata is not None and metadata.equals(_STOP_INPUT):
                # The status follows the half-close, so the call cannot end
                # under a write of the sender's (gRPC would abort the process).
                self._sender.halt.set()
                continue
            if metadata is not None and metadata.size:
                self._last_metadata = metadata.to_pybytes()
                if self._tag_rows and self._count_received is not None:
                    self._count_received(_tagged_rows(metadata))
            if chunk.data is not None:
                if not self._tag_rows and self._count_received is not None:
                    self._count_received(chunk.data.num_rows)
                return chunk.data

    def _stream_schema(self) -> pa.Schema:
        """Return the schema of a call that ended without a batch: declared, or empty."""
        try:
            return self._reader.schema
        except pa.ArrowException:
            # The server sent no schema (no results, none declared).
            return pa.schema([])

    def _end(self) -> None:
        """End a call that ended well; raise what reading the input raised, if anything."""
        self._ended = True
        self._finish(cancel=False)
        if self._sender.source_error is not None:
            raise self._sender.source_error

    def _fail(self, error: BaseException) -> NoReturn:
        """Raise ``error`` (translated), or the input's error that caused it; the call ends."""
        self._ended = True
        self._finish(cancel=True)
        source_error = self._sender.source_error
        if source_error is not None:
            raise source_error from None
        converted = self._translate(error)
        if converted is error:
            raise error
        raise converted from error

    def _translate(self, error: BaseException) -> BaseException:
        # The status may have reached the writer thread: hand it to this one.
        if self._call is not None and self._call.details is not None:
            _status.leave_captured(self._call.details)
        return translate(error)

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except pa.ArrowException as error:
            converted = self._translate(error)
            if converted is error:
                raise
            raise converted from error

    def _finish(self, *, cancel: bool) -> None:
        """End the call: cancel it if asked, stop and join the writer, close the streams."""
        if cancel:
            with contextlib.suppress(pa.ArrowException):
                self._reader.cancel()
        self._sender.stop.set()
        self._sender.join(WRITER_JOIN_TIMEOUT_S)
        if not self._sender.is_alive():
            # The status was raised already, or the call was cancelled.
            with contextlib.suppress(pa.ArrowException):
                self._writer.close()
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close()

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop reading; cancel the call if it has not ended. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._ended:
            self._ended = True
            self._finish(cancel=True)

    cancel = close

    def __enter__(self) -> ExchangeReader:
        """Return the reader itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the reader, cancelling the call if it has not ended."""
        self.close()

    def __del__(self) -> None:
        """Cancel the call of a reader dropped before its end."""
        with contextlib.suppress(Exception):
            self.close()


_STOP_INPUT = pa.py_buffer(STOP_INPUT)


def _ignore(rows: int) -> None:
    del rows
