"""The memory suite: a fresh server's RSS after a put, while serving gets, after a delete."""

from __future__ import annotations

import contextlib
import threading
import time

import pyarrow as pa

from .. import data, flight_client, servers
from ..report import Goal, _size, _times
from ..results import ARROW_CPP, QUIVER, Measurement
from ..run import Run, Section, Suite, log
from ..servers import ServerProcess
from ..summary import Row, select, spread
from .throughput import headline_size


def run_memory(run: Run) -> None:
    """Resident memory of a fresh server of each kind holding the headline table.

    Each server is started for this alone, so that what earlier measurements left in its
    allocator does not count: its RSS when started, after the put, during gets (sampled), and
    after the table is deleted.
    """
    plan = run.plan
    rows = plan.headline_rows
    table = data.records(rows, plan.batch_rows)
    log(f"memory: fresh servers holding {table.nbytes / 2**20:,.0f} MiB")
    starters = {
        QUIVER: lambda: servers.start_quiver(run.binary, run.log_dir / "memory"),
        ARROW_CPP: lambda: servers.start_arrow_cpp(run.log_dir / "memory"),
    }
    for name, start in starters.items():
        with run.attempt(f"memory {name}"):
            server = start()
            try:
                _measure_memory(run, server, table, rows)
            finally:
                code = server.stop()
            if code != 0:
                run.note(f"{name} (memory suite) exited with code {code} after SIGTERM")


def _measure_memory(run: Run, server: ServerProcess, table: pa.Table, rows: int) -> None:
    batch_rows = run.plan.batch_rows

    def record(op: str, rss: int, hwm: int, rep: int = 0, seconds: float = 0.0) -> None:
        run.add(
            Measurement(
                "memory",
                server.name,
                "pyarrow",
                op,
                1,
                rows,
                batch_rows,
                bytes=table.nbytes,
                seconds=seconds,
                rep=rep,
                rss_bytes=rss,
                hwm_bytes=hwm,
            )
        )

    record("rss_started", *server.memory())
    client = flight_client.connect(server.uri)
    try:
        flight_client.put(client, "memory", table, batch_rows, {"partitions": 1})
        record("rss_after_put", *server.memory())
        for rep in range(run.plan.reps):
            sampler = _MemorySampler(server)
            got = flight_client.timed_get([client], "memory")
            rss, hwm = sampler.stop()
            if got.rows != table.num_rows:
                raise RuntimeError(f"got {got.rows} rows, expected {table.num_rows}")
            del got
            record("rss", rss, hwm, rep)
        flight_client.delete(client, "memory")
        time.sleep(0.2)
        record("rss_after_delete", *server.memory())
    finally:
        client.close()


class _MemorySampler:
    """Samples a server's VmRSS every few milliseconds in a thread, until stopped."""

    INTERVAL_S = 0.01

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.peak = server.memory()[0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            with contextlib.suppress(OSError):
                self.peak = max(self.peak, self.server.memory()[0])

    def stop(self) -> tuple[int, int]:
        """Stop sampling; return the largest VmRSS seen and the VmHWM now."""
        self._stop.set()
        self._thread.join()
        rss, hwm = self.server.memory()
        return max(self.peak, rss), hwm


RSS_VS_STORED = 1.2


def _memory_section(rows: list[Row]) -> list[str]:
    lines = [
        "## Server memory",
        "",
        "Resident memory (VmRSS, from `/proc/PID/status`) of a server of each kind started for "
        "this measurement alone: when started, after the pyarrow client put the headline table, "
        "the largest sampled every 10 ms while it served gets of it, and after the table was "
        "deleted. VmHWM is the peak since the server started. The Arrow C++ peer's RSS "
        "includes the Python interpreter.",
        "",
        "| server | stored | started | after the put | during gets | during gets / stored "
        "| after delete | VmHWM |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for server in (QUIVER, ARROW_CPP):
        during = select(rows, suite="memory", server=server, op="rss")
        if not during:
            continue

        def at(op: str, server: str = server) -> str:
            found = select(rows, suite="memory", server=server, op=op)
            return _size(float(found[0]["rss_bytes"])) if found else "—"

        stored = float(during[0]["bytes"])
        rss = spread(during, "rss_bytes")
        hwm = max(float(r["hwm_bytes"]) for r in select(rows, suite="memory", server=server))
        assert rss is not None
        lines.append(
            f"| {server} | {_size(stored)} | {at('rss_started')} | {at('rss_after_put')} | "
            f"{_size(rss.median)} | {rss.median / stored:.2f}× | {at('rss_after_delete')} | "
            f"{_size(hwm)} |"
        )
    return lines


def memory_goals(rows: list[Row]) -> list[Goal]:
    """Quiver's RSS while serving gets of the headline table, over the bytes stored."""
    memory = select(rows, suite="memory", server=QUIVER, op="rss")
    ratio_rss = spread(memory, lambda r: float(r["rss_bytes"]) / float(r["bytes"]))
    return [
        Goal(
            f"quiver's RSS while serving gets of the {headline_size(rows)} table / stored bytes",
            f"≤ {RSS_VS_STORED}×",
            None if ratio_rss is None else ratio_rss.median,
            None if ratio_rss is None else ratio_rss.median <= RSS_VS_STORED,
            _times(None if ratio_rss is None else ratio_rss.median),
        )
    ]


SUITE = Suite(
    "memory",
    run_memory,
    goals=lambda rows, plan: memory_goals(rows),
    goals_rank=20,
    goals_in_table=True,
    sections=(Section(lambda rows, run, plots, at: [*_memory_section(rows), ""], rank=60),),
)
