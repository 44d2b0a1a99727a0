"""The figures: throughput vs streams, records and batch size (the paper's Figure 2, with the
ceilings drawn), small-object latency, JSON vs Flight, query results into pandas (the
paper's Figure 8), scoring over DoExchange (the paper's XGBatch), Spark, Dask and Ray
through quiver and their peers (the paper's Figure 10), and TPC-H's 22 queries on quiver
against DuckDB (issue 38).
"""  # noqa: D205

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

from . import sql_clients, tpch
from .results import (
    ARROW_CPP,
    DASK,
    DUCKDB,
    FASTAPI_JSON,
    FUNCTIONS_STREAM_ECHO,
    FUNCTIONS_STREAM_SQL,
    IN_PROCESS,
    IN_PROCESS_THREADS,
    JSON_SOCKET,
    PARQUET,
    POSTGRESQL,
    PYARROW,
    PYARROW_FLIGHT,
    QUIVER,
    QUIVER_1_WORKER,
    QUIVER_2_WORKERS,
    QUIVER_FILES,
    QUIVER_GRPC,
    QUIVER_PYTHON,
    RAY,
    SPARK,
    SPARK_CACHE,
    SPARK_JVM,
)
from .sql_clients import SQL_PEERS, SqlPeer
from .summary import Row, Spread, ceiling, percentile, select, spread

COLORS = {QUIVER: "tab:blue", ARROW_CPP: "tab:orange", JSON_SOCKET: "tab:gray"}
LABELS = {QUIVER: "quiver", ARROW_CPP: "Arrow C++ (pyarrow)", JSON_SOCKET: "JSON over a socket"}
CLIENT_STYLE = {"pyarrow": "-", "rust": "--"}
MARKERS = ("o", "s", "^", "D", "v", "P")
CEILINGS = (
    ("tcp", "loopback TCP", "black", "--"),
    ("iperf3", "iperf3", "dimgray", ":"),
    ("memcpy_warm", "memcpy (warm)", "tab:red", "-."),
)
SERVERS = (QUIVER, ARROW_CPP)
DPI = 110


def _throughput_rows(rows: list[Row], op: str) -> list[Row]:
    return [
        r
        for r in select(rows, suite=("get", "put", "rust", "headline"), op=op)
        if not r.get("note")
    ]


def _draw_ceilings(ax: Axes, rows: list[Row]) -> None:
    """Draw the ceilings as horizontal lines; one far above the data is written at the top."""
    top = max(ax.get_ylim()[1], 0.1)
    found = [(ceiling(rows, op), label, color, style) for op, label, color, style in CEILINGS]
    shown = [f for f in found if f[0] is not None]
    in_range = [f[0].median for f in shown if f[0].median <= 3 * top]
    limit = max([top, *in_range]) * 1.15
    for spread_, label, color, style in shown:
        value = spread_.median
        if value <= limit:
            ax.axhline(
                value, color=color, linestyle=style, linewidth=1, label=f"{label} {value:.1f} GB/s"
            )
        else:
            ax.annotate(
                f"{label}: {value:.1f} GB/s (above)",
                xy=(0.01, 0.97),
                xycoords="axes fraction",
                va="top",
                fontsize=7,
                color=color,
            )
    ax.set_ylim(0, limit)


def _line(ax: Axes, points: list[tuple[float, list[Row]]], **style: object) -> None:
    xs, medians, lows, highs = [], [], [], []
    for x, group in sorted(points, key=lambda p: p[0]):
        found = spread(group)
        if found is None:
            continue
        xs.append(x)
        medians.append(found.median)
        lows.append(found.median - found.low)
        highs.append(found.high - found.median)
    if xs:
        ax.errorbar(xs, medians, yerr=[lows, highs], capsize=3, **style)


