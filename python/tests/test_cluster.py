"""quiver on several nodes: real etcd, three real server processes on 127.0.0.1-3.

Puts through one node are read through another; a node killed mid-way leaves reads
whole (failover to a replica) and puts whole or absent; a lost node's partitions are
copied again; concurrent commits serialize; with etcd gone nodes keep serving and
refuse commits clearly; and a checker in the style of Jepsen runs appends from several
clients while a node is killed and restarted, then checks that every acknowledged
append is readable and none is torn.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pytest

import nemesis
import quiver
from cluster_helpers import LEASE_TTL_S, NODES, Cluster, Etcd, wait_until
from engine_helpers import mixed_table
from functions_fixture import features
from quiver import splits
from quiver._shm import TRANSPORT_HEADER
from test_functions import expected_scores, function_flags


def ids(rows: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + rows), pa.int64())})


def info_of(client: flight.FlightClient, name: str) -> flight.FlightInfo:
    """Table ``name``'s FlightInfo through ``client``, which it closes."""
    try:
        return client.get_flight_info(flight.FlightDescriptor.for_path(name))
    finally:
        client.close()


def test_a_put_through_one_node_is_read_through_the_others(cluster: Cluster) -> None:
    table = mixed_table()
    with cluster.client("n1") as c:
        result = c.put("trips", table)
    assert result.version == 1
    for node_id in ("n2", "n3"):
        with cluster.client(node_id) as c:
            assert c.get("trips").equals(table)
            assert [t.name for t in c.list_tables()] == ["trips"]
    info = info_of(cluster.flight_client("n2"), "trips")
    # One endpoint per live node, each on two distinct nodes, spread over all three.
    assert len(info.endpoints) == 3
    holders = set()
    for endpoint in info.endpoints:
        uris = [loc.uri.decode() for loc in endpoint.locations]
        assert len(uris) == len(set(uris)) == 2
        holders.update(uris)
    # Placed round a ring of the nodes: each holds two copies and one first copy.
    assert holders == {cluster.uri(n) for n in NODES}
    firsts = sorted(e.locations[0].uri.decode() for e in info.endpoints)
    assert firsts == sorted(cluster.uri(n) for n in NODES)
    assert info.total_records == table.num_rows
    # A plain pyarrow client reads it the same way, each endpoint from its first
    # location: any Flight client works.
    parts = []
    for endpoint in info.endpoints:
        client = cluster.flight_client(endpoint.locations[0].uri.decode())
        try:
            parts.append(client.do_get(endpoint.ticket).read_all())
        finally:
            client.close()
    assert pa.concat_tables(parts).equals(table)
    # A ticket of the table's name reads it whole, through any node; one asking for a
    # part of it is refused (the endpoints' tickets are the parts).
    client = cluster.flight_client("n3")
    try:
        assert client.do_get(flight.Ticket(b"trips")).read_all().equals(table)
        half = b'\0quiver-ticket-v1:{"t": "trips", "p": 0, "n": 2}'
        with pytest.raises(pa.ArrowInvalid, match="reads it whole"):
            client.do_get(flight.Ticket(half)).read_all()
    finally:
        client.close()
    status = cluster.status()
    assert status["under_replicated"] == 0
    assert [t["name"] for t in status["tables"]] == ["trips"]  # type: ignore[index]


def test_appends_replaces_deletes_and_renames_go_through_the_catalog(cluster: Cluster) -> None:
    with cluster.client("n1") as a, cluster.client("n3") as c:
        a.put("t", ids(100))
        assert c.put("t", ids(50, 100), mode="append").version == 2
        assert c.get("t").column("id").to_pylist() == list(range(150))
        with pytest.raises(quiver.QuiverError, match="schema"):
            a.put("t", pa.table({"x": pa.array([1.0])}), mode="append")
        with pytest.raises(quiver.NotFoundError):
            a.put("missing", ids(1), mode="append")
        assert a.put("t", ids(10), partitions=2).version == 3
        assert len(info_of(cluster.flight_client("n2"), "t").endpoints) == 2
        assert c.get("t").equals(ids(10))
        a.rename("t", "u")
        with pytest.raises(quiver.NotFoundError):
            c.get("t")
        assert c.get("u").equals(ids(10))
        c.delete("u")
        with pytest.raises(quiver.NotFoundError):
            a.get("u")
        assert a.list_tables() == []


