"""Helpers of the connector tests: a table of every kind of column, and replicated servers."""

from __future__ import annotations

import decimal
import time
from typing import Any

import numpy as np
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


def types_spark_lacks() -> pa.Table:
    """Columns of Arrow types Spark has no type for (unsigned integers, half floats) beside
    the view types Spark 4 reads, each with its extremes and a null."""
    return pa.table(
        {
            "id": pa.array([0, 1, 2, 3], pa.int64()),
            "u8": pa.array([0, 200, 255, None], pa.uint8()),
            "u16": pa.array([0, 40_000, 65_535, None], pa.uint16()),
            "u32": pa.array([0, 3_000_000_000, 2**32 - 1, None], pa.uint32()),
            "u64": pa.array([0, 2**63 + 5, 2**64 - 1, None], pa.uint64()),
            "half": pa.array([np.float16(1.5), np.float16(-2.25), np.float16(65504), None]),
            "sv": pa.array(["a", "a string longer than twelve bytes", "", None], pa.string_view()),
            "bv": pa.array([b"\x00", b"bytes longer than twelve", b"", None], pa.binary_view()),
        }
    )


#: How Spark reads :func:`types_spark_lacks`: each unsigned integer as the next wider signed
#: type, ``uint64`` as ``decimal(20,0)``, half floats as floats.
TYPES_SPARK_LACKS_AS_READ = (
    "struct<id:bigint,u8:smallint,u16:int,u32:bigint,u64:decimal(20,0),half:float,"
    "sv:string,bv:binary>"
)


def check_spark_reads_types_it_lacks(df: Any) -> None:
    """``df``, a Spark read of :func:`types_spark_lacks`, has every value, in Spark's types."""
    assert df.schema.simpleString() == TYPES_SPARK_LACKS_AS_READ, df.schema.simpleString()
    table = types_spark_lacks()
    rows = sorted(df.collect(), key=lambda r: r["id"])
    for name in table.column_names:
        want = table[name].to_pylist()
        got = [r[name] for r in rows]
        if name == "u64":
            got = [None if v is None else int(v) for v in got]
        if name == "bv":
            got = [None if v is None else bytes(v) for v in got]
        assert got == want, (name, got, want)
    # A filter on a widened column gives the rows it names (Spark applies it: its literal is of
    # Spark's type, not the stored one).
    assert sorted(r["id"] for r in df.where("u8 > 100 AND u64 > 2").collect()) == [1, 2]


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
