"""SQL as analysts write it for other engines, run unchanged through ADBC against DuckDB.

- Names (docs/protocol.md, "Names and case"): a table stored by ``put`` keeps its case, and an
  unquoted name in any case reads it and its columns, as DuckDB reads the same table.
- Decimal division (docs/protocol.md, "Decimal arithmetic"): a quotient with a decimal operand
  is a double, the same double DuckDB computes, for operands of every scale from 0 to 18 and
  precisions up to 38.
- Windows and grouping sets (docs/performance.md, issue 68): ``ROLLUP`` and ``CUBE`` rolled up
  from one aggregation at the finest grain, and windows without ``ORDER BY`` gathered by hash,
  give DuckDB's rows, the grand total of no rows included.

The sqllogictest files ``sql/identifiers.slt`` and ``sql/decimals.slt`` hold the rest of the
rules, one statement beside its result.
"""

from __future__ import annotations

import decimal
import random

import adbc_driver_flightsql.dbapi as flight_sql
import duckdb
import pyarrow as pa
import pyarrow.flight as flight

from flight_helpers import put

SCALES = (0, 1, 2, 3, 4, 6, 8, 10, 12, 15, 18)
ROWS = 200


def sql(uri: str, query: str) -> pa.Table:
    with (
        flight_sql.connect(uri.replace("grpc+tcp://", "grpc://"), autocommit=True) as conn,
        conn.cursor() as cur,
    ):
        cur.execute(query)
        return cur.fetch_arrow_table()


def test_names_stored_by_put_keep_their_case_and_match_unquoted_in_any_case(uri: str) -> None:
    trips = pa.table(
        {
            "VendorID": pa.array([1, 2, 1, 2, 2], pa.int64()),
            "PULocationID": pa.array([10, 20, 30, 40, 50], pa.int32()),
            "Fare_Amount": pa.array([5.0, 7.5, 10.0, 2.5, 1.0]),
        }
    )
    with flight.FlightClient(uri) as client:
        put(client, "TaxiTrips", trips)
    query = (
        "SELECT vendorid, count(*) AS Trips, SUM(fare_amount) AS total "
        "FROM taxitrips WHERE pulocationid > 10 GROUP BY VENDORID ORDER BY TRIPS DESC, vendorid"
    )
    ours = sql(uri, query)
    theirs = duckdb.connect().execute(query.replace("taxitrips", "trips")).to_arrow_table()
    assert ours.to_pylist() == theirs.to_pylist()
    # The names as stored, whatever case the query wrote them in.
    assert ours.column_names == ["VendorID", "Trips", "total"]
    listed = sql(
        uri, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    )
    assert listed.column("table_name").to_pylist() == ["TaxiTrips"]


def random_decimals(rng: random.Random, precision: int, scale: int) -> pa.Array:
    """``ROWS`` values of ``decimal(precision, scale)``: small and large, negative, a null."""
    values: list[decimal.Decimal | None] = []
    for row in range(ROWS):
        digits = rng.randint(1, precision)
        unscaled = rng.randrange(10 ** (digits - 1), 10**digits) * rng.choice((1, -1))
        values.append(None if row == 7 else decimal.Decimal(unscaled).scaleb(-scale))
    return pa.array(values, pa.decimal128(precision, scale))


def test_a_decimal_quotient_is_the_double_duckdb_computes_at_every_scale(uri: str) -> None:
    rng = random.Random(68)
    columns: dict[str, pa.Array] = {}
    for scale in SCALES:
        # Precisions around the 18- and 38-digit boundaries of both engines' storage.
        for precision in sorted({scale + 2, 18, 38}):
            if precision >= scale:
                columns[f"d{precision}_{scale}"] = random_decimals(rng, precision, scale)
    table = pa.table(columns)
    with flight.FlightClient(uri) as client:
        put(client, "decimals", table)
    names = table.column_names
    quotients = [f"{a} / {b}" for a in names for b in names if a != b]
    quotients += [f"{a} / 7" for a in names] + [f"3 / {a}" for a in names]
    query = "SELECT " + ", ".join(quotients) + " FROM decimals"
    ours = sql(uri, query)
    duck = duckdb.connect()
    duck.register("decimals", table)
    theirs = duck.execute(query).to_arrow_table()
    assert ours.num_rows == theirs.num_rows == ROWS
    mismatches = []
    for index, quotient in enumerate(quotients):
        assert ours.schema.field(index).type == pa.float64(), (quotient, ours.schema.field(index))
        for row, (a, b) in enumerate(
            zip(ours.column(index).to_pylist(), theirs.column(index).to_pylist(), strict=True)
        ):
            if a != b:
                mismatches.append(f"{quotient}, row {row}: {a!r}, DuckDB's {b!r}")
    assert not mismatches, f"{len(mismatches)} quotients differ: {mismatches[:10]}"


def rounded(table: pa.Table) -> list[tuple[object, ...]]:
    """Rows with floats to 9 significant digits: sums merged in another order differ after."""
    return [
        tuple(float(f"{v:.9g}") if isinstance(v, float) else v for v in row.values())
        for row in table.to_pylist()
    ]


def test_rollups_and_whole_partition_windows_give_duckdbs_rows(uri: str) -> None:
    rows = 120_000
    sales = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "region": pa.array([["north", "south", "east", None][i % 4] for i in range(rows)]),
            "product": pa.array([i % 7 for i in range(rows)], pa.int32()),
            "amount": pa.array([(i * 7919) % 1000 / 8 for i in range(rows)]),
        }
    )
    with flight.FlightClient(uri) as client:
        put(client, "sales", sales)
    duck = duckdb.connect()
    duck.register("sales", sales)
    order = "ORDER BY 1 NULLS LAST, 2 NULLS LAST, 3"
    queries = {
        "RollUpExec": [
            "SELECT region, product, grouping(region, product) AS g, count(*), sum(amount), "
            f"avg(amount), min(id) FROM sales GROUP BY ROLLUP (region, product) {order}",
            "SELECT region, product, grouping(region, product) AS g, count(*), avg(amount) "
            f"FROM sales GROUP BY CUBE (region, product) {order}",
            # Rows in one batch alone, and none at all: partitions of no rows.
            "SELECT region, product, grouping(region, product) AS g, count(*), avg(amount) "
            f"FROM sales WHERE id < 10 GROUP BY ROLLUP (region, product) {order}",
            "SELECT region, product, grouping(region, product) AS g, count(*), avg(amount) "
            f"FROM sales WHERE id < 0 GROUP BY CUBE (region, product) {order}",
        ],
        "PartitionGatherExec": [
            "SELECT region, product, count(*), min(m) FROM (SELECT region, product, amount, "
            "avg(amount) OVER (PARTITION BY region, product) AS m FROM sales) "
            f"WHERE amount > 1.5 * m GROUP BY region, product {order}",
        ],
    }
    for operator, texts in queries.items():
        for query in texts:
            plan = sql(uri, "EXPLAIN " + query).column("plan").to_pylist()
            assert any(operator in line for line in plan), (query, plan)
            ours, theirs = sql(uri, query), duck.execute(query).to_arrow_table()
            assert ours.num_rows > 0, query
            assert rounded(ours) == rounded(theirs), query
