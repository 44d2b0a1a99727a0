"""The small suite: p50/p99 latency of GetFlightInfo + DoGet of a 1 KiB table."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from .. import data, flight_client
from ..plots import LABELS, SERVERS, _save
from ..report import Goal, _figure
from ..results import ARROW_CPP, QUIVER, Measurement
from ..run import Run, Section, Suite, alternating, log
from ..summary import Row, percentile, select


def run_small(run: Run) -> None:
    """Latency of GetFlightInfo + DoGet of a 1 KiB table, one get at a time."""
    plan = run.plan
    alive = run.servers_alive()
    table = data.records(plan.small_rows, plan.small_rows)
    clients = {}
    for server in alive:
        with run.attempt(f"small put {server.name}"):
            client = flight_client.connect(server.uri)
            flight_client.put(client, "small", table, plan.small_rows, {"partitions": 1})
            for _ in range(10):  # warm up
                flight_client.timed_get([client], "small")
            clients[server.name] = client
    log(f"small: {plan.small_gets} gets of a {table.nbytes} B table per server")
    for rep in range(plan.small_gets):
        for server in alternating([s for s in alive if s.name in clients], rep):
            with run.attempt(f"small get {server.name}"):
                got = flight_client.timed_get([clients[server.name]], "small")
                run.add(
                    Measurement(
                        "small",
                        server.name,
                        "pyarrow",
                        "get",
                        1,
                        plan.small_rows,
                        plan.small_rows,
                        bytes=table.nbytes,
                        seconds=got.seconds,
                        rep=rep,
                        ttfb_seconds=got.ttfb_seconds,
                        endpoints=got.endpoints,
                    )
                )
    for client in clients.values():
        flight_client.delete(client, "small")
        client.close()


def _small_section(rows: list[Row]) -> list[str]:
    lines = [
        "## Small objects",
        "",
        "A 1 KiB table (32 records), got one at a time by one pyarrow client: GetFlightInfo "
        "then DoGet, on a warm connection.",
        "",
        "| server | p50 | p99 | mean | gets |",
        "| --- | --- | --- | --- | --- |",
    ]
    for server in (QUIVER, ARROW_CPP):
        seconds = [float(r["seconds"]) for r in select(rows, suite="small", server=server)]
        if seconds:
            lines.append(
                f"| {server} | {percentile(seconds, 50) * 1e6:.0f} µs | "
                f"{percentile(seconds, 99) * 1e6:.0f} µs | "
                f"{sum(seconds) / len(seconds) * 1e6:.0f} µs | {len(seconds)} |"
            )
    return lines


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


def small_goals(rows: list[Row]) -> list[Goal]:
    """Evaluate the goal of the 1 KiB table's p50 get latency against the Arrow C++ server's."""
    p50 = {
        server: [float(r["seconds"]) for r in select(rows, suite="small", server=server)]
        for server in (QUIVER, ARROW_CPP)
    }
    if p50[QUIVER] and p50[ARROW_CPP]:
        ours, theirs = percentile(p50[QUIVER], 50), percentile(p50[ARROW_CPP], 50)
        ratio_small: float | None = ours / theirs
        shown = f"{ours * 1e6:.0f} µs vs {theirs * 1e6:.0f} µs ({ratio_small:.2f}×)"
    else:
        ratio_small, shown = None, "—"
    return [
        Goal(
            "1 KiB table, get latency p50 (GetFlightInfo + DoGet): quiver / Arrow C++",
            "≤ 1.0×",
            ratio_small,
            None if ratio_small is None else ratio_small <= 1.0,
            shown,
        )
    ]


def _section(
    rows: list[Row], run: dict[str, object], plots: dict[str, Path], at: Path
) -> list[str]:
    return [
        *_small_section(rows),
        "",
        *_figure("Small-object latency", plots.get("small_latency"), at),
    ]


def _figures(rows: list[Row], plan: dict[str, object], out_dir: Path) -> list[Path]:
    return (
        [small_latency(rows, out_dir / "small_latency.png")] if select(rows, suite="small") else []
    )


SUITE = Suite(
    "small",
    run_small,
    goals=lambda rows, plan: small_goals(rows),
    goals_rank=30,
    goals_in_table=True,
    sections=(Section(_section, rank=40),),
    figures=_figures,
)
