"""Spark, Dask and Ray reading and writing quiver tables: real engines, real servers.

Each engine starts once for this module (Spark ``local[2]``, a Dask
``distributed.LocalCluster`` of two worker processes, Ray with 2 CPUs) and is
shut down at its end. The servers are fresh per test.
"""

from __future__ import annotations

import datetime
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import quiver
from engine_helpers import (
    check_a_failed_spark_write_publishes_nothing,
    check_spark_reads_types_it_lacks,
    mixed_table,
    spark_view,
    staging_left,
    types_spark_lacks,
)
from server_process import Server

pyspark = pytest.importorskip("pyspark", reason="pip install 'quiver-client[spark]'")
dask_dataframe = pytest.importorskip("dask.dataframe", reason="pip install 'quiver-client[dask]'")
distributed = pytest.importorskip("distributed", reason="pip install 'quiver-client[dask]'")
ray = pytest.importorskip("ray", reason="pip install 'quiver-client[ray]'")

import quiver.dask  # noqa: E402
import quiver.ray  # noqa: E402
import quiver.spark  # noqa: E402
import quiver.splits  # noqa: E402

STAGING = ".quiver-staging/"


# -- Spark -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("quiver-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    quiver.spark.register(session)
    yield session
    session.stop()


def test_spark_reads_one_partition_per_endpoint_with_every_type(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    table = mixed_table(2000)
    client.put("trips", table, partitions=3)
    df = spark.read.format("quiver").option("uri", uri).load("trips")
    assert df.rdd.getNumPartitions() == 3
    got = df.toArrow()
    assert got.equals(spark_view(table))


def test_spark_pushes_filters_and_columns_to_the_server(
    spark: Any, client: quiver.Client, uri: str, server: Server
) -> None:
    table = mixed_table(2000)
    client.put("trips", table, partitions=2)
    df = (
        spark.read.format("quiver")
        .option("uri", uri)
        .schema("id long, fare double")
        .load("trips")
        .where("id >= 1500 AND fare < 1000")
    )
    got = df.toArrow()
    assert got.column_names == ["id", "fare"]
    assert 'columns=["id","fare"]' in server.log(), server.log()[-3000:]
    assert sorted(got["id"].to_pylist()) == list(range(1500, 2000))
    log = server.log()
    assert "DoGet pushdown" in log, log[-3000:]
    assert 'id\\" >= 1500' in log and 'fare\\" < 1000' in log, log[-3000:]


def test_spark_pushes_timestamp_filters_as_instants(
    spark: Any, client: quiver.Client, uri: str, server: Server
) -> None:
    # 18:00 in New York is 23:00 UTC: the pushed filter must compare instants,
    # whatever the session's zone and the column's (Europe/Paris here).
    table = mixed_table(10_000)
    client.put("trips", table, partitions=2)
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        df = spark.read.format("quiver").option("uri", uri).load("trips")
        count = df.where("at < timestamp'2023-11-14 18:00:00'").count()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    cut = pa.scalar(datetime.datetime(2023, 11, 14, 23, 0), pa.timestamp("us", "UTC"))
    want = pc.sum(pc.less(table["at"].cast(pa.timestamp("us", "UTC")), cut)).as_py()
    assert count == want == 2800
    assert "DoGet pushdown" in server.log() and "2023-11-14T23:00:00Z" in server.log()


def test_spark_reads_types_it_lacks_widened(spark: Any, client: quiver.Client, uri: str) -> None:
    client.put("wide", types_spark_lacks(), partitions=2)
    check_spark_reads_types_it_lacks(spark.read.format("quiver").option("uri", uri).load("wide"))


def test_spark_reads_a_query(spark: Any, client: quiver.Client, uri: str) -> None:
    client.put("trips", mixed_table(2000))
    df = (
        spark.read.format("quiver")
        .option("uri", uri)
        .option("query", "SELECT vendor, count(*) AS n FROM trips GROUP BY vendor")
        .load()
    )
    counts = {r["vendor"]: r["n"] for r in df.collect()}
    assert counts == {"a": 500, "b": 500, "c": 500, None: 500}


def test_spark_writes_overwrite_and_append_atomically(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    table = mixed_table(2000)
    client.put("trips", table, partitions=4)
    df = spark.read.format("quiver").option("uri", uri).load("trips")
    df.write.format("quiver").option("uri", uri).mode("overwrite").save("copy")
    copy = client.get("copy")
    assert copy.sort_by("id").equals(spark_view(table))
    df.where("id < 100").write.format("quiver").option("uri", uri).mode("append").save("copy")
    assert client.info("copy").num_rows == 2100
    assert client.list_tables(STAGING) == []


def test_a_failed_spark_job_publishes_nothing(spark: Any, client: quiver.Client, uri: str) -> None:
    check_a_failed_spark_write_publishes_nothing(spark, client, uri)


def test_spark_fails_over_between_two_servers(
    spark: Any, replicas: tuple[list[Server], str]
) -> None:
    servers, planner = replicas
    df = spark.read.format("quiver").option("uri", planner).load("trips")
    servers[1].stop()
    assert df.count() == 10_000
    assert df.where("id < 10").count() == 10


# -- Dask ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def test_dask_reads_a_table_with_columns_and_filters(
    dask_client: Any, client: quiver.Client, uri: str, server: Server
) -> None:
    table = mixed_table(2000)
    client.put("trips", table, partitions=4)
    ddf = quiver.dask.read_table(uri, "trips")
    assert ddf.npartitions == 4
    assert pa.Table.from_pandas(ddf.compute(), preserve_index=False).num_rows == 2000
    fares = quiver.dask.read_table(
        uri, "trips", columns=["id", "fare"], filters=[("id", "<", 100)]
    ).compute()
    assert list(fares.columns) == ["id", "fare"]
    assert sorted(fares["id"]) == list(range(100))
    assert 'id\\" < 100' in server.log()


def test_dask_reads_sql(dask_client: Any, client: quiver.Client, uri: str) -> None:
    client.put("trips", mixed_table(2000))
    ddf = quiver.dask.read_sql(uri, "SELECT id FROM trips WHERE id % 2 = 0")
    assert sorted(ddf.compute()["id"]) == list(range(0, 2000, 2))


def test_dask_writes_partitions_atomically(
    dask_client: Any, client: quiver.Client, uri: str, server: Server
) -> None:
    table = mixed_table(2000)
    client.put("trips", table, partitions=4)
    ddf = quiver.dask.read_table(uri, "trips", columns=["id", "fare"])
    result = quiver.dask.to_quiver(ddf, uri, "copy")
    assert result.rows == 2000
    # Each partition was staged through shared memory (the server is on this host).
    staged_by_shm = re.findall(r'shm put .* table="\.quiver-staging/', server.log())
    assert len(staged_by_shm) >= 4, server.log()[-3000:]
    assert client.get("copy").equals(table.select(["id", "fare"]))
    quiver.dask.to_quiver(ddf, uri, "copy", mode="append")
    assert client.info("copy").num_rows == 4000
    assert client.list_tables(STAGING) == []


def test_a_failed_dask_write_publishes_nothing(
    dask_client: Any, client: quiver.Client, uri: str
) -> None:
    before = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    client.put("target", before)
    ddf = dask_dataframe.from_dict({"x": list(range(1000))}, npartitions=4)

    def fail_one(part: Any) -> Any:
        if 700 in set(part["x"]):
            raise RuntimeError("a partition fails")
        return part

    with pytest.raises(RuntimeError, match="a partition fails"):
        quiver.dask.to_quiver(ddf.map_partitions(fail_one, meta=ddf._meta), uri, "target")
    assert client.get("target").equals(before)
    assert staging_left(client) == []


# -- Ray -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def test_ray_reads_one_task_per_endpoint_and_prunes_columns(
    ray_session: None, client: quiver.Client, uri: str, server: Server
) -> None:
    table = mixed_table(2000)
    client.put("trips", table, partitions=4)
    ds = quiver.ray.read_table(uri, "trips")
    # One block per endpoint: Ray does not cut the splits further.
    assert len(ds.to_arrow_refs()) == 4
    assert ds.count() == 2000
    assert ds.sum("id") == sum(range(2000))
    # Over gRPC, so that the server's log shows the columns it was asked for (a
    # split read through shared memory is projected here, without a copy).
    grpc = quiver.splits.Connection(uri, transport="grpc")
    narrow = quiver.ray.read_table(grpc, "trips").select_columns(["fare"])
    assert narrow.schema().names == ["fare"]
    assert sorted(r["fare"] for r in narrow.take_all()) == table["fare"].to_pylist()
    assert 'columns=["fare"]' in server.log(), server.log()[-3000:]
    filtered = quiver.ray.read_table(uri, "trips", filters=[("id", ">=", 1990)])
    assert sorted(r["id"] for r in filtered.take_all()) == list(range(1990, 2000))


def test_ray_writes_atomically(ray_session: None, client: quiver.Client, uri: str) -> None:
    table = mixed_table(2000).select(["id", "fare", "amount"])
    client.put("trips", table, partitions=4)
    ds = quiver.ray.read_table(uri, "trips")
    result = quiver.ray.write_table(ds, uri, "copy")
    assert result.rows == 2000
    assert client.get("copy").sort_by("id").equals(table)
    assert client.list_tables(STAGING) == []


def test_a_failed_ray_write_publishes_nothing(
    ray_session: None, client: quiver.Client, uri: str
) -> None:
    before = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    client.put("target", before)

    def fail_one(batch: dict[str, Any]) -> dict[str, Any]:
        if 700 in set(batch["id"].tolist()):
            raise RuntimeError("a block fails")
        return batch

    ds = ray.data.range(1000, override_num_blocks=4).map_batches(fail_one)
    with pytest.raises(Exception, match="a block fails"):
        quiver.ray.write_table(ds, uri, "target")
    assert client.get("target").equals(before)
    assert staging_left(client) == []
