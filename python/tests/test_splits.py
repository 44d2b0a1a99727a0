"""The engine-neutral core of the connectors (quiver.splits), against real servers.

Plans and splits are read back in this process and compared with the stored
table; pushdown is checked in the server's log; failover uses two real servers
on two loopback addresses and a real pyarrow Flight server as the planner that
lists both as every endpoint's locations.
"""

from __future__ import annotations

import datetime
import decimal
import pickle
import threading
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import quiver
from engine_helpers import ROWS, Planner, mixed_table
from quiver import splits
from quiver.errors import (
    InvalidArgumentError,
    NotFoundError,
    ServerUnavailableError,
    TableNotFoundError,
    VersionConflictError,
)
from server_process import Server, ServerFactory, start_server


@pytest.fixture
def stored(client: quiver.Client) -> pa.Table:
    table = mixed_table()
    client.put("trips", table, partitions=4)
    return table


def read_all(plan: splits.ReadPlan) -> pa.Table:
    return plan.read()


# -- planning and reading --------------------------------------------------------------------


def test_a_table_plans_one_split_per_endpoint_and_reads_back_whole(
    uri: str, stored: pa.Table
) -> None:
    plan = splits.plan_read(uri, "trips")
    assert len(plan.splits) == 4
    assert [s.index for s in plan.splits] == [0, 1, 2, 3]
    assert plan.rows == ROWS and sum(s.rows or 0 for s in plan.splits) == ROWS
    assert all(s.locations == (uri,) for s in plan.splits)
    assert plan.table == "trips" and plan.version is not None
    # Plans travel to other processes: they pickle, and the copy reads the same rows.
    copy = pickle.loads(pickle.dumps(plan))
    assert read_all(copy).equals(stored)


def test_a_split_on_this_host_is_read_through_shared_memory(
    uri: str, stored: pa.Table, start_quiver: ServerFactory
) -> None:
    shm = splits.Connection(uri, transport="shm")
    plan = splits.plan_read(shm, "trips", columns=["vendor", "id"])
    parts = [pa.Table.from_batches(list(splits.read_split(plan, s))) for s in plan.splits]
    assert pa.concat_tables(parts).equals(stored.select(["vendor", "id"]))
    # Zero-copy: every split's buffers lie in a mapping of the server's memfd.
    spans = [
        tuple(int(x, 16) for x in line.split()[0].split("-"))
        for line in Path("/proc/self/maps").read_text().splitlines()
        if "memfd:" in line
    ]
    for part in parts:
        address = part["id"].chunks[0].buffers()[1].address
        assert any(lo <= address < hi for lo, hi in spans), "a split was copied"
    # A server without the shared-memory socket: "shm" refuses, "auto" uses gRPC.
    other = start_quiver("--shm-socket", "off")
    with quiver.connect(other.uri) as c:
        c.put("trips", stored, partitions=4)
    with pytest.raises(quiver.QuiverError):
        splits.plan_read(splits.Connection(other.uri, transport="shm"), "trips").read()
    assert splits.plan_read(other.uri, "trips").read().equals(stored)


def test_a_table_split_can_be_read_again(uri: str, stored: pa.Table) -> None:
    plan = splits.plan_read(uri, "trips", columns=["id"], filters=[("id", "<", 100)])
    first = list(splits.read_split(plan, plan.splits[0]))
    second = list(splits.read_split(plan, plan.splits[0]))
    assert pa.Table.from_batches(first).equals(pa.Table.from_batches(second))
    assert pa.Table.from_batches(first)["id"].to_pylist() == list(range(100))


def test_columns_and_filters_are_evaluated_by_the_server(
    uri: str, stored: pa.Table, server: Server
) -> None:
    plan = splits.plan_read(
        uri,
        "trips",
        columns=["fare", "id", "vendor"],
        filters=[("id", ">=", 2500), ("vendor", "in", ["a", "c"])],
    )
    assert len(plan.splits) == 4
    assert plan.schema.names == ["fare", "id", "vendor"]
    got = read_all(plan)
    mask = pc.and_(
        pc.greater_equal(stored["id"], 2500), pc.is_in(stored["vendor"], pa.array(["a", "c"]))
    )
    want = stored.filter(mask).select(["fare", "id", "vendor"])
    assert got.equals(want)
    # The server did the work: the filter is in its log, and the rows it sent are fewer.
    log = server.log()
    assert "DoGet pushdown" in log and 'id\\" >= 2500' in log, log[-3000:]


