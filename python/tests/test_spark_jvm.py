"""quiver's JVM Spark connector (``java/spark``) in a real Spark 4, ``local[2]``, from PySpark.

``scripts/setup-spark-jvm.sh`` builds the connector's one jar with its Maven build
(``java/spark/pom.xml``: what Spark lacks of Arrow Flight's Java client shaded into it)
against PySpark's own jars, into a cache outside the repository, and installs it in the
local Maven repository; this module's Spark session takes that jar as ``spark.jars``, and
does not register the Python connector: ``format("quiver")`` is the JVM source found
through its ``META-INF/services`` entry. One test loads it by its coordinates instead
(``spark.jars.packages``), as users install connectors.

With ``CI=true`` a machine where the connector cannot be built fails the tests; elsewhere
they are skipped when there is no JDK or Maven (``scripts/setup-java.sh --spark`` installs
both).
"""

from __future__ import annotations

import datetime
import decimal
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pytest

import quiver
import quiver.spark
from cluster_helpers import NODES, Cluster, Etcd, wait_until
from engine_helpers import (
    check_a_failed_spark_write_publishes_nothing,
    check_spark_reads_types_it_lacks,
    mixed_table,
    spark_view,
    types_spark_lacks,
)
from metrics_helpers import scrape, value
from quiver import splits
from security_helpers import PASSWORDS, make_certs, make_users
from server_process import REPO, Server, ServerFactory

