"""Turning whatever a caller hands to :meth:`quiver.Client.put` into a stream of batches."""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa

#: Most bytes of rows :meth:`quiver.Client.put` sends in one gRPC message: 64 MiB.
#: A larger record batch is sent as zero-copy slices of at most this size
#: (:func:`message_slices`), well under the server's default 1 GiB
#: ``--max-message-size``. Each message costs a little per column, so smaller
#: slices suit narrow tables and larger ones wide tables; 64 MiB measured near the
#: fastest at every width (docs/performance.md, "The Python client's put of one
#: large batch").
MESSAGE_TARGET_BYTES = 64 << 20

ACCEPTED_TYPES = (
    "a pyarrow Table, RecordBatch or RecordBatchReader, a pandas or polars DataFrame, "
    "an object with __arrow_c_stream__ or __arrow_c_array__, or an iterable of RecordBatches"
)


@dataclass(frozen=True)
class BatchSource:
    """Record batches to send, read lazily.

    Attributes
    ----------
    reader : pyarrow.RecordBatchReader
        The batches, in order.
    num_rows : int or None
        How many rows ``reader`` yields, when known before reading it.
    may_fail : bool
        Whether reading ``reader`` can raise half-way (a caller's reader,
        iterator or C stream); in-memory data cannot.
    """

    reader: pa.RecordBatchReader
    num_rows: int | None
    may_fail: bool


def batch_source(data: object) -> BatchSource:
    """Return the batches of ``data`` without reading a stream into memory.

    Raises
    ------
    TypeError
        ``data`` is none of the accepted kinds.
    ValueError
        ``data`` is an empty iterable, which has no schema.
    """
    if isinstance(data, pa.RecordBatchReader):
        return BatchSource(data, None, may_fail=True)
    if isinstance(data, pa.Table):
        return _from_table(data)
    if isinstance(data, pa.RecordBatch):
        reader = pa.RecordBatchReader.from_batches(data.schema, [data])
        return BatchSource(reader, data.num_rows, may_fail=False)
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(data, pandas.DataFrame):
        return _from_table(pa.Table.from_pandas(data, preserve_index=False))
    polars = sys.modules.get("polars")
    if polars is not None and isinstance(data, polars.LazyFrame):
        data = data.collect()
    if polars is not None and isinstance(data, polars.DataFrame):
        return _from_table(data.to_arrow())
    if hasattr(data, "__arrow_c_stream__"):
        return BatchSource(pa.RecordBatchReader.from_stream(data), None, may_fail=True)
    if hasattr(data, "__arrow_c_array__"):
        batch = pa.record_batch(data)
        reader = pa.RecordBatchReader.from_batches(batch.schema, [batch])
        return BatchSource(reader, batch.num_rows, may_fail=False)
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, dict)):
        return _from_batches(iter(data))
    raise TypeError(f"cannot put {type(data).__name__}: expected {ACCEPTED_TYPES}")


def _from_table(table: pa.Table) -> BatchSource:
    return BatchSource(table.to_reader(), table.num_rows, may_fail=False)


def _from_batches(batches: Iterator[object]) -> BatchSource:
    first = next(batches, None)
    if first is None:
        raise ValueError("cannot put an empty iterable of batches: it has no schema")
    first = _as_batch(first)
    schema = first.schema

    def checked() -> Iterator[pa.RecordBatch]:
        for item in itertools.chain([first], batches):
            batch = _as_batch(item)
            if not batch.schema.equals(schema):
                raise ValueError(
                    f"every batch must have the first batch's schema\n"
                    f"first: {schema}\nthis one: {batch.schema}"
                )
            yield batch

    return BatchSource(pa.RecordBatchReader.from_batches(schema, checked()), None, may_fail=True)


def _as_batch(item: object) -> pa.RecordBatch:
    if not isinstance(item, pa.RecordBatch):
        raise TypeError(f"an iterable passed to put must yield RecordBatches, not {type(item)}")
    return item


def message_slices(
    batch: pa.RecordBatch, target: int = MESSAGE_TARGET_BYTES
) -> Iterator[pa.RecordBatch]:
    """Yield ``batch`` whole, or as consecutive zero-copy slices of at most ``target`` bytes.

    A slice's bytes are its :attr:`~pyarrow.RecordBatch.nbytes` less those
    that do not grow with its rows (dictionaries, which IPC sends in messages of
    their own); its IPC message adds only its header and padding. ``batch`` is
    cut into equal numbers of rows, and a slice still over ``target`` (its rows
    larger than the average: strings, lists) is cut again. A row larger than
    ``target`` is yielded alone and whole; a batch without rows as it is.
    """
    size = _row_bytes(batch)
    if size <= target or batch.num_rows <= 1:
        yield batch
        return
    pieces = math.ceil(size / target)
    step = math.ceil(batch.num_rows / pieces)
    for start in range(0, batch.num_rows, step):
        # An even split by rows; a piece of larger-than-average rows is split again.
        yield from message_slices(batch.slice(start, step), target)


def _row_bytes(batch: pa.RecordBatch) -> int:
    """Bytes of ``batch`` that its rows hold: ``nbytes`` less what a batch with no rows holds."""
    return int(batch.nbytes) - int(batch.slice(0, 0).nbytes)
