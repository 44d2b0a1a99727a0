"""A node cut off from the cluster by the network, then healed (run inside a netns).

Writers append to a log through each of the three nodes the whole time (the cut node
included: it must acknowledge nothing it cannot commit), and the checker of nemesis.py
reads every acknowledged append back through every node and copy at the end.

``test_cluster.py`` runs this script in a network namespace of its own
(``ip netns exec``), where everything listens on that namespace's loopback: etcd on
127.0.0.1, nodes n1, n2, n3 on 127.0.0.1-3. n3 runs as another user, so that one
iptables rule (the owner match on its uid) drops every packet it sends: to etcd, to
the other nodes, and its answers to anyone. The script prints one JSON line per step
it checked and exits 0; any failed check raises.

Usage: python cluster_partition.py TMPDIR
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

import nemesis
from cluster_helpers import (
    LEASE_TTL_S,
    NODES,
    SECURE,
    Cluster,
    Etcd,
    start_secured_etcd,
    wait_until,
)

#: The user n3 runs as (nobody).
CUT_UID = 65534
RULE = ["OUTPUT", "-m", "owner", "--uid-owner", str(CUT_UID), "-j", "DROP"]


def step(name: str, **facts: object) -> None:
    print(json.dumps({"step": name, **facts}), flush=True)


def ids(rows: int) -> pa.Table:
    return pa.table({"id": pa.array(range(rows), pa.int64())})


def replicas_of(cluster: Cluster) -> set[str]:
    status = cluster.status()
    return {r for t in status["tables"] for p in t["partitions"] for r in p["replicas"]}  # type: ignore[attr-defined]


def main(tmp: Path) -> None:
    if SECURE:
        etcd, _, _ = start_secured_etcd(tmp / "secure-etcd")
    else:
        etcd = Etcd(tmp / "etcd")
        etcd.start()
    cluster = Cluster(etcd, tmp)
    try:
        cluster.start("n1")
        cluster.start("n2")
        cluster.start("n3", uid=CUT_UID)
        wait_until("three nodes", lambda: len(cluster.status()["nodes"]) == 3)  # type: ignore[arg-type]
        table = ids(90_000)
        with cluster.client("n1", transport="grpc") as c:
            c.put("t", table, partitions=6)
        assert "n3" in replicas_of(cluster)
        step("spread", replicas=sorted(replicas_of(cluster)))
        with cluster.client("n1", transport="grpc") as c:
            c.put("log", nemesis.LOG_SCHEMA.empty_table())
        writers = nemesis.Writers(
            "log",
            lambda w, seq: cluster.uri(NODES[w]),
            count=3,
            every=0.05,
            connect=lambda uri, **kw: cluster.client(uri, transport="grpc", **kw),
        )
        with writers:
            cut, healed = cut_off(cluster, table)
            time.sleep(1.0)
        record = writers.record
        wait_until("n3 back with every copy", lambda: fully_replicated(cluster), timeout=60)
        through_n3 = {a for a in record.acknowledged if a[0] == 2}
        # Appends (they are all through n1 and n2 then) started once n3 was cut off.
        since_cut = [t for t, _ in record.latencies if t >= cut]
        problems = nemesis.check(
            [cluster.uri(n) for n in NODES],
            "log",
            record,
            connect=lambda uri, **kw: cluster.client(uri, transport="grpc", **kw),
            flight_client=cluster.flight_client,
        )
        assert not problems, problems
        step(
            "checked",
            acknowledged=len(record.acknowledged),
            failed=len(record.failed),
            acknowledged_through_n3=len(through_n3),
            acknowledged_since_cut=len(since_cut),
            longest_append_s=round(max((d for _, d in record.latencies), default=0.0), 2),
            cut_for_s=round(healed - cut, 2),
        )
    finally:
        subprocess.run(["iptables", "-D", *RULE], check=False, capture_output=True)
        failures = cluster.stop_all()
        etcd.stop()
    if failures:
        raise SystemExit("\n".join(failures))


def fully_replicated(cluster: Cluster) -> bool:
    status = cluster.status()
    return len(status["nodes"]) == 3 and status["under_replicated"] == 0  # type: ignore[arg-type]


def cut_off(cluster: Cluster, table: pa.Table) -> tuple[float, float]:
    """Cut n3 off, check it is replaced and the others serve; heal, check it rejoins.
    Returns when it was cut and when healed (``time.monotonic``)."""
    subprocess.run(["iptables", "-A", *RULE], check=True)
    cut = time.monotonic()
    step("cut")

    def replaced() -> bool:
        status = cluster.status()
        return (
            sorted(n["id"] for n in status["nodes"]) == ["n1", "n2"]  # type: ignore[attr-defined]
            and status["under_replicated"] == 0
            and "n3" not in replicas_of(cluster)
        )

    wait_until("n3 dropped and its partitions copied", replaced, timeout=10 * LEASE_TTL_S + 30)
    step("replaced", replicas=sorted(replicas_of(cluster)))
    with cluster.client("n2", transport="grpc", timeout=20) as c:
        assert c.get("t").sort_by("id").equals(table)
        c.put("during", ids(1000), partitions=4)
        assert c.get("during").equals(ids(1000))
    step("served while cut off")

    subprocess.run(["iptables", "-D", *RULE], check=True)
    healed = time.monotonic()
    wait_until("n3 back", lambda: len(cluster.status()["nodes"]) == 3, timeout=30)  # type: ignore[arg-type]
    step("healed")
    with cluster.client("n3", transport="grpc", timeout=20) as c:
        c.put("after", ids(6000), partitions=12)
        assert c.get("after").equals(ids(6000))
        assert c.get("t").sort_by("id").equals(table)
    assert "n3" in replicas_of(cluster)
    step("rejoined", replicas=sorted(replicas_of(cluster)))
    return cut, healed


if __name__ == "__main__":
    main(Path(sys.argv[1]))
