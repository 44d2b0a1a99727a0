"""A node cut off from the cluster by the network, then healed (run inside a netns).

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
from pathlib import Path

import pyarrow as pa

import quiver
from cluster_helpers import LEASE_TTL_S, Cluster, Etcd, wait_until

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
    etcd = Etcd(tmp / "etcd")
    etcd.start()
    cluster = Cluster(etcd, tmp)
    try:
        cluster.start("n1")
        cluster.start("n2")
        cluster.start("n3", uid=CUT_UID)
        wait_until("three nodes", lambda: len(cluster.status()["nodes"]) == 3)  # type: ignore[arg-type]
        table = ids(90_000)
        with quiver.connect(cluster.uri("n1"), transport="grpc") as c:
            c.put("t", table, partitions=6)
        assert "n3" in replicas_of(cluster)
        step("spread", replicas=sorted(replicas_of(cluster)))

        subprocess.run(["iptables", "-A", *RULE], check=True)
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
        with quiver.connect(cluster.uri("n2"), transport="grpc", timeout=20) as c:
            assert c.get("t").sort_by("id").equals(table)
            c.put("during", ids(1000), partitions=4)
            assert c.get("during").equals(ids(1000))
        step("served while cut off")

        subprocess.run(["iptables", "-D", *RULE], check=True)
        wait_until("n3 back", lambda: len(cluster.status()["nodes"]) == 3, timeout=30)  # type: ignore[arg-type]
        step("healed")
        with quiver.connect(cluster.uri("n3"), transport="grpc", timeout=20) as c:
            c.put("after", ids(6000), partitions=12)
            assert c.get("after").equals(ids(6000))
            assert c.get("t").sort_by("id").equals(table)
        assert "n3" in replicas_of(cluster)
        step("rejoined", replicas=sorted(replicas_of(cluster)))
    finally:
        subprocess.run(["iptables", "-D", *RULE], check=False, capture_output=True)
        failures = cluster.stop_all()
        etcd.stop()
    if failures:
        raise SystemExit("\n".join(failures))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