SETUP = REPO / "scripts" / "setup-spark-jvm.sh"
SETUP_TIMEOUT_S = 600.0


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def java_cache() -> Path:
    configured = os.environ.get("QUIVER_JAVA_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "quiver" / "java"


@pytest.fixture(scope="module")
def jars() -> str:
    """``spark.jars``: the connector's jar, with the Flight client's classes Spark lacks."""
    done = subprocess.run(
        ["bash", str(SETUP), sys.executable],
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT_S,
        check=False,
    )
    output = f"{done.stdout}{done.stderr}"
    if done.returncode != 0:
        if not in_ci() and ("no javac" in output or "no Maven" in output):
            pytest.skip(f"the JVM connector cannot be built here: {output.strip()}")
        pytest.fail(f"{SETUP} exited with {done.returncode}:\n{output}", pytrace=False)
    return (java_cache() / "spark" / "jars.txt").read_text().strip()


def end_jvm() -> None:
    """End the JVM PySpark launched in this process, if any: the next session launches its
    own. A JVM takes ``spark.jars`` when it starts; one that earlier tests started (with
    the Python connector) would not see the connector's jar, and one started here must
    not give later tests the JVM source in place of the Python one."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        proc.kill()
        proc.wait(timeout=60)
    SparkContext._gateway = None
    SparkContext._jvm = None


@pytest.fixture(scope="module")
def spark(jars: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    # CREATE TABLE keeps its catalog entry in a warehouse: a temporary one, not the cwd's.
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    end_jvm()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("quiver-jvm-tests")
        .config("spark.jars", jars)
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    end_jvm()


def read(spark: Any, uri: str, table: str, schema: str | None = None, **options: str) -> Any:
    reader = spark.read.format("quiver").option("uri", uri)
    if schema is not None:
        reader = reader.schema(schema)
    for key, setting in options.items():
        reader = reader.option(key, setting)
    return reader.load(table)


def test_the_jvm_source_reads_one_columnar_partition_per_endpoint_with_every_type(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    table = mixed_table(2000)
    client.put("trips", table, partitions=3)
    # PySpark's register() sees the JVM source and leaves it in place.
    assert quiver.spark.jvm_source_loaded(spark)
    quiver.spark.register(spark)
    df = read(spark, uri, "trips")
    assert df.rdd.getNumPartitions() == 3
    plan = df._jdf.queryExecution().executedPlan().toString()
    # Batches go to Spark as columns: no Python worker, no rows until Spark makes them.
    assert "BatchScan" in plan and "quiver table 'trips'" in plan, plan
    assert "ColumnarToRow" in plan and "PythonDataSource" not in plan, plan
    got = df.toArrow()
    assert got.sort_by("id").equals(spark_view(table)), got.schema


def assert_same_rows(got: pa.Table, table: pa.Table) -> None:
    """Assert that ``got`` holds ``table``'s rows in its order, column by column (dictionaries
    decoded); a difference is named by its first row (pytest's diff of two long lists of
    values takes minutes)."""
    assert got.num_rows == table.num_rows
    for name in table.column_names:
        want, have = table[name].to_pylist(), got[name].to_pylist()
        wrong = [i for i, (w, h) in enumerate(zip(want, have, strict=True)) if w != h]
        if wrong:
            first = wrong[0]
            pytest.fail(
                f"column {name!r}: {len(wrong)} of {len(want)} rows differ; row {first} is "
                f"{have[first]!r}, not {want[first]!r}",
                pytrace=False,
            )


def direct_types(batches: int = 6, rows: int = 700) -> pa.Table:
    """Every type the JVM source reads from the Arrow buffers' memory itself, in several
    batches whose values and nulls differ (the first batch has none): a reader that kept a
    batch's addresses past it, or read a null as a value, gives other rows back."""
    parts = []
    for b in range(batches):
        ids = list(range(b * rows, (b + 1) * rows))
        present = [b == 0 or (i + b) % 7 != 0 for i in ids]

        def column(values: list[Any], kind: pa.DataType, present: list[bool] = present) -> pa.Array:
            return pa.array([v if p else None for v, p in zip(values, present, strict=True)], kind)

        day = datetime.date(2024, 1, 1)
        parts.append(
            pa.record_batch(
                {
                    "id": pa.array(ids, pa.int64()),
                    "flag": column([i % 3 == 0 for i in ids], pa.bool_()),
                    "i8": column([i % 127 - 60 for i in ids], pa.int8()),
                    "i16": column([i % 30_000 - 15_000 for i in ids], pa.int16()),
                    "i32": column([i * 7 - 1_000 for i in ids], pa.int32()),
                    "i64": column([i * 1_000_003 - 2**40 for i in ids], pa.int64()),
                    "f32": column([i / 4 for i in ids], pa.float32()),
                    "f64": column([i / 3 for i in ids], pa.float64()),
                    "day": column([day + datetime.timedelta(days=i) for i in ids], pa.date32()),
                    "local": column([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us")),
                    "zoned": column(
                        [1_700_000_000_000_000 - i for i in ids], pa.timestamp("us", "UTC")
                    ),
                    "small_decimal": column(
                        [decimal.Decimal(i * 37 - 500) / 100 for i in ids], pa.decimal128(10, 2)
                    ),
                    "big_decimal": column(
                        [decimal.Decimal(i) * 10**20 + 1 for i in ids], pa.decimal128(30, 4)
                    ),
                    "text": column([f"row {i}" * (i % 4) for i in ids], pa.string()),
                    "large_text": column([f"é{i}" for i in ids], pa.large_string()),
                    "data": column([bytes([i % 256]) * (i % 5) for i in ids], pa.binary()),
                    "large_data": column([str(i).encode() for i in ids], pa.large_binary()),
                }
            )
        )
    return pa.Table.from_batches(parts)


def with_nested(table: pa.Table) -> pa.Table:
    """``table`` (with an ``id`` column) and a list and a struct column, batches kept."""
    ids = table["id"]
    tags = pa.array([[f"t{i % 3}"] * (i % 3) for i in ids.to_pylist()], pa.list_(pa.string()))
    point = pa.StructArray.from_arrays(
        [ids.combine_chunks(), pc.negate(ids).combine_chunks()], names=["x", "y"]
    )
    return table.append_column("tags", tags).append_column("point", point)


def test_the_jvm_source_reads_nested_columns_batch_after_batch(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    """Spark closes a batch's columns when it has read them: a struct's must not take the
    vector the next batch is loaded into with it (its children gone, the load failed)."""
    table = with_nested(direct_types())
    client.put("nested", table, partitions=2)
    got = read(spark, uri, "nested").toArrow().sort_by("id")
    columns = ["id", "tags", "point"]
    assert_same_rows(got.select(columns), table.select(columns))


def test_the_jvm_source_reads_each_batch_of_every_direct_type(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    table = direct_types()
    client.put("direct", table, partitions=2)
    df = read(spark, uri, "direct")
    got = df.toArrow().sort_by("id")
    assert_same_rows(got, table)
    # Spark's own operators over the values: a filter and sums.
    odd = df.where("i32 % 2 = 1 AND flag").count()
    assert odd == sum(
        1
        for i32, flag in zip(table["i32"].to_pylist(), table["flag"].to_pylist(), strict=True)
        # Spark's remainder takes the dividend's sign.
        if i32 is not None and i32 > 0 and i32 % 2 == 1 and flag
    )
    sums = df.selectExpr("sum(i64)", "sum(small_decimal)", "count(text)").collect()[0]
    assert sums[0] == sum(v for v in table["i64"].to_pylist() if v is not None)
    assert sums[1] == sum(v for v in table["small_decimal"].to_pylist() if v is not None)
    assert sums[2] == table.num_rows - table["text"].null_count


def test_the_jvm_source_pushes_columns_and_filters_to_the_server(
    spark: Any, client: quiver.Client, uri: str, server: Server
) -> None:
    table = mixed_table(2000)
    client.put("trips", table, partitions=2)
    df = read(spark, uri, "trips").where("id >= 1500 AND fare < 1000").select("id", "fare")
    got = df.toArrow()
    assert got.column_names == ["id", "fare"]
    assert sorted(got["id"].to_pylist()) == list(range(1500, 2000))
    log = server.log()
    assert 'columns=["id","fare"]' in log, log[-3000:]
    assert 'id\\" >= 1500' in log and 'fare\\" < 1000' in log, log[-3000:]
    # What quiver cannot apply (arithmetic here) stays with Spark, and the answer is whole.
    odd = read(spark, uri, "trips").where("id % 2 = 1 AND vendor = 'a'").count()
    assert odd == sum(1 for i in range(2000) if i % 2 == 1 and i % 4 == 0)
    assert read(spark, uri, "trips").where("vendor IN ('b', 'c')").count() == 1000
    assert read(spark, uri, "trips").count() == 2000


def test_the_jvm_source_pushes_dates_and_timestamps_as_such(
    spark: Any, client: quiver.Client, uri: str, server: Server
) -> None:
    # 18:00 in New York is 23:00 UTC: the pushed filter must compare instants, whatever
    # the session's zone and the column's (Europe/Paris here). A date is a date, not the
    # number of days Spark holds it as.
    table = mixed_table(10_000)
    first = datetime.date(2024, 1, 1)
    days = pa.array([first + datetime.timedelta(days=i % 10) for i in range(10_000)])
    client.put("trips", table.append_column("day", days), partitions=2)
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        df = read(spark, uri, "trips")
        at = df.where("at < timestamp'2023-11-14 18:00:00'").count()
        day = df.where("day >= date'2024-01-08'").count()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert at == 2800
    assert day == 3000
    log = server.log()
    assert "2023-11-14T23:00:00Z" in log, log[-3000:]
    assert "CAST('2024-01-08' AS DATE)" in log, log[-3000:]


def test_the_jvm_source_reads_types_spark_lacks_widened(
    spark: Any, client: quiver.Client, uri: str, server: Server
) -> None:
    client.put("wide", types_spark_lacks(), partitions=2)
    # Over gRPC, whatever the JVM: the server logs what each DoGet was asked.
    check_spark_reads_types_it_lacks(read(spark, uri, "wide", transport="grpc"))
    # The filter on widened columns stayed with Spark.
    log = server.log().splitlines()
    filters = [line.partition(" filter=")[2] for line in log if "DoGet pushdown" in line]
    assert filters and not any("u8" in f or "u64" in f for f in filters), filters


def test_the_jvm_source_reads_a_query_with_columns_and_filters_around_it(
    spark: Any, client: quiver.Client, uri: str, server: Server
) -> None:
    client.put("trips", mixed_table(2000), partitions=2)
    query = "SELECT vendor, count(*) AS n, sum(id) AS s FROM trips GROUP BY vendor"
    df = spark.read.format("quiver").option("uri", uri).option("query", query).load()
    assert df.schema.simpleString() == "struct<vendor:string,n:bigint,s:bigint>"
    counts = {r["vendor"]: (r["n"], r["s"]) for r in df.collect()}
    assert counts == {v: (500, sum(range(i, 2000, 4))) for i, v in enumerate(["a", "b", "c", None])}
    # Spark's columns and filter go around the query, to the server.
    got = df.where("vendor = 'b'").select("s").collect()
    assert [r["s"] for r in got] == [sum(range(1, 2000, 4))]
    log = server.log()
    assert 'SELECT \\"s\\" FROM (' + query + ") AS q WHERE " in log, log[-3000:]
    assert "\\\"vendor\\\" = 'b'" in log, log[-3000:]
    # In Spark SQL too; a query's result cannot be written.
    spark.sql(f"CREATE TABLE by_vendor USING quiver OPTIONS (uri '{uri}', query '{query}')")
    try:
        [row] = spark.sql("SELECT sum(n) AS n FROM by_vendor").collect()
        assert row["n"] == 2000
    finally:
        spark.sql("DROP TABLE by_vendor")
    both = spark.read.format("quiver").option("uri", uri).option("query", query)
    with pytest.raises(Exception, match=r"(?i)not both"):
        both.option("table", "trips").load()
    with pytest.raises(Exception, match=r"(?i)write"):
        df.write.format("quiver").option("uri", uri).option("query", query).mode("append").save()


def test_the_jvm_source_fails_over_between_two_servers(
    spark: Any, replicas: tuple[list[Server], str]
) -> None:
    servers, planner = replicas
    df = read(spark, planner, "trips")
    servers[1].stop()
    assert df.count() == 10_000
    assert df.where("id < 10").count() == 10


def test_the_jvm_source_logs_in_and_names_what_it_cannot_read(
    spark: Any, start_quiver: ServerFactory, tmp_path: Path
) -> None:
    users, tokens = make_users(tmp_path)
    server = start_quiver("--users", str(users))
    points = pa.array([{"u": 7}, {"u": 8}, {"u": 9}], pa.struct([("u", pa.uint32())]))
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "n": points})
    with quiver.connect(server.uri, username="writer", password=PASSWORDS["writer"]) as c:
        c.put("t", table)
    as_reader = {"username": "reader", "password": PASSWORDS["reader"]}
    # The schema given selects the columns (the ticket carries them).
    got = read(spark, server.uri, "t", "id long", **as_reader).toArrow()
    assert got["id"].to_pylist() == [1, 2, 3]
    got = read(spark, server.uri, "t", "id long", token=tokens["reader"]).toArrow()
    assert got["id"].to_pylist() == [1, 2, 3]
    with pytest.raises(Exception, match=r"(?i)unauthenticated"):
        read(spark, server.uri, "t", "id long", username="reader", password="wrong").count()
    # Spark has no unsigned integers, and the connector widens top-level columns only: the
    # error names the column, at load.
    with pytest.raises(Exception, match="column 'n'"):
        read(spark, server.uri, "t", **as_reader)


def test_the_jvm_source_writes_overwrite_and_append_atomically(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    table = mixed_table(2000)
    client.put("trips", table, partitions=4)
    df = read(spark, uri, "trips")
    df.write.format("quiver").option("uri", uri).mode("overwrite").save("copy")
    assert client.get("copy").sort_by("id").equals(spark_view(table))
    df.where("id < 100").write.format("quiver").option("uri", uri).mode("append").save("copy")
    assert client.info("copy").num_rows == 2100
    df.where("id < 10").write.format("quiver").option("uri", uri).mode("overwrite").save("copy")
    assert sorted(client.get("copy")["id"].to_pylist()) == list(range(10))
    assert client.list_tables(".quiver-staging/") == []
    # An append needs its target, and says so before any task runs.
    with pytest.raises(Exception, match="missing"):
        df.write.format("quiver").option("uri", uri).mode("append").save("missing")


def test_the_jvm_source_sends_each_task_to_the_cluster_node_that_keeps_it(
    spark: Any, cluster: Cluster
) -> None:
    """On a cluster, task i of a write puts to node i modulo the nodes (the ``nodes``
    action), which keeps the first copy of its rows (``"place": "here"``)."""
    # Rebalancing may move a first copy once the table is published: off, to see
    # where the puts placed them.
    cluster.rebalance(on=False)
    uri = cluster.uri("n1")
    spark.range(0, 6_000, numPartitions=6).write.format("quiver").option("uri", uri).mode(
        "overwrite"
    ).save("spread")
    with cluster.client("n2") as c:
        assert sorted(c.get("spread")["id"].to_pylist()) == list(range(6_000))
        assert c.list_tables(".quiver-staging/") == []
    client = cluster.flight_client("n3")
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_path("spread"))
    finally:
        client.close()
    nodes = [cluster.uri(n) for n in sorted(NODES)]
    firsts = [e.locations[0].uri.decode() for e in info.endpoints]
    assert firsts == [nodes[i % 3] for i in range(6)]


def test_the_jvm_source_writes_every_direct_type_batch_by_batch(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    # One task of 84,000 rows: a full batch of 65,536 and a second one written into the same
    # vectors, whose strings outgrow their first data buffer. Decimals of more than 18 digits
    # would take Spark's own writer: left out.
    table = direct_types(batches=12, rows=7_000).drop_columns(["big_decimal"])
    client.put("direct", table, partitions=1)
    df = read(spark, uri, "direct")
    df.write.format("quiver").option("uri", uri).mode("overwrite").save("copy")
    got = client.get("copy").sort_by("id")
    assert_same_rows(got, table)
    # A table an empty overwrite made has the schema written rows have, and takes them.
    df.limit(0).write.format("quiver").option("uri", uri).mode("overwrite").save("empty")
    assert client.get("empty").schema == got.schema
    df.write.format("quiver").option("uri", uri).mode("append").save("empty")
    assert client.info("empty").num_rows == table.num_rows


def test_a_failed_jvm_write_job_publishes_nothing(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    check_a_failed_spark_write_publishes_nothing(spark, client, uri)


def test_spark_sql_reads_a_quiver_table_it_was_told_of(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    client.put("trips", mixed_table(2000), partitions=2)
    spark.sql(f"CREATE TABLE sql_trips USING quiver OPTIONS (uri '{uri}', table 'trips')")
    try:
        [row] = spark.sql(
            "SELECT count(*) AS n, sum(id) AS s FROM sql_trips WHERE vendor = 'a'"
        ).collect()
    finally:
        spark.sql("DROP TABLE sql_trips")
    assert (row["n"], row["s"]) == (500, sum(range(0, 2000, 4)))


def test_a_java_spark_job_reads_and_writes_quiver_tables(
    jars: str, client: quiver.Client, uri: str
) -> None:
    """A job in Java (java/spark/src/test/java/quiver/spark/JavaJob.java), submitted with
    ``spark-submit --jars`` as a Java or Scala user runs one: its own JVM, no Python."""
    import pyspark

    client.put("trips", mixed_table(1000), partitions=3)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    job = java_cache() / "spark" / "quiver-spark-tests.jar"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_"))}
    command = [str(submit), "--jars", jars, "--class", "quiver.spark.JavaJob", str(job)]
    done = subprocess.run(
        [*command, uri, "trips", "copy"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert "quiver-java-job rows=1000 from500=500 partitions=3" in done.stdout, done.stdout
    assert sorted(client.get("copy")["id"].to_pylist()) == list(range(100))


def copy_job(jars: str, java_home: Path, uri: str, table: str, copy: str, transport: str) -> str:
    """Run java/spark/src/test/java/quiver/spark/CopyJob.java with ``spark-submit`` on the
    JDK at ``java_home``; return what it printed."""
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    job = java_cache() / "spark" / "quiver-spark-tests.jar"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_"))}
    env["JAVA_HOME"] = str(java_home)
    done = subprocess.run(
        [str(submit), "--jars", jars, "--driver-java-options", "--enable-native-access=ALL-UNNAMED",
         "--class", "quiver.spark.CopyJob", str(job), uri, table, copy, transport],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    return done.stdout


@pytest.fixture(scope="module")
def java_home(jars: str) -> Path:
    """The JDK 22+ ``scripts/setup-spark-jvm.sh`` compiled the connector's shared-memory part
    with, and records: a Spark to run on it.

    Skipped, with ``CI=true`` too, on a machine with none: no registry this test command
    installs from offers one that runs Spark 4 (the script says why).
    """
    recorded = java_cache() / "spark" / "java22-home"
    if not recorded.is_file():
        pytest.skip(
            "no JDK 22+ on this machine (JAVA22_HOME, JAVA_HOME, /usr/lib/jvm): the JVM "
            "connector reads over gRPC only"
        )
    return Path(recorded.read_text().strip())


def check_a_shared_memory_copy(
    jars: str, java_home: Path, server: Server, table: pa.Table, partitions: int
) -> None:
    """Put ``table`` in ``partitions`` endpoints, copy it with a Java 22 job reading with
    ``transport`` ``shm``, and check the copy's rows, its count, and that the server served
    one ShmGet per endpoint and read, and no DoGet (its metrics)."""
    metrics = server.metrics_url()
    with quiver.connect(server.uri) as client:
        client.put("source", table, partitions=partitions)
        before = scrape(metrics)
        out = copy_job(jars, java_home, server.uri, "source", "copy", "shm")
        after = scrape(metrics)
        # The count reads no column: the endpoints' row ranges alone, nothing cut.
        expected = rf"quiver-copy-job java=\d+ partitions={partitions} rows={table.num_rows}\b"
        assert re.search(expected, out), out
        shm_gets = value(after, "quiver_rpcs_total", method="ShmGet", code="OK") - value(
            before, "quiver_rpcs_total", method="ShmGet", code="OK"
        )
        assert shm_gets == 2 * partitions  # one per endpoint, for the copy and for the count
        assert value(after, "quiver_rpcs_total", method="DoGet") == value(
            before, "quiver_rpcs_total", method="DoGet"
        )
        got = client.get("copy").sort_by("id")
    assert_same_rows(got, table)


def test_a_java_22_job_reads_every_type_through_shared_memory(
    jars: str, java_home: Path, start_quiver: ServerFactory
) -> None:
    """On Java 22+, a same-host read maps the server's memfds: the rows Spark sees are the
    table's, cut into the endpoints' row ranges (4 endpoints over batches of 700 rows: every
    endpoint starts inside a batch), and the server served them without one DoGet."""
    server = start_quiver("--metrics-listen", "127.0.0.1:0")
    check_a_shared_memory_copy(jars, java_home, server, with_nested(direct_types()), 4)


def test_a_java_22_job_reads_dictionary_columns_through_shared_memory(
    jars: str, java_home: Path, start_quiver: ServerFactory
) -> None:
    """Dictionary-encoded columns are mapped too: their dictionary batches, loaded in stream
    order, decode the record batches after them. Each batch here has dictionaries of its own
    (the stream replaces them), and 3 endpoints over 4 batches of 500 rows start inside
    batches, whose dictionaries come before the endpoint's first row."""
    batches = []
    for b in range(4):
        ids = list(range(b * 500, (b + 1) * 500))
        words = [f"w{b}-{i % 5}" if i % 9 else None for i in ids]
        codes = [(i * 7 + b) % 11 for i in ids]
        batches.append(
            pa.record_batch(
                {
                    "id": pa.array(ids, pa.int64()),
                    "word": pa.array(words, pa.string()).dictionary_encode(),
                    "code": pa.array(codes, pa.int64()).dictionary_encode(),
                }
            )
        )
    server = start_quiver("--metrics-listen", "127.0.0.1:0")
    check_a_shared_memory_copy(jars, java_home, server, pa.Table.from_batches(batches), 3)


def test_a_java_22_job_reads_a_cluster_table_through_its_nodes_shared_memory(
    jars: str, java_home: Path, etcd: Etcd, tmp_path: Path
) -> None:
    """Three nodes on this host: each endpoint (a partition) is mapped from a node that holds
    a copy of it, found through that node's GetFlightInfo; no node serves a DoGet of one."""
    nodes = Cluster(etcd, tmp_path)
    for node_id in NODES:
        nodes.start(node_id, shm=True)
    stopped = False
    try:
        wait_until("three live nodes", lambda: len(nodes.status()["nodes"]) == 3)  # type: ignore[arg-type]
        table = with_nested(direct_types())
        with nodes.client("n1") as c:
            c.put("wide", table, partitions=6)
        out = copy_job(jars, java_home, nodes.uri("n2"), "wide", "copy", "shm")
        expected = rf"quiver-copy-job java=\d+ partitions=6 rows={table.num_rows}\b"
        assert re.search(expected, out), out
        with nodes.client("n2") as c:
            got = c.get("copy").sort_by("id")
        # The control: one split of the table read by DoGet, which its node logs.
        plan = splits.plan_read(nodes.connection("n2", transport="grpc"), "wide")
        assert sum(b.num_rows for b in splits.read_split(plan, plan.splits[0])) > 0
        failures = nodes.stop_all()  # every RPC has logged its line once the nodes are down
        stopped = True
        assert failures == []
        partition_gets = [
            line
            for n in NODES
            for line in nodes.nodes[n].log().splitlines()
            if "DoGet" in line and ".quiver-part/wide#" in line
        ]
        assert len(partition_gets) == 1, partition_gets
    finally:
        if not stopped:
            nodes.stop_all()
    assert_same_rows(got, table)


def test_the_jvm_source_says_what_shared_memory_needs(
    spark: Any, client: quiver.Client, uri: str
) -> None:
    """On the Java of the test command (17), ``transport="shm"`` fails naming Java 22;
    ``"auto"`` reads over gRPC."""
    client.put("trips", mixed_table(100), partitions=2)
    if int(spark.sparkContext._jvm.java.lang.Runtime.version().feature()) >= 22:
        pytest.skip("this Spark runs on Java 22+, which reads shared memory")
    with pytest.raises(Exception, match="needs Java 22 or newer"):
        read(spark, uri, "trips", transport="shm").count()
    assert read(spark, uri, "trips", transport="auto").count() == 100
    with pytest.raises(Exception, match='"auto", "shm" or "grpc"'):
        read(spark, uri, "trips", transport="udp").count()


def test_a_scala_spark_shell_job_reads_and_writes_quiver_tables(
    jars: str, client: quiver.Client, uri: str
) -> None:
    """A Scala script (java/spark/src/test/scala/job.scala) run by ``spark-shell -i``, as a
    Scala user runs one: the connector from Scala, in a JVM of its own."""
    import pyspark

    client.put("trips", mixed_table(1000), partitions=3)
    shell = Path(pyspark.__file__).parent / "bin" / "spark-shell"
    script = REPO / "java" / "spark" / "src" / "test" / "scala" / "job.scala"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_"))}
    env["QUIVER_URI"] = uri
    done = subprocess.run(
        [str(shell), "--master", "local[2]", "--jars", jars, "--conf", "spark.ui.enabled=false",
         "-i", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    assert "quiver-scala-job rows=1000 from500=500 partitions=3" in done.stdout, done.stdout
    assert sorted(client.get("copy")["id"].to_pylist()) == list(range(100))


def test_the_jvm_source_reads_and_writes_over_mutual_tls(
    spark: Any, start_quiver: ServerFactory, tmp_path: Path
) -> None:
    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    (tmp_path / "users").mkdir()
    users, _ = make_users(tmp_path / "users")
    server = start_quiver(
        "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
        "--tls-client-ca", str(certs.ca), "--users", str(users),
    )  # fmt: skip
    assert server.uri.startswith("grpc+tls://")
    tls = {
        "tls_root_certs": str(certs.ca),
        "cert_chain": str(certs.client_cert),
        "private_key": str(certs.client_key),
        "username": "writer",
        "password": PASSWORDS["writer"],
    }
    table = mixed_table(500)
    with quiver.connect(
        server.uri,
        tls_root_certs=certs.ca.read_bytes(),
        cert_chain=certs.client_cert.read_bytes(),
        private_key=certs.client_key.read_bytes(),
        username="writer",
        password=PASSWORDS["writer"],
    ) as c:
        c.put("t", table, partitions=2)
        df = read(spark, server.uri, "t", **tls)
        assert df.where("id < 100").count() == 100
        writer = df.write.format("quiver").option("uri", server.uri)
        for key, value in tls.items():
            writer = writer.option(key, value)
        writer.mode("overwrite").save("copy")
        assert c.get("copy").sort_by("id").equals(spark_view(table))
    # Without the client certificate, the server turns the connection away.
    no_cert = {k: v for k, v in tls.items() if k not in ("cert_chain", "private_key")}
    with pytest.raises(Exception, match=r"(?i)unavailable|handshake|certificate"):
        read(spark, server.uri, "t", "id long", **no_cert).count()


# Classes the jar must not hold at their own names: relocated, or Spark's.
NOT_IN_THE_JAR = (
    "io/grpc/",
    "com/google/protobuf/",
    "org/apache/arrow/",
    "io/netty/",
    "io/perfmark/",
    "com/google/common/",
    "com/fasterxml/",
    "org/apache/spark/",
    "scala/",
)


def test_the_connector_jar_keeps_what_it_shades_relocated(jars: str) -> None:
    """``mvn -f java/spark package`` makes one jar: the connector, and gRPC, protobuf and
    Flight relocated under ``quiver/shaded/`` (no class at its own name to clash with a
    user's or Spark's); none of what Spark ships (Arrow's vectors and memory, Netty, Guava,
    Jackson), whose Arrow vectors Spark's ArrowColumnVector reads. The pom installed beside
    it asks for nothing at run time, so ``--packages`` fetches no other jar."""
    import zipfile

    (jar,) = jars.split(",")
    with zipfile.ZipFile(jar) as archive:
        names = archive.namelist()
        services = {
            name: archive.read(name).decode()
            for name in names
            if name.startswith("META-INF/services/") and not name.endswith("/")
        }
    assert "quiver/spark/QuiverDataSource.class" in names
    assert (
        "quiver/spark/ForeignCalls.class" in names
        or not (java_cache() / "spark" / "java22-home").is_file()
    )
    for shaded in ("io/grpc/", "com/google/protobuf/", "org/apache/arrow/flight/", "io/perfmark/"):
        assert any(name.startswith(f"quiver/shaded/{shaded}") for name in names), shaded
    unrelocated = [
        name for name in names if name.endswith(".class") and name.startswith(NOT_IN_THE_JAR)
    ]
    assert unrelocated == []
    sources = services["META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"]
    assert sources.split() == ["quiver.spark.QuiverDataSource"]
    channels = services["META-INF/services/quiver.shaded.io.grpc.ManagedChannelProvider"]
    assert "quiver.shaded.io.grpc.netty.NettyChannelProvider" in channels.split()
    assert not any(name.startswith("META-INF/services/io.grpc.") for name in services)

    group, artifact, version = (java_cache() / "spark" / "package.txt").read_text().split(":")
    installed = Path.home() / ".m2" / "repository" / group / artifact / version.strip()
    pom = (installed / f"{artifact}-{version.strip()}.pom").read_text()
    assert (installed / f"{artifact}-{version.strip()}.jar").read_bytes() == Path(jar).read_bytes()
    runtime = re.findall(r"<dependency>(?:(?!</dependency>).)*</dependency>", pom, re.S)
    assert [d for d in runtime if not re.search(r"<scope>(provided|system|test)</scope>", d)] == []


PACKAGE_JOB = """
import sys
from pyspark.sql import SparkSession

package, ivy, uri = sys.argv[1:]
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.jars.packages", package)
    .config("spark.jars.ivy", ivy)
    .config("spark.ui.enabled", "false")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.driver.host", "127.0.0.1")
    .getOrCreate()
)
df = spark.read.format("quiver").option("uri", uri).load("trips")
row = df.where("id >= 500").selectExpr("count(*) AS n", "sum(id) AS s").first()
parts = df.rdd.getNumPartitions()
print(f"quiver-package rows={df.count()} n={row.n} s={row.s} partitions={parts}")
df.where("id < 100").write.format("quiver").option("uri", uri).mode("overwrite").save("copy")
spark.stop()
"""


def test_pyspark_loads_the_installed_package_by_its_coordinates(
    jars: str, client: quiver.Client, uri: str, tmp_path: Path
) -> None:
    """As a PySpark user installs a connector: ``spark.jars.packages`` (``--packages``) with
    the coordinates ``mvn install`` put in the local Maven repository; Spark's Ivy finds
    the jar there, alone, and the session reads a quiver table and writes one back. A
    process of its own: a JVM takes its packages when it starts."""
    client.put("trips", mixed_table(1000), partitions=3)
    package = (java_cache() / "spark" / "package.txt").read_text().strip()
    job = tmp_path / "job.py"
    job.write_text(PACKAGE_JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_"))}
    env["PYSPARK_PYTHON"] = sys.executable
    done = subprocess.run(
        [sys.executable, str(job), package, str(tmp_path / "ivy"), uri],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    group, artifact, version = package.split(":")
    # Spark's Ivy found it in ~/.m2, and fetched no other artifact.
    assert f"found {group}#{artifact};{version} in local-m2-cache" in done.stderr, done.stderr
    assert re.search(r"\b1 artifacts copied", done.stderr), done.stderr[-3000:]
    assert "quiver-package rows=1000 n=500 s=374750 partitions=3" in done.stdout, done.stdout
    assert sorted(client.get("copy")["id"].to_pylist()) == list(range(100))
