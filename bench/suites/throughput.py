"""What the get, put and rust suites share: the pyarrow client's measurements.

The headline (one stream) and the grid (streams x records x batch size), their goals,
sections and figures.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import matplotlib.pyplot as plt

from .. import data, flight_worker, workers
from ..plots import (
    CLIENT_STYLE,
    COLORS,
    LABELS,
    MARKERS,
    SERVERS,
    _draw_ceilings,
    _finish,
    _line,
    _save,
)
from ..report import Goal, _duration, _figure, _gbps, _ms, _ratio, _size, _times
from ..results import ARROW_CPP, PYARROW, QUIVER, QUIVER_PYTHON, QUIVER_PYTHON_SHM, Measurement
from ..run import Run, alternating, log
from ..summary import Row, Spread, ceiling, comparable, select, shapes, spread


def _shape_text(streams: int, rows: int, batch_rows: int) -> str:
    return f"{streams} stream(s) x {rows:,} rows, batches of {batch_rows:,}"


def measure(
    run: Run,
    suite: str,
    op: str,
    streams: int,
    rows: int,
    batch_rows: int,
    reps: int,
    clients: tuple[str, ...] = (PYARROW,),
) -> None:
    """Time ``reps`` gets or puts (``op``) of one shape on every server, by every client.

    Each client of each server is in a worker process of its own (:mod:`bench.flight_worker`),
    which prepares the data when it starts (a get's table stored on its server, a put's
    table made), makes the warm-up rounds, then one round per repetition, the servers and
    clients taking turns; it deletes what it stored when closed. The quiver Python client
    over shared memory (:data:`bench.results.QUIVER_PYTHON_SHM`) reads quiver only.
    The CPU seconds of the client's worker and of the server are read around each round.
    """
    shape = _shape_text(streams, rows, batch_rows)
    # Both ops move streams x rows records: a get of them split into streams partitions, a
    # put of rows records by each of streams clients.
    nbytes = streams * rows * data.RECORD_BYTES
    with contextlib.ExitStack() as stack:
        rounds: dict[tuple[str, str], workers.Worker] = {}
        pids: dict[str, int] = {}
        for client in clients:
            for server in run.servers_alive():
                if client == QUIVER_PYTHON_SHM and server.name != QUIVER:
                    continue
                with run.attempt(f"{suite} {op}: prepare the {client} worker of {server.name}"):
                    label = f"{suite} {op}, {client} client of {server.name}"
                    worker = flight_worker.start(
                        label, server.uri, op, streams, rows, batch_rows, client
                    )
                    rounds[client, server.name] = stack.enter_context(worker)
                    pids[server.name] = server.pid
        warm_ups = run.plan.warm_up_reps
        for (client, server), worker in rounds.items():
            with run.attempt(f"{suite} warm-up {op} {client} {server}"):
                for _ in range(warm_ups):
                    seconds = worker.call("round")["seconds"]
                    _note_warm_up(run, suite, server, client, op, nbytes, seconds)
        for rep in range(reps):
            for client, server in alternating(list(rounds), rep):
                with run.attempt(f"{suite} {op} {client} {server} {shape}"):
                    worker = rounds[client, server]
                    before = workers.cpu_seconds(worker.pid), workers.cpu_seconds(pids[server])
                    got = worker.call("round")
                    after = workers.cpu_seconds(worker.pid), workers.cpu_seconds(pids[server])
                    run.add(
                        Measurement(
                            suite,
                            server,
                            client,
                            op,
                            streams,
                            rows,
                            batch_rows,
                            bytes=nbytes,
                            rep=rep,
                            client_cpu_seconds=after[0] - before[0],
                            server_cpu_seconds=after[1] - before[1],
                            **got,
                        )
                    )


def _note_warm_up(
    run: Run, suite: str, server: str, client: str, op: str, nbytes: int, seconds: float
) -> None:
    """Keep a headline warm-up's time in the notes: it is left out of the medians."""
    if suite == "headline":
        who = server if client == PYARROW else f"{server}, {client} client"
        run.note(
            f"headline {op} warm-up (untimed in the medians), {who}: "
            f"{nbytes / seconds / 1e9:.2f} GB/s"
        )


