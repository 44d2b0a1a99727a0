"""Crash testing a durable quiver server, SQLite-style.

Several client threads run random puts, appends, deletes and renames against
the real server binary with ``--data-dir``; the server is killed with SIGKILL
at a random moment and restarted over the same directory. After each restart
every acknowledged operation must be there, bit for bit, and the operation a
thread had in flight when the server died must be wholly present or wholly
absent: never half.

Each thread owns its own table names, so the expected state of each thread's
tables is known exactly: the acknowledged state, or that state with the one
in-flight operation applied.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

import quiver
from server_process import Server

#: Tables each client thread owns.
TABLES_PER_THREAD = 3
#: Rows past which a thread's tables are replaced rather than appended to.
MAX_ROWS = 400_000
#: Seconds any one call may take before the harness calls the server hung.
CALL_TIMEOUT_S = 60.0

State = dict[str, pa.Table]
"""A thread's tables: name -> content."""


def random_table(rng: random.Random, schema: pa.Schema) -> pa.Table:
    """Rows of ``schema`` (int64, float64, string, all nullable) from ``rng``."""
    rows = rng.choice([0, 1, 17, 1000, 20_000, 150_000])
    gen = np.random.default_rng(rng.randrange(1 << 32))
    nulls = gen.random(rows) < 0.1
    ints = pa.array(gen.integers(-(1 << 62), 1 << 62, rows), mask=nulls)
    floats = pa.array(gen.standard_normal(rows))
    words = pa.array([f"w{gen.integers(1 << 30)}" * (1 + i % 4) for i in range(64)] + [None])
    strings = words.take(pa.array(gen.integers(0, len(words), rows)))
    return pa.Table.from_arrays([ints, floats, strings], schema=schema)


@dataclass
class Op:
    """One write: its description and what it does to a thread's state."""

    text: str
    run: Callable[[quiver.Client], object]
    apply: Callable[[State], State]


@dataclass
class Worker:
    """A client thread and the state of its tables."""

    index: int
    rng: random.Random
    schema: pa.Schema
    acked: State = field(default_factory=dict)
    in_flight: Op | None = None
    acked_ops: int = 0
    error: str | None = None

    def name(self, k: int) -> str:
        return f"w{self.index}/t{k}"

    def next_op(self) -> Op:
        """A random write that the server should accept given ``acked``."""
        rng, acked = self.rng, self.acked
        existing = sorted(acked)
        name = self.name(rng.randrange(TABLES_PER_THREAD))
        kind = rng.choice(["put", "put", "append", "append", "delete", "rename"])
        if kind in ("append", "delete", "rename") and not existing:
            kind = "put"
        if kind == "append" and max(acked[n].num_rows for n in existing) > MAX_ROWS:
            kind = "put"  # keep tables small enough to read back every cycle
        if kind == "put":
            table = random_table(rng, self.schema)
            return Op(
                f"put {name} ({table.num_rows} rows)",
                lambda c: c.put(name, table),
                lambda s: {**s, name: table},
            )
        name = rng.choice(existing)
        if kind == "append":
            table = random_table(rng, self.schema)
            return Op(
                f"append {table.num_rows} rows to {name}",
                lambda c: c.put(name, table, mode="append"),
                lambda s: {**s, name: pa.concat_tables([s[name], table])},
            )
        if kind == "delete":
            return Op(
                f"delete {name}",
                lambda c: c.delete(name),
                lambda s: {k: v for k, v in s.items() if k != name},
            )
        target = self.name(rng.randrange(TABLES_PER_THREAD))
        if target == name:
            target = self.name((int(name.rsplit("t", 1)[1]) + 1) % TABLES_PER_THREAD)

        def renamed(s: State) -> State:
            out = {k: v for k, v in s.items() if k not in (name, target)}
            out[target] = s[name]
            return out

        return Op(
            f"rename {name} to {target} (overwrite)",
            lambda c: c.rename(name, target, overwrite=True),
            renamed,
        )

    def run(self, uri: str, killing: threading.Event) -> None:
        """Write until the server is killed (``killing`` is set just before)."""
        with quiver.connect(uri, timeout=CALL_TIMEOUT_S) as client:
            while not killing.is_set():
                op = self.next_op()
                self.in_flight = op
                try:
                    op.run(client)
                except Exception as e:  # any failure after the kill is expected
                    if not killing.is_set():
                        self.error = f"{op.text} failed while the server was up: {e!r}"
                    return
                self.acked = op.apply(self.acked)
                self.acked_ops += 1
                self.in_flight = None


