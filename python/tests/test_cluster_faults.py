"""The cluster under faults: no acknowledged write lost, no write stalled by one bad node.

Real etcd, three real nodes on 127.0.0.1-3 (cluster_helpers.py), faults a user meets:
a node paused (SIGSTOP) for less and for more than its lease, a node killed in the
middle of steady appends, a second process started with a live node's id, the node a
put goes through frozen while it copies, etcd restarted. (A network partition runs in a
namespace of its own: test_cluster.py.) The checker of nemesis.py reads every
acknowledged append back through every node and every listed copy.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import quiver
from cluster_helpers import NODES, Cluster, Etcd, wait_until
from nemesis import LOG_SCHEMA, Writers, check, every_copy, p99
from server_process import quiver_bin


def ids(rows: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + rows), pa.int64())})


def start_cluster(etcd: Etcd, tmp_path: Path, *flags: str, lease_ttl: int = 2) -> Cluster:
    nodes = Cluster(etcd, tmp_path, lease_ttl=lease_ttl)
    for node_id in NODES:
        nodes.start(node_id, *flags)
    wait_until("three live nodes", lambda: len(nodes.status()["nodes"]) == 3)  # type: ignore[arg-type]
    return nodes


def stop_cluster(nodes: Cluster) -> None:
    for node_id, server in nodes.nodes.items():
        if server.alive():
            nodes.resume(node_id)
    failures = nodes.stop_all()
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


def fully_replicated(nodes: Cluster) -> bool:
    status = nodes.status()
    return status["under_replicated"] == 0 and status["unavailable"] == 0


def uris(nodes: Cluster) -> list[str]:
    return [nodes.uri(n) for n in NODES if nodes.nodes[n].alive()]


def test_a_put_while_a_replica_is_paused_keeps_every_acknowledged_row(
    etcd: Etcd, tmp_path: Path
) -> None:
    """n3 frozen for 5 s while a put through n1 copies to it: longer than the orphan
    grace (1 s), shorter than the lease (8 s). Before puts in flight were known to the
    cluster, n1 and n2 dropped the put's copies as orphans while it waited on n3, and
    the acknowledged put had no live copy of two of its partitions."""
    nodes = start_cluster(etcd, tmp_path, "--orphan-grace", "1", lease_ttl=8)
    try:
        table = ids(600_000)
        nodes.pause("n3")
        resume = threading.Timer(5.0, nodes.resume, args=("n3",))
        resume.start()
        try:
            with nodes.client("n1", timeout=30) as c:
                assert c.put("t", table, partitions=6).version == 1
        finally:
            resume.join()
        # Past the grace, several upkeep rounds on every node.
        time.sleep(4.0)
        wait_until("every partition fully replicated", lambda: fully_replicated(nodes), 30)
        for uri in uris(nodes):
            with nodes.client(uri) as c:
                assert c.get("t").equals(table), uri
        for at, copy in every_copy(nodes.uri("n2"), "t", nodes.flight_client):
            assert not isinstance(copy, str), f"{at}: {copy}"
    finally:
        stop_cluster(nodes)


def test_an_append_whose_replica_freezes_is_copied_to_another_node_at_once(
    etcd: Etcd, tmp_path: Path
) -> None:
    """n3 frozen (SIGSTOP), then appends of one row through n1, before a probe finds n3
    out (2 s). An append's copy to n3 lags behind its partition's other copy: n1 tries
    the third node too instead of waiting for n3's missed HTTP/2 pings, and the append
    commits on n1 and n2. Before, the copy waited for the pings (3 s) and the next
    appends passed n3 over as a suspect, so n1 never tried another node beside it."""
    nodes = start_cluster(etcd, tmp_path, lease_ttl=8)
    n1 = nodes.nodes["n1"]
    appended = 0
    try:
        with nodes.client("n1", timeout=30) as c:
            c.put("log", ids(0))
            nodes.pause("n3")
            try:
                for i in range(20):  # each goes to n3 with odds of 2 in 3
                    c.put("log", ids(1, i), mode="append", partitions=1)
                    appended += 1
                    if "trying another node too" in n1.log():
                        break
            finally:
                nodes.resume("n3")
            assert "trying another node too" in n1.log(), f"{appended} appends"
            assert c.get("log").equals(ids(appended))
    finally:
        stop_cluster(nodes)


def test_appends_go_on_when_a_node_is_killed(etcd: Etcd, tmp_path: Path) -> None:
    """Appends every 100 ms through n1 and queries through n2; n3 is SIGKILLed. Its
    partitions have other places to go, so no append waits for its lease to end, and
    no query fails."""
    nodes = start_cluster(etcd, tmp_path)
    try:
        with nodes.client("n1") as c:
            c.put("log", LOG_SCHEMA.empty_table())
        query_failures: list[str] = []
        queries = 0
        with Writers(
            "log", lambda w, s: nodes.uri("n1"), count=1, every=0.1, connect=nodes.client
        ) as writers:
            time.sleep(2.0)
            killed_at = time.monotonic()
            nodes.kill("n3")
            deadline = killed_at + 6.0  # bounded in time, past the 2 s lease
            while time.monotonic() < deadline:
                queries += 1
                try:
                    with nodes.client("n2", timeout=10) as c:
                        c.sql("SELECT count(*) AS n, sum(seq) AS s FROM log")
                except quiver.QuiverError as error:
                    query_failures.append(str(error)[:300])
                time.sleep(0.05)
        record = writers.record
        after_kill = record.failures_between(killed_at, time.monotonic())
        latencies = [d for t, d in record.latencies if t >= killed_at]
        assert len(record.acknowledged) > 40
        assert len(after_kill) <= 1, after_kill
        # Every partition keeps a live copy: a query that meets n3 is planned again.
        assert not query_failures, (queries, query_failures)
        assert not check(uris(nodes), "log", record, nodes.client, nodes.flight_client)
        print(f"p99 append after the kill: {p99(latencies):.3f} s; queries {queries}")
    finally:
        stop_cluster(nodes)


def test_a_second_process_with_a_live_nodes_id_refuses_to_start(etcd: Etcd, tmp_path: Path) -> None:
    nodes = start_cluster(etcd, tmp_path)
    try:
        with nodes.client("n1") as c:
            c.put("t", ids(3000))
        duplicate = subprocess.run(
            [
                str(quiver_bin()),
                "serve",
                "--listen",
                "127.0.0.2:0",
                "--shm-socket",
                "off",
                "--cluster",
                etcd.url,
                *nodes.access_flags("n2"),
                "--node-id",
                "n2",
                "--lease-ttl",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert duplicate.returncode != 0
        assert f"node id 'n2' is in use by a live node at {nodes.uri('n2')}" in (
            duplicate.stderr
        ), duplicate.stderr[-2000:]
        # The original is untouched: listed, holding its copies, taking puts.
        status = nodes.status()
        assert sorted(n["id"] for n in status["nodes"]) == ["n1", "n2", "n3"]  # type: ignore[index, union-attr]
        with nodes.client("n2") as c:
            c.put("u", ids(3000))
            assert c.get("t").equals(ids(3000))
        assert fully_replicated(nodes)
    finally:
        stop_cluster(nodes)


def test_a_node_restarted_after_a_kill_waits_out_its_old_lease(etcd: Etcd, tmp_path: Path) -> None:
    """The key a killed node leaves lasts until its lease ends: the new process of the
    same id waits for that instead of refusing."""
    nodes = start_cluster(etcd, tmp_path)
    try:
        nodes.kill("n2")
        nodes.start("n2")
        wait_until("three live nodes", lambda: len(nodes.status()["nodes"]) == 3)  # type: ignore[arg-type]
    finally:
        stop_cluster(nodes)


def test_a_node_paused_past_its_lease_rejoins_and_nothing_acknowledged_is_lost(
    etcd: Etcd, tmp_path: Path
) -> None:
    """Appends through all three nodes while each in turn is frozen: n3 for less than
    its lease, n1 (a node the appends go through, caught mid-put) for more, n2 for
    more. A frozen writer's put either fails or is whole: its intent ends with its
    lease, and a commit without its intent is refused."""
    nodes = start_cluster(etcd, tmp_path, "--orphan-grace", "1")
    try:
        with nodes.client("n1") as c:
            c.put("log", LOG_SCHEMA.empty_table())
        with Writers(
            "log",
            lambda w, s: nodes.uri(NODES[w % 3]),
            count=3,
            every=0.05,
            connect=nodes.client,
        ) as writers:
            for victim, pause in (("n3", 1.0), ("n1", 5.0), ("n2", 5.0)):
                time.sleep(1.0)
                nodes.pause(victim)
                time.sleep(pause)
                nodes.resume(victim)
            time.sleep(3.0)
        wait_until("three live nodes", lambda: len(nodes.status()["nodes"]) == 3)  # type: ignore[arg-type]
        wait_until("every partition fully replicated", lambda: fully_replicated(nodes), 30)
        assert len(writers.record.acknowledged) > 30
        problems = check(uris(nodes), "log", writers.record, nodes.client, nodes.flight_client)
        assert not problems, problems
    finally:
        stop_cluster(nodes)


def test_etcd_restarted_under_steady_appends_loses_nothing_acknowledged(
    etcd: Etcd, tmp_path: Path
) -> None:
    """Appends through all three nodes while etcd is stopped twice and started again on
    its data: for 1 s, and for 5 s (past the nodes' 2 s lease). Commits fail while it
    is gone; afterwards every acknowledged append is there exactly once. etcd keeps the
    nodes' leases over its restarts, and the nodes renew them rather than registering
    again (before, each took a new lease and left its puts in flight with intents under
    the old one, which nobody renewed)."""
    nodes = start_cluster(etcd, tmp_path, "--orphan-grace", "1")
    try:
        with nodes.client("n1") as c:
            c.put("log", LOG_SCHEMA.empty_table())
        with Writers(
            "log",
            lambda w, s: nodes.uri(NODES[(w + s) % 3]),
            count=3,
            every=0.05,
            connect=nodes.client,
        ) as writers:
            outages = []
            for down in (1.0, 5.0):
                time.sleep(1.5)
                # From here etcd may refuse or drop a request: its stop has begun.
                stopping = time.monotonic()
                etcd.stop()
                time.sleep(down)
                etcd.start()
                answers = wait_until("etcd answers", lambda: etcd_answers(nodes), 30)
                outages.append((stopping, answers))
            time.sleep(4.0)
        wait_until("three live nodes", lambda: len(nodes.status()["nodes"]) == 3)  # type: ignore[arg-type]
        record = writers.record
        during = [f for start, end in outages for f in record.failures_between(start, end)]
        # Appends that started after etcd's first answer following a restart and ended
        # before the next outage began (or by the end): at most one failed append per
        # writer and outage. An append still in flight when the next stop began may have
        # failed because of that stop, and is that outage's.
        ends = [start for start, _ in outages[1:]] + [time.monotonic()]
        after = [
            (f[0] - answered, f[1], f[2])
            for (_, answered), end in zip(outages, ends, strict=True)
            for f in record.failures_between(answered, end)
            if f[3] < end
        ]
        print(
            f"acknowledged {len(record.acknowledged)}, failed {len(record.failed)} "
            f"({len(during)} while etcd was down, {len(after)} after it answered: "
            f"{sorted(round(f[0], 2) for f in after)} s after)"
        )
        for f in after:
            print(f"  writer {f[1]}, {f[0]:.2f} s after etcd answered: {f[2]}")
        worst = max((sum(f[1] == w for f in after) for w in range(3)), default=0)
        assert worst <= len(outages), after
        for node_id, server in nodes.nodes.items():
            assert "registered again" not in server.log(), f"{node_id} took a new lease"
        problems = check(uris(nodes), "log", record, nodes.client, nodes.flight_client)
        assert not problems, problems
        wait_until("every partition fully replicated", lambda: fully_replicated(nodes), 30)
    finally:
        stop_cluster(nodes)


def etcd_answers(nodes: Cluster) -> float | None:
    """When etcd answered a read of the catalog (it elected its leader), if it did."""
    try:
        nodes.status()
    except AssertionError:
        return None
    return time.monotonic()


def test_a_put_retried_with_its_request_id_is_committed_once(etcd: Etcd, tmp_path: Path) -> None:
    """A client that lost the answer to an append retries it, through another node, with
    the same request id: it gets the first commit's result, and the rows are there once."""
    nodes = start_cluster(etcd, tmp_path)
    try:
        with nodes.client("n1") as c:
            c.put("log", ids(10))
            first = c.put("log", ids(5, 100), mode="append", request_id="append-1")
        with nodes.client("n2") as c:
            again = c.put("log", ids(5, 100), mode="append", request_id="append-1")
            assert again == first
            assert c.get("log").num_rows == 15
            other = c.put("log", ids(5, 200), mode="append", request_id="append-2")
            assert (other.version, other.rows) == (first.version + 1, 20)
            with pytest.raises(quiver.InvalidArgumentError, match="request id 'append-1'"):
                c.put("elsewhere", ids(1), request_id="append-1")
    finally:
        stop_cluster(nodes)
