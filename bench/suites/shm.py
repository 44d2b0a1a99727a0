"""The shm suite: the quiver client over shared memory against gRPC, and the server's RSS."""

from __future__ import annotations

import gc
import time

import pyarrow as pa

from .. import data
from ..report import Goal, _goal_rows, _size, _times
from ..results import QUIVER, Measurement
from ..run import Run, Section, Suite, log
from ..servers import ServerProcess
from ..summary import Row, select, spread


def run_shm(run: Run) -> None:
    """Time gets and puts of the same table by the same client over shared memory and gRPC.

    The quiver client with ``transport="shm"`` against ``transport="grpc"``, both to quiver,
    taking turns within each repetition; each client's puts come back to back
    (``Plan.shm_puts_in_a_row``), each replacing the last. Each result is checked equal to
    the table once. Also the server's RSS after one reader and after eight readers holding
    the table.
    """
    import quiver

    server = next((s for s in run.servers_alive() if s.name == QUIVER), None)
    if server is None:
        run.note("shm: quiver is not running")
        return
    clients = {
        "pyarrow-shm": quiver.connect(server.uri, transport="shm"),
        "pyarrow-grpc": quiver.connect(server.uri, transport="grpc"),
    }
    try:
        for nbytes in run.plan.shm_bytes:
            rows = nbytes // data.RECORD_BYTES
            table = data.records(rows, run.plan.batch_rows)
            log(f"shm: {table.nbytes / 2**20:,.0f} MiB, {rows:,} rows")
            with run.attempt(f"shm {rows:,} rows"):
                _measure_shm(run, server, clients, table)
            del table
            gc.collect()
    finally:
        for client in clients.values():
            client.close()


def _measure_shm(run: Run, server: ServerProcess, clients: dict, table: pa.Table) -> None:
    rows, batch_rows, nbytes = table.num_rows, run.plan.batch_rows, table.nbytes
    name = "shm_table"

    def record(client: str, op: str, seconds: float, rep: int) -> None:
        run.add(
            Measurement(
                "shm",
                QUIVER,
                client,
                op,
                1,
                rows,
                batch_rows,
                bytes=nbytes,
                seconds=seconds,
                rep=rep,
            )
        )

    in_a_row = run.plan.shm_puts_in_a_row
    for rep in range(run.plan.reps):
        for label, client in _order_items(clients, rep):
            # Back to back, each replacing the version the one before stored, as a
            # client refreshing a table does: a put pays for whatever the one before left
            # under way (the free of the version it replaced), and its fresh pages are
            # those just freed or others.
            for i in range(in_a_row):
                started = time.perf_counter()
                client.put(name, table)
                record(label, "put", time.perf_counter() - started, rep * in_a_row + i)
        # The first shm get of a version put over gRPC writes the version into its
        # memfd (once per version); later ones, and those of a version put over shm,
        # only map it.
        clients["pyarrow-grpc"].put(name, table)
        started = time.perf_counter()
        got = clients["pyarrow-shm"].get(name)
        record("pyarrow-shm", "get_first", time.perf_counter() - started, rep)
        del got
        gc.collect()
        for label, client in _order_items(clients, rep):
            started = time.perf_counter()
            got = client.get(name)
            record(label, "get", time.perf_counter() - started, rep)
            if rep == 0 and not got.equals(table):
                raise RuntimeError(f"{label}: the table read back differs from the one put")
            del got
            gc.collect()
    # The server's memory with one and with eight readers holding the table.
    shm = clients["pyarrow-shm"]
    shm.put(name, table)
    held = [shm.get(name)]
    one = server.memory()[0]
    held += [shm.get(name) for _ in range(7)]
    eight = server.memory()[0]
    run.add(
        Measurement(
            "shm",
            QUIVER,
            "pyarrow-shm",
            "rss_1_reader",
            1,
            rows,
            batch_rows,
            bytes=nbytes,
            seconds=0.0,
            rep=0,
            rss_bytes=one,
        )
    )
    run.add(
        Measurement(
            "shm",
            QUIVER,
            "pyarrow-shm",
            "rss_8_readers",
            1,
            rows,
            batch_rows,
            bytes=nbytes,
            seconds=0.0,
            rep=0,
            rss_bytes=eight,
        )
    )
    del held
    gc.collect()
    clients["pyarrow-grpc"].delete(name)


def _order_items(clients: dict, rep: int) -> list:
    items = list(clients.items())
    return items if rep % 2 == 0 else items[::-1]