def read_back(client: quiver.Client) -> dict[str, pa.Table]:
    """Every table the server holds."""
    return {info.name: client.get(info.name) for info in client.list_tables()}


def same(a: State, b: State) -> bool:
    """Whether two states hold the same tables, equal value for value."""
    return a.keys() == b.keys() and all(
        a[k].schema.equals(b[k].schema, check_metadata=True) and a[k].equals(b[k]) for k in a
    )


@dataclass
class CrashReport:
    """What a crash run did."""

    cycles: int = 0
    acked_ops: int = 0
    in_flight_present: int = 0
    in_flight_absent: int = 0
    restart_seconds: list[float] = field(default_factory=list)

    def summary(self) -> str:
        worst = max(self.restart_seconds, default=0.0)
        return (
            f"{self.cycles} SIGKILL cycles, {self.acked_ops} acknowledged writes all present; "
            f"in-flight writes at the kill: {self.in_flight_present} present, "
            f"{self.in_flight_absent} absent, none half-visible; slowest restart {worst:.2f} s"
        )


def check(workers: list[Worker], found: dict[str, pa.Table], report: CrashReport) -> None:
    """Check the server's tables against what the workers were told."""
    owned = {w.name(k) for w in workers for k in range(TABLES_PER_THREAD)}
    stray = sorted(set(found) - owned)
    assert not stray, f"tables nobody wrote: {stray}"
    for w in workers:
        mine = {k: v for k, v in found.items() if k.startswith(f"w{w.index}/")}
        if same(mine, w.acked):
            if w.in_flight is not None:
                report.in_flight_absent += 1
        elif w.in_flight is not None and same(mine, w.in_flight.apply(w.acked)):
            report.in_flight_present += 1
            w.acked = mine
        else:
            expected = {k: v.num_rows for k, v in w.acked.items()}
            got = {k: v.num_rows for k, v in mine.items()}
            pending = w.in_flight.text if w.in_flight else "nothing"
            raise AssertionError(
                f"worker {w.index}: expected the rows {expected} (or those with "
                f"'{pending}' applied), found {got}"
            )
        w.in_flight = None


def crash_cycles(
    start: Callable[..., Server],
    data_dir: Path,
    *,
    cycles: int,
    threads: int = 4,
    seed: int = 0,
    extra_flags: tuple[str, ...] = (),
    log: Callable[[str], None] = lambda _: None,
) -> CrashReport:
    """Run ``cycles`` rounds of writes, SIGKILL and restart; check each restart."""
    rng = random.Random(seed)
    schema = pa.schema([("i", pa.int64()), ("f", pa.float64()), ("s", pa.string())])
    workers = [Worker(i, random.Random(rng.random()), schema) for i in range(threads)]
    report = CrashReport()
    flags = ("--data-dir", str(data_dir), *extra_flags)
    for cycle in range(cycles):
        began = time.monotonic()
        server = start(*flags)
        report.restart_seconds.append(time.monotonic() - began)
        with quiver.connect(server.uri) as client:
            check(workers, read_back(client), report)
        killing = threading.Event()
        running = [
            threading.Thread(target=w.run, args=(server.uri, killing), daemon=True) for w in workers
        ]
        for t in running:
            t.start()
        time.sleep(rng.uniform(0.05, 1.5))
        killing.set()
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
        for t in running:
            t.join(timeout=60)
            assert not t.is_alive(), "a client thread did not stop after the kill"
        errors = [w.error for w in workers if w.error]
        assert not errors, errors
        report.cycles += 1
        log(f"cycle {cycle + 1}/{cycles}: {sum(w.acked_ops for w in workers)} writes acknowledged")
    server = start(*flags)
    with quiver.connect(server.uri) as client:
        check(workers, read_back(client), report)
    assert server.stop() == 0, server.log()[-4000:]
    report.acked_ops = sum(w.acked_ops for w in workers)
    return report