#: The clients of the headline, by op: pyarrow.flight and the quiver Python client (its Rust
#: core over gRPC; for gets, shared memory from quiver too), their rounds interleaved.
HEADLINE_CLIENTS = {
    "get": (PYARROW, QUIVER_PYTHON, QUIVER_PYTHON_SHM),
    "put": (PYARROW, QUIVER_PYTHON),
}


def _run_throughput(run: Run, op: str) -> None:
    plan = run.plan
    for streams, rows, batch_rows in plan.grid():
        log(f"{op}: {_shape_text(streams, rows, batch_rows)}")
        measure(run, op, op, streams, rows, batch_rows, plan.reps)
    log(f"{op}: headline, {_shape_text(1, plan.headline_rows, plan.batch_rows)}")
    measure(
        run,
        "headline",
        op,
        1,
        plan.headline_rows,
        plan.batch_rows,
        plan.headline_reps,
        HEADLINE_CLIENTS[op],
    )


#: The issue's goals: thresholds the report checks.
GET_VS_CPP = 1.3


PUT_VS_CPP = 1.3


SINGLE_STREAM_VS_TCP = 0.9


#: Issue 26's goals for the quiver Python client (its Rust core moving the data), all on the
#: headline table, one stream: its get from quiver at least this fraction of raw loopback
#: TCP...
CLIENT_GET_VS_TCP = 0.8


#: ...and this many times pyarrow.flight's get from quiver...
CLIENT_GET_VS_PYARROW = 1.4


#: ...its get from the Arrow C++ server this many times pyarrow.flight's from it...
CLIENT_GET_CPP_VS_PYARROW = 1.3


#: ...its put into quiver this many times pyarrow.flight's...
CLIENT_PUT_VS_PYARROW = 1.2


#: ...and its shared-memory get from quiver (``transport="shm"``) at most this many seconds.
CLIENT_SHM_GET_S = 0.002


#: The clients of the headline table, in the order the report lists them.
HEADLINE_CLIENT_ORDER = (PYARROW, QUIVER_PYTHON, "rust")


CLIENT_LABELS = {
    PYARROW: "pyarrow",
    QUIVER_PYTHON: "quiver Python (Rust core)",
    QUIVER_PYTHON_SHM: "quiver Python, shm",
    "rust": "rust",
}


def _headline(rows: list[Row], server: str, op: str, client: str = "pyarrow") -> Spread | None:
    return spread(comparable(select(rows, suite="headline", server=server, op=op, client=client)))


def headline_goals(rows: list[Row]) -> list[Goal]:
    """Evaluate the issue's goals of the headline table on the rows of one run."""
    out = []
    headline_rows = select(rows, suite="headline")
    size = _size(float(headline_rows[0]["bytes"])) if headline_rows else "headline"
    tcp = ceiling(rows, "tcp")
    for op, threshold in (("get", GET_VS_CPP), ("put", PUT_VS_CPP)):
        ratio = _ratio(_headline(rows, QUIVER, op), _headline(rows, ARROW_CPP, op))
        out.append(
            Goal(
                f"Do{op.capitalize()}, one stream, {size} table, pyarrow client: "
                "quiver / Arrow C++",
                f"≥ {threshold}×",
                ratio,
                None if ratio is None else ratio >= threshold,
                _times(ratio),
            )
        )
    for op in ("get", "put"):
        ratio = _ratio(_headline(rows, QUIVER, op), tcp)
        out.append(
            Goal(
                f"Do{op.capitalize()}, one stream, {size} table, pyarrow client: "
                "quiver / raw loopback TCP",
                f"≥ {SINGLE_STREAM_VS_TCP:.0%}",
                ratio,
                None if ratio is None else ratio >= SINGLE_STREAM_VS_TCP,
                "—" if ratio is None else f"{ratio:.0%}",
            )
        )
    out += client_goals(rows)
    return out


def _headline_seconds(rows: list[Row], server: str, op: str, client: str) -> Spread | None:
    found = comparable(select(rows, suite="headline", server=server, op=op, client=client))
    return spread(found, "seconds")