def test_a_write_jobs_tasks_are_held_by_the_nodes_they_are_sent_to(cluster: Cluster) -> None:
    """An engine's write sends task i to node i modulo the nodes (the ``nodes``
    action), which keeps the first copy of the task's rows (``place="here"``): the
    nodes share the job's puts and its first copies. A node dead since the job began
    has its tasks placed by the job's server instead."""
    # Rebalancing evens out the nodes' bytes once a table is published, and may move a
    # first copy: off, to see where the puts placed them (here and in the tests below).
    cluster.rebalance(on=False)
    job = splits.WriteJob.begin(cluster.connection("n1"), "spread")
    assert sorted(job.nodes) == sorted(cluster.uri(n) for n in NODES)
    writes = [job.write(i, ids(1_000, 1_000 * i)) for i in range(6)]
    job.commit(writes)
    info = info_of(cluster.flight_client("n2"), "spread")
    # One partition per task, in task order, its first copy where the task was sent.
    firsts = [e.locations[0].uri.decode() for e in info.endpoints]
    assert firsts == [job.nodes[i % 3] for i in range(6)]
    assert all(len(e.locations) == 2 for e in info.endpoints)
    with cluster.client("n3") as c:
        assert c.get("spread").equals(ids(6_000))
        assert c.nodes() == {n: cluster.uri(n) for n in NODES}

    job = splits.WriteJob.begin(cluster.connection("n1"), "spread", "append")
    cluster.kill("n3")
    writes = [job.write(i, ids(1_000, 6_000 + 1_000 * i)) for i in range(3)]
    job.commit(writes)
    with cluster.client("n2") as c:
        assert c.get("spread").sort_by("id").equals(ids(9_000))
    info = info_of(cluster.flight_client("n1"), "spread")
    firsts = [e.locations[0].uri.decode() for e in info.endpoints]
    assert firsts[6:8] == [cluster.uri("n1"), cluster.uri("n2")]
    # Task 2's node was dead: n1 spread its rows over the ring, one partition or more.
    assert len(info.endpoints) > 8


def test_dask_workers_put_each_partition_to_the_node_that_keeps_it(cluster: Cluster) -> None:
    """The same through a real Dask cluster (two worker processes): its workers send
    partition i to node i modulo the nodes, and read the table back."""
    distributed = pytest.importorskip("distributed")
    import dask.dataframe as dd

    from quiver import dask as quiver_dask

    cluster.rebalance(on=False)
    frame = ids(6_000).to_pandas()
    local = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None,
    )  # fmt: skip
    try:
        with distributed.Client(local):
            connection = cluster.connection("n1")
            quiver_dask.to_quiver(dd.from_pandas(frame, npartitions=6), connection, "dask")
            got = quiver_dask.read_table(connection, "dask").compute()
    finally:
        local.close()
    assert got.sort_values("id").reset_index(drop=True).equals(frame)
    info = info_of(cluster.flight_client("n1"), "dask")
    nodes = [cluster.uri(n) for n in sorted(NODES)]  # the job's order: by node id
    assert [e.locations[0].uri.decode() for e in info.endpoints] == [nodes[i % 3] for i in range(6)]


def test_a_node_killed_before_a_read_leaves_the_read_whole(cluster: Cluster) -> None:
    table = ids(300_000)
    with cluster.client("n1") as c:
        c.put("big", table)
    # Planned with n2 alive; n2 dies before the endpoints are read: every partition
    # it held is read from its other replica.
    info = info_of(cluster.flight_client("n1"), "big")
    cluster.kill("n2")
    with cluster.client("n1") as c:
        got = c.get("big")
    assert got.sort_by("id").equals(table)
    # The engines' splits (one per endpoint) fail over the same way.
    plan = splits.plan_read(cluster.connection("n3"), "big")
    assert len(plan.splits) == len(info.endpoints)
    parts = [
        pa.Table.from_batches(list(splits.read_split(plan, s)), plan.schema) for s in plan.splits
    ]
    assert pa.concat_tables(parts).sort_by("id").equals(table)


