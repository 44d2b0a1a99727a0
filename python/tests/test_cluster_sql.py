"""Distributed SQL on the cluster: real etcd, three real nodes on 127.0.0.1-3.

Flight SQL on any node plans over the cluster's tables with datafusion-distributed:
scans run as tasks on the nodes holding the partitions, the stages above them stream
between nodes. Every query here gives the same result as on one node holding the same
tables (a single ``quiver serve`` in the same test), through each node in turn and
after a node is lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import quiver
from cluster_helpers import NODES, Cluster, wait_until
from server_process import Server, start_server

ROWS = 240_000
CITIES = [f"c{i}" for i in range(20)]

#: Aggregations, a join with a filter (the small side broadcast), distinct counts, a
#: top-k, a window, a self join whose filtered side is broadcast and one whose sides are
#: both shuffled by key. Each is fully ordered; fares are quarters, so their sums are
#: exact whatever order they are added in.
QUERIES = {
    "group_by": "SELECT vendor, count(*) AS n, sum(fare) AS total, avg(fare) AS mean, "
    "min(id) AS lo, max(id) AS hi FROM trips GROUP BY vendor ORDER BY vendor",
    "join": "SELECT v.name, t.city, count(*) AS n, sum(t.fare) AS total "
    "FROM trips t JOIN vendors v ON t.vendor = v.vendor WHERE t.fare > 10 "
    "GROUP BY v.name, t.city ORDER BY v.name, t.city",
    "distinct": "SELECT count(*) AS n, count(DISTINCT city) AS cities, sum(id) AS ids FROM trips",
    "top_k": "SELECT id, fare FROM trips WHERE city = 'c7' ORDER BY fare DESC, id LIMIT 25",
    "window": "SELECT vendor, id, row_number() OVER (PARTITION BY vendor ORDER BY id) AS rn "
    "FROM trips WHERE id % 997 = 0 ORDER BY vendor, id",
    "self_join": "SELECT a.city, count(*) AS n, sum(b.fare) AS total FROM trips a "
    "JOIN trips b ON a.id = b.id + 1 WHERE a.vendor = 3 GROUP BY a.city ORDER BY a.city",
    "shuffle_join": "SELECT a.vendor, count(*) AS n, sum(b.fare) AS total FROM trips a "
    "JOIN trips b ON a.id = b.id + 1 GROUP BY a.vendor ORDER BY a.vendor",
}


def trips() -> pa.Table:
    ids = pa.array(range(ROWS), pa.int64())
    return pa.table(
        {
            "id": ids,
            "vendor": pa.array([i % 7 for i in range(ROWS)], pa.int32()),
            "fare": pa.array([(i * 31 % 400) * 0.25 for i in range(ROWS)], pa.float64()),
            "city": pa.array([CITIES[i * 13 % len(CITIES)] for i in range(ROWS)]),
        }
    )


def vendors() -> pa.Table:
    return pa.table(
        {
            "vendor": pa.array(range(7), pa.int32()),
            "name": pa.array([f"vendor-{i}" for i in range(7)]),
        }
    )


@pytest.fixture
def single(tmp_path: Path) -> Iterator[Server]:
    """One quiver node, no cluster, holding the same tables: the reference."""
    server = start_server("--shm-socket", "off", log_dir=tmp_path / "single")
    with quiver.connect(server.uri) as c:
        c.put("trips", trips())
        c.put("vendors", vendors())
    try:
        yield server
    finally:
        server.stop()


def spread(cluster: Cluster) -> None:
    """Put the tables through n1: trips in six partitions over the three nodes."""
    with cluster.client("n1") as c:
        c.put("trips", trips(), partitions=6)
        c.put("vendors", vendors())


def sql(client: quiver.Client, query: str) -> pa.Table:
    """``query``'s result through ``client``, which it closes."""
    with client:
        return client.sql(query)


