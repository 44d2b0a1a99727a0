"""A NYC-taxi-like table: the yellow-taxi trip records' schema, filled by a seeded generator.

The ``sql`` suite fetches query results of this table into pandas, as the paper's Figure 8
did with the real trip records. The columns, their names and types are those of the
yellow-taxi Parquet files (19 columns: 6 int64, 2 timestamp[us], 10 double, 1 string);
the values are drawn with numpy from distributions shaped like the real ones (fares that
follow the distance and duration, mostly "N" flags, two vendors, 265 zones...), and, as in
the real files, about 3% of the trips (payment type 0) have no passenger count, rate code,
store-and-forward flag, congestion surcharge or airport fee. Everything is vectorised and
the same for the same ``rows`` and ``seed``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: The yellow-taxi trip records' schema.
SCHEMA = pa.schema(
    [
        ("VendorID", pa.int64()),
        ("tpep_pickup_datetime", pa.timestamp("us")),
        ("tpep_dropoff_datetime", pa.timestamp("us")),
        ("passenger_count", pa.int64()),
        ("trip_distance", pa.float64()),
        ("RatecodeID", pa.int64()),
        ("store_and_fwd_flag", pa.string()),
        ("PULocationID", pa.int64()),
        ("DOLocationID", pa.int64()),
        ("payment_type", pa.int64()),
        ("fare_amount", pa.float64()),
        ("extra", pa.float64()),
        ("mta_tax", pa.float64()),
        ("tip_amount", pa.float64()),
        ("tolls_amount", pa.float64()),
        ("improvement_surcharge", pa.float64()),
        ("total_amount", pa.float64()),
        ("congestion_surcharge", pa.float64()),
        ("airport_fee", pa.float64()),
    ]
)
#: The columns left empty on trips without a payment type, as in the real files.
NULLABLE = (
    "passenger_count",
    "RatecodeID",
    "store_and_fwd_flag",
    "congestion_surcharge",
    "airport_fee",
)
#: Share of the trips with payment type 0 (and those columns empty).
MISSING_SHARE = 0.03
#: The month the pickups fall in (January 2023), as microseconds since the epoch.
MONTH_START_US = 1_672_531_200 * 1_000_000
MONTH_US = 31 * 86_400 * 1_000_000
DEFAULT_SEED = 2023


def table_name(rows: int) -> str:
    """Return the name the suite stores a table of ``rows`` trips under (``taxi_1m``...)."""
    for unit, scale in (("m", 10**6), ("k", 10**3)):
        if rows >= scale and rows % scale == 0:
            return f"taxi_{rows // scale}{unit}"
    return f"taxi_{rows}"


def _money(values: np.ndarray) -> np.ndarray:
    return np.round(values, 2)


def _choice(rng: np.random.Generator, values: list, weights: list[float], rows: int) -> np.ndarray:
    p = np.asarray(weights, dtype=np.float64)
    return np.asarray(values)[rng.choice(len(values), size=rows, p=p / p.sum())]


def _column(values: np.ndarray, kind: pa.DataType, missing: np.ndarray | None) -> pa.Array:
    return pa.array(values, type=kind, mask=missing)


def columns(rows: int, seed: int = DEFAULT_SEED) -> dict[str, pa.Array]:
    """Return the table's columns, by name, for ``rows`` trips.

    Parameters
    ----------
    rows : int
        Trips to generate.
    seed : int
        The seed of the numpy generator: the same seed gives the same trips.
    """
    rng = np.random.default_rng(seed)
    missing = rng.random(rows) < MISSING_SHARE
    pickup = MONTH_START_US + np.sort(rng.integers(0, MONTH_US, size=rows)) // 1_000_000 * 1_000_000
    minutes = np.clip(rng.lognormal(np.log(12.0), 0.6, size=rows), 1.0, 180.0)
    dropoff = pickup + (minutes * 60.0).astype(np.int64) * 1_000_000
    distance = np.round(np.clip(rng.gamma(1.4, 2.3, size=rows), 0.0, 60.0), 2)
    rate = _choice(rng, [1, 2, 3, 4, 5, 99], [93.0, 3.5, 0.4, 0.3, 0.6, 0.2], rows)
    payment = np.where(missing, 0, _choice(rng, [1, 2, 3, 4], [78.0, 19.0, 1.5, 1.5], rows))
    fare = np.where(rate == 2, 70.0, _money(3.0 + 1.75 * distance + 0.7 * minutes))
    extra = _choice(rng, [0.0, 1.0, 2.5, 3.5, 5.0], [35.0, 30.0, 20.0, 10.0, 5.0], rows)
    mta_tax = np.full(rows, 0.5)
    tip = np.where(payment == 1, _money(fare * rng.uniform(0.1, 0.3, size=rows)), 0.0)
    tolls = np.where(rng.random(rows) < 0.07, 6.55, 0.0)
    improvement = np.full(rows, 1.0)
    congestion = np.where(rng.random(rows) < 0.9, 2.5, 0.0)
    airport = np.where(rng.random(rows) < 0.09, 1.25, 0.0)
    total = _money(fare + extra + mta_tax + tip + tolls + improvement + congestion + airport)
    flags = pc.take(
        pa.array(["N", "Y"]),
        pa.array((rng.random(rows) < 0.005).astype(np.int8), mask=missing),
    )
    values = {
        "VendorID": _choice(rng, [1, 2, 6], [27.0, 72.9, 0.1], rows),
        "tpep_pickup_datetime": pickup,
        "tpep_dropoff_datetime": dropoff,
        "passenger_count": _choice(rng, [0, 1, 2, 3, 4, 5, 6], [2, 72, 14, 4, 2, 4, 2], rows),
        "trip_distance": distance,
        "RatecodeID": rate,
        "PULocationID": rng.integers(1, 266, size=rows),
        "DOLocationID": rng.integers(1, 266, size=rows),
        "payment_type": payment,
        "fare_amount": fare,
        "extra": extra,
        "mta_tax": mta_tax,
        "tip_amount": tip,
        "tolls_amount": tolls,
        "improvement_surcharge": improvement,
        "total_amount": total,
        "congestion_surcharge": congestion,
        "airport_fee": airport,
    }
    out: dict[str, pa.Array] = {}
    for field in SCHEMA:
        if field.name == "store_and_fwd_flag":
            out[field.name] = flags
        else:
            mask = missing if field.name in NULLABLE else None
            out[field.name] = _column(values[field.name], field.type, mask)
    return out


def table(rows: int, batch_rows: int = 64 * 1024, seed: int = DEFAULT_SEED) -> pa.Table:
    """Return ``rows`` taxi trips as an Arrow table in record batches of ``batch_rows``.

    Parameters
    ----------
    rows : int
        Trips in the table.
    batch_rows : int
        Rows per record batch (the last one may be shorter).
    seed : int
        The seed of the generator.

    Returns
    -------
    pyarrow.Table
        A table of :data:`SCHEMA`, about 150 bytes of Arrow data per row.
    """
    whole = pa.Table.from_pydict(columns(rows, seed), schema=SCHEMA)
    return pa.Table.from_batches(whole.to_batches(max_chunksize=max(1, batch_rows)), SCHEMA)