def test_a_node_killed_during_a_put_leaves_the_put_whole_or_absent(cluster: Cluster) -> None:
    with cluster.client("n1") as c:
        c.put("t", ids(10))
    outcome: dict[str, object] = {}

    def put() -> None:
        try:
            with cluster.client("n1") as c:
                outcome["result"] = c.put("t", ids(4_000_000, 10), mode="append")
        except quiver.QuiverError as e:
            outcome["error"] = e

    thread = threading.Thread(target=put)
    thread.start()
    time.sleep(0.3)
    cluster.kill("n3")
    thread.join(timeout=60)
    assert not thread.is_alive()
    with cluster.client("n2") as c:
        got = c.get("t").column("id")
    if "result" in outcome:
        assert len(got) == 4_000_010
        assert pc.max(got).as_py() == 4_000_009
    else:
        # Failed cleanly: the table is exactly as it was.
        assert isinstance(outcome["error"], quiver.QuiverError), outcome
        assert got.to_pylist() == list(range(10))


def test_a_lost_nodes_partitions_are_copied_again(cluster: Cluster) -> None:
    table = ids(90_000)
    with cluster.client("n1") as c:
        c.put("t", table, partitions=6)
    before = cluster.status()
    assert before["under_replicated"] == 0
    cluster.kill("n3")

    def repaired() -> bool:
        status = cluster.status()
        parts = [p for t in status["tables"] for p in t["partitions"]]  # type: ignore[attr-defined]
        return (
            len(status["nodes"]) == 2  # type: ignore[arg-type]
            and status["under_replicated"] == 0
            and all(sorted(p["replicas"]) == ["n1", "n2"] for p in parts)
        )

    wait_until("n3's partitions copied to n1 and n2", repaired, timeout=10 * LEASE_TTL_S + 20)
    # Both survivors hold everything: either alone serves the whole table.
    cluster.kill("n2")
    with cluster.client("n1") as c:
        assert c.get("t").sort_by("id").equals(table)
    # A node that joins takes new partitions.
    cluster.start("n3")
    wait_until("n3 back", lambda: len(cluster.status()["nodes"]) == 2)  # type: ignore[arg-type]
    with cluster.client("n3") as c:
        c.put("fresh", ids(1000), partitions=4)
        assert c.get("fresh").equals(ids(1000))


def copies_on(status: dict[str, object], node: str) -> int:
    """How many partition copies the catalog lists on ``node``."""
    parts = [p for t in status["tables"] for p in t["partitions"]]  # type: ignore[attr-defined]
    return sum(node in p["replicas"] for p in parts)