def explain(client: quiver.Client, query: str) -> str:
    """The distributed plan ``query`` ran with through ``client``, which it closes
    (EXPLAIN ANALYZE: plain EXPLAIN shows the plan before the distributed planner cuts
    it into stages)."""
    plan = sql(client, f"EXPLAIN ANALYZE {query}")
    return "\n".join(str(row) for row in plan.column("plan").to_pylist())


def test_distributed_queries_give_the_single_node_results(cluster: Cluster, single: Server) -> None:
    spread(cluster)
    expected = {name: sql(quiver.connect(single.uri), query) for name, query in QUERIES.items()}
    assert expected["distinct"].column("n").to_pylist() == [ROWS]
    for node_id in NODES:
        for name, query in QUERIES.items():
            got = sql(cluster.client(node_id), query)
            assert got.equals(expected[name]), f"{name} through {node_id}:\n{got}\n{expected[name]}"


def test_the_plan_runs_scans_on_the_nodes_holding_the_partitions(cluster: Cluster) -> None:
    spread(cluster)
    plan = explain(cluster.client("n2"), QUERIES["join"])
    assert "DistributedExec" in plan, plan
    # The small side is broadcast to the tasks scanning the large one.
    assert "NetworkBroadcastExec" in plan, plan
    # One scan task per node, each reading the two partitions of trips it holds.
    scans = [line for line in plan.splitlines() if "ClusterScanExec: table=trips" in line]
    assert len(scans) == 3, plan
    assert {line.split("node=")[1].strip() for line in scans} == set(NODES), plan
    assert all(f"partitions=2, rows={ROWS // 3}" in line for line in scans), plan
    # Both sides of a join of two large inputs are shuffled by key between the nodes.
    plan = explain(cluster.client("n1"), QUERIES["shuffle_join"])
    assert plan.count("NetworkShuffleExec") >= 2, plan


def test_a_lost_node_costs_no_query_while_its_partitions_have_live_copies(
    cluster: Cluster, single: Server
) -> None:
    spread(cluster)
    expected = sql(quiver.connect(single.uri), QUERIES["join"])
    # n3 has just answered n1 and n2 (each ran tasks there): they plan the next
    # queries onto it without asking it again.
    for node_id in ("n1", "n2"):
        assert sql(cluster.client(node_id), QUERIES["join"]).equals(expected)
    cluster.kill("n3")
    # Until n3's lease ends it is still in the catalog, and a query may be planned
    # with tasks on it. Such a query loses n3 before its first row: it is planned
    # again without n3 and gives the whole result, never an error, since every
    # partition has a copy on n1 or n2 (two replicas).
    outcomes = []
    deadline = time.monotonic() + 30
    for attempt in range(200):
        if time.monotonic() > deadline or len(cluster.status()["nodes"]) == 2:  # type: ignore[arg-type]
            break
        node_id = ("n1", "n2")[attempt % 2]
        try:
            got = sql(cluster.client(node_id), QUERIES["join"])
        except quiver.QuiverError as error:
            outcomes.append(f"{node_id}: {error.code}: {error}")
        else:
            assert got.equals(expected), f"through {node_id}:\n{got}"
            outcomes.append("whole")
    assert outcomes and set(outcomes) == {"whole"}, outcomes
    wait_until("n3's lease to end", lambda: len(cluster.status()["nodes"]) == 2)  # type: ignore[arg-type]
    for node_id in ("n1", "n2"):
        assert sql(cluster.client(node_id), QUERIES["join"]).equals(expected)


