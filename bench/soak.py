"""A bounded soak of a running quiver server, with latency, errors and resident memory.

Many clients mix puts, gets, listings and deletes on loopback.

Each client has its own connection and loops until the time is up: put a small table
under one of its own names, get one back, list the tables, delete one. At the end every
table is deleted and the server's RSS is sampled until it settles (jemalloc's background
thread purges freed pages after its decay time, 10 s by default).

The benchmark harness's ``soak`` suite and ``python/tests/test_soak.py`` run it; against
a server of your own: ``python -m bench.soak URI PID SECONDS [CLIENTS]``.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

SETTLE_S = 15.0


def rss_bytes(pid: int) -> int:
    """Return the resident memory of process ``pid``."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for {pid}")


@dataclass
class SoakResult:
    """What a soak measured."""

    clients: int
    seconds: float
    ops: int
    errors: list[str]
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    rss_before: int = 0
    rss_peak: int = 0
    rss_after: int = 0

    def ops_per_s(self) -> float:
        """Return the operations per second over all clients."""
        return self.ops / self.seconds

    def percentile_ms(self, q: float, op: str | None = None) -> float:
        """Return the ``q``-th percentile latency of ``op`` (all ops if None), in ms."""
        values = (
            self.latencies_ms.get(op, [])
            if op
            else [v for vs in self.latencies_ms.values() for v in vs]
        )
        return float(np.percentile(values, q)) if values else float("nan")

    def summary(self) -> str:
        """Return the figures in one line."""
        mib = 1 << 20
        return (
            f"{self.clients} clients, {self.seconds:.0f} s: {self.ops} ops "
            f"({self.ops_per_s():.0f}/s), p50 {self.percentile_ms(50):.2f} ms, "
            f"p99 {self.percentile_ms(99):.2f} ms, {len(self.errors)} errors; RSS "
            f"{self.rss_before / mib:.0f} MiB before, {self.rss_peak / mib:.0f} peak, "
            f"{self.rss_after / mib:.0f} after deletes"
        )


def _table(rng: random.Random, rows: int) -> pa.Table:
    return pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "x": np.full(rows, rng.random()),
            "s": pa.array([f"r{i % 97}" for i in range(rows)]),
        }
    )


def _client(
    uri: str, index: int, until: float, rows: int, result: SoakResult, lock: threading.Lock
) -> None:
    rng = random.Random(index)
    names = [f"soak-{index}-{k}" for k in range(3)]
    stored: set[str] = set()
    client = flight.FlightClient(uri)
    latencies: dict[str, list[float]] = {"put": [], "get": [], "list": [], "delete": []}
    errors: list[str] = []
    ops = 0
    table = _table(rng, rows)
    try:
        while time.monotonic() < until:
            op = rng.choices(["put", "get", "list", "delete"], weights=[3, 4, 2, 1])[0]
            if op in ("get", "delete") and not stored:
                op = "put"
            name = rng.choice(sorted(stored)) if op in ("get", "delete") else rng.choice(names)
            start = time.perf_counter()
            try:
                if op == "put":
                    writer, reader = client.do_put(
                        flight.FlightDescriptor.for_path(name), table.schema
                    )
                    writer.write_table(table)
                    writer.done_writing()
                    reader.read()
                    writer.close()
                    stored.add(name)
                elif op == "get":
                    got = client.do_get(flight.Ticket(name.encode())).read_all()
                    if got.num_rows != rows:
                        errors.append(f"get {name}: {got.num_rows} rows, not {rows}")
                elif op == "list":
                    list(client.list_flights())
                else:
                    list(client.do_action(flight.Action("delete", name.encode())))
                    stored.discard(name)
            except Exception as e:  # every failure is counted and reported
                errors.append(f"{op} {name}: {e}")
            latencies[op].append((time.perf_counter() - start) * 1000)
            ops += 1
        for name in sorted(stored):
            list(client.do_action(flight.Action("delete", name.encode())))
    finally:
        client.close()
    with lock:
        result.ops += ops
        result.errors.extend(errors)
        for op, values in latencies.items():
            result.latencies_ms.setdefault(op, []).extend(values)


def run(uri: str, pid: int, seconds: float, clients: int = 64, rows: int = 10_000) -> SoakResult:
    """Soak the server at ``uri`` (process ``pid``) for ``seconds`` with ``clients``."""
    result = SoakResult(clients=clients, seconds=seconds, ops=0, errors=[])
    result.rss_before = rss_bytes(pid)
    result.rss_peak = result.rss_before
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            result.rss_peak = max(result.rss_peak, rss_bytes(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lock = threading.Lock()
    until = time.monotonic() + seconds
    threads = [
        threading.Thread(target=_client, args=(uri, i, until, rows, result, lock))
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    sampler.join()
    # Freed pages go back to the system after jemalloc's decay time: wait for it.
    deadline = time.monotonic() + SETTLE_S
    result.rss_after = rss_bytes(pid)
    while time.monotonic() < deadline and result.rss_after > result.rss_before * 1.5:
        time.sleep(0.5)
        result.rss_after = rss_bytes(pid)
    return result


if __name__ == "__main__":
    outcome = run(
        sys.argv[1],
        int(sys.argv[2]),
        float(sys.argv[3]),
        int(sys.argv[4]) if len(sys.argv) > 4 else 64,
    )
    print(outcome.summary())
    for error in outcome.errors[:20]:
        print("error:", error)