def client_goals(rows: list[Row]) -> list[Goal]:
    """Evaluate issue 26's goals: the quiver Python client against pyarrow.flight and TCP.

    Each is a ratio of the medians of the same run (the headline table, one stream), or,
    for the shared-memory get, its median time. None when the quiver client was not
    measured (e.g. a run before it was).
    """
    if not select(rows, suite="headline", client=(QUIVER_PYTHON, QUIVER_PYTHON_SHM)):
        return []
    headline_rows = select(rows, suite="headline")
    size = _size(float(headline_rows[0]["bytes"]))
    out = []

    def ratio_goal(text: str, ours: Spread | None, theirs: Spread | None, at_least: float) -> None:
        ratio = _ratio(ours, theirs)
        shown = _times(ratio)
        if ratio is not None and ours is not None and theirs is not None:
            shown += f" ({ours.median:.2f} vs {theirs.median:.2f} GB/s)"
        passed = None if ratio is None else ratio >= at_least
        out.append(Goal(text, f"≥ {at_least:g}×", ratio, passed, shown))

    ours = _headline(rows, QUIVER, "get", QUIVER_PYTHON)
    tcp = ceiling(rows, "tcp")
    ratio = _ratio(ours, tcp)
    shown = "—" if ratio is None else f"{ratio:.0%}"
    if ratio is not None and ours is not None and tcp is not None:
        shown += f" ({ours.median:.2f} vs {tcp.median:.2f} GB/s)"
    out.append(
        Goal(
            f"DoGet, one stream, {size} table, quiver Python client (Rust core) from quiver / "
            "raw loopback TCP",
            f"≥ {CLIENT_GET_VS_TCP:.0%}",
            ratio,
            None if ratio is None else ratio >= CLIENT_GET_VS_TCP,
            shown,
        )
    )
    for server, threshold, source in (
        (QUIVER, CLIENT_GET_VS_PYARROW, "quiver"),
        (ARROW_CPP, CLIENT_GET_CPP_VS_PYARROW, "the Arrow C++ server"),
    ):
        ratio_goal(
            f"DoGet, one stream, {size} table, from {source}: quiver Python client / "
            "pyarrow.flight",
            _headline(rows, server, "get", QUIVER_PYTHON),
            _headline(rows, server, "get", PYARROW),
            threshold,
        )
    ratio_goal(
        f"DoPut, one stream, {size} table, into quiver: quiver Python client / pyarrow.flight",
        _headline(rows, QUIVER, "put", QUIVER_PYTHON),
        _headline(rows, QUIVER, "put", PYARROW),
        CLIENT_PUT_VS_PYARROW,
    )
    shm = _headline_seconds(rows, QUIVER, "get", QUIVER_PYTHON_SHM)
    found = comparable(select(rows, suite="headline", client=QUIVER_PYTHON_SHM, op="get"))
    batches = ""
    if found and found[0].get("batch_rows"):
        count = -(-int(found[0]["rows_per_stream"]) // int(found[0]["batch_rows"]))
        batches = f" in {count:,} batches"
    out.append(
        Goal(
            f"Shared-memory get of the {size} table{batches} from quiver, quiver Python "
            'client (`transport="shm"`), median time',
            f"≤ {CLIENT_SHM_GET_S * 1e3:g} ms",
            None if shm is None else shm.median,
            None if shm is None else shm.median <= CLIENT_SHM_GET_S,
            "—" if shm is None else f"{_ms(shm.median)} ({_ms(shm.low)}–{_ms(shm.high)})",
        )
    )
    return out


def _headline_section(rows: list[Row]) -> list[str]:
    tcp = ceiling(rows, "tcp")
    memcpy = ceiling(rows, "memcpy_warm")
    lines = [
        "## Headline: one stream",
        "",
        "GB/s, median (min–max) of the repetitions; the ratios compare medians. The clients: "
        "pyarrow.flight (`bench/flight_client.py`), the quiver Python client "
        '(`quiver.connect(uri, transport="grpc")`, `get` and `put`, its Rust core '
        "`quiver._core` moving the data), each in a worker process of its own per server, "
        "their rounds interleaved; and `quiver bench client` (arrow-rs).",
        "",
        "| op | client | quiver | Arrow C++ | quiver / C++ | quiver / TCP | quiver / memcpy | "
        "time to first batch, quiver / C++ |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for op in ("get", "put"):
        for client in HEADLINE_CLIENT_ORDER:
            ours = _headline(rows, QUIVER, op, client)
            theirs = _headline(rows, ARROW_CPP, op, client)
            if ours is None and theirs is None:
                continue
            ttfb = "—"
            if op == "get" and client == "pyarrow":
                spreads = [
                    spread(
                        select(rows, suite="headline", server=s, op="get", client=client),
                        "ttfb_seconds",
                    )
                    for s in (QUIVER, ARROW_CPP)
                ]
                if all(spreads):
                    ttfb = " / ".join(f"{s.median * 1e3:.1f} ms" for s in spreads if s)
            lines.append(
                f"| Do{op.capitalize()} | {CLIENT_LABELS[client]} | {_gbps(ours)} | "
                f"{_gbps(theirs)} | {_times(_ratio(ours, theirs))} | "
                f"{_times(_ratio(ours, tcp))} | {_times(_ratio(ours, memcpy))} | {ttfb} |"
            )
    return [*lines, *_headline_cpu_lines(rows)]


def _cpu_spread(rows: list[Row], column: str) -> Spread | None:
    """CPU seconds per GiB moved, of the rows that recorded ``column``."""
    found = [r for r in rows if r.get(column) is not None and float(r["bytes"]) > 0]
    return spread(found, lambda r: float(r[column]) / (float(r["bytes"]) / 2**30))


def _headline_cpu_lines(rows: list[Row]) -> list[str]:
    """Return the lines of the headline's wall times and CPU seconds per GiB moved."""
    measured = [
        r
        for r in comparable(select(rows, suite="headline"))
        if r.get("client_cpu_seconds") is not None
    ]
    if not measured:
        return []
    lines = [
        "",
        "Wall time and CPU seconds per GiB moved (user + system from `/proc/PID/stat` before "
        "and after each round, 10 ms ticks), median (min–max): the client's worker process "
        "and the server process. The shared-memory get maps the server's copy of the table "
        "(docs/shm.md): its time is that of the call, not of reading the bytes.",
        "",
        "| op | client | server | wall time | GB/s | client CPU s/GiB | server CPU s/GiB | "
        "total CPU s/GiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for op in ("get", "put"):
        for client in (*HEADLINE_CLIENT_ORDER, QUIVER_PYTHON_SHM):
            for server in (QUIVER, ARROW_CPP):
                found = select(measured, op=op, client=client, server=server)
                if not found:
                    continue
                seconds = spread(found, "seconds")
                cpu = [_cpu_spread(found, c) for c in ("client_cpu_seconds", "server_cpu_seconds")]
                total = _cpu_spread(
                    [
                        {
                            **r,
                            "cpu": float(r["client_cpu_seconds"])
                            + float(r["server_cpu_seconds"] or 0.0),
                        }
                        for r in found
                    ],
                    "cpu",
                )
                assert seconds is not None
                cells = [
                    "—" if c is None else f"{c.median:.2f} ({c.low:.2f}–{c.high:.2f})"
                    for c in (*cpu, total)
                ]
                wall = (
                    f"{_duration(seconds.median)} "
                    f"({_duration(seconds.low)}–{_duration(seconds.high)})"
                )
                lines.append(
                    f"| Do{op.capitalize()} | {CLIENT_LABELS[client]} | "
                    f"{'quiver' if server == QUIVER else 'Arrow C++'} | {wall} | "
                    f"{_gbps(spread(found))} | {' | '.join(cells)} |"
                )
    return lines


def _throughput_section(rows: list[Row]) -> list[str]:
    tcp = ceiling(rows, "tcp")
    lines = [
        "## Throughput: streams × records × batch size",
        "",
        "GB/s, median (min–max). A get is GetFlightInfo then DoGet of every endpoint in "
        "parallel (one connection and thread each); a put with N streams is N parallel DoPuts "
        "of N tables. Bytes are Arrow bytes (32 per record).",
        "",
        "| op | client | streams | records/stream | rows/batch | quiver | Arrow C++ | "
        "quiver / C++ | quiver / TCP |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for op in ("get", "put"):
        for client, suite in (("pyarrow", op), ("rust", "rust")):
            measured = comparable(select(rows, suite=suite, op=op, client=client))
            for streams, count, batch in shapes(measured):
                shape = select(measured, streams=streams, rows_per_stream=count, batch_rows=batch)
                ours = spread(select(shape, server=QUIVER))
                theirs = spread(select(shape, server=ARROW_CPP))
                lines.append(
                    f"| Do{op.capitalize()} | {client} | {streams} | {count:,} | {batch:,} | "
                    f"{_gbps(ours)} | {_gbps(theirs)} | {_times(_ratio(ours, theirs))} | "
                    f"{_times(_ratio(ours, tcp))} |"
                )
    return lines


def _throughput_rows(rows: list[Row], op: str) -> list[Row]:
    return [
        r
        for r in select(rows, suite=("get", "put", "rust", "headline"), op=op)
        if not r.get("note")
    ]


def throughput_vs_streams(rows: list[Row], batch_rows: int, path: Path) -> Path:
    """Throughput vs parallel streams, a line per server and records per stream."""
    clients = [
        c for c in ("pyarrow", "rust") if select(rows, client=c, suite=("get", "put", "rust"))
    ]
    clients = clients or ["pyarrow"]
    fig, axes = plt.subplots(
        2, len(clients), figsize=(6.5 * len(clients), 8), squeeze=False, sharey="row"
    )
    for i, op in enumerate(("get", "put")):
        for j, client in enumerate(clients):
            ax = axes[i][j]
            measured = select(
                _throughput_rows(rows, op),
                client=client,
                batch_rows=batch_rows,
                suite=("get", "put", "rust"),
            )
            records = sorted({r["rows_per_stream"] for r in measured})
            for server in SERVERS:
                for k, count in enumerate(records):
                    group = select(measured, server=server, rows_per_stream=count)
                    streams = sorted({r["streams"] for r in group})
                    _line(
                        ax,
                        [(s, select(group, streams=s)) for s in streams],
                        color=COLORS[server],
                        marker=MARKERS[k % len(MARKERS)],
                        linestyle="-" if server == QUIVER else "--",
                        label=f"{LABELS[server]}, {count / 1e6:g}M records/stream",
                    )
            _draw_ceilings(ax, rows)
            ax.set_xscale("log", base=2)
            ticks = sorted({int(r["streams"]) for r in measured}) or [1]
            ax.set_xticks(ticks, labels=[str(t) for t in ticks])
            _finish(ax, f"Do{op.capitalize()}, {client} client", "parallel streams")
            ax.legend(fontsize=7)
    fig.suptitle(f"Throughput vs parallel streams (batches of {batch_rows:,} rows)")
    return _save(fig, path)


def _count(value: float) -> str:
    """Write a count the short way: 8Ki, 1Mi for powers of two, 4M, 100k otherwise."""
    value = int(value)
    for unit, scale in (("Mi", 2**20), ("Ki", 2**10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale}{unit}"
    for unit, scale in (("M", 10**6), ("k", 10**3)):
        if value >= scale:
            return f"{value / scale:g}{unit}"
    return str(value)


def _sweep(
    rows: list[Row], x_key: str, fixed: dict[str, object], title: str, xlabel: str, path: Path
) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), squeeze=False, sharey=True)
    for j, op in enumerate(("get", "put")):
        ax = axes[0][j]
        measured = select(_throughput_rows(rows, op), **fixed)
        for server in SERVERS:
            for client, style in CLIENT_STYLE.items():
                group = select(measured, server=server, client=client)
                xs = sorted({r[x_key] for r in group})
                _line(
                    ax,
                    [(x, select(group, **{x_key: x})) for x in xs],
                    color=COLORS[server],
                    marker="o" if client == "pyarrow" else "s",
                    linestyle=style,
                    label=f"{LABELS[server]}, {client} client",
                )
        _draw_ceilings(ax, rows)
        ax.set_xscale("log")
        ticks = sorted({int(r[x_key]) for r in measured})
        if ticks:
            ax.set_xticks(ticks, labels=[_count(t) for t in ticks])
            ax.minorticks_off()
        _finish(ax, f"Do{op.capitalize()}", xlabel)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return _save(fig, path)


def throughput_vs_records(rows: list[Row], batch_rows: int, path: Path) -> Path:
    """Throughput of one stream vs records per stream."""
    return _sweep(
        rows,
        "rows_per_stream",
        {"streams": 1, "batch_rows": batch_rows},
        f"One stream: throughput vs records (batches of {batch_rows:,} rows)",
        "records per stream",
        path,
    )


def throughput_vs_batch(rows: list[Row], records: int, path: Path) -> Path:
    """Throughput of one stream vs rows per record batch."""
    return _sweep(
        rows,
        "batch_rows",
        {"streams": 1, "rows_per_stream": records, "suite": ("get", "put", "rust")},
        f"One stream of {records:,} records: throughput vs batch size",
        "rows per record batch (32 bytes each)",
        path,
    )


def headline(rows: list[Row], path: Path) -> Path:
    """Draw the headline table's throughput, one stream: a bar per server and client."""
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    clients = (PYARROW, QUIVER_PYTHON, "rust")
    groups = [
        (op, client)
        for op in ("get", "put")
        for client in clients
        if select(rows, suite="headline", op=op, client=client, note="")
    ]
    width = 0.38
    for k, server in enumerate(SERVERS):
        xs, heights, errors = [], [], [[], []]
        for i, (op, client) in enumerate(groups):
            found = spread(
                select(rows, suite="headline", server=server, op=op, client=client, note="")
            )
            if found is None:
                continue
            xs.append(i + (k - 0.5) * width)
            heights.append(found.median)
            errors[0].append(found.median - found.low)
            errors[1].append(found.high - found.median)
        ax.bar(
            xs, heights, width, yerr=errors, capsize=3, color=COLORS[server], label=LABELS[server]
        )
    _draw_ceilings(ax, rows)
    ax.set_xticks(range(len(groups)), [f"Do{op.capitalize()}\n{c} client" for op, c in groups])
    ax.tick_params(axis="x", labelsize=8)
    headline_rows = select(rows, suite="headline")
    size = headline_rows[0]["bytes"] if headline_rows else 0
    ax.set_title(f"One stream, {int(size) / 2**20:,.0f} MiB table", fontsize=10)
    ax.set_ylabel("GB/s")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def headline_size(rows: list[Row]) -> str:
    """Return the headline table's size, as the goals' texts say it."""
    headline_rows = select(rows, suite="headline")
    return _size(float(headline_rows[0]["bytes"])) if headline_rows else "headline"


def figures(rows: list[Row], plan: dict[str, object], out_dir: Path) -> list[Path]:
    """Draw the grid's figures (the get, put and rust suites') and the headline's."""
    drawn = []
    batch_rows = int(plan["batch_rows"])  # type: ignore[call-overload]
    if select(rows, suite=("get", "put", "rust")):
        drawn.append(throughput_vs_streams(rows, batch_rows, out_dir / "throughput_vs_streams.png"))
        drawn.append(throughput_vs_records(rows, batch_rows, out_dir / "throughput_vs_records.png"))
        drawn.append(
            throughput_vs_batch(
                rows,
                int(plan["batch_sweep_rows"]),  # type: ignore[call-overload]
                out_dir / "throughput_vs_batch.png",
            )
        )
    if select(rows, suite="headline"):
        drawn.append(headline(rows, out_dir / "headline.png"))
    return drawn


def headline_lines(
    rows: list[Row], run: dict[str, object], plots: dict[str, Path], at: Path
) -> list[str]:
    """Return the headline section and its figure."""
    return [*_headline_section(rows), "", *_figure("Headline", plots.get("headline"), at)]


def grid_lines(
    rows: list[Row], run: dict[str, object], plots: dict[str, Path], at: Path
) -> list[str]:
    """Return the grid's figures and section."""
    return [
        *_figure("Throughput vs streams", plots.get("throughput_vs_streams"), at),
        *_figure("Throughput vs records", plots.get("throughput_vs_records"), at),
        *_figure("Throughput vs batch size", plots.get("throughput_vs_batch"), at),
        *_throughput_section(rows),
        "",
    ]
