"""The json suite: a mixed table into pandas, JSON over a socket against Flight (the blog's)."""

from __future__ import annotations

import io
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pyarrow as pa
import pyarrow.flight as flight

from .. import data, flight_client
from ..peers import json_socket
from ..plots import COLORS, LABELS, _save
from ..report import _figure, _ratio, _size, _times
from ..results import ARROW_CPP, JSON_SOCKET, QUIVER, Measurement
from ..run import Run, Section, Suite, alternating, log
from ..summary import Row, select, spread


def run_json(run: Run) -> None:
    """Compare, as the blog did, a mixed table as JSON over a socket and over Flight."""
    if run.json_server is None:
        run.note("JSON comparison skipped: the JSON peer did not start")
        return
    port = int(run.json_server.uri.rsplit(":", 1)[1])
    for rows in run.plan.json_rows:
        log(f"json: {rows:,} rows of a mixed table")
        table = data.mixed_table(rows)
        clients = {}
        for server in run.servers_alive():
            with run.attempt(f"json put {server.name}"):
                client = flight_client.connect(server.uri)
                flight_client.put(client, "mixed", table, 64 * 1024, {"partitions": 1})
                clients[server.name] = client
        json_socket.fetch(port, rows, prepare=True)
        for rep in range(run.plan.reps):
            for name in alternating([JSON_SOCKET, *clients], rep):
                with run.attempt(f"json {name} {rows} rows"):
                    if name == JSON_SOCKET:
                        _json_get(run, port, table, rows, rep)
                    else:
                        _flight_get_pandas(run, name, clients[name], table, rows, rep)
        for client in clients.values():
            flight_client.delete(client, "mixed")
            client.close()


def _json_get(run: Run, port: int, table: pa.Table, rows: int, rep: int) -> None:
    started = time.perf_counter()
    body, first_byte_at = json_socket.fetch(port, rows)
    frame = pd.read_json(io.BytesIO(body), orient="records")
    seconds = time.perf_counter() - started
    if len(frame) != rows:
        raise RuntimeError(f"got {len(frame)} rows, expected {rows}")
    run.add(
        Measurement(
            "json",
            JSON_SOCKET,
            "socket",
            "get+to_pandas",
            1,
            rows,
            rows,
            bytes=table.nbytes,
            seconds=seconds,
            rep=rep,
            ttfb_seconds=first_byte_at - started,
            wire_bytes=len(body),
        )
    )


def _flight_get_pandas(
    run: Run, server: str, client: flight.FlightClient, table: pa.Table, rows: int, rep: int
) -> None:
    started = time.perf_counter()
    got = flight_client.timed_get([client], "mixed", keep=True)
    assert got.table is not None
    frame = got.table.to_pandas()
    seconds = time.perf_counter() - started
    if len(frame) != rows:
        raise RuntimeError(f"got {len(frame)} rows, expected {rows}")
    run.add(
        Measurement(
            "json",
            server,
            "pyarrow",
            "get+to_pandas",
            1,
            rows,
            rows,
            bytes=table.nbytes,
            seconds=seconds,
            rep=rep,
            ttfb_seconds=got.ttfb_seconds,
        )
    )


def _json_section(rows: list[Row]) -> list[str]:
    lines = [
        "## JSON over a socket vs Flight (the blog's comparison)",
        "",
        "A mixed table (2 int64, 2 float64, 2 string columns) from the request to a pandas "
        "DataFrame in the client. JSON: the server serializes it with "
        '`to_json(orient="records")` for each request, the client parses it with '
        "`pd.read_json`. Flight: GetFlightInfo + DoGet, then `to_pandas()`.",
        "",
        "| rows | Arrow size | path | seconds, median (min–max) | bytes on the wire | "
        "speed-up over JSON |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    measured = select(rows, suite="json")
    for count in sorted({int(r["rows_per_stream"]) for r in measured}):
        sized = select(measured, rows_per_stream=count)
        base = spread(select(sized, server=JSON_SOCKET), "seconds")
        for server, text in (
            (JSON_SOCKET, "JSON over a socket"),
            (ARROW_CPP, "Arrow C++ Flight"),
            (QUIVER, "quiver Flight"),
        ):
            group = select(sized, server=server)
            found = spread(group, "seconds")
            if found is None:
                continue
            wire = group[0]["wire_bytes"] or group[0]["bytes"]
            speedup = _ratio(base, found)
            lines.append(
                f"| {count:,} | {_size(float(group[0]['bytes']))} | {text} | "
                f"{found.median:.3f} ({found.low:.3f}–{found.high:.3f}) | "
                f"{_size(float(wire))} | {_times(speedup)} |"
            )
    return lines


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


def _section(
    rows: list[Row], run: dict[str, object], plots: dict[str, Path], at: Path
) -> list[str]:
    return [*_json_section(rows), "", *_figure("JSON vs Flight", plots.get("json_vs_flight"), at)]


def _figures(rows: list[Row], plan: dict[str, object], out_dir: Path) -> list[Path]:
    if not select(rows, suite="json"):
        return []
    return [json_vs_flight(rows, out_dir / "json_vs_flight.png")]


SUITE = Suite("json", run_json, sections=(Section(_section, rank=50),), figures=_figures)
