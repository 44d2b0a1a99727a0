"""The tables the benchmarks move, generated with numpy.

The throughput table is the paper's: records of four int64 columns, 32 bytes each, the same
values ``quiver bench client`` generates. The JSON comparison uses a mixed table (integers,
floats, strings), as a DataFrame a JSON peer can rebuild from the same seed.
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