@pytest.mark.parametrize(
    ("filters", "mask"),
    [
        ([("amount", ">", decimal.Decimal("50.5"))], lambda t: pc.greater(t["amount"], 50.5)),
        (
            [("at", "<", datetime.datetime(2023, 11, 14, 23, 0, tzinfo=datetime.timezone.utc))],
            lambda t: pc.less(
                t["at"].cast(pa.timestamp("us", "UTC")),
                pa.scalar(datetime.datetime(2023, 11, 14, 23, 0), pa.timestamp("us", "UTC")),
            ),
        ),
        ([("vendor", "is", None)], lambda t: pc.is_null(t["vendor"])),
        ([[("id", "=", 3)], [("id", "=", 9000)]], lambda t: pc.is_in(t["id"], pa.array([3, 9000]))),
        ([("vendor", "starts_with", "b")], lambda t: pc.equal(t["vendor"].cast(pa.string()), "b")),
        ([("id", "in", [])], lambda t: pc.equal(t["id"], -1)),
    ],
)
def test_filters_on_every_kind_of_column(uri: str, stored: pa.Table, filters, mask) -> None:  # type: ignore[no-untyped-def]
    got = read_all(splits.plan_read(uri, "trips", filters=filters))
    want = stored.filter(mask(stored).fill_null(False))
    assert got.num_rows == want.num_rows
    assert got.equals(want)


def test_bad_columns_and_filters_are_refused_clearly(uri: str, stored: pa.Table) -> None:
    with pytest.raises(InvalidArgumentError, match="no column 'nope'"):
        splits.plan_read(uri, "trips", columns=["nope"])
    with pytest.raises(ValueError, match="unknown filter operator"):
        splits.plan_read(uri, "trips", filters=[("id", "~", 1)])
    with pytest.raises(ValueError, match="use 'is' None"):
        splits.plan_read(uri, "trips", filters=[("id", "=", None)])
    plan = splits.plan_read(uri, "trips", filters=[("nope", ">", 1)])
    with pytest.raises(InvalidArgumentError):
        read_all(plan)
    with pytest.raises(TableNotFoundError):
        splits.plan_read(uri, "missing")
    with pytest.raises(ValueError, match="table or a query"):
        splits.plan_read(uri)


def test_a_changed_table_is_a_version_conflict(
    uri: str, stored: pa.Table, client: quiver.Client
) -> None:
    plan = splits.plan_read(uri, "trips")
    client.put("trips", stored.slice(0, 10))
    with pytest.raises(VersionConflictError):
        read_all(plan)


def test_a_query_plans_splits_with_locations_read_once(uri: str, stored: pa.Table) -> None:
    plan = splits.plan_read(
        uri, query="SELECT id, fare FROM trips", columns=["id"], filters=[("id", "<", 10)]
    )
    assert plan.splits and all(s.locations == (uri,) for s in plan.splits)
    assert sorted(read_all(plan)["id"].to_pylist()) == list(range(10))
    with pytest.raises(NotFoundError, match="plan the read again"):
        read_all(plan)
    assert splits.read_schema(uri, query="SELECT id, fare FROM trips").names == ["id", "fare"]


def test_adbc_reads_a_querys_partitions_from_their_locations(uri: str, stored: pa.Table) -> None:
    adbc_uri = uri.replace("grpc+tcp://", "grpc://")
    with flight_sql.connect(adbc_uri, autocommit=True) as conn, conn.cursor() as cur:
        partitions, schema = cur.adbc_execute_partitions("SELECT id FROM trips WHERE id < 1000")
        assert len(partitions) >= 1
        ids: list[int] = []
        for partition in partitions:
            cur.adbc_read_partition(partition)
            ids += cur.fetch_arrow_table()["id"].to_pylist()
    assert sorted(ids) == list(range(1000))
    assert schema.names == ["id"]


def test_filters_to_sql_quotes_names_and_values() -> None:
    sql = splits.filters_to_sql([('we"ird', "=", "it's"), ("b", "!=", b"\x00\xff")])
    assert sql == "(\"we\"\"ird\" = 'it''s') AND (\"b\" <> X'00ff')"
    assert splits.sql_literal(float("nan")) == "CAST('NaN' AS DOUBLE)"
    assert splits.sql_literal(decimal.Decimal("-1.250")) == "CAST('-1.250' AS DECIMAL(4, 3))"
    assert splits.sql_literal(datetime.date(2024, 2, 29)) == "CAST('2024-02-29' AS DATE)"
    with pytest.raises(ValueError, match="SQL literal"):
        splits.sql_literal(object())


# -- two servers, one table: locations and failover ------------------------------------------


def test_each_split_reads_its_own_first_location(
    replicas: tuple[list[Server], str],
) -> None:
    servers, planner = replicas
    plan = splits.plan_read(planner, "trips")
    assert [s.locations[0] for s in plan.splits] == [
        servers[0].uri,
        servers[1].uri,
        servers[0].uri,
        servers[1].uri,
    ]
    assert read_all(plan).equals(mixed_table())
    # Each server served the two endpoints it is listed first for.
    for server in servers:
        assert server.log().count("DoGet") >= 2, server.log()[-2000:]


def test_a_split_fails_over_to_its_next_location(
    replicas: tuple[list[Server], str],
) -> None:
    servers, planner = replicas
    plan = splits.plan_read(planner, "trips")
    servers[0].stop()
    assert read_all(plan).equals(mixed_table())