def _finish(ax: Axes, title: str, xlabel: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("GB/s")
    ax.grid(True, alpha=0.3)


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


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


def small_latency(rows: list[Row], path: Path) -> Path:
    """Latency of a 1 KiB get (GetFlightInfo + DoGet): p50 and p99 per server."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    labels, p50s, p99s = [], [], []
    for server in SERVERS:
        seconds = [float(r["seconds"]) for r in select(rows, suite="small", server=server)]
        if not seconds:
            continue
        labels.append(LABELS[server])
        p50s.append(percentile(seconds, 50) * 1e6)
        p99s.append(percentile(seconds, 99) * 1e6)
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], p50s, 0.4, label="p50", color="tab:blue")
    ax.bar([x + 0.2 for x in xs], p99s, 0.4, label="p99", color="tab:cyan")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("microseconds")
    ax.set_title("Get of a 1 KiB table (GetFlightInfo + DoGet), pyarrow client", fontsize=10)
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def json_vs_flight(rows: list[Row], path: Path) -> Path:
    """Seconds to get a mixed table into a pandas DataFrame: JSON over a socket vs Flight."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    measured = select(rows, suite="json")
    sizes = sorted({r["rows_per_stream"] for r in measured})
    order = (JSON_SOCKET, ARROW_CPP, QUIVER)
    width = 0.8 / len(order)
    for k, server in enumerate(order):
        xs, heights, errors = [], [], [[], []]
        for i, size in enumerate(sizes):
            found = spread(select(measured, server=server, rows_per_stream=size), "seconds")
            if found is None:
                continue
            xs.append(i + (k - 1) * width)
            heights.append(found.median)
            errors[0].append(found.median - found.low)
            errors[1].append(found.high - found.median)
        ax.bar(
            xs, heights, width, yerr=errors, capsize=3, color=COLORS[server], label=LABELS[server]
        )
    ax.set_xticks(range(len(sizes)), [f"{s:,} rows" for s in sizes])
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log scale)")
    ax.set_title("Mixed table into a pandas DataFrame: request to DataFrame", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


SQL_COLORS = {
    sql_clients.QUIVER_ADBC: "tab:blue",
    sql_clients.QUIVER_FLIGHT_SQL: "#7fb2e5",
    sql_clients.QUIVER_DOGET: "navy",
    sql_clients.ARROW_CPP_DOGET: "tab:orange",
    sql_clients.POSTGRES_ADBC: "tab:green",
    sql_clients.POSTGRES_PSYCOPG: "tab:olive",
    sql_clients.POSTGRES_ODBC: "tab:red",
    sql_clients.DUCKDB_PARQUET: "tab:purple",
}


def sql_rows_of(rows: list[Row], peer: SqlPeer, size: int | None = None) -> list[Row]:
    """Return the ``sql`` suite's rows of one client (and one result size)."""
    where: dict[str, object] = {"server": peer.server, "client": peer.client, "op": peer.op}
    if size is not None:
        where["rows_per_stream"] = size
    return select(rows, suite="sql", **where)


def rows_text(count: int) -> str:
    """Write a row count the short decimal way: 2k, 100k, 1M, 16M."""
    for unit, scale in (("M", 10**6), ("k", 10**3)):
        if count >= scale and count % (scale // 10) == 0:
            return f"{count / scale:g}{unit}"
    return f"{count:,}"


def _seconds(value: float) -> str:
    """Write seconds the short way: 2.6s, 0.17s, 4.2ms."""
    if value >= 1:
        return f"{value:.1f}s"
    if value >= 0.1:
        return f"{value:.2f}s"
    return f"{value * 1e3:.1f}ms"


def _sql_bars(ax: Axes, rows: list[Row], sizes: list[int], cap: int | None) -> None:
    peers = [p for p in SQL_PEERS if sql_rows_of(rows, p)]
    width = 0.85 / max(1, len(peers))
    for k, peer in enumerate(peers):
        offset = (k - (len(peers) - 1) / 2) * width
        xs, heights, errors = [], [], [[], []]
        for i, size in enumerate(sizes):
            found = spread(sql_rows_of(rows, peer, size), "seconds")
            if found is None:
                if peer.row_based and cap is not None and size > cap:
                    ax.annotate(
                        f"not run\n(> {rows_text(cap)})",
                        xy=(i + offset, 0.02),
                        xycoords=("data", "axes fraction"),
                        ha="center",
                        va="bottom",
                        fontsize=6,
                        rotation=90,
                        color=SQL_COLORS[peer],
                    )
                continue
            xs.append(i + offset)
            heights.append(found.median)
            errors[0].append(found.median - found.low)
            errors[1].append(found.high - found.median)
        ax.bar(xs, heights, width, yerr=errors, capsize=2, color=SQL_COLORS[peer], label=peer.label)
        for x, height, above in zip(xs, heights, errors[1], strict=True):
            ax.annotate(
                _seconds(height),
                xy=(x, height + above),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=6,
                rotation=90,
            )
    ax.set_xticks(range(len(sizes)), [f"{rows_text(s)} rows" for s in sizes])
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 12)
    ax.set_ylabel("seconds (log scale)")
    ax.set_title("SELECT * of a taxi table into a pandas DataFrame", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    ax.grid(True, axis="y", alpha=0.3)


def _sql_first_batch(ax: Axes, rows: list[Row], sizes: list[int]) -> None:
    for peer in (sql_clients.QUIVER_FLIGHT_SQL, sql_clients.QUIVER_DOGET):
        xs, medians, lows, highs = [], [], [], []
        for size in sizes:
            found = spread(
                [r for r in sql_rows_of(rows, peer, size) if r.get("ttfb_seconds") is not None],
                lambda r: float(r["ttfb_seconds"]) * 1e3,
            )
            if found is None:
                continue
            xs.append(size)
            medians.append(found.median)
            lows.append(found.median - found.low)
            highs.append(found.high - found.median)
        if xs:
            ax.errorbar(
                xs,
                medians,
                yerr=[lows, highs],
                capsize=3,
                marker="o",
                color=SQL_COLORS[peer],
                label=peer.label,
            )
    ax.set_xscale("log")
    ax.set_xticks(sizes, labels=[rows_text(s) for s in sizes])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("result rows")
    ax.set_ylabel("milliseconds")
    ax.set_title("quiver: time to the first record batch", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)


def sql_to_pandas(rows: list[Row], plan: dict[str, object], path: Path) -> Path:
    """Seconds from a query to its result as a DataFrame, per client and size (Figure 8)."""
    sizes = sorted({int(r["rows_per_stream"]) for r in select(rows, suite="sql")})
    cap = plan.get("sql_row_clients_max_rows")
    fig, axes = plt.subplots(
        1, 2, figsize=(14, 5), squeeze=False, gridspec_kw={"width_ratios": [2.2, 1]}
    )
    _sql_bars(axes[0][0], rows, sizes, None if cap is None else int(cap))
    _sql_first_batch(axes[0][1], rows, sizes)
    fig.suptitle("Query results into pandas (the paper's Figure 8)")
    return _save(fig, path)


#: The functions suite's peers, in the order shown, with their labels and colours.
FUNCTIONS_PEERS = (
    (IN_PROCESS, "in process, 1 thread (the limit)", "tab:gray"),
    (IN_PROCESS_THREADS, "in process, all cores", "silver"),
    (PYARROW_FLIGHT, "pyarrow FlightServerBase (XGBatch)", "tab:orange"),
    (FASTAPI_JSON, "FastAPI + uvicorn, JSON", "tab:red"),
    (QUIVER_1_WORKER, "quiver, 1 worker", "#7fb2e5"),
    (QUIVER_2_WORKERS, "quiver, 2 workers", "tab:blue"),
)


#: The streams of SQL over a stream, in the order shown, with their labels.
FUNCTIONS_STREAM_LABELS = (
    (FUNCTIONS_STREAM_ECHO, "echo"),
    ("stream_filter", "SQL filter"),
    ("stream_project", "SQL projection"),
)
FUNCTIONS_STREAM_OPS = tuple(op for op, _ in FUNCTIONS_STREAM_LABELS)


def functions_rows_per_second(rows: list[Row], peer: str) -> Spread | None:
    """Return the spread of ``peer``'s bulk scoring rate, rows per second."""
    bulk = select(rows, suite="functions", server=peer, op="bulk")
    return spread(bulk, lambda r: float(r["rows_per_stream"]) / float(r["seconds"]))


def functions_latency(rows: list[Row], peer: str, size: int) -> Row | None:
    """Return ``peer``'s latency row for requests of ``size`` rows (the last one measured)."""
    found = select(rows, suite="functions", server=peer, op="latency", rows_per_stream=size)
    return found[-1] if found else None


def functions_xgbatch(rows: list[Row], path: Path) -> Path:
    """Bulk scoring rate and request latency per peer of the functions suite (XGBatch)."""
    fig, axes = plt.subplots(1, 2, figsize=(14, 5), squeeze=False)
    ax = axes[0][0]
    peers = list(FUNCTIONS_PEERS)
    ys, widths, errors, colors, labels = [], [], [[], []], [], []
    for peer, label, color in peers:
        found = functions_rows_per_second(rows, peer)
        if found is None:
            continue
        ys.append(len(ys))
        widths.append(found.median)
        errors[0].append(found.median - found.low)
        errors[1].append(found.high - found.median)
        colors.append(color)
        labels.append(label)
    ax.barh(ys, widths, xerr=errors, capsize=3, color=colors)
    for y, width, above in zip(ys, widths, errors[1], strict=True):
        ax.annotate(
            f"{width / 1e6:.2f}M/s" if width >= 1e5 else f"{width / 1e3:.1f}k/s",
            xy=(width + above, y),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
    ax.set_yticks(ys, labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    if widths:
        ax.set_xlim(min(widths) / 2, max(widths) * 4)
    ax.set_xlabel("rows scored per second (log scale)")
    ax.set_title("Bulk: 65,536-row requests, 20 float32 features", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    ax = axes[0][1]
    measured = [p for p in peers if any(functions_latency(rows, p[0], n) for n in (1, 1000))]
    width = 0.8 / max(1, 2 * len(measured))
    lowest = math.inf
    for k, (peer, label, color) in enumerate(measured):
        for j, size in enumerate((1, 1000)):
            row = functions_latency(rows, peer, size)
            if row is None:
                continue
            x = j + (k - (len(measured) - 1) / 2) * 2 * width
            p50, p99 = float(row["seconds"]) * 1e3, float(row["p99_seconds"]) * 1e3
            lowest = min(lowest, p50)
            ax.bar(x, p50, width * 1.8, color=color, label=label if j == 0 else None)
            ax.plot([x, x], [p50, p99], color="black", linewidth=1)
            ax.plot(x, p99, marker="_", color="black", markersize=8)
    ax.set_xticks([0, 1], ["1-row requests", "1,000-row requests"])
    ax.set_yscale("log")
    if lowest < math.inf and lowest > 0:
        ax.set_ylim(bottom=10 ** math.floor(math.log10(lowest)))  # a labelled decade below
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    ax.set_ylabel("milliseconds (bar: p50, whisker: p99; log scale)")
    ax.set_title("Latency: sequential requests, one DoExchange or HTTP request each", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Scoring an xgboost model over the wire (the paper's XGBatch scenario)")
    return _save(fig, path)


def functions_stream_rates(rows: list[Row]) -> dict[str, Spread | str | None]:
    """Return the GB/s of each stream op of the functions suite, or why it is not available.

    Keys are the ops that ran (``stream_echo``, ``stream_filter``, ``stream_project``);
    a value is the spread of GB/s of input, or the note of an op the server did not
    implement (``not available: ...``).
    """
    out: dict[str, Spread | str | None] = {}
    for op in FUNCTIONS_STREAM_OPS:
        found = select(rows, suite="functions", op=op)
        if not found:
            continue
        noted = [r for r in found if r.get("note")]
        out[op] = str(noted[0]["note"]) if noted else spread(found, "gbps")
    return out


def functions_sql_stream(rows: list[Row], path: Path) -> Path:
    """Draw SQL over a stream against the echo of the same stream, GB/s of input."""
    rates = functions_stream_rates(rows)
    fig, ax = plt.subplots(figsize=(9, 3.5))
    labels = [(op, label) for op, label in FUNCTIONS_STREAM_LABELS if op in rates]
    top = max((r.high for r in rates.values() if isinstance(r, Spread)), default=1.0)
    for y, (op, _) in enumerate(labels):
        rate = rates[op]
        if isinstance(rate, Spread):
            ax.barh(
                y,
                rate.median,
                xerr=[[rate.median - rate.low], [rate.high - rate.median]],
                capsize=3,
                color="tab:gray" if op == FUNCTIONS_STREAM_ECHO else "tab:blue",
            )
            ax.annotate(
                f"{rate.median:.2f} GB/s",
                xy=(rate.high, y),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        elif isinstance(rate, str):
            ax.annotate(
                "not available: the server answered UNIMPLEMENTED",
                xy=(0, y),
                xytext=(8, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
                color="tab:red",
            )
    ax.set_yticks(
        range(len(labels)),
        [
            label + (f"\n{FUNCTIONS_STREAM_SQL[op]}" if op in FUNCTIONS_STREAM_SQL else "")
            for op, label in labels
        ],
        fontsize=8,
    )
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.4)
    ax.set_xlabel("GB/s of input (1e9 bytes per second)")
    ax.set_title("SQL over a DoExchange stream vs the echo of the same stream (quiver)")
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, path)


# --- engines: Spark, Dask and Ray through quiver (the paper's Figure 10) --------------------

#: The engines in the order shown, with their names.
ENGINE_NAMES = (
    (SPARK, "Spark"),
    (SPARK_JVM, "Spark, JVM connector"),
    (DASK, "Dask"),
    (RAY, "Ray"),
)
#: The sources and sinks in the order shown, with their colours (one endpoint, several).
ENGINE_SOURCE_COLORS = {
    QUIVER: ("#7fb2e5", "tab:blue"),
    QUIVER_GRPC: ("navy", "navy"),
    POSTGRESQL: ("tab:green", "#98df8a"),
    PARQUET: ("tab:purple", "tab:purple"),
    SPARK_CACHE: ("tab:gray", "tab:gray"),
}


def engine_peers(rows: list[Row], engine: str, op: str) -> list[tuple[str, int]]:
    """Return the ``(server, endpoints)`` the engines suite measured for ``engine``'s ``op``.

    In the order shown: quiver (fewest endpoints first), PostgreSQL, Parquet, Spark's cache.
    """
    found = {
        (str(r["server"]), int(r["endpoints"] or 0))
        for r in select(rows, suite="engines", client=engine, op=op)
    }
    order = list(ENGINE_SOURCE_COLORS)
    return sorted(found, key=lambda p: (order.index(p[0]) if p[0] in order else 99, p[1]))


def engine_peer_label(server: str, endpoints: int, op: str = "read") -> str:
    """Name a source or sink of the engines suite: ``quiver, 4 endpoints``..."""
    if server in (QUIVER, QUIVER_GRPC):
        grpc = ", gRPC" if server == QUIVER_GRPC else ""
        if op == "write":
            return f"quiver{grpc}"
        return f"quiver, {endpoints} endpoint{'s' if endpoints != 1 else ''}{grpc}"
    if server == POSTGRESQL:
        if op == "write":
            return "PostgreSQL, JDBC"
        return "PostgreSQL, JDBC" + (f", {endpoints} partitions" if endpoints > 1 else "")
    if server == PARQUET:
        return f"local Parquet, {endpoints} file{'s' if endpoints != 1 else ''}"
    if server == SPARK_CACHE:
        return "Spark's cache (no I/O)"
    return server


def engine_seconds(
    rows: list[Row], engine: str, op: str, server: str, endpoints: int
) -> Spread | None:
    """Return the spread of the seconds of one read or write of the engines suite."""
    found = select(rows, suite="engines", client=engine, op=op, server=server, endpoints=endpoints)
    return spread(found, "seconds")


def engine_reference(rows: list[Row], engine: str, op: str) -> tuple[str, int] | None:
    """Return the peer the others are compared with: quiver with the most endpoints."""
    ours = [p for p in engine_peers(rows, engine, op) if p[0] == QUIVER]
    return ours[-1] if ours else None


def engines_figure(rows: list[Row], path: Path) -> Path:
    """Seconds per source or sink, a panel per engine and op (reads, Spark's writes)."""
    panels = [
        (engine, name, op)
        for engine, name in ENGINE_NAMES
        for op in ("read", "write")
        if engine_peers(rows, engine, op)
    ]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(9, 1.2 + 0.55 * sum(
            len(engine_peers(rows, e, o)) + 1 for e, _, o in panels
        )), squeeze=False,
        gridspec_kw={"height_ratios": [len(engine_peers(rows, e, o)) + 1 for e, _, o in panels]},
    )  # fmt: skip
    table_rows = next(
        (int(r["rows_per_stream"]) for r in select(rows, suite="engines", op="read")), 0
    )
    for ax, (engine, name, op) in zip(axes[:, 0], panels, strict=True):
        peers = engine_peers(rows, engine, op)
        reference = engine_reference(rows, engine, op)
        ours = None if reference is None else engine_seconds(rows, engine, op, *reference)
        found = [(p, engine_seconds(rows, engine, op, *p)) for p in peers]
        top = max((s.high for _, s in found if s is not None), default=1.0)
        for y, ((server, endpoints), seconds) in enumerate(found):
            if seconds is None:
                continue
            colors = ENGINE_SOURCE_COLORS.get(server, ("black", "black"))
            ax.barh(
                y,
                seconds.median,
                xerr=[[seconds.median - seconds.low], [seconds.high - seconds.median]],
                capsize=3,
                color=colors[0 if endpoints <= 1 else 1],
            )
            text = _seconds(seconds.median)
            if ours is not None and (server, endpoints) != reference and ours.median > 0:
                text += f"  ({seconds.median / ours.median:.2f}× quiver's time)"
            ax.annotate(
                text,
                xy=(seconds.high, y),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
        ax.set_yticks(
            range(len(found)), [engine_peer_label(s, e, op) for (s, e), _ in found], fontsize=8
        )
        ax.invert_yaxis()
        ax.set_xlim(0, top * 1.6)
        what = "read and aggregate"
        if op == "write":
            tasks = {p[1] for p in peers}
            what = f"write its cached rows ({', '.join(map(str, sorted(tasks)))} tasks, overwrite)"
        ax.set_title(f"{name}: {what}", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1][0].set_xlabel("seconds (median; whiskers: min–max)")
    fig.suptitle(
        f"Engines through quiver and their peers, {rows_text(table_rows)} taxi rows "
        "(the paper's Figure 10)",
        fontsize=10,
    )
    return _save(fig, path)


# --- TPC-H against DuckDB (issue 38) ----------------------------------------------------------

#: The tpch suite's engines, in the order shown, with their colours.
TPCH_COLORS = {DUCKDB: "tab:orange", QUIVER: "tab:blue", QUIVER_FILES: "#7fb2e5"}


def tpch_queries(rows: list[Row]) -> list[str]:
    """Return the TPC-H queries the tpch suite timed (``q01``...), in order."""
    return sorted(
        {str(r["op"]) for r in select(rows, suite="tpch") if str(r["op"]) in tpch.QUERY_IDS}
    )


def tpch_seconds(rows: list[Row], engine: str, qid: str) -> Spread | None:
    """Return the spread of the timed runs of query ``qid`` on ``engine``."""
    return spread(select(rows, suite="tpch", server=engine, op=qid), "seconds")


def tpch_total(rows: list[Row], engine: str, queries: list[str]) -> float | None:
    """Return the sum of ``engine``'s medians over ``queries`` (``None``: one is missing)."""
    found = [tpch_seconds(rows, engine, q) for q in queries]
    if not found or any(f is None for f in found):
        return None
    return sum(f.median for f in found if f is not None)


def tpch_ratio(rows: list[Row], engine: str, qid: str) -> float | None:
    """Return ``engine``'s median over DuckDB's for query ``qid``."""
    ours, theirs = tpch_seconds(rows, engine, qid), tpch_seconds(rows, DUCKDB, qid)
    if ours is None or theirs is None or theirs.median <= 0:
        return None
    return ours.median / theirs.median


def tpch_both(rows: list[Row], engine: str, queries: list[str]) -> list[str]:
    """Return those of ``queries`` timed on both ``engine`` and DuckDB."""
    return [
        q
        for q in queries
        if tpch_seconds(rows, engine, q) is not None and tpch_seconds(rows, DUCKDB, q) is not None
    ]


def _tpch_total_text(rows: list[Row], engine: str, queries: list[str], ratio: bool) -> str:
    """Name ``engine``'s total (or its ratio to DuckDB's), of the queries both engines ran."""
    both = queries if engine == DUCKDB else tpch_both(rows, engine, queries)
    ours, theirs = tpch_total(rows, engine, both), tpch_total(rows, DUCKDB, both)
    if ours is None or not theirs:
        return ""
    of = "" if len(both) == len(queries) else f" of {len(both)} queries"
    return f" (total{of} {ours / theirs:.2f}×)" if ratio else f" (total{of} {_seconds(ours)})"


def _log_seconds(value: float, _: object) -> str:
    """Label the 1, 2 and 5 of each decade of a log scale of seconds."""
    leading = round(value / 10 ** math.floor(math.log10(value)), 6) if value > 0 else 0
    return _seconds(value) if leading in (1, 2, 5) else ""


def tpch_figure(rows: list[Row], plan: dict[str, object], path: Path) -> Path:
    """Per query: the median seconds of each engine, and quiver's time over DuckDB's."""
    queries = tpch_queries(rows)
    engines = [e for e in tpch.ENGINES if any(tpch_seconds(rows, e, q) for q in queries)]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(13, 8), sharex=True)
    width = 0.8 / max(1, len(engines))
    xs = range(len(queries))
    for k, engine in enumerate(engines):
        offset = (k - (len(engines) - 1) / 2) * width
        found = [tpch_seconds(rows, engine, q) for q in queries]
        top.bar(
            [x + offset for x, f in zip(xs, found, strict=True) if f is not None],
            [f.median for f in found if f is not None],
            width,
            yerr=[
                [f.median - f.low for f in found if f is not None],
                [f.high - f.median for f in found if f is not None],
            ],
            capsize=2,
            color=TPCH_COLORS[engine],
            label=tpch.LABELS[engine] + _tpch_total_text(rows, engine, queries, ratio=False),
        )
    top.set_yscale("log")
    top.yaxis.set_major_formatter(FuncFormatter(_log_seconds))
    top.yaxis.set_minor_formatter(FuncFormatter(_log_seconds))
    top.tick_params(axis="y", which="minor", labelsize=7)
    top.set_ylabel("seconds (median; whiskers: min–max)")
    top.legend(fontsize=8, ncol=3, loc="lower left", bbox_to_anchor=(0.0, 1.0))
    top.grid(True, axis="y", alpha=0.3)
    setups = [e for e in engines if e != DUCKDB]
    width = 0.8 / max(1, len(setups))
    for k, setup in enumerate(setups):
        offset = (k - (len(setups) - 1) / 2) * width
        ratios = [tpch_ratio(rows, setup, q) for q in queries]
        bars = bottom.bar(
            [x + offset for x, r in zip(xs, ratios, strict=True) if r is not None],
            [r for r in ratios if r is not None],
            width,
            color=TPCH_COLORS[setup],
            label=tpch.LABELS[setup] + _tpch_total_text(rows, setup, queries, ratio=True),
        )
        bottom.bar_label(bars, fmt="%.2f", fontsize=6, rotation=90, padding=2)
        for x, ratio in zip(xs, ratios, strict=True):
            if ratio is None:  # failed, or not run: said where its bar would be
                bottom.text(
                    x + offset, 0.05, "not timed", rotation=90, fontsize=7, ha="center",
                    va="bottom", color=TPCH_COLORS[setup],
                )  # fmt: skip
    bottom.axhline(1.0, color="black", linewidth=1)
    bottom.axhline(
        1.5,
        color="tab:red",
        linestyle="--",
        linewidth=1,
        label="1.5×: the goal of each query, stored tables",
    )
    bottom.set_ylabel("× DuckDB's time (median over median)")
    bottom.set_xticks(list(xs), [q.upper() for q in queries])
    bottom.legend(fontsize=8, ncol=3, loc="upper left")
    bottom.grid(True, axis="y", alpha=0.3)
    top_ratio = max(
        (r for s in setups for q in queries if (r := tpch_ratio(rows, s, q)) is not None),
        default=1.5,
    )
    bottom.set_ylim(0, max(1.6, top_ratio) * 1.3)
    scale = plan.get("tpch_scale")
    at = "" if scale is None else f" at scale factor {float(scale):g}"  # type: ignore[arg-type]
    fig.suptitle(f"TPC-H{at}: quiver (ADBC Flight SQL) against DuckDB in process, same Parquet")
    return _save(fig, path)


def draw_all(rows: list[Row], plan: dict[str, object], out_dir: Path) -> list[Path]:
    """Draw every figure the rows allow into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    batch_rows = int(plan["batch_rows"])
    drawn = []
    if select(rows, suite=("get", "put", "rust")):
        drawn.append(throughput_vs_streams(rows, batch_rows, out_dir / "throughput_vs_streams.png"))
        drawn.append(throughput_vs_records(rows, batch_rows, out_dir / "throughput_vs_records.png"))
        drawn.append(
            throughput_vs_batch(
                rows, int(plan["batch_sweep_rows"]), out_dir / "throughput_vs_batch.png"
            )
        )
    if select(rows, suite="headline"):
        drawn.append(headline(rows, out_dir / "headline.png"))
    if select(rows, suite="small"):
        drawn.append(small_latency(rows, out_dir / "small_latency.png"))
    if select(rows, suite="json"):
        drawn.append(json_vs_flight(rows, out_dir / "json_vs_flight.png"))
    if select(rows, suite="sql"):
        drawn.append(sql_to_pandas(rows, plan, out_dir / "sql_to_pandas.png"))
    if select(rows, suite="functions", op=("bulk", "latency")):
        drawn.append(functions_xgbatch(rows, out_dir / "functions_xgbatch.png"))
    if select(rows, suite="functions", op=FUNCTIONS_STREAM_OPS):
        drawn.append(functions_sql_stream(rows, out_dir / "functions_sql_stream.png"))
    if select(rows, suite="engines", op=("read", "write")):
        drawn.append(engines_figure(rows, out_dir / "engines.png"))
    if tpch_queries(rows):
        drawn.append(tpch_figure(rows, plan, out_dir / "tpch.png"))
    if select(rows, suite="lake", op=tpch.QUERY_IDS):
        from . import lake  # here: bench.lake imports this module (through bench.report)

        drawn.append(lake.figure(rows, plan, out_dir / "lake.png"))
    return drawn
