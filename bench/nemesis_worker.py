"""The nemesis suite: three cluster nodes under faults, and what their clients saw.

``python -m bench.nemesis_worker --binary QUIVER --seconds N`` is started by
:func:`bench.suites.nemesis.run_nemesis` through ``ip netns exec``, as root: in the namespace
everything listens on loopback, etcd on 127.0.0.1 and nodes n1-n3 on 127.0.0.1-3, each
with ``--replicas 2 --lease-ttl 2`` and a ``--data-dir`` of its own, each running as a
user of its own (uid 64001-64003), so that one iptables rule (the owner match) cuts one
node off the network.

The table ``log`` starts empty. Three writer threads append 20-row batches tagged
``(writer, seq)`` every 100 ms, append ``seq`` of writer ``w`` through node
``(w + seq) % 3``, each with a request id of its own and a 15 s deadline, never retried;
one query thread runs ``SELECT count(*), sum(seq) FROM log`` every 200 ms through the
nodes in turn. Appends and queries skip a node the nemesis has taken down (killed,
paused, cut off), and connect to it afresh once it is back, as a client behind a health
check would: what fails is what a live node refused, or a call already in flight to the
node when it went down.

Meanwhile the nemesis cycles through :data:`FAULTS` (each fault on the next node in
turn), with ``--calm`` seconds of calm after each, until ``--seconds`` are used up and
every kind of fault has been injected once:

- ``kill``: SIGKILL a node, start it again (same id, port and data directory) after the
  lease and 2 s;
- ``pause-short``: SIGSTOP a node for 1 s, shorter than its lease, then SIGCONT;
- ``pause-long``: SIGSTOP for 5 s, longer than its lease, then SIGCONT;
- ``etcd-restart``: stop etcd (SIGTERM) for 3 s, start it again on its data;
- ``partition``: drop every packet a node sends for 8 s (iptables), then heal.

At the end the writers stop, the cluster is given up to 120 s to list three nodes and no
under-replicated partition, and the checker reads ``log`` through every node and every
listed copy of every partition: an acknowledged append missing is lost; an append with
other than 20 rows is torn or doubled; a ``(writer, seq)`` never attempted is invented;
copies of one partition that differ, or a listed copy that cannot be read, are problems.

A fault's window runs from its start to 2 s after its end; an append or query counts for
a window when it was in flight during it (the append a node was killed in the middle of
belongs to the kill). It prints one JSON line per kind of fault (and ``calm``: calls in
no window), then a summary line; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import bisect
import ctypes
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import quiver
from quiver import testing

from .results import NEMESIS_CALM, NEMESIS_FAULTS
from .servers import REPO
from .summary import percentile

#: The kinds of fault, in the order the nemesis cycles through them.


def _checker() -> types.ModuleType:
    """Load the cluster tests' checker (python/tests/nemesis.py): one copy of its rules."""
    path = REPO / "python" / "tests" / "nemesis.py"
    spec = importlib.util.spec_from_file_location("quiver_tests_nemesis", path)
    assert spec is not None, path
    assert spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclasses look their module up by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


checker = _checker()