def test_a_split_resumes_on_its_next_location_when_a_server_dies_mid_stream(
    tmp_path: Path,
) -> None:
    rows = 4_000_000
    table = pa.table({"x": pa.array(range(rows), pa.int64())})
    table = pa.Table.from_batches(table.to_batches(max_chunksize=65_536))
    servers = [
        start_server("--shm-socket", "off", log_dir=tmp_path / "a", listen="127.0.0.1:0"),
        start_server("--shm-socket", "off", log_dir=tmp_path / "b", listen="127.0.0.2:0"),
    ]
    for server in servers:
        with quiver.connect(server.uri) as c:
            c.put("big", table, partitions=1)
    planner = Planner([s.uri for s in servers])
    threading.Thread(target=planner.serve, daemon=True).start()
    try:
        plan = splits.plan_read(f"grpc+tcp://127.0.0.1:{planner.port}", "big")
        batches = splits.read_split(plan, plan.splits[0])
        got = [next(batches)]
        assert "DoGet" not in servers[1].log()
        servers[0].process.kill()  # mid-stream: SIGKILL, no goodbye
        got += list(batches)
    finally:
        planner.shutdown()
        for server in servers:
            server.stop()
    assert pa.Table.from_batches(got).equals(table.combine_chunks())
    # The rest came from the second server, resumed after the rows already read.
    assert 'rpc="DoGet"' in servers[1].log()


def test_a_split_with_no_location_left_raises_unavailable(
    replicas: tuple[list[Server], str],
) -> None:
    servers, planner = replicas
    plan = splits.plan_read(planner, "trips")
    for server in servers:
        server.stop()
    with pytest.raises(ServerUnavailableError):
        read_all(plan)


# -- write jobs ------------------------------------------------------------------------------


def test_a_write_job_publishes_every_task_at_once_in_order(uri: str, client: quiver.Client) -> None:
    table = mixed_table(1000)
    client.put("target", table.slice(0, 10))
    job = splits.WriteJob.begin(uri, "target", "replace")
    writes = [job.write(i, table.slice(i * 250, 250)) for i in range(4)]
    # Nothing is visible before the commit.
    assert client.get("target").num_rows == 10
    # The four tasks' tables, and the marker that says the job is open.
    assert len(client.list_tables(job.staging_prefix)) == 5
    result = job.commit(reversed(writes))
    got = client.get("target")
    assert result.rows == 1000 and got.num_rows == 1000
    assert got.equals(pa.concat_tables([table.slice(i * 250, 250) for i in (3, 2, 1, 0)]))
    assert client.list_tables(".quiver-staging/") == []


def test_an_append_job_casts_rows_to_the_target_schema(uri: str, client: quiver.Client) -> None:
    target = pa.table({"x": pa.array([1, 2], pa.int32()), "y": pa.array(["a", "b"])})
    client.put("t", target)
    job = splits.WriteJob.begin(uri, "t", "append")
    write = job.write(0, pa.table({"y": ["c"], "x": pa.array([3], pa.int64())}))
    job.commit([write])
    assert client.get("t").to_pydict() == {"x": [1, 2, 3], "y": ["a", "b", "c"]}
    with pytest.raises(InvalidArgumentError, match="target table's schema"):
        job.write(1, pa.table({"z": [1]}))
    with pytest.raises(TableNotFoundError):
        splits.WriteJob.begin(uri, "missing", "append")


def test_an_aborted_job_leaves_the_target_and_no_staging_behind(
    uri: str, client: quiver.Client
) -> None:
    before = pa.table({"x": [1, 2, 3]})
    client.put("t", before)
    job = splits.WriteJob.begin(uri, "t", "replace")
    job.write(0, pa.table({"x": [9]}))
    job.write(1, pa.table({"x": [10]}))
    job.abort()
    assert client.get("t").equals(before)
    assert client.list_tables(".quiver-staging/") == []


def test_a_commit_drops_attempts_that_did_not_count(uri: str, client: quiver.Client) -> None:
    job = splits.WriteJob.begin(uri, "t", "replace")
    job.write(0, pa.table({"x": [1]}))  # an attempt the engine retried
    retried = job.write(0, pa.table({"x": [1]}))
    job.commit([retried, None])
    assert client.get("t").to_pydict() == {"x": [1]}
    assert client.list_tables(".quiver-staging/") == []


def test_a_job_with_no_rows_replaces_with_an_empty_table(uri: str, client: quiver.Client) -> None:
    client.put("t", pa.table({"x": [1]}))
    job = splits.WriteJob.begin(uri, "t", "replace")
    job.commit([None, None], pa.schema([("x", pa.int64())]))
    assert client.get("t").num_rows == 0
    with pytest.raises(ValueError, match="no schema"):
        splits.WriteJob.begin(uri, "t", "replace").commit([])
