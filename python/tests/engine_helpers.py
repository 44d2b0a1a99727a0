"""Helpers of the connector tests: a table of every kind of column, and replicated servers."""

from __future__ import annotations

import decimal
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

import quiver

ROWS = 10_000


def mixed_table(rows: int = ROWS) -> pa.Table:
    """Nested, decimal, zoned timestamps, dictionaries, nulls: what must round-trip."""
    ids = pa.array(range(rows), pa.int64())
    return pa.table(
        {
            "id": ids,
            "fare": pc.divide(pc.cast(ids, pa.float64()), 7.0),
            "vendor": pa.array(
                [["a", "b", "c", None][i % 4] for i in range(rows)]
            ).dictionary_encode(),
            "amount": pa.array(
                [decimal.Decimal(i) / 100 for i in range(rows)], pa.decimal128(12, 2)
            ),
            "at": pa.array(
                [1_700_000_000_000_000 + i * 1_000_000 for i in range(rows)],
                pa.timestamp("us", "Europe/Paris"),
            ),
            "tags": pa.array([[f"t{i % 3}"] * (i % 3) for i in range(rows)], pa.list_(pa.string())),
            "point": pa.array(
                [{"x": i, "y": -i} for i in range(rows)],
                pa.struct([("x", pa.int32()), ("y", pa.int32())]),
            ),
        }
    )


def spark_view(table: pa.Table) -> pa.Table:
    """``table`` as Spark gives it back: dictionaries decoded, timestamps in UTC."""
    fields = []
    for f in table.schema:
        t = f.type
        if pa.types.is_dictionary(t):
            t = t.value_type
        elif pa.types.is_timestamp(t) and t.tz is not None:
            t = pa.timestamp("us", "UTC")
        fields.append(pa.field(f.name, t))
    return table.cast(pa.schema(fields))


class Planner(flight.FlightServerBase):  # type: ignore[misc]
    """A Flight server that plans reads over replicas: a real pyarrow server, no data.

    It asks the first replica for a table's FlightInfo and answers with the same
    tickets, each endpoint listing every replica, starting with a different one
    for each endpoint (the shape a catalog of replicated tables gives).
    """

    def __init__(self, replicas: list[str]) -> None:
        super().__init__("grpc+tcp://127.0.0.1:0")
        self.replicas = replicas

    def get_flight_info(self, context, descriptor):  # type: ignore[no-untyped-def]
        upstream = flight.FlightClient(self.replicas[0])
        try:
            info = upstream.get_flight_info(descriptor)
        finally:
            upstream.close()
        n = len(self.replicas)
        endpoints = [
            flight.FlightEndpoint(e.ticket, [self.replicas[(i + k) % n] for k in range(n)])
            for i, e in enumerate(info.endpoints)
        ]
        return flight.FlightInfo(
            info.schema, descriptor, endpoints, info.total_records, info.total_bytes
        )


def staging_left(client: quiver.Client, seconds: float = 15.0) -> list[str]:
    """The staging tables still there once a failed job's tasks have ended (bounded wait).

    A task the engine gave up on may still be finishing when the job's error is
    raised; it removes what it staged as soon as it ends (quiver.splits.WriteJob).
    """
    deadline = time.monotonic() + seconds
    while True:
        left = [t.name for t in client.list_tables(".quiver-staging/")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def check_a_failed_spark_write_publishes_nothing(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    """A Spark job whose task fails half-way through its write into ``target`` (overwrite):
    the table stays as it was and nothing staged is left (either connector)."""
    import pytest
    from pyspark.sql.functions import udf

    before = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    client.put("target", before)

    @udf("long")  # type: ignore[misc]
    def explode(x: int) -> int:
        if x == 7777:
            raise RuntimeError("a task fails half-way")
        return x

    df = spark.range(0, 10_000, numPartitions=4).select(explode("id").alias("id"))
    with pytest.raises(Exception, match="a task fails half-way"):
        df.write.format("quiver").option("uri", uri).mode("overwrite").save("target")
    assert client.get("target").equals(before)
    assert staging_left(client) == []