FAULTS = tuple(NEMESIS_FAULTS)
NODES = (1, 2, 3)
REPLICAS = 2
#: A node is taken for lost this many seconds after its last lease renewal.
LEASE_TTL_S = 2
#: A killed node is started again this long after the kill: its lease has ended.
RESTART_AFTER_S = LEASE_TTL_S + 2.0
SHORT_PAUSE_S = 1.0
LONG_PAUSE_S = 5.0
ETCD_DOWN_S = 3.0
PARTITION_S = 8.0
#: A fault's window lasts this long past its end.
WINDOW_TAIL_S = 2.0
APPEND_EVERY_S = 0.1
QUERY_EVERY_S = 0.2
#: Every append and query has this deadline.
CALL_TIMEOUT_S = 15.0
QUERY = "SELECT count(*) AS n, sum(seq) AS s FROM log"
WRITERS = 3
#: Longest wait for the cluster to list three nodes and full replication at the end.
SETTLE_TIMEOUT_S = 120.0
#: The user each node runs as (no name needed): iptables' owner match singles it out.
NODE_UID = {1: 64001, 2: 64002, 3: 64003}
#: prctl(2): the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def log(text: str) -> None:
    """Print progress to stderr."""
    print(f"[nemesis {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def emit(**fields: object) -> None:
    """Print one result as a JSON line."""
    print(json.dumps(fields), flush=True)


def _error_text(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first}"[:300]


@dataclass
class Call:
    """One append (``who`` the writer) or query (``who`` -1) and how it ended."""

    who: int
    seq: int
    node: int
    start: float
    end: float
    ok: bool
    error: str = ""
    rows: int | None = None


@dataclass
class Fault:
    """One fault injected: its kind, its victim (``n2``, ``etcd``), when it began and ended."""

    kind: str
    victim: str
    start: float
    end: float

    @property
    def window(self) -> tuple[float, float]:
        """From its start to :data:`WINDOW_TAIL_S` past its end."""
        return self.start, self.end + WINDOW_TAIL_S


class Health:
    """The nodes the nemesis has taken down; calls go round them."""

    def __init__(self) -> None:
        self._down: set[int] = set()
        self._downs: dict[int, int] = dict.fromkeys(NODES, 0)
        self._lock = threading.Lock()

    def down(self, node: int) -> None:
        """Take node ``n<node>`` out of the calls' way."""
        with self._lock:
            self._down.add(node)
            self._downs[node] += 1

    def downs(self, node: int) -> int:
        """How many times node ``n<node>`` was taken down: a client made before the last
        time is made again, as a client would reconnect after its health check.
        """  # noqa: D205
        with self._lock:
            return self._downs[node]

    def up(self, node: int) -> None:
        """Send calls to node ``n<node>`` again."""
        with self._lock:
            self._down.discard(node)

    def route(self, preferred: int) -> int:
        """``preferred`` (1-3) if it is up, else the next node that is."""
        with self._lock:
            for step in range(len(NODES)):
                node = NODES[(NODES.index(preferred) + step) % len(NODES)]
                if node not in self._down:
                    return node
        return preferred


class Cluster:
    """etcd and nodes n1-n3, each node as its own user, on fixed ports."""

    def __init__(
        self,
        binary: Path,
        tmp: Path,
        log_dir: Path,
        node_log: str = "warn",
        node_args: tuple[str, ...] = (),
    ) -> None:
        self.tmp, self.log_dir, self.node_log, self.node_args = tmp, log_dir, node_log, node_args
        tmp.chmod(0o755)  # the nodes' users reach their data directories through it
        shared = tmp / "bin"
        shared.mkdir(mode=0o755)
        self.binary = shared / "quiver"
        try:  # the build may be under /root, where the nodes' users cannot reach it
            os.link(binary, self.binary)
        except OSError:
            shutil.copy2(binary, self.binary)
            self.binary.chmod(0o755)
        self.etcd = testing.EtcdProcess(tmp / "etcd" / "data")
        self.ports = {n: testing.free_port(f"127.0.0.{n}") for n in NODES}
        self.uris = {n: f"grpc+tcp://127.0.0.{n}:{self.ports[n]}" for n in NODES}
        self.running: dict[int, testing.ServerProcess] = {}
        self.starts: dict[int, int] = dict.fromkeys(NODES, 0)
        self.cut: set[int] = set()
        for n in NODES:
            data = tmp / f"n{n}-data"
            data.mkdir()
            os.chown(data, NODE_UID[n], NODE_UID[n])
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, node: int) -> testing.ServerProcess:
        """Start node ``n<node>`` as its user; it dies with this process."""
        uid = NODE_UID[node]

        def as_node_user() -> None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            # After setuid, which clears it.
            _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

        self.starts[node] += 1
        flags = (
            "--cluster", self.etcd.url,
            "--node-id", f"n{node}",
            "--replicas", str(REPLICAS),
            "--lease-ttl", str(LEASE_TTL_S),
            "--data-dir", str(self.tmp / f"n{node}-data"),
            "--shm-socket", "off",
            "--log", self.node_log,
            *self.node_args,
        )  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
        server = testing.start(
            [str(self.binary), "serve", "--listen", f"127.0.0.{node}:{self.ports[node]}", *flags],
            banner=testing.LISTENING,
            name=f"n{node}",
            log_path=self.log_dir / f"n{node}-{self.starts[node]}.log",
            env=env,
            cwd=self.tmp,
            preexec_fn=as_node_user,
            flags=flags,
            timeout=60,
        )
        self.running[node] = server
        return server

    def restart(self, node: int, attempts: int = 3) -> None:
        """Start a stopped node again; a start that fails is tried again, 2 s later."""
        for attempt in range(attempts):
            try:
                self.start(node)
                return
            except testing.ServerStartError as error:
                log(f"n{node} did not start (attempt {attempt + 1}): {_error_text(error)}")
                if attempt == attempts - 1:
                    raise
                time.sleep(2.0)

    def status(self) -> dict[str, object]:
        """``quiver cluster status --json``."""
        out = subprocess.run(
            [str(self.binary), "cluster", "status", "--cluster", self.etcd.url,
             "--replicas", str(REPLICAS), "--json"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        status: dict[str, object] = json.loads(out.stdout)
        return status

    def settled(self) -> bool:
        """Whether etcd lists three nodes and no partition is under-replicated."""
        try:
            status = self.status()
        except (subprocess.SubprocessError, ValueError):
            return False
        return len(status["nodes"]) == 3 and status["under_replicated"] == 0  # type: ignore[arg-type]

    def cut_off(self, node: int) -> None:
        """Drop every packet node ``n<node>`` sends."""
        subprocess.run(["iptables", "-A", *self._rule(node)], check=True, timeout=30)
        self.cut.add(node)

    def heal(self, node: int) -> None:
        """Remove :meth:`cut_off`'s rule."""
        subprocess.run(["iptables", "-D", *self._rule(node)], check=True, timeout=30)
        self.cut.discard(node)

    @staticmethod
    def _rule(node: int) -> list[str]:
        return ["OUTPUT", "-m", "owner", "--uid-owner", str(NODE_UID[node]), "-j", "DROP"]

    def stop(self) -> None:
        """Heal, resume and stop every node, then etcd."""
        for node in list(self.cut):
            with suppress(subprocess.SubprocessError):
                self.heal(node)
        for server in self.running.values():
            if server.alive():
                with suppress(ProcessLookupError):
                    server.process.send_signal(signal.SIGCONT)
                server.stop()
        self.running.clear()
        self.etcd.stop()
        with suppress(OSError):
            shutil.copyfile(self.etcd.log_path, self.log_dir / "etcd.log")


#: A thread's clients, by node: each with the count of that node's downs when it was made.
Clients = dict[int, tuple[int, quiver.Client]]


class Load(checker.Threads):  # type: ignore[misc, name-defined]
    """The writer threads and the query thread, and every call they made."""

    # Bounded: a call has a deadline.
    join_timeout = 3 * CALL_TIMEOUT_S

    def __init__(self, cluster: Cluster, health: Health, seconds: float) -> None:
        self.cluster, self.health = cluster, health
        self.run_id = uuid.uuid4().hex[:12]
        self.lock = threading.Lock()
        self.appends: list[Call] = []
        self.queries: list[Call] = []
        self.attempted: set[tuple[int, int]] = set()
        self.acknowledged: set[tuple[int, int]] = set()
        # Bounded in count: past the planned time by half, and then some.
        self.max_appends = int(1.5 * seconds / APPEND_EVERY_S) + 2000
        self.max_queries = int(1.5 * seconds / QUERY_EVERY_S) + 1000
        super().__init__([
            *(threading.Thread(target=self._write, args=(w,), name=f"writer-{w}")
              for w in range(WRITERS)),
            threading.Thread(target=self._query, name="query"),
        ])  # fmt: skip

    def _client(self, clients: Clients, node: int) -> quiver.Client:
        downs = self.health.downs(node)
        if node in clients and clients[node][0] != downs:
            self._drop(clients, node)
        if node not in clients:
            client = quiver.connect(
                self.cluster.uris[node], transport="grpc", timeout=CALL_TIMEOUT_S
            )
            clients[node] = (downs, client)
        return clients[node][1]

    @staticmethod
    def _drop(clients: Clients, node: int) -> None:
        made = clients.pop(node, None)
        if made is not None:
            with suppress(Exception):
                made[1].close()

    def _write(self, writer: int) -> None:
        clients: Clients = {}
        try:
            for seq in range(self.max_appends):
                if self.stop.is_set():
                    return
                rows = checker.append_rows(writer, seq)
                node = self.health.route(NODES[(writer + seq) % len(NODES)])
                with self.lock:
                    self.attempted.add((writer, seq))
                started = time.monotonic()
                error = ""
                try:
                    self._client(clients, node).put(
                        "log", rows, mode="append",
                        request_id=f"nemesis-{self.run_id}-{writer}-{seq}",
                    )  # fmt: skip
                except Exception as e:
                    error = _error_text(e)
                    self._drop(clients, node)
                ended = time.monotonic()
                with self.lock:
                    self.appends.append(Call(writer, seq, node, started, ended, not error, error))
                    if not error:
                        self.acknowledged.add((writer, seq))
                self.stop.wait(max(0.0, APPEND_EVERY_S - (ended - started)))
        finally:
            for node in list(clients):
                self._drop(clients, node)

    def _query(self) -> None:
        clients: Clients = {}
        try:
            for seq in range(self.max_queries):
                if self.stop.is_set():
                    return
                node = self.health.route(NODES[seq % len(NODES)])
                started = time.monotonic()
                error, count = "", None
                try:
                    result = self._client(clients, node).sql(QUERY)
                    count = int(result.column("n")[0].as_py() or 0)
                except Exception as e:
                    error = _error_text(e)
                    self._drop(clients, node)
                ended = time.monotonic()
                with self.lock:
                    self.queries.append(
                        Call(-1, seq, node, started, ended, not error, error, count)
                    )
                self.stop.wait(max(0.0, QUERY_EVERY_S - (ended - started)))
        finally:
            for node in list(clients):
                self._drop(clients, node)


class Nemesis:
    """Injects :data:`FAULTS` in turn and records each."""

    def __init__(self, cluster: Cluster, health: Health, calm: float) -> None:
        self.cluster, self.health, self.calm = cluster, health, calm
        self.faults: list[Fault] = []
        self.problems: list[str] = []

    def run(self, seconds: float) -> None:
        """Until ``seconds`` have passed and every kind was injected once (bounded)."""
        deadline = time.monotonic() + seconds
        for index in range(100_000):
            if time.monotonic() >= deadline and len(self.faults) >= len(FAULTS):
                return
            kind = FAULTS[index % len(FAULTS)]
            node = NODES[index % len(NODES)]
            try:
                fault = self.inject(kind, node)
            except Exception as error:
                self.problems.append(f"the nemesis could not {kind} n{node}: {_error_text(error)}")
                log(self.problems[-1])
                return
            self.faults.append(fault)
            log(f"{kind} {fault.victim}: {fault.end - fault.start:.1f} s")
            time.sleep(self.calm)

    def inject(self, kind: str, node: int) -> Fault:
        """Inject one fault and undo it; return when it began and ended."""
        cluster, health = self.cluster, self.health
        if kind == "etcd-restart":
            start = time.monotonic()
            cluster.etcd.stop()
            time.sleep(ETCD_DOWN_S)
            cluster.etcd.start()
            return Fault(kind, "etcd", start, time.monotonic())
        server = cluster.running[node]
        health.down(node)
        start = time.monotonic()
        try:
            if kind == "kill":
                server.process.kill()
                server.process.wait(timeout=10)
                time.sleep(RESTART_AFTER_S)
                cluster.restart(node)
            elif kind in ("pause-short", "pause-long"):
                server.process.send_signal(signal.SIGSTOP)
                try:
                    time.sleep(SHORT_PAUSE_S if kind == "pause-short" else LONG_PAUSE_S)
                finally:
                    server.process.send_signal(signal.SIGCONT)
            elif kind == "partition":
                cluster.cut_off(node)
                try:
                    time.sleep(PARTITION_S)
                finally:
                    cluster.heal(node)
            else:
                raise ValueError(f"unknown fault {kind!r}")
        finally:
            health.up(node)
        return Fault(kind, f"n{node}", start, time.monotonic())


# --- the checker ----------------------------------------------------------------------------


@dataclass
class Checked:
    """What the checker found, over every read."""

    lost: set[tuple[int, int]] = field(default_factory=set)
    torn_or_doubled: set[tuple[int, int]] = field(default_factory=set)
    invented: set[tuple[int, int]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    reads: int = 0

    def judge(self, seen: dict[tuple[int, int], int], load: Load, where: str) -> None:
        """Add what breaks the rules in one read of the whole table."""
        self.reads += 1
        found = checker.violations(seen, load.acknowledged, load.attempted)
        self.problems += found.problems(where)
        self.lost |= found.lost
        self.torn_or_doubled |= set(found.torn_or_doubled)
        self.invented |= found.invented


def check(uris: Iterable[str], load: Load) -> Checked:
    """Read ``log`` through each node, and each listed copy of each partition."""
    checked = Checked()
    uris = list(uris)
    for uri in uris:
        try:
            with quiver.connect(uri, transport="grpc", timeout=120) as c:
                table = c.get("log")
        except Exception as error:
            checked.problems.append(f"read through {uri} failed: {_error_text(error)}")
            continue
        checked.judge(checker.counts(table), load, f"through {uri}")
    options = flight.FlightCallOptions(timeout=120)
    info = None
    for uri in uris:
        client = flight.FlightClient(uri)
        try:
            info = client.get_flight_info(flight.FlightDescriptor.for_path("log"), options)
            break
        except flight.FlightError as error:
            checked.problems.append(f"GetFlightInfo through {uri} failed: {_error_text(error)}")
        finally:
            client.close()
    if info is None:
        return checked
    first_copies = []
    for index, endpoint in enumerate(info.endpoints):
        copies: dict[str, dict[tuple[int, int], int]] = {}
        for location in endpoint.locations:
            at = location.uri.decode()
            replica = flight.FlightClient(at)
            try:
                table = replica.do_get(endpoint.ticket, options).read_all()
            except (flight.FlightError, pa.ArrowException) as error:
                checked.problems.append(
                    f"a listed copy of partition {index} at {at} is not readable: "
                    f"{_error_text(error)}"
                )
                continue
            finally:
                replica.close()
            if not copies:
                first_copies.append(table)
            copies[at] = checker.counts(table)
        if len({json.dumps(sorted(c.items())) for c in copies.values()}) > 1:
            sizes = {at: sum(c.values()) for at, c in copies.items()}
            checked.problems.append(f"the copies of partition {index} differ (rows: {sizes})")
        if len(copies) < REPLICAS:
            checked.problems.append(
                f"partition {index} has {len(copies)} readable copies of {REPLICAS}"
            )
    if first_copies:
        whole = pa.concat_tables(first_copies)
        checked.judge(checker.counts(whole), load, "the listed copies of every partition")
    return checked


# --- the numbers ----------------------------------------------------------------------------


def _in(call: Call, window: tuple[float, float]) -> bool:
    """Whether ``call`` was in flight during ``window``."""
    return call.start <= window[1] and call.end >= window[0]


def _p(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def _stale(queries: list[Call], appends: list[Call]) -> set[int]:
    """Ids of the queries that counted fewer rows than the appends acknowledged before
    they started (the catalog is read from etcd, a linearizable read, at planning).
    """  # noqa: D205
    acknowledged = sorted(a.end for a in appends if a.ok)
    return {
        id(q)
        for q in queries
        if q.ok
        and q.rows is not None
        and q.rows < checker.ROWS_PER_APPEND * bisect.bisect_left(acknowledged, q.start)
    }


def fault_lines(faults: list[Fault], load: Load) -> list[dict[str, object]]:
    """One result per kind of fault, and one for the calls in no window (``calm``)."""
    stale = _stale(load.queries, load.appends)
    windows = [f.window for f in faults]
    lines = []
    for kind in (*FAULTS, NEMESIS_CALM):
        if kind == NEMESIS_CALM:
            groups = [
                [a for a in load.appends if not any(_in(a, w) for w in windows)],
            ]
            queries = [q for q in load.queries if not any(_in(q, w) for w in windows)]
            mine: list[Fault] = []
        else:
            mine = [f for f in faults if f.kind == kind]
            groups = [[a for a in load.appends if _in(a, f.window)] for f in mine]
            queries = list(
                {id(q): q for f in mine for q in load.queries if _in(q, f.window)}.values()
            )
        appends = list({id(a): a for group in groups for a in group}.values())
        # The most appends one writer had fail in one window.
        worst = max(
            (
                sum(1 for a in group if a.who == w and not a.ok)
                for group in groups
                for w in range(WRITERS)
            ),
            default=0,
        )
        latencies = [a.end - a.start for a in appends if a.ok]
        failed = [a for a in appends if not a.ok]
        failed_queries = [q for q in queries if not q.ok]
        lines.append(
            {
                "op": "fault",
                "kind": kind,
                "injected": len(mine),
                "victims": sorted({f.victim for f in mine}),
                "seconds": round(sum(f.end - f.start for f in mine), 3),
                "ops": len(appends),
                "failed": len(failed),
                "failed_max_per_client": worst,
                "p50": _p(latencies, 50),
                "p99": _p(latencies, 99),
                "longest": max((a.end - a.start for a in appends), default=None),
                "queries": len(queries),
                "queries_failed": len(failed_queries),
                "queries_stale": sum(1 for q in queries if id(q) in stale),
                "errors": sorted({a.error for a in failed})[:5],
                "query_errors": sorted({q.error for q in failed_queries})[:5],
            }
        )
    return lines


def injection_line(
    fault: Fault, appends: list[Call], queries: list[Call], started: float
) -> dict[str, object]:
    """One fault injected: when, how long, and the calls that failed in its window (the
    first few: when they started from the fault's start, through which node, the error).
    """  # noqa: D205
    during = [a for a in appends if _in(a, fault.window)]
    failed = [a for a in during if not a.ok]
    back = [a.start for a in appends if a.ok and a.start >= fault.end]
    failed_queries = [q for q in queries if _in(q, fault.window) and not q.ok]

    def sample(calls: list[Call]) -> list[str]:
        return [f"{c.start - fault.start:+.2f} s n{c.node} {c.error[:200]}" for c in calls[:3]]

    return {
        "op": "injection",
        "kind": fault.kind,
        "victim": fault.victim,
        "at": round(fault.start - started, 1),
        "seconds": round(fault.end - fault.start, 2),
        "ops": len(during),
        "failed": len(failed),
        "longest": max((a.end - a.start for a in during), default=None),
        # From the fault's end to the start of the first append acknowledged after it.
        "writes_back_after": round(min(back) - fault.end, 3) if back else None,
        "queries_failed": len(failed_queries),
        "failed_appends": sample(failed),
        "failed_queries": sample(failed_queries),
    }


def node_log_lines(log_dir: Path, limit: int = 10) -> tuple[int, list[str]]:
    """How many lines of the nodes' logs say ERROR or panicked, and the first few."""
    found = []
    for path in sorted(log_dir.glob("n*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if "ERROR" in line or "panicked" in line:
                found.append(f"{path.name}: {line.strip()[:400]}")
    return len(found), found[:limit]


def _status_text(cluster: Cluster) -> str:
    """Say the nodes and the under-replicated and unavailable partitions, from status."""
    try:
        status = cluster.status()
    except (subprocess.SubprocessError, ValueError) as error:
        return f"status failed: {_error_text(error)}"
    nodes = [n.get("id") for n in status["nodes"]]  # type: ignore[attr-defined, union-attr]
    return (
        f"nodes {nodes}, under-replicated {status.get('under_replicated')}, "
        f"unavailable {status.get('unavailable')}"
    )


def main() -> None:
    """Start the cluster, run the load and the nemesis, check, print the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--seconds", type=float, required=True, help="how long faults go on")
    parser.add_argument("--calm", type=float, default=5.0, help="seconds of calm after a fault")
    parser.add_argument("--log-dir", type=Path, help="where the nodes' and etcd's logs go")
    parser.add_argument(
        "--node-arg",
        action="append",
        default=[],
        help="one more argument of every node's `quiver serve` (repeat it), e.g. "
        "--node-arg=--fsync=never; the suite passes none",
    )
    parser.add_argument("--node-log", default="warn", help="the nodes' --log (default: warn)")
    args = parser.parse_args()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    health = Health()
    with tempfile.TemporaryDirectory(prefix="quiver-nemesis-") as tmp:
        root = Path(tmp)
        log_dir = args.log_dir or root / "logs"
        cluster = Cluster(args.binary, root, log_dir, args.node_log, tuple(args.node_arg))
        nemesis = Nemesis(cluster, health, args.calm)
        problems: list[str] = []
        try:
            cluster.etcd.start()
            for node in NODES:
                cluster.start(node)
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while not cluster.settled():
                if time.monotonic() > deadline:
                    raise TimeoutError("the three nodes did not register")
                time.sleep(0.1)
            with quiver.connect(cluster.uris[1], transport="grpc", timeout=60) as c:
                c.put("log", checker.LOG_SCHEMA.empty_table())
            log(f"3 nodes up; faults for {args.seconds:.0f} s, {args.calm:g} s of calm between")
            started = time.monotonic()
            with Load(cluster, health, args.seconds) as load:
                time.sleep(args.calm)
                nemesis.run(args.seconds)
            elapsed = time.monotonic() - started
            problems += [f"a thread hung: {name}" for name in load.hung()]
            log(f"load stopped: {len(load.appends)} appends, {len(load.queries)} queries")
            waited = time.monotonic()
            settled = False
            while time.monotonic() - waited < SETTLE_TIMEOUT_S:
                if cluster.settled():
                    settled = True
                    break
                time.sleep(0.5)
            settle_s = time.monotonic() - waited
            if not settled:
                problems.append(f"not settled {SETTLE_TIMEOUT_S:.0f} s after the load: "
                                f"{_status_text(cluster)}")  # fmt: skip
            log(f"settled in {settle_s:.1f} s" if settled else problems[-1])
            checking = time.monotonic()
            checked = check([cluster.uris[n] for n in NODES], load)
            log(f"checked {checked.reads} reads in {time.monotonic() - checking:.1f} s")
            with load.lock:
                snapshot = list(load.appends)
            torn_reads = [
                q
                for q in load.queries
                if q.ok and q.rows is not None and q.rows % checker.ROWS_PER_APPEND
            ]
            if torn_reads:
                problems.append(
                    f"{len(torn_reads)} queries counted rows that are not whole appends, e.g. "
                    f"{[q.rows for q in torn_reads[:5]]}"
                )
            for fault in nemesis.faults:
                emit(**injection_line(fault, snapshot, load.queries, started))
            for line in fault_lines(nemesis.faults, load):
                emit(**line)
            errors, samples = node_log_lines(log_dir)
            latencies = [a.end - a.start for a in snapshot if a.ok]
            emit(
                op="summary",
                seconds=round(elapsed, 1),
                faults=len(nemesis.faults),
                faults_by_kind={k: sum(f.kind == k for f in nemesis.faults) for k in FAULTS},
                attempted=len(load.attempted),
                acknowledged=len(load.acknowledged),
                failed=sum(1 for a in snapshot if not a.ok),
                p50=_p(latencies, 50),
                p99=_p(latencies, 99),
                queries=len(load.queries),
                queries_failed=sum(1 for q in load.queries if not q.ok),
                lost=len(checked.lost),
                torn_or_doubled=len(checked.torn_or_doubled),
                invented=len(checked.invented),
                reads_checked=checked.reads,
                settled=settled,
                settle_seconds=round(settle_s, 1),
                problems=[*nemesis.problems, *problems, *checked.problems],
                node_log_errors=errors,
                node_log_samples=samples,
            )
        finally:
            stopping = time.monotonic()
            cluster.stop()
            log(f"cluster stopped in {time.monotonic() - stopping:.1f} s")
            # A file or more per append and copy, each synced: removing them takes a while.
            removing = time.monotonic()
            for node in NODES:
                shutil.rmtree(root / f"n{node}-data", ignore_errors=True)
            log(f"data directories removed in {time.monotonic() - removing:.1f} s")


if __name__ == "__main__":
    main()
