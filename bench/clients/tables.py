"""The clients suite's two tables, made the same way by every client (bench/clients/*).

- ``ints``: four int64 columns ``a``-``d``, column ``k`` of row ``i`` holding ``4 * i + k``
  (:func:`bench.data.records`): 32 bytes a row;
- ``strings``: ``s``, row ``i`` in decimal zero-padded to 32 digits (utf8, 32-bit offsets),
  and ``n``, ``i`` as int64: 44 bytes a row.

Both in record batches of :data:`BATCH_BYTES` (2 MiB).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import data

#: The tables, in the order the suite and the report take them.
KINDS = ("ints", "strings")
#: Bytes of one record batch of either table.
BATCH_BYTES = 2 * 1024 * 1024
#: Digits of every string of the ``strings`` table.
STRING_WIDTH = 32
#: Arrow bytes of one row: 4 int64; a 32-byte string, its 4-byte offset and an int64.
ROW_BYTES = {"ints": data.RECORD_BYTES, "strings": STRING_WIDTH + 4 + 8}
STRINGS_SCHEMA = pa.schema(
    [pa.field("s", pa.string(), nullable=False), pa.field("n", pa.int64(), nullable=False)]
)


def rows_for(kind: str, nbytes: int) -> int:
    """Return the fewest rows of a ``kind`` table of at least ``nbytes`` Arrow bytes.

    At least: 2^30 is no multiple of the strings table's 44 bytes a row, and a table a few
    bytes short of 1 GiB would be reported as "1,024 MiB".
    """
    return -(-nbytes // ROW_BYTES[kind])


def batch_rows(kind: str) -> int:
    """Return the rows of a 2 MiB batch of ``kind``."""
    return BATCH_BYTES // ROW_BYTES[kind]


def _decimal_strings(start: int, count: int) -> pa.Array:
    """Return ``start .. start + count - 1`` zero-padded to 32 digits, as one utf8 array."""
    values = np.arange(start, start + count, dtype=np.int64)
    digits = np.full((count, STRING_WIDTH), ord("0"), dtype=np.uint8)
    # An int64 has at most 19 decimal digits: the others stay '0'.
    for place in range(19):
        digits[:, STRING_WIDTH - 1 - place] += ((values // 10**place) % 10).astype(np.uint8)
    offsets = np.arange(0, (count + 1) * STRING_WIDTH, STRING_WIDTH, dtype=np.int32)
    return pa.StringArray.from_buffers(
        count, pa.py_buffer(offsets.tobytes()), pa.py_buffer(digits.tobytes())
    )


def make(kind: str, rows: int) -> pa.Table:
    """Return the ``kind`` table of ``rows`` rows in 2 MiB batches."""
    step = batch_rows(kind)
    if kind == "ints":
        return data.records(rows, step)
    if kind != "strings":
        raise ValueError(f"unknown table kind {kind!r}: expected one of {', '.join(KINDS)}")
    batches = []
    for start in range(0, rows, step):
        count = min(step, rows - start)
        numbers = pa.array(np.arange(start, start + count, dtype=np.int64))
        batches.append(
            pa.record_batch([_decimal_strings(start, count), numbers], schema=STRINGS_SCHEMA)
        )
    return pa.Table.from_batches(batches, STRINGS_SCHEMA)