def shm_goals(rows: list[Row]) -> list[Goal]:
    """Issue 6's goals at the largest size measured: shm get >= 50x gRPC, put >= 3x."""
    shm = select(rows, suite="shm", server=QUIVER)
    sizes = sorted({int(r["bytes"]) for r in shm if r["op"] in ("get", "put")})
    if not sizes:
        return []
    size = sizes[-1]
    found = []
    for op, goal in (("get", 50.0), ("put", 3.0)):
        fast = spread(select(shm, op=op, client="pyarrow-shm", bytes=size), "seconds")
        slow = spread(select(shm, op=op, client="pyarrow-grpc", bytes=size), "seconds")
        if fast is None or slow is None:
            continue
        ratio = slow.median / fast.median
        found.append(
            Goal(
                f"shm {op} of {_size(size)}, Python client: gRPC time / shm time",
                f"≥ {goal:g}×",
                ratio,
                ratio >= goal,
                _times(ratio),
            )
        )
    return found


def _shm_section(rows: list[Row]) -> list[str]:
    shm = select(rows, suite="shm", server=QUIVER)
    if not shm:
        return []
    sizes = sorted({int(r["bytes"]) for r in shm if r["op"] in ("get", "put")})
    lines = [
        "## Shared memory (same host)",
        "",
        'The quiver Python client with `transport="shm"` (Dissociated IPC over a Unix '
        "socket: a get maps the server's sealed memfds, a put writes the table into "
        "memfds, one thread each, and hands them over; docs/shm.md) "
        'against the same client with `transport="grpc"`, both to quiver, same table, '
        "median (min-max) seconds.",
        "",
        "| goal | target | measured | result |",
        "| --- | --- | --- | --- |",
        *_goal_rows(shm_goals(rows)),
        "",
        "| table | op | shm | gRPC | gRPC / shm |",
        "| --- | --- | --- | --- | --- |",
    ]
    for size in sizes:
        for op in ("get", "put"):
            fast = spread(select(shm, op=op, client="pyarrow-shm", bytes=size), "seconds")
            slow = spread(select(shm, op=op, client="pyarrow-grpc", bytes=size), "seconds")
            if fast is None or slow is None:
                continue
            lines.append(
                f"| {_size(size)} | {op} | {fast.median:.4f} ({fast.low:.4f}-{fast.high:.4f}) | "
                f"{slow.median:.3f} ({slow.low:.3f}-{slow.high:.3f}) | "
                f"{_times(slow.median / fast.median)} |"
            )
    for size in sizes:
        first = spread(select(shm, op="get_first", bytes=size), "seconds")
        if first is not None:
            lines.append(
                f"| {_size(size)} | first shm get of a version put over gRPC (writes its memfd) | "
                f"{first.median:.3f} ({first.low:.3f}-{first.high:.3f}) | | |"
            )
    lines += _back_to_back_puts(shm, sizes)
    one = select(shm, op="rss_1_reader")
    eight = select(shm, op="rss_8_readers")
    if one and eight:
        mib = 2**20
        a, b = float(one[-1]["rss_bytes"]) / mib, float(eight[-1]["rss_bytes"]) / mib
        size = float(one[-1]["bytes"]) / mib
        lines += [
            "",
            f"Server RSS with one shm reader of the {size:,.0f} MiB table: {a:,.0f} MiB; with "
            f"eight: {b:,.0f} MiB (readers map the same memfd; nothing is copied per reader).",
        ]
    return [*lines, ""]


def _back_to_back_puts(shm: list[Row], sizes: list[int]) -> list[str]:
    """Return the table of each client's puts, which the suite makes back to back."""
    lines = [
        "",
        "Puts, back to back in series, each replacing the table the one before stored "
        "(seconds; steady when max / min stays near 1):",
        "",
        "| table | client | puts | min | median | max | max / min |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    found = False
    for size in sizes:
        for client, label in (("pyarrow-shm", "shm"), ("pyarrow-grpc", "gRPC")):
            puts = spread(select(shm, op="put", client=client, bytes=size), "seconds")
            if puts is None:
                continue
            found = True
            lines.append(
                f"| {_size(size)} | {label} | {puts.n} | {puts.low:.4f} | {puts.median:.4f} | "
                f"{puts.high:.4f} | {_times(puts.high / puts.low if puts.low else None)} |"
            )
    return lines if found else []


SUITE = Suite(
    "shm", run_shm, sections=(Section(lambda rows, run, plots, at: _shm_section(rows), rank=90),)
)
