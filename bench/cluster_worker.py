"""The cluster suite's measurements, run inside a network namespace of their own.

``python -m bench.cluster_worker ARGS`` is started by :func:`bench.suites.cluster.run_cluster`
through ``ip netns exec``, as root. In the namespace everything listens on loopback:
etcd on 127.0.0.1, nodes n1-n3 on 127.0.0.1-3, a single node without ``--cluster`` on
127.0.0.4. ``tc`` gives each cluster node a link of its own on the loopback device, the
shape of a real cluster's network cards: an HTB class of ``--rate`` for what the node
sends (packets from its port) and one for what it receives (packets to its port), full
duplex. Everything else (the client's requests, etcd) is not limited.

It prints one JSON object per measurement on stdout:

- ``read``: ``nodes`` nodes (one copy of each partition), the client's get of the whole
  table (``bytes`` in ``seconds``), through the quiver client's Rust core, every endpoint
  at once;
- ``append_latency``: the median time of a 1-row append to one cluster table, over the
  first 50 appends (``appends`` 50) and the last 50 of 2,000 (a flat cost: small
  partitions are merged past 64, so the catalog entry stops growing);
- ``put_latency``: the median time of a 1-row put into the cluster of three (two copies)
  and into the single node, over ``ops`` puts each: their difference is what a cluster
  commit adds (the replicas' DoPuts and the etcd reads and transaction);
- ``write_job``: an engine's write job of the table into the cluster of three (two
  copies), six tasks at once, with every task put through the node the job began on
  (``"place": "spread"``) and with each task put to a node of its own that keeps its rows
  (``"here"``), alternately;
- ``rereplicate``: the bytes of a lost node's partitions copied again, from the moment the
  others see it gone to the moment every partition has two copies again;
- ``read`` and ``rereplicate`` with ``"tls": true``: the same over TLS, the nodes'
  certificates made by ``quiver cluster init-ca`` / ``issue-cert``, mutual TLS between the
  nodes and to the client: what encryption costs at these links' speed;
- ``sql``: a grouped aggregation (:data:`SQL_AGGREGATION`) over the table, through Flight
  SQL, on the single node holding it whole and on the cluster of three holding it spread
  (one copy, two partitions per node), where datafusion-distributed runs the scans and
  partial aggregates on the nodes holding the partitions. All the processes share this
  machine's cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path

import pyarrow as pa
import quiver
from quiver import splits, testing

from . import data

#: The distributed SQL measurement's query: every row read, a few hundred groups out.
SQL_AGGREGATION = (
    "SELECT a % 256 AS k, count(*) AS n, sum(b) AS b, min(c) AS c, max(d) AS d "
    "FROM bench GROUP BY a % 256 ORDER BY k"
)

#: A node is taken for lost this many seconds after its last lease renewal.
LEASE_TTL_S = 2
#: Longest wait for the cluster to reach a state (nodes seen, copies made).
SETTLE_TIMEOUT_S = 120.0


def emit(**fields: object) -> None:
    """Print one measurement as a JSON line."""
    print(json.dumps(fields), flush=True)


def wait_for(what: str, probe: Callable[[], bool], timeout: float = SETTLE_TIMEOUT_S) -> float:
    """Poll ``probe`` every 20 ms until true; return when it became true (monotonic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return time.monotonic()
        time.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def shape_links(ports: dict[int, int], rate: str) -> None:
    """One HTB class of ``rate`` per node and direction on ``lo``; the rest unlimited."""

    def tc(*args: str) -> None:
        subprocess.run(["tc", *args], check=True)

    tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1")
    tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate", "100gbit")
    for node, port in ports.items():
        for direction, minor in (("sport", 10 + node), ("dport", 20 + node)):
            tc(
                "class",
                "add",
                "dev",
                "lo",
                "parent",
                "1:",
                "classid",
                f"1:{minor}",
                "htb",
                "rate",
                rate,
                "burst",
                "1mb",
                "cburst",
                "1mb",
            )
            tc(
                "filter",
                "add",
                "dev",
                "lo",
                "parent",
                "1:",
                "protocol",
                "ip",
                "prio",
                "1",
                "u32",
                "match",
                "ip",
                direction,
                str(port),
                "0xffff",
                "flowid",
                f"1:{minor}",
            )


class Pki:
    """A cluster CA and certificates for n1-n3 and the client (``quiver cluster``)."""

    def __init__(self, binary: Path, tmp: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(dir=tmp)) / "pki"

        def cluster(*args: str) -> None:
            subprocess.run(
                [str(binary), "cluster", *args], check=True, capture_output=True, timeout=60
            )

        cluster("init-ca", "--dir", str(self.dir))
        for node in (1, 2, 3):
            cluster("issue-cert", "--dir", str(self.dir), "--node", f"n{node}",
                    "--host", f"127.0.0.{node}")  # fmt: skip
        cluster("issue-cert", "--dir", str(self.dir), "--node", "client", "--host", "localhost")

    def node_flags(self, node: int) -> tuple[str, ...]:
        """``quiver serve``'s TLS flags for node ``n<node>``: mutual TLS, the cluster's CA."""
        ca = str(self.dir / "ca.pem")
        return ("--tls-cert", str(self.dir / f"n{node}.pem"),
                "--tls-key", str(self.dir / f"n{node}.key"),
                "--tls-client-ca", ca, "--cluster-ca", ca)  # fmt: skip

    def client(self) -> dict[str, bytes]:
        """Return the client's TLS settings, as :func:`quiver.connect` takes them."""
        return {
            "tls_root_certs": (self.dir / "ca.pem").read_bytes(),
            "cert_chain": (self.dir / "client.pem").read_bytes(),
            "private_key": (self.dir / "client.key").read_bytes(),
        }


class Nodes:
    """quiver nodes over one etcd, on the ports the links were shaped for."""

    def __init__(
        self,
        binary: Path,
        etcd: testing.EtcdProcess,
        ports: dict[int, int],
        tmp: Path,
        pki: Pki | None = None,
    ):
        self.binary, self.etcd, self.ports, self.tmp, self.pki = binary, etcd, ports, tmp, pki
        self.running: dict[int, testing.ServerProcess] = {}

    def connect(self, node: int = 1) -> quiver.Client:
        """Connect a gRPC client to node ``n<node>``, over TLS when the nodes use it."""
        tls = self.pki.client() if self.pki else {}
        return quiver.connect(self.running[node].uri, transport="grpc", **tls)

    def start(self, node: int, replicas: int) -> testing.ServerProcess:
        """Start node ``n<node>`` on 127.0.0.<node>, keeping ``replicas`` copies."""
        server = testing.start_quiver(
            "--cluster",
            self.etcd.url,
            "--node-id",
            f"n{node}",
            "--replicas",
            str(replicas),
            "--lease-ttl",
            str(LEASE_TTL_S),
            "--shm-socket",
            "off",
            "--log",
            "warn",
            *(self.pki.node_flags(node) if self.pki else ()),
            log_dir=self.tmp / f"n{node}",
            binary=self.binary,
            listen=f"127.0.0.{node}:{self.ports[node]}",
        )
        self.running[node] = server
        return server

    def status(self) -> dict[str, object]:
        """``quiver cluster status --json``."""
        out = subprocess.run(
            [str(self.binary), "cluster", "status", "--cluster", self.etcd.url, "--json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        status: dict[str, object] = json.loads(out.stdout)
        return status

    def live(self) -> int:
        """Return how many nodes etcd lists."""
        return len(self.status()["nodes"])  # type: ignore[arg-type]

    def stop(self) -> None:
        """Stop every node started."""
        for server in self.running.values():
            server.stop()
        self.running.clear()


@contextmanager
def cluster(
    binary: Path,
    ports: dict[int, int],
    tmp: Path,
    count: int,
    replicas: int,
    pki: Pki | None = None,
) -> Iterator[Nodes]:
    """``count`` nodes over a fresh etcd (over TLS with ``pki``); everything stopped after."""
    etcd = testing.EtcdProcess(Path(tempfile.mkdtemp(dir=tmp)) / "etcd")
    etcd.start()
    nodes = Nodes(binary, etcd, ports, tmp, pki)
    try:
        for node in range(1, count + 1):
            nodes.start(node, replicas)
        wait_for(f"{count} live nodes", lambda: nodes.live() == count)
        yield nodes
    finally:
        nodes.stop()
        etcd.stop()


def measure_reads(
    binary: Path, ports: dict[int, int], tmp: Path, table: pa.Table, reps: int, pki: Pki
) -> None:
    """Get ``table`` spread over 1, 2 and 3 nodes (one copy, two partitions per node), then
    over 3 nodes with TLS.
    """  # noqa: D205
    for count, tls in ((1, None), (2, None), (3, None), (3, pki)):
        with cluster(binary, ports, tmp, count, replicas=1, pki=tls) as nodes:
            partitions = 2 * count
            with nodes.connect() as c:
                c.put("bench", table, partitions=partitions)
                c.get("bench", max_workers=partitions)  # warm up
                for rep in range(reps):
                    started = time.perf_counter()
                    got = c.get("bench", max_workers=partitions)
                    seconds = time.perf_counter() - started
                    assert got.num_rows == table.num_rows
                    emit(
                        op="read",
                        nodes=count,
                        bytes=table.nbytes,
                        seconds=seconds,
                        rep=rep,
                        endpoints=partitions,
                        tls=tls is not None,
                    )


def measure_put_latency(
    binary: Path, ports: dict[int, int], tmp: Path, ops: int, appends: int
) -> None:
    """Time 1-row puts into a single node and into a cluster of three (two copies).

    And 1-row appends to one cluster table: the first ``ops`` and the last of ``appends``.
    """
    row = pa.table({"id": pa.array([1], pa.int64())})

    def median_put(uri: str) -> float:
        times = []
        with quiver.connect(uri, transport="grpc") as c:
            for _ in range(5):  # warm up
                c.put("small", row)
            for _ in range(ops):
                started = time.perf_counter()
                c.put("small", row)
                times.append(time.perf_counter() - started)
        return statistics.median(times)

    single = testing.start_quiver(
        "--shm-socket",
        "off",
        "--log",
        "warn",
        log_dir=tmp / "single",
        binary=binary,
        listen="127.0.0.4:0",
    )
    try:
        alone = median_put(single.uri)
    finally:
        single.stop()

    def append_latencies(uri: str, count: int) -> tuple[float, float]:
        """Median times of the first and the last ``ops`` of ``count`` 1-row appends."""
        times = []
        with quiver.connect(uri, transport="grpc") as c:
            c.put("log", row, partitions=1)
            for _ in range(count):
                started = time.perf_counter()
                c.put("log", row, mode="append", partitions=1)
                times.append(time.perf_counter() - started)
        return statistics.median(times[:ops]), statistics.median(times[-ops:])

    with cluster(binary, ports, tmp, 3, replicas=2) as nodes:
        spread = median_put(nodes.running[1].uri)
        first, last = append_latencies(nodes.running[1].uri, appends)
    emit(op="put_latency", server="single", seconds=alone, ops=ops)
    emit(op="put_latency", server="cluster", seconds=spread, ops=ops)
    # Each append adds a partition to the table's catalog entry, until small ones merge.
    emit(op="append_latency", server="cluster", seconds=first, ops=ops, appends=ops)
    emit(op="append_latency", server="cluster", seconds=last, ops=ops, appends=appends)


def measure_write_job(
    binary: Path, ports: dict[int, int], tmp: Path, table: pa.Table, reps: int
) -> None:
    """Time an engine's write job of ``table`` into a cluster of three (two copies).

    Begun through n1: six tasks at once, each a sixth of the rows, staged and then
    published. Alternately with every task put through n1, which spreads its rows round the ring
    (``"spread"``, how every write went before the ``nodes`` action), and with task i put
    to node i modulo three, which keeps the first copy of its rows (``"here"``, what
    :class:`quiver.splits.WriteJob` does on a cluster).
    """
    tasks = 6
    rows = table.num_rows
    parts = [table.slice(i * rows // tasks, (i + 1) * rows // tasks - i * rows // tasks)
             for i in range(tasks)]  # fmt: skip
    with cluster(binary, ports, tmp, 3, replicas=2) as nodes:
        connection = splits.Connection(nodes.running[1].uri, transport="grpc")
        for rep in range(-1, reps):  # the first round warms up
            for place in ("spread", "here"):
                job = splits.WriteJob.begin(connection, "bench")
                assert len(job.nodes) == 3, job.nodes
                if place == "spread":
                    job = dataclasses.replace(job, nodes=())
                started = time.perf_counter()
                with ThreadPoolExecutor(tasks) as pool:
                    writes = list(pool.map(job.write, range(tasks), parts))
                job.commit(writes)
                seconds = time.perf_counter() - started
                if rep >= 0:
                    emit(op="write_job", place=place, bytes=table.nbytes, seconds=seconds,
                         rep=rep, tasks=tasks)  # fmt: skip


def measure_rereplication(
    binary: Path, ports: dict[int, int], tmp: Path, table: pa.Table, reps: int, pki: Pki
) -> None:
    """Kill one node of three; time copying its partitions again, without TLS and with."""
    for rep, tls in [(rep, tls) for tls in (None, pki) for rep in range(reps)]:
        with cluster(binary, ports, tmp, 3, replicas=2, pki=tls) as nodes:
            with nodes.connect() as c:
                c.put("bench", table, partitions=6)
            lost = [
                p
                for t in nodes.status()["tables"]
                for p in t["partitions"]  # type: ignore[attr-defined]
                if "n3" in p["replicas"]
            ]
            nbytes = sum(int(p["bytes"]) for p in lost)
            nodes.running.pop(3).process.kill()
            gone = wait_for("n3 gone", lambda: nodes.live() == 2)

            def whole() -> bool:
                return nodes.status()["under_replicated"] == 0

            done = wait_for("two copies again", whole)
            emit(
                op="rereplicate",
                bytes=nbytes,
                seconds=done - gone,
                rep=rep,
                partitions=len(lost),
                tls=tls is not None,
            )


def measure_sql(binary: Path, ports: dict[int, int], tmp: Path, table: pa.Table, reps: int) -> None:
    """Time :data:`SQL_AGGREGATION` on one node and on three (datafusion-distributed)."""

    def timed(uri: str, server: str) -> pa.Table:
        with quiver.connect(uri, transport="grpc") as c:
            result = c.sql(SQL_AGGREGATION)  # warm up
            for rep in range(reps):
                started = time.perf_counter()
                result = c.sql(SQL_AGGREGATION)
                seconds = time.perf_counter() - started
                emit(op="sql", server=server, bytes=table.nbytes, seconds=seconds, rep=rep)
        return result

    single = testing.start_quiver(
        "--shm-socket",
        "off",
        "--log",
        "warn",
        log_dir=tmp / "single-sql",
        binary=binary,
        listen="127.0.0.4:0",
    )
    try:
        with quiver.connect(single.uri, transport="grpc") as c:
            c.put("bench", table)
        alone = timed(single.uri, "single")
    finally:
        single.stop()
    with cluster(binary, ports, tmp, 3, replicas=1) as nodes:
        with quiver.connect(nodes.running[1].uri, transport="grpc") as c:
            c.put("bench", table, partitions=6)
        spread = timed(nodes.running[1].uri, "cluster")
    if not spread.equals(alone):
        raise AssertionError(f"distributed result differs:\n{spread}\n{alone}")


def main() -> None:
    """Shape the links, then measure; one JSON line per measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--bytes", type=int, required=True, help="the read table's Arrow bytes")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rate", default="1gbit", help="each node's link, as tc says it")
    parser.add_argument("--put-ops", type=int, default=50)
    parser.add_argument("--appends", type=int, default=2000, help="1-row appends to one table")
    args = parser.parse_args()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    ports = {node: testing.free_port(f"127.0.0.{node}") for node in (1, 2, 3)}
    shape_links(ports, args.rate)
    table = data.records(max(1, args.bytes // data.RECORD_BYTES), 64 * 1024)
    with tempfile.TemporaryDirectory(prefix="quiver-cluster-bench-") as tmp:
        root = Path(tmp)
        pki = Pki(args.binary, root)
        measure_reads(args.binary, ports, root, table, args.reps, pki)
        measure_put_latency(args.binary, ports, root, args.put_ops, args.appends)
        measure_write_job(args.binary, ports, root, table, args.reps)
        measure_rereplication(args.binary, ports, root, table, args.reps, pki)
        measure_sql(args.binary, ports, root, table, args.reps)
    with suppress(subprocess.CalledProcessError):
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], check=True)


if __name__ == "__main__":
    main()