def test_a_node_that_joins_takes_its_share_while_readers_read(etcd: Etcd, tmp_path: Path) -> None:
    """A table of 12 partitions put on n1 and n2 (two copies each: 24 copies), then n3
    joins: copies move to n3 until each node holds a third (8), while readers through
    n1 and n2 read the whole table without a failure; the copies moved away are
    dropped, and n1's memory with them. Before rebalancing, n3 got nothing."""
    nodes = Cluster(etcd, tmp_path)
    for node_id in ("n1", "n2"):
        nodes.start(node_id, "--orphan-grace", "1", "--query-timeout", "5")
    try:
        wait_until("two live nodes", lambda: len(nodes.status()["nodes"]) == 2)  # type: ignore[arg-type]
        table = ids(1_200_000)
        expected = pc.sum(table["id"]).as_py()
        with nodes.client("n1") as c:
            c.put("t", table, partitions=12)
            before = c.stats().memory_used
        stop = threading.Event()
        reads: list[str] = []
        failures: list[str] = []

        def read() -> None:
            for i in range(500):  # bounded in count, and by the test's time
                if stop.is_set():
                    return
                node = ("n1", "n2")[i % 2]
                try:
                    with nodes.client(node, timeout=20) as c:
                        got = c.get("t")
                        [row] = c.sql("SELECT count(*) AS n, sum(id) AS s FROM t").to_pylist()
                    if (got.num_rows, pc.sum(got["id"]).as_py()) != (table.num_rows, expected):
                        failures.append(f"{node}: get gave {got.num_rows} rows")
                    if (row["n"], row["s"]) != (table.num_rows, expected):
                        failures.append(f"{node}: SQL gave {row}")
                    reads.append(node)
                except quiver.QuiverError as error:
                    failures.append(f"{node}: {error}")

        reader = threading.Thread(target=read)
        reader.start()
        try:
            time.sleep(1.0)
            nodes.start("n3", "--orphan-grace", "1", "--query-timeout", "5")
            wait_until(
                "a third of the copies on each node",
                lambda: [copies_on(nodes.status(), n) for n in NODES] == [8, 8, 8],
                60,
            )
            time.sleep(1.0)
        finally:
            stop.set()
            reader.join(timeout=120)
        assert not reader.is_alive(), "the reader hung"
        assert not failures, failures[:5]
        assert len(reads) >= 4, reads
        status = nodes.status()
        assert status["under_replicated"] == 0, status
        # The copies moved away are dropped once their readers' hold (5 s) ends.
        with nodes.client("n1") as c:
            wait_until(
                "n1 drops the copies it gave away",
                lambda: c.stats().memory_used < before * 3 // 4,
                40,
            )
        for node in NODES:
            with nodes.client(node) as c:
                assert c.get("t").sort_by("id").equals(table), node
    finally:
        failures = nodes.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def test_rebalancing_turned_off_moves_no_copy_until_turned_on(etcd: Etcd, tmp_path: Path) -> None:
    """``quiver cluster rebalance off`` (for maintenance, say): a node that joins gets no
    copies while the nodes tend the cluster every 250 ms; ``on`` again, it takes its
    share. ``cluster status`` says which."""
    nodes = Cluster(etcd, tmp_path)
    for node_id in ("n1", "n2"):
        nodes.start(node_id)
    try:
        wait_until("two live nodes", lambda: len(nodes.status()["nodes"]) == 2)  # type: ignore[arg-type]
        table = ids(60_000)
        with nodes.client("n1") as c:
            c.put("t", table, partitions=6)
        assert nodes.status()["rebalance"] is True
        nodes.rebalance(on=False)
        assert nodes.status()["rebalance"] is False
        nodes.start("n3")
        wait_until("three live nodes", lambda: len(nodes.status()["nodes"]) == 3)  # type: ignore[arg-type]
        # A dozen upkeep ticks: with rebalancing on, copies move within the first few.
        time.sleep(3.0)
        assert [copies_on(nodes.status(), n) for n in NODES] == [6, 6, 0]
        nodes.rebalance(on=True)
        wait_until(
            "a third of the copies on each node",
            lambda: [copies_on(nodes.status(), n) for n in NODES] == [4, 4, 4],
            60,
        )
        for node in NODES:
            with nodes.client(node) as c:
                assert c.get("t").sort_by("id").equals(table), node
    finally:
        failures = nodes.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def test_of_two_concurrent_commits_exactly_one_wins(cluster: Cluster) -> None:
    with cluster.client("n1") as a, cluster.client("n2") as b:
        a.put("s1", ids(5))
        b.put("s2", ids(7, 100))
        results: dict[str, object] = {}
        barrier = threading.Barrier(2)

        def rename(name: str, client: quiver.Client) -> None:
            barrier.wait(timeout=10)
            try:
                results[name] = client.rename(name, "target")
            except quiver.QuiverError as e:
                results[name] = e

        threads = [
            threading.Thread(target=rename, args=("s1", a)),
            threading.Thread(target=rename, args=("s2", b)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        errors = [r for r in results.values() if isinstance(r, quiver.QuiverError)]
        assert len(results) == 2 and len(errors) == 1, results
        assert isinstance(errors[0], quiver.AlreadyExistsError)
        winner = next(n for n, r in results.items() if not isinstance(r, quiver.QuiverError))
        expected = ids(5) if winner == "s1" else ids(7, 100)
        assert a.get("target").equals(expected)
        names = sorted(t.name for t in a.list_tables())
        assert names == sorted(["target", "s2" if winner == "s1" else "s1"])

        # Concurrent appends all land: each commit is retried on the version it lost to.
        def append(start: int, client: quiver.Client) -> None:
            for i in range(5):
                client.put("target", pa.table({"id": [start + i]}), mode="append")

        threads = [
            threading.Thread(target=append, args=(1000, a)),
            threading.Thread(target=append, args=(2000, b)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        got = set(a.get("target").column("id").to_pylist())
        assert {*range(1000, 1005), *range(2000, 2005)} <= got
        assert a.info("target").num_rows == expected.num_rows + 10


def test_with_etcd_gone_nodes_serve_what_they_have_and_refuse_commits(
    cluster: Cluster, etcd: Etcd
) -> None:
    table = ids(20_000)
    with cluster.client("n1") as c:
        c.put("t", table)
    # Each node reads the catalog four times a second: what it serves without etcd is what
    # it last read.
    time.sleep(2)
    etcd.stop()
    with cluster.client("n2") as c:
        assert c.get("t").sort_by("id").equals(table)
        started = time.monotonic()
        with pytest.raises(quiver.ServerUnavailableError, match="etcd"):
            c.put("t", ids(5), mode="append")
        assert time.monotonic() - started < 30
    etcd.start()

    def commits() -> bool:
        try:
            with cluster.client("n3") as c:
                c.put("t", ids(5, 20_000), mode="append")
            return True
        except quiver.ServerUnavailableError:
            return False

    wait_until("commits after etcd is back", commits, timeout=30)
    with cluster.client("n1") as c:
        assert c.get("t").num_rows == 20_005


def test_a_node_cut_off_by_the_network_is_replaced_then_rejoins(tmp_path: Path) -> None:
    """In a network namespace of the test's own, iptables drops everything n3 sends,
    while three writers append through n1, n2 and n3 under the checker."""
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        reason = f"needs root and {', '.join(missing) or 'ip, iptables'} for a network namespace"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    namespace = f"quiver-partition-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        loopback_up = ["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"]
        subprocess.run(loopback_up, check=True)
        script = Path(__file__).with_name("cluster_partition.py")
        result = subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, str(script), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    assert result.returncode == 0, result.stdout + result.stderr[-6000:]
    steps = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [s["step"] for s in steps] == [
        "spread",
        "cut",
        "replaced",
        "served while cut off",
        "healed",
        "rejoined",
        "checked",
    ]
    assert "n3" not in steps[2]["replicas"]
    # Appends through n1 and n2 went on after n3 was cut off, and the checker found every
    # acknowledged one once (the script fails otherwise).
    assert steps[-1]["acknowledged_since_cut"] > 0, steps[-1]
    print(steps[-1])


def test_partitions_no_version_holds_are_dropped(etcd: Etcd, tmp_path: Path) -> None:
    nodes = Cluster(etcd, tmp_path)
    for node_id in NODES:
        nodes.start(node_id, "--orphan-grace", "1", "--query-timeout", "8")
    try:
        with nodes.client("n1") as c:
            c.put("t", ids(3000))
            # Handed to a reader: held for --query-timeout (8 s) from now.
            old = info_of(nodes.flight_client("n1"), "t").endpoints
            handed_out = time.monotonic()
            c.put("t", ids(10, 5000))

        def read_old(endpoint: flight.FlightEndpoint) -> bool:
            client = nodes.flight_client(endpoint.locations[0].uri.decode())
            try:
                client.do_get(endpoint.ticket).read_all()
                return True
            except pa.ArrowKeyError:  # NOT_FOUND: dropped
                return False
            finally:
                client.close()

        # Replaced, the old version's partitions stay readable past --orphan-grace for
        # the reader that was handed them (before readers were held, they were
        # dropped a second or two after the put), then every copy is dropped.
        time.sleep(3)
        assert time.monotonic() - handed_out < 7, "too slow to check the hold"
        assert all(read_old(e) for e in old)
        wait_until("old partitions dropped", lambda: not any(read_old(e) for e in old), 40)
        with nodes.client("n2") as c:
            assert c.get("t").equals(ids(10, 5000))
    finally:
        failures = nodes.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def test_table_limits_bound_a_cluster_table_across_appends(etcd: Etcd, tmp_path: Path) -> None:
    # Each append's partitions are small; the table they make is what is limited.
    nodes = Cluster(etcd, tmp_path)
    for node_id in NODES:
        nodes.start(node_id, "--max-table-rows", "100")
    try:
        with nodes.client("n1") as c:
            c.put("t", ids(60), partitions=3)
            c.put("t", ids(40, 60), mode="append", partitions=2)
            with pytest.raises(quiver.ResourceExhaustedError, match="--max-table-rows") as over:
                c.put("t", ids(1, 100), mode="append")
            assert over.value.kind == "TABLE_LIMIT"
        for node_id in NODES:
            with nodes.client(node_id) as c:
                assert c.get("t").sort_by("id").equals(ids(100))
    finally:
        failures = nodes.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def anon_rss(pid: int) -> int:
    """Process ``pid``'s anonymous resident memory, in bytes: its heap, not the
    pages of the files it maps (a durable node's stored tables)."""
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("RssAnon:"))
    return int(line.split()[1]) * 1024


def test_a_put_four_times_a_nodes_memory_is_streamed_to_its_replicas(
    etcd: Etcd, tmp_path: Path
) -> None:
    # --max-memory 128MiB: a node gathers 16 MiB of a put, ships it as a partition
    # while the next rows arrive, and holds at most three such buffers of it. Durable
    # nodes keep stored tables in files, so a put of 512 MiB goes through n1 whole,
    # and n1's heap stays far below the put's size while it does.
    nodes = Cluster(etcd, tmp_path)
    for node_id in NODES:
        nodes.start(node_id, "--max-memory", "128MiB", data_dir=True)
    batches, rows = 512, 1 << 17  # 1 MiB of int64 a batch
    schema = pa.schema([("id", pa.int64())])

    def generate() -> Iterator[pa.RecordBatch]:
        for i in range(batches):
            yield pa.record_batch([pa.array(np.arange(i * rows, (i + 1) * rows))], schema=schema)

    pid = nodes.nodes["n1"].process.pid
    peak, stop = [anon_rss(pid)], threading.Event()

    def sample() -> None:
        for _ in range(100_000):
            if stop.wait(0.02):
                return
            peak.append(anon_rss(pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with nodes.client("n1") as c:
            try:
                put = c.put("big", pa.RecordBatchReader.from_batches(schema, generate()))
            finally:
                stop.set()
                sampler.join()
            total = batches * rows
            assert put.rows == total
            info = c.info("big")
            assert info.partitions >= batches // 16, info
        for node_id in NODES:
            with nodes.client(node_id) as c:
                result = c.sql("SELECT count(*) AS n, sum(id) AS s, min(id) AS lo FROM big")
                assert result.to_pylist() == [{"n": total, "s": total * (total - 1) // 2, "lo": 0}]
        grown = max(peak) - peak[0]
        assert grown < 256 << 20, f"n1's heap grew by {grown >> 20} MiB during a 512 MiB put"
    finally:
        failures = nodes.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def test_a_table_appended_row_by_row_keeps_a_small_catalog_entry(cluster: Cluster) -> None:
    # Every append adds a partition to the table's one etcd value; past 64 the
    # small ones are merged, in order, so the value stops growing with the appends.
    appends = 300
    clients = [cluster.client(node_id) for node_id in NODES]
    try:
        clients[0].put("log", ids(1), partitions=1)
        for i in range(1, appends):
            clients[i % 3].put("log", ids(1, i), mode="append", partitions=1)

        def partitions() -> int:
            metadata = info_of(cluster.flight_client(NODES[0]), "log").app_metadata
            return int(json.loads(metadata)["partitions"])

        wait_until("small partitions merged", lambda: partitions() <= 64, 60)
        for client in clients:
            assert client.get("log").equals(ids(appends))
    finally:
        for client in clients:
            client.close()


def test_a_client_on_a_nodes_host_reads_its_partitions_over_shared_memory(
    etcd: Etcd, tmp_path: Path
) -> None:
    nodes = Cluster(etcd, tmp_path)
    for node_id in NODES:
        nodes.start(node_id, shm=True)
    try:
        wait_until("three live nodes", lambda: len(nodes.status()["nodes"]) == 3)  # type: ignore[arg-type]
        table = ids(300_000)
        table = table.append_column("half", pc.divide(table["id"], 2))
        # A put over shared memory is spread and replicated as a put over gRPC is.
        with nodes.client("n1", transport="shm") as c:
            assert c.put("t", table, partitions=6).version == 1
            assert c.put("u", ids(10), partitions=3).version == 1
            assert c.put("u", ids(5), mode="append").rows == 15
        assert nodes.status()["under_replicated"] == 0
        appended = pa.concat_tables([ids(10), ids(5)]).sort_by("id")
        for node_id in NODES:
            with nodes.client(node_id, transport="grpc") as c:
                assert c.get("u").sort_by("id").equals(appended), node_id
        info = quiver_shm_info(nodes.flight_client("n2"), "t")
        local = [e for e in info.endpoints if e.locations[0].uri.startswith(b"shm+")]
        # n2 holds four of the six partitions (two copies round a ring of three).
        assert len(local) == 4
        assert len(info.endpoints) == 6
        for node_id in NODES:
            # "shm" requires shared memory: the node's own partitions come through it,
            # the others over gRPC, in table order.
            with nodes.client(node_id, transport="shm") as c:
                assert c.get("t").equals(table)
            with nodes.client(node_id) as c:
                assert c.get("t").equals(table)

        # The engines' splits of a cluster table on the nodes' host: each is read through
        # the shared memory of the first node holding it (every node is local here), with
        # the plan's columns; no DoGet, and no GetFlightInfo of a partition's storage.
        def partition_gets() -> int:
            logs = [nodes.nodes[n].log() for n in NODES]
            return sum(
                1
                for log in logs
                for line in log.splitlines()
                if "DoGet" in line and ".quiver-part/" in line
            )

        before = partition_gets()
        for transport in ("shm", "auto"):
            plan = splits.plan_read(
                nodes.connection("n2", transport=transport), "t", columns=["id"]
            )
            parts = [
                pa.Table.from_batches(list(splits.read_split(plan, s)), plan.schema)
                for s in plan.splits
            ]
            assert pa.concat_tables(parts).equals(table.select(["id"])), transport
        assert partition_gets() == before, "a split was read by DoGet"
        refused = [n for n in NODES if "kept for quiver's own storage" in nodes.nodes[n].log()]
        assert refused == [], f"GetFlightInfo of a partition's storage asked of {refused}"
        # Over gRPC the same split is a DoGet, logged as such.
        plan = splits.plan_read(nodes.connection("n2", transport="grpc"), "t")
        assert pa.Table.from_batches(list(splits.read_split(plan, plan.splits[0]))).num_rows > 0
        wait_until("the gRPC split's DoGet logged", lambda: partition_gets() > before)
        # Planned before a replace: "shm" asks to plan again; "auto" reads the replaced
        # version's partitions, held for the plan's readers, over gRPC.
        shm = splits.plan_read(nodes.connection("n2", transport="shm"), "t")
        auto = splits.plan_read(nodes.connection("n2"), "t")
        with nodes.client("n1") as c:
            assert c.put("t", ids(10)).version == 2
        with pytest.raises(quiver.VersionConflictError, match="plan again"):
            list(splits.read_split(shm, shm.splits[0]))
        assert auto.read().equals(table)
    finally:
        failures = nodes.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def test_a_split_whose_copy_moved_is_read_from_its_next_location_over_shared_memory(
    etcd: Etcd, tmp_path: Path
) -> None:
    """Splits planned on two nodes, read after a third joined and took its share: a split
    whose first location gave its copy away (and dropped it, the plan's hold over) is
    read from the next one, through shared memory with ``transport="shm"``."""
    nodes = Cluster(etcd, tmp_path)
    # A copy given away is dropped a second after the plan's hold of a second ends.
    grace = ("--orphan-grace", "1", "--query-timeout", "1")
    for node_id in ("n1", "n2"):
        nodes.start(node_id, *grace, shm=True)
    try:
        wait_until("two live nodes", lambda: len(nodes.status()["nodes"]) == 2)  # type: ignore[arg-type]
        table = ids(120_000)
        with nodes.client("n1") as c:
            c.put("t", table, partitions=6)
        plans = {
            transport: splits.plan_read(nodes.connection("n1", transport=transport), "t")
            for transport in ("shm", "auto")
        }
        nodes.start("n3", *grace, shm=True)
        wait_until(
            "a third of the copies on each node",
            lambda: [copies_on(nodes.status(), n) for n in NODES] == [4, 4, 4],
            60,
        )
        holders = [
            {loc.uri.decode() for loc in e.locations}
            for e in info_of(nodes.flight_client("n1"), "t").endpoints
        ]

        def dropped() -> int:
            """How many copies the nodes given them away have dropped (their logs say)."""
            found = (
                re.search(r"dropped\W+(\d+)", line)
                for node in ("n1", "n2")
                for line in nodes.nodes[node].log().splitlines()
                if "dropped partitions no version holds" in line
            )
            return sum(int(match[1]) for match in found if match)

        wait_until("the copies given away dropped", lambda: dropped() == 4, 30)
        # Which copies moved varies: each split that lost one is read as a plan made
        # before the move may list it, with the node that gave its copy away first.
        for transport, plan in plans.items():
            moved = [
                dataclasses.replace(
                    split,
                    locations=tuple(
                        sorted(split.locations, key=lambda uri: uri in holders[split.index])
                    ),
                )
                for split in plan.splits
                if not set(split.locations) <= holders[split.index]
            ]
            assert len(moved) == 4, (moved, holders)
            for split in moved:
                assert split.locations[0] not in holders[split.index]
                got = pa.Table.from_batches(list(splits.read_split(plan, split)), plan.schema)
                assert got.equals(table.slice(split.index * 20_000, 20_000)), transport
    finally:
        failures = nodes.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def quiver_shm_info(client: flight.FlightClient, name: str) -> flight.FlightInfo:
    """GetFlightInfo through ``client`` (closed after) as a quiver client on this host asks
    it: shared memory wanted."""
    try:
        options = flight.FlightCallOptions(headers=[TRANSPORT_HEADER])
        return client.get_flight_info(flight.FlightDescriptor.for_path(name), options)
    finally:
        client.close()


def test_a_single_node_without_cluster_is_unchanged(start_quiver) -> None:  # type: ignore[no-untyped-def]
    server = start_quiver()
    with quiver.connect(server.uri) as c:
        c.put("t", ids(10))
        info = info_of(flight.FlightClient(server.uri), "t")
        assert "cluster" not in json.loads(info.app_metadata or b"{}")
    assert "cluster" not in server.log().lower()


def test_checker_acknowledged_appends_survive_kills_and_none_is_torn(
    etcd: Etcd, tmp_path: Path
) -> None:
    """Concurrent appends from three clients while nodes are killed and restarted."""
    nodes = Cluster(etcd, tmp_path)
    for node_id in NODES:
        nodes.start(node_id, data_dir=True)
    try:
        with nodes.client("n1") as c:
            c.put("log", nemesis.LOG_SCHEMA.empty_table())

        def uri(writer: int, seq: int) -> str:
            return nodes.uri(NODES[(writer + seq) % 3])

        with nemesis.Writers(
            "log", uri, count=3, every=0.0, max_appends=200, connect=nodes.client
        ) as writers:
            deadline = time.monotonic() + 40  # bounded in time
            for victim in ("n2", "n3", "n2"):
                if time.monotonic() > deadline:
                    break
                time.sleep(1.0)
                nodes.kill(victim)
                time.sleep(LEASE_TTL_S + 2)
                nodes.start(victim, data_dir=True)
            time.sleep(1.0)
        assert len(writers.record.acknowledged) > 10

        def read() -> pa.Table | None:
            try:
                with nodes.client("n1") as c:
                    return c.get("log")
            except quiver.QuiverError:
                return None

        wait_until("a whole read of the log", read, timeout=30)
        # Every acknowledged append is there once, none in part, nothing never attempted.
        problems = nemesis.check(
            [nodes.uri(n) for n in NODES],
            "log",
            writers.record,
            connect=nodes.client,
            flight_client=nodes.flight_client,
        )
        assert not problems, problems
    finally:
        failures = nodes.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def test_apply_reads_every_partition_of_a_cluster_table(etcd: Etcd, tmp_path: Path) -> None:
    table = pa.Table.from_batches([features(30_000, seed=5)])
    cluster = Cluster(etcd, tmp_path)
    try:
        for node_id in NODES:
            cluster.start(node_id, *function_flags(workers=1))
        wait_until("three live nodes", lambda: len(cluster.status()["nodes"]) == 3)  # type: ignore[arg-type]
        with cluster.client("n2") as c:
            put = c.put("features", table, partitions=3)
            # Each node holds some partitions, none all: apply must read them from the others.
            result = c.apply("score", source="features", into="scores")
            assert (result.table, result.rows, result.source_version) == (
                "scores", table.num_rows, put.version,
            )  # fmt: skip
            streamed = c.apply("score", source="features")
        expected = expected_scores(table)
        np.testing.assert_array_equal(streamed["score"].to_numpy(), expected)
        # The results are a cluster table, read whole through any node.
        with cluster.client("n3") as c:
            np.testing.assert_array_equal(c.get("scores")["score"].to_numpy(), expected)
        status = cluster.status()
        assert status["under_replicated"] == 0
        assert sorted(t["name"] for t in status["tables"]) == ["features", "scores"]  # type: ignore[attr-defined]
    finally:
        failures = cluster.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
