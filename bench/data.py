"""The tables the benchmarks move, generated with numpy.

The throughput table is the paper's: records of four int64 columns, 32 bytes each, the same
values ``quiver bench client`` generates. The JSON comparison uses a mixed table (integers,
floats, strings), as a DataFrame a JSON peer can rebuild from the same seed. The ``bytes``
suite puts one column of each of several kinds, some as slices of one array.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

#: Bytes in one record of the throughput table.
RECORD_BYTES = 32
#: Its columns: four int64.
COLUMNS = ("a", "b", "c", "d")
SCHEMA = pa.schema([pa.field(name, pa.int64(), nullable=False) for name in COLUMNS])


def records(rows: int, batch_rows: int) -> pa.Table:
    """Return ``rows`` records of four int64 columns, in record batches of ``batch_rows``.

    Column ``c`` of row ``i`` holds ``4 * i + c``, as in ``quiver bench client``.

    Parameters
    ----------
    rows : int
        Records in the table.
    batch_rows : int
        Rows per record batch (the last one may be shorter).

    Returns
    -------
    pyarrow.Table
        A table of ``rows * 32`` bytes.
    """
    base = np.arange(rows, dtype=np.int64) * 4
    columns = [pa.array(base + c) for c in range(len(COLUMNS))]
    table = pa.Table.from_arrays(columns, schema=SCHEMA)
    return pa.Table.from_batches(table.to_batches(max_chunksize=max(1, batch_rows)), SCHEMA)


def rows_for_bytes(nbytes: int) -> int:
    """Return how many records make ``nbytes`` of data."""
    return nbytes // RECORD_BYTES


def mixed_frame(rows: int, seed: int = 42) -> pd.DataFrame:
    """Return a DataFrame of mixed types, the same for the same ``rows`` and ``seed``.

    Columns: ``id`` (int64), ``qty`` (int64), ``price`` and ``score`` (float64), ``city``
    (a short string from a small set) and ``code`` (an 8-character string).
    """
    rng = np.random.default_rng(seed)
    cities = np.array(["Amsterdam", "Berlin", "Delft", "Lisbon", "Oslo", "Paris", "Rome"])
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    codes = letters[rng.integers(0, len(letters), size=(rows, 8))].view("U8").ravel()
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype=np.int64),
            "qty": rng.integers(0, 1000, size=rows, dtype=np.int64),
            "price": np.round(rng.random(rows) * 100.0, 2),
            "score": rng.standard_normal(rows),
            "city": cities[rng.integers(0, len(cities), size=rows)],
            "code": codes,
        }
    )


def mixed_table(rows: int, seed: int = 42) -> pa.Table:
    """Return :func:`mixed_frame` as an Arrow table (strings as ``large_string``)."""
    return pa.Table.from_pandas(mixed_frame(rows, seed), preserve_index=False)


#: The ``bytes`` suite's column kinds, in the order of the report: plain utf8 strings in one
#: tight array; the same strings as ``string_view``, and as utf8, and int64, each table made
#: of slices of one array (what pyarrow hands out when it cuts a table: a slice keeps every
#: buffer of the array, a ``string_view`` slice all of its data buffers); and a
#: ``dictionary<int32, utf8>`` column, also as slices of one array.
BYTES_KINDS = ("string", "string_view", "sliced string", "sliced int64", "dictionary")
#: Slices of one array the sliced kinds' tables are made of.
BYTES_SLICES = 10
#: Bytes of each string of the ``bytes`` suite: past the 12 a ``string_view`` inlines, so
#: each value lives in a data buffer.
BYTES_STRING_LENGTH = 20
#: Distinct values of the ``dictionary`` kind.
BYTES_DICTIONARY_VALUES = 100


def bytes_values(kind: str, rows: int) -> list[object]:
    """Return the Python values of a ``bytes`` suite column of ``kind``, ``rows`` of them.

    Strings are ``BYTES_STRING_LENGTH`` characters long, the same for the same row; the
    dictionary kind's rows take one of ``BYTES_DICTIONARY_VALUES`` strings in turn.
    """
    if kind not in BYTES_KINDS:
        raise ValueError(f"unknown kind {kind!r}: expected one of {', '.join(BYTES_KINDS)}")
    if kind == "sliced int64":
        return list(range(rows))
    if kind == "dictionary":
        distinct = [f"category-{j:03d}-abcdefg" for j in range(BYTES_DICTIONARY_VALUES)]
        return [distinct[(i * 37) % len(distinct)] for i in range(rows)]
    width = BYTES_STRING_LENGTH - 1
    return [f"s{i * 2_654_435_761 % 10**width:0{width}d}" for i in range(rows)]


def bytes_column(kind: str, values: list[object]) -> pa.Array:
    """Return ``values`` as one fresh, tight array of ``kind``'s type.

    Tight: each buffer holds these values and nothing else. ``pa.table({"c": ...}).nbytes``
    of it is the suite's Arrow size of the rows.
    """
    if kind == "string_view":
        return pa.array(values, pa.string_view())
    if kind == "sliced int64":
        return pa.array(values, pa.int64())
    strings = pa.array(values, pa.string())
    return strings.dictionary_encode() if kind == "dictionary" else strings


def bytes_table(kind: str, column: pa.Array, slices: int = BYTES_SLICES) -> pa.Table:
    """Return the table of column ``c`` the ``bytes`` suite puts for ``kind``.

    ``string``: the tight ``column`` in one batch. Every other kind: ``slices`` batches,
    each a slice of ``column`` (``pa.record_batch({"c": column.slice(i, k)})``), which
    references all of ``column``'s buffers.
    """
    if kind == "string":
        return pa.table({"c": column})
    step = max(1, -(-len(column) // slices))
    return pa.Table.from_batches(
        [pa.record_batch({"c": column.slice(i, step)}) for i in range(0, len(column), step)]
    )
