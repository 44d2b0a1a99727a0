"""The figures: throughput vs streams, records and batch size (the paper's Figure 2, with the
ceilings drawn), small-object latency, JSON vs Flight, query results into pandas (the
paper's Figure 8), scoring over DoExchange (the paper's XGBatch), Spark, Dask and Ray
through quiver and their peers (the paper's Figure 10), and TPC-H's 22 queries on quiver
against DuckDB (issue 38).
"""  # noqa: D205

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from .results import (
    ARROW_CPP,
    JSON_SOCKET,
    QUIVER,
)
from .summary import Row, ceiling, spread

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


# --- engines: Spark, Dask and Ray through quiver (the paper's Figure 10) --------------------


# --- TPC-H against DuckDB (issue 38) ----------------------------------------------------------


def draw_all(rows: list[Row], plan: dict[str, object], out_dir: Path) -> list[Path]:
    """Draw every figure the rows allow into ``out_dir``; return their paths."""
    from .suites import SUITES  # here: every suite's module imports this one

    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = []
    for suite in SUITES:
        if suite.figures is not None:
            drawn += suite.figures(rows, plan, out_dir)
    return drawn