def test_a_query_that_loses_a_node_is_planned_again_on_the_server(
    cluster: Cluster, single: Server
) -> None:
    """n3 killed while a query runs through ADBC, which never runs a statement again (the
    quiver client would, on another node): n1 must plan the query again itself.

    The query joins every trip with 2,400 others (576 M rows summed, about 2 s here), so
    n3 dies while its tasks run, before the gathered result's first row. An unordered
    scan, which one node answers in two partitions, is one partition on a cluster too
    (datafusion-distributed's ``DistributedExec`` gathers the result), so what holds for
    this aggregate holds for every distributed result."""
    spread(cluster)
    heavy = (
        "SELECT count(*) AS n, sum(a.fare * b.fare) AS s "
        "FROM trips a JOIN trips b ON a.id % 100 = b.id % 100"
    )
    expected = sql(quiver.connect(single.uri), heavy)
    assert expected.column("n").to_pylist() == [ROWS * ROWS // 100]
    n1 = cluster.nodes["n1"]
    with cluster.adbc("n1") as conn, conn.cursor() as cur:
        partitions, _ = cur.adbc_execute_partitions("SELECT id, fare FROM trips WHERE fare > 90")
        assert len(partitions) == 1
        results: list[object] = []

        def run() -> None:
            try:
                cur.execute(heavy)
                results.append(cur.fetch_arrow_table())
            except Exception as error:  # the assertion below shows it
                results.append(error)

        query = threading.Thread(target=run)
        query.start()
        time.sleep(0.5)
        cluster.kill("n3")
        query.join(timeout=120)
        assert not query.is_alive(), "the query did not end within 120 s"
    assert len(results) == 1 and isinstance(results[0], pa.Table), results
    assert results[0].equals(expected), results[0]
    assert "planning it again" in n1.log(), "the query did not lose n3: it proved nothing"


def test_a_query_planned_before_a_node_died_runs_on_the_nodes_left(
    cluster: Cluster, single: Server
) -> None:
    """Queries planned on n1 while n3 was live, run once n1 knows n3 is gone.

    Each stage of such a plan has three tasks and two nodes are left: n3's scan
    tasks go to nodes holding copies of their partitions, and no node takes two
    tasks of a stage in its own process (they would share the plan's exchanges and
    read each other's streams: "WorkerConnections stream ... already consumed").
    Routed when it runs, the query needs no second plan. Six queries: the library's
    own routing (a random first node, round robin) put two tasks of a stage here in
    about half of them."""
    spread(cluster)
    expected = sql(quiver.connect(single.uri), QUERIES["join"])
    n1 = cluster.nodes["n1"]
    with cluster.client("n1") as client:
        # sql_reader plans at once and reads the result when it is read.
        readers = [client.sql_reader(QUERIES["join"]) for _ in range(6)]
        assert "n3" in client.nodes()
        cluster.kill("n3")
        wait_until("n1 to pass n3 over", lambda: "n3" not in client.nodes())
        for reader in readers:
            assert reader.read_all().equals(expected)
    assert "planning it again" not in n1.log(), "a query was planned again"


def test_a_paused_node_costs_no_query(cluster: Cluster, single: Server) -> None:
    spread(cluster)
    expected = sql(quiver.connect(single.uri), QUERIES["join"])
    for node_id in ("n1", "n2"):
        assert sql(cluster.client(node_id), QUERIES["join"]).equals(expected)
    cluster.pause("n3")
    try:
        # A frozen node answers no probe: it is passed over once its probe times
        # out (2 s), well within the lease it keeps while the pause lasts.
        for node_id in ("n1", "n2", "n1"):
            got = sql(cluster.client(node_id), QUERIES["join"])
            assert got.equals(expected), f"through {node_id}:\n{got}"
    finally:
        cluster.resume("n3")


def test_a_client_whose_node_dies_runs_its_queries_on_another(
    cluster: Cluster, single: Server
) -> None:
    # No node can answer for a client whose own node died: the client asks another
    # of the live nodes the cluster named in its last SQL answer.
    spread(cluster)
    expected = sql(quiver.connect(single.uri), QUERIES["join"])
    by_vendor = sql(quiver.connect(single.uri), QUERIES["group_by"])
    with cluster.client("n3") as client:
        assert client.sql(QUERIES["join"]).equals(expected)
        cluster.kill("n3")
        for _ in range(3):
            assert client.sql(QUERIES["join"]).equals(expected)
        assert client.sql_reader(QUERIES["group_by"]).read_all().equals(by_vendor)


def test_sql_lists_the_cluster_tables(cluster: Cluster) -> None:
    spread(cluster)
    with cluster.client("n3") as c:
        names = c.sql(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' ORDER BY table_name"
        )
        assert names.column("table_name").to_pylist() == ["trips", "vendors"]
        assert c.sql("SELECT count(*) AS n FROM vendors").column("n").to_pylist() == [7]
        with pytest.raises(quiver.InvalidArgumentError, match="missing"):
            c.sql("SELECT * FROM missing")
        # The cluster's errors carry their kinds, as a single node's do.
        with pytest.raises(quiver.TableNotFoundError) as missing:
            c.get("missing")
        assert missing.value.kind == "TABLE_NOT_FOUND"


def test_sql_writes_on_one_node_are_the_cluster_tables_of_every_node(cluster: Cluster) -> None:
    """CREATE TABLE AS, INSERT and DROP TABLE through one node are puts and deletes like
    any other: spread over the nodes, replicated, published in the catalog."""
    spread(cluster)
    rows = vendors()
    with cluster.client("n3") as c:
        c.sql("CREATE TABLE copied AS SELECT * FROM vendors WHERE vendor < 5")
        assert c.get("copied").num_rows == 5
        with pytest.raises(quiver.AlreadyExistsError, match="copied"):
            c.sql("CREATE TABLE copied AS SELECT * FROM vendors")
    with cluster.client("n2") as c:
        c.sql("INSERT INTO copied SELECT * FROM vendors WHERE vendor >= 5")
        c.sql("INSERT INTO copied VALUES (70, 'vendor-70')")
        with pytest.raises(quiver.InvalidArgumentError):
            c.sql("INSERT INTO copied VALUES ('not a number', 1, 2)")
    expected = pa.concat_tables(
        [rows, pa.table({"vendor": [70], "name": ["vendor-70"]}, schema=rows.schema)]
    ).sort_by("vendor")
    for node in NODES:
        with cluster.client(node) as c:
            assert c.get("copied").sort_by("vendor").equals(expected), node
            counted = c.sql("SELECT count(*) AS n FROM copied").column("n").to_pylist()
            assert counted == [expected.num_rows], node
    status = cluster.status()
    assert status["under_replicated"] == 0, status
    with cluster.client("n1") as c:
        assert sorted(t.name for t in c.list_tables()) == ["copied", "trips", "vendors"]
        c.sql("DROP TABLE copied")
        with pytest.raises(quiver.TableNotFoundError):
            c.sql("DROP TABLE copied")
        c.sql("DROP TABLE IF EXISTS copied")
    for node in NODES:
        with cluster.client(node) as c:
            assert sorted(t.name for t in c.list_tables()) == ["trips", "vendors"], node
            assert c.get("vendors").equals(rows), node


def test_adbc_bulk_ingest_spreads_a_cluster_table(cluster: Cluster) -> None:
    """Flight SQL bulk ingest (ADBC's ``adbc_ingest``) is a put like any other: spread over
    the nodes, replicated, published in the catalog, with the ingest's modes."""
    rows = vendors()
    with cluster.adbc("n1") as conn, conn.cursor() as cur:
        assert cur.adbc_ingest("ingested", rows, mode="create") == rows.num_rows
        with pytest.raises(Exception, match="already exists"):
            cur.adbc_ingest("ingested", rows, mode="create")
        assert cur.adbc_ingest("ingested", rows.slice(0, 3), mode="append") == 3
        assert cur.adbc_ingest("fresh", rows, mode="create_append") == rows.num_rows
    expected = pa.concat_tables([rows, rows.slice(0, 3)])
    for node in NODES:
        with cluster.client(node) as c:
            got = c.get("ingested")
            assert got.sort_by("vendor").equals(expected.sort_by("vendor")), node
            assert c.get("fresh").sort_by("vendor").equals(rows.sort_by("vendor")), node
    status = cluster.status()
    assert status["under_replicated"] == 0, status
    # Nothing of the ingest is left as a table of one node's store.
    with cluster.client("n2") as c:
        assert sorted(t.name for t in c.list_tables()) == ["fresh", "ingested"]
