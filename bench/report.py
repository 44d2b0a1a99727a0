"""BENCHMARKS.md: the run's medians, spreads, ratios and goals, generated from results.csv."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import sql_clients, tpch
from .plots import (
    ENGINE_NAMES,
    FUNCTIONS_PEERS,
    FUNCTIONS_STREAM_LABELS,
    engine_peer_label,
    engine_peers,
    engine_reference,
    engine_seconds,
    functions_latency,
    functions_rows_per_second,
    functions_stream_rates,
    rows_text,
    sql_rows_of,
    tpch_both,
    tpch_queries,
    tpch_ratio,
    tpch_seconds,
    tpch_total,
)
from .results import (
    ARROW_CPP,
    DASK,
    DUCKDB,
    FASTAPI_JSON,
    FUNCTIONS_STREAM_ECHO,
    FUNCTIONS_STREAM_SQL,
    IN_PROCESS,
    JSON_SOCKET,
    NEMESIS_CALM,
    NEMESIS_FAULTS,
    PARQUET,
    POSTGRESQL,
    PYARROW,
    PYARROW_FLIGHT,
    QUIVER,
    QUIVER_1_WORKER,
    QUIVER_2_WORKERS,
    QUIVER_CLUSTER,
    QUIVER_CLUSTER_TLS,
    QUIVER_FILES,
    QUIVER_PYTHON,
    QUIVER_PYTHON_SHM,
    SPARK,
    SPARK_CACHE,
    SPARK_JVM,
)
from .sql_clients import SQL_PEERS, SqlPeer
from .summary import Row, Spread, ceiling, comparable, percentile, select, shapes, spread

#: The issue's goals: thresholds the report checks.
GET_VS_CPP = 1.3
PUT_VS_CPP = 1.3
SINGLE_STREAM_VS_TCP = 0.9
RSS_VS_STORED = 1.2
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
HEADLINE_CLIENTS = (PYARROW, QUIVER_PYTHON, "rust")
CLIENT_LABELS = {
    PYARROW: "pyarrow",
    QUIVER_PYTHON: "quiver Python (Rust core)",
    QUIVER_PYTHON_SHM: "quiver Python, shm",
    "rust": "rust",
}
#: The sql suite's goals: quiver Flight SQL at most this much slower than a raw DoGet...
FLIGHT_SQL_VS_DOGET = 1.3
#: ...and at least this many times faster than each peer (DuckDB: faster at all).
SQL_SPEEDUPS = (
    (sql_clients.POSTGRES_ODBC, 40.0),
    (sql_clients.POSTGRES_PSYCOPG, 25.0),
    (sql_clients.POSTGRES_ADBC, 10.0),
    (sql_clients.DUCKDB_PARQUET, 1.0),
)
#: The client whose median the sql ratios divide by. The goals' speed-ups were derived from a
#: pyarrow.flight DoGet (the issue's pre-quiver figures) times the 1.3x a query may cost over
#: it, so pyarrow.flight's Flight SQL is the reference; ADBC's Go driver adds its own client
#: cost on top, and its ratios are shown beside as well.
SQL_REFERENCE = sql_clients.QUIVER_FLIGHT_SQL
#: Every quiver Flight SQL client the speed-up goals are evaluated for, the reference first.
SQL_REFERENCES = (sql_clients.QUIVER_FLIGHT_SQL, sql_clients.QUIVER_ADBC)
#: The result sizes the sql goals are stated for.
SQL_GOAL_ROWS = (1_000_000, 16_000_000)
#: The functions suite's goals (docs/functions.md): bulk scoring with 1 quiver worker at
#: least this fraction of the in-process rate...
FUNCTIONS_VS_IN_PROCESS = 0.9
#: ...with 2 workers at least this many times the XGBatch-style pyarrow server's...
FUNCTIONS_VS_PYARROW = 1.6
#: ...at least this many times the JSON service's (both with one scoring process)...
FUNCTIONS_VS_JSON = 50.0
#: ...and a median 1-row request of at most this many seconds.
FUNCTIONS_ONE_ROW_P50_S = 0.001
#: The CPU rows of a bulk repetition, and the column each heads.
FUNCTIONS_CPU = (("cpu_server", "server"), ("cpu_workers", "workers"), ("cpu_client", "client"))
#: The bytes suite's goals: quiver stores, and sends for a whole-table DoGet, at most this
#: many times the tight Arrow size of the rows, for the worst column kind.
BYTES_VS_ARROW = 1.1


@dataclass(frozen=True)
class Goal:
    """One goal, its measured value and whether it was met.

    Attributes
    ----------
    text : str
        What is measured.
    target : str
        The threshold, as text.
    value : float or None
        The measured value (``None``: not measured in this run).
    passed : bool or None
        Whether the value meets the target.
    shown : str
        The value, as text.
    """

    text: str
    target: str
    value: float | None
    passed: bool | None
    shown: str

    @property
    def verdict(self) -> str:
        """PASS, FAIL, or n/a (not measured)."""
        if self.passed is None:
            return "n/a (not measured)"
        return "PASS" if self.passed else "FAIL"


def _gbps(found: Spread | None) -> str:
    if found is None:
        return "—"
    return f"{found.median:.2f} ({found.low:.2f}–{found.high:.2f})"


def _ratio(a: Spread | None, b: Spread | None) -> float | None:
    if a is None or b is None or b.median == 0:
        return None
    return a.median / b.median


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}".replace(".0 ", " ")
    return f"{int(nbytes)} B"


def _headline(rows: list[Row], server: str, op: str, client: str = "pyarrow") -> Spread | None:
    return spread(comparable(select(rows, suite="headline", server=server, op=op, client=client)))


def goals(rows: list[Row]) -> list[Goal]:
    """Evaluate the issue's goals on the rows of one run."""
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
    memory = select(rows, suite="memory", server=QUIVER, op="rss")
    ratio_rss = spread(memory, lambda r: float(r["rss_bytes"]) / float(r["bytes"]))
    out.append(
        Goal(
            f"quiver's RSS while serving gets of the {size} table / stored bytes",
            f"≤ {RSS_VS_STORED}×",
            None if ratio_rss is None else ratio_rss.median,
            None if ratio_rss is None else ratio_rss.median <= RSS_VS_STORED,
            _times(None if ratio_rss is None else ratio_rss.median),
        )
    )
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
    out.append(
        Goal(
            "1 KiB table, get latency p50 (GetFlightInfo + DoGet): quiver / Arrow C++",
            "≤ 1.0×",
            ratio_small,
            None if ratio_small is None else ratio_small <= 1.0,
            shown,
        )
    )
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


def _sql_spread(rows: list[Row], peer: SqlPeer, size: int) -> Spread | None:
    return spread(sql_rows_of(rows, peer, size), "seconds")


def sql_sizes(rows: list[Row]) -> list[int]:
    """Return the result sizes the sql suite measured, ascending."""
    return sorted({int(r["rows_per_stream"]) for r in select(rows, suite="sql")})


def sql_goal_sizes(rows: list[Row]) -> list[int]:
    """Return the sizes the sql goals are checked at: 1M and 16M rows, else the largest."""
    sizes = sql_sizes(rows)
    return [s for s in SQL_GOAL_ROWS if s in sizes] or sizes[-1:]


def sql_goals(rows: list[Row], cap: int | None = None) -> list[Goal]:
    """Evaluate the sql suite's goals (none when it did not run).

    Parameters
    ----------
    rows : list of dict
        The rows of results.csv.
    cap : int, optional
        The plan's largest size for the row-based clients: a goal above it says so.
    """
    out = []
    for size in sql_goal_sizes(rows):
        at = f"{rows_text(size)} rows"
        ours = _sql_spread(rows, sql_clients.QUIVER_FLIGHT_SQL, size)
        doget = _sql_spread(rows, sql_clients.QUIVER_DOGET, size)
        ratio = _ratio(ours, doget)
        shown = _times(ratio)
        if ratio is not None and ours is not None and doget is not None:
            shown += f" ({ours.median:.3f} s vs {doget.median:.3f} s)"
        out.append(
            Goal(
                f"{at} into pandas: quiver Flight SQL / quiver raw DoGet (both pyarrow.flight)",
                f"≤ {FLIGHT_SQL_VS_DOGET}×",
                ratio,
                None if ratio is None else ratio <= FLIGHT_SQL_VS_DOGET,
                shown,
            )
        )
        for reference in SQL_REFERENCES:
            out += _speedup_goals(rows, reference, size, cap)
    return out


def _speedup_goals(rows: list[Row], reference: SqlPeer, size: int, cap: int | None) -> list[Goal]:
    """Return the speed-up goals at ``size`` rows: each peer's median over ``reference``'s."""
    out = []
    at = f"{rows_text(size)} rows"
    ours = _sql_spread(rows, reference, size)
    for peer, threshold in SQL_SPEEDUPS:
        theirs = _sql_spread(rows, peer, size)
        speedup = _ratio(theirs, ours)
        shown = _times(speedup)
        if speedup is not None and ours is not None and theirs is not None:
            shown += f" ({theirs.median:.3f} s vs {ours.median:.3f} s)"
        elif peer.row_based and cap is not None and size > cap:
            shown = f"not run above {rows_text(cap)} rows"
        target = "> 1× (faster)" if threshold == 1.0 else f"≥ {threshold:g}×"
        passed = None
        if speedup is not None:
            passed = speedup > 1.0 if threshold == 1.0 else speedup >= threshold
        out.append(
            Goal(
                f"{at} into pandas: {peer.label} / {reference.label}",
                target,
                speedup,
                passed,
                shown,
            )
        )
    return out


def _rate_ratio(rows: list[Row], ours: str, theirs: str) -> tuple[float | None, str]:
    """Return the ratio of two peers' median scoring rates, and it as text with both rates."""
    a = functions_rows_per_second(rows, ours)
    b = functions_rows_per_second(rows, theirs)
    ratio = _ratio(a, b)
    if ratio is None or a is None or b is None:
        return None, "—"
    return ratio, f"{_times(ratio)} ({_rate(a.median)} vs {_rate(b.median)})"


def _rate(rows_per_second: float, unit: str = " rows/s") -> str:
    if rows_per_second >= 1e6:
        return f"{rows_per_second / 1e6:.2f}M{unit}"
    return f"{rows_per_second / 1e3:.1f}k{unit}"


def functions_goals(rows: list[Row]) -> list[Goal]:
    """Evaluate the functions suite's goals (none when it did not run)."""
    if not select(rows, suite="functions"):
        return []
    out = []
    for ours, theirs, threshold, text in (
        (
            QUIVER_1_WORKER,
            IN_PROCESS,
            FUNCTIONS_VS_IN_PROCESS,
            "quiver, 1 worker / in process, 1 thread",
        ),
        (
            QUIVER_2_WORKERS,
            PYARROW_FLIGHT,
            FUNCTIONS_VS_PYARROW,
            "quiver, 2 workers / XGBatch-style pyarrow server",
        ),
        (
            QUIVER_1_WORKER,
            FASTAPI_JSON,
            FUNCTIONS_VS_JSON,
            "quiver, 1 worker / FastAPI JSON service, 1 worker",
        ),
    ):
        ratio, shown = _rate_ratio(rows, ours, theirs)
        out.append(
            Goal(
                f"Bulk scoring, rows/s: {text}",
                f"≥ {threshold:g}×",
                ratio,
                None if ratio is None else ratio >= threshold,
                shown,
            )
        )
    for peer, text in ((QUIVER_1_WORKER, "1 worker"), (QUIVER_2_WORKERS, "2 workers")):
        one = functions_latency(rows, peer, 1)
        p50 = None if one is None else float(one["seconds"])
        out.append(
            Goal(
                f"1-row request, p50: quiver, {text} (one DoExchange per request)",
                f"≤ {FUNCTIONS_ONE_ROW_P50_S * 1e3:g} ms",
                p50,
                None if p50 is None else p50 <= FUNCTIONS_ONE_ROW_P50_S,
                "—" if p50 is None else f"{p50 * 1e3:.3f} ms",
            )
        )
    return out


def _functions_stream_lines(rows: list[Row], plan: dict[str, object]) -> list[str]:
    rates = functions_stream_rates(rows)
    if not rates:
        return []
    found = select(rows, suite="functions", op=tuple(rates))
    sent = max((int(r["bytes"]) for r in found), default=0)
    echo = rates.get(FUNCTIONS_STREAM_ECHO)
    cap = plan.get("functions_stream_max_memory")
    lines = [
        "SQL over a stream: DoExchange with the command "
        '`{"sql": "SELECT ... FROM input ..."}`, the statement run by quiver over the '
        f"incoming batches as they arrive; {_size(sent)} of the 20 float32 features per "
        "stream, in 65,536-row batches from a pyarrow.flight writer thread, against the "
        "echo of the same stream (a descriptor that is not a command) on the same server"
        + (
            f", a quiver started with `--max-memory {_size(float(cap))}` for this alone"
            if isinstance(cap, (int, float))
            else ""
        )
        + ". "
        "GB/s of input (1e9 bytes per second), median (min–max) of the repetitions; the "
        "peak of `quiver_memory_used_bytes` read from the server's /metrics every 10 ms "
        "during each stream, and the server's VmHWM after it (peak RSS since it started). "
        "The echo sends every byte back and the client reads it all, where the statements "
        "send a tenth or a fifth back: × echo is the rate end to end, the client's reading "
        "included, not the server's cost alone.",
        "",
        "| stream | statement | GB/s | × echo | bytes out | peak memory used | server VmHWM |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for op, label in FUNCTIONS_STREAM_LABELS:
        rate = rates.get(op)
        if op not in rates:
            continue
        statement = f"`{FUNCTIONS_STREAM_SQL[op]}`" if op in FUNCTIONS_STREAM_SQL else "—"
        if isinstance(rate, str):
            lines.append(f"| {label} | {statement} | {rate} | — | — | — | — |")
            continue
        group = select(found, op=op)
        ratio = None if op == FUNCTIONS_STREAM_ECHO or isinstance(echo, str) else _ratio(rate, echo)
        out_share = sum(int(r["wire_bytes"] or 0) for r in group) / max(
            1, sum(int(r["bytes"]) for r in group)
        )
        peak = max((int(r["rss_bytes"] or 0) for r in group), default=0)
        hwm = max((int(r["hwm_bytes"] or 0) for r in group), default=0)
        lines.append(
            f"| {label} | {statement} | {_gbps(rate)} | "
            f"{'—' if ratio is None else _times(ratio)} | {out_share:.0%} of the bytes | "
            f"{_size(peak)} | {_size(hwm)} |"
        )
    unavailable = [r for r in rates.values() if isinstance(r, str)]
    if unavailable:
        lines += [
            "",
            "SQL over a stream was **not available** from the server measured: it answered "
            f"UNIMPLEMENTED ({unavailable[0].removeprefix('not available: ')}). Only the "
            "echo was measured.",
        ]
    return [*lines, ""]


def _cpu_per_gib(rows: list[Row], peer: str, op: str) -> Spread | None:
    found = select(rows, suite="functions", server=peer, op=op)
    return spread(found, lambda r: float(r["seconds"]) / (float(r["bytes"]) / 2**30))


def _functions_section(
    rows: list[Row], run: dict[str, object], plot: Path | None, report_dir: Path
) -> list[str]:
    measured = select(rows, suite="functions")
    if not measured:
        return []
    machine = run.get("machine") or {}
    assert isinstance(machine, dict)
    bulk = select(measured, op="bulk")
    most = max((int(r["rows_per_stream"]) for r in bulk), default=0)
    json_rows = {int(r["rows_per_stream"]) for r in select(bulk, server=FASTAPI_JSON)}
    calls = {int(r["ops"]) for r in select(measured, op="latency") if r.get("ops")}
    lines = [
        "## Functions: scoring over DoExchange (the paper's XGBatch)",
        "",
        "The BID'22 paper's XGBatch scenario: a client streams record batches of 20 float32 "
        "features to a scoring service and gets one float32 score per row back. The model "
        "is an `xgboost` booster (100 trees of depth 6, binary logistic) trained by the "
        "harness on 100,000 seeded rows and saved to a file that every peer loads; every "
        "peer scores with `inplace_predict` on one thread (`bench/xgbatch.py`), on the same "
        "rows. The peers, each a process of its own started by the harness:",
        "",
        "- in process: the client's own process calls `inplace_predict` on the same "
        "65,536-row batches (the limit), and beside it with xgboost's threads on all "
        "cores;",
        "- an XGBatch-style server: pyarrow's `FlightServerBase` whose `do_exchange` scores "
        "each batch and writes the scores back, one Python process "
        "(`bench/peers/xgbatch_server.py`);",
        "- a JSON service: FastAPI on uvicorn, one worker, `POST /score` of rows as lists "
        "of lists validated by pydantic (`bench/peers/json_scoring.py`), one kept-alive "
        "HTTP/1.1 connection;",
        "- quiver serving the functions module `bench/peers/quiver_scoring.py` "
        "(`quiver serve --functions ... --function-workers 1|2`).",
        "",
        "The Flight clients are plain `pyarrow.flight`: DoExchange with the command "
        '`{"function": "score"}`, a writer thread sending while the calling thread reads. '
        f"Bulk: {most:,} rows per repetition in 65,536-row requests (batches), "
        "repetitions alternating between the peers; "
        + (
            f"the JSON service scores {', '.join(f'{n:,}' for n in sorted(json_rows))} rows "
            "per repetition instead (a row costs it far more), so its rate is over fewer "
            "rows. "
            if json_rows and json_rows != {most}
            else ""
        )
        + "Latency: sequential requests of 1 and of 1,000 rows, "
        + (f"{', '.join(f'{n:,}' for n in sorted(calls))} timed per peer " if calls else "")
        + "after untimed ones, each one DoExchange or one HTTP request. CPU: the seconds of "
        "user and system time each process used during a bulk repetition (`/proc/PID/stat`"
        " before and after), per GiB of input (80 bytes a row): the server, quiver's "
        "workers (the server's child processes, summed), and the client's process (for "
        "the in-process peer, the scoring itself). "
        f"On this machine the client, the server and its workers share "
        f"{machine.get('nproc', '?')} cores: two workers compete with the client's encoding "
        "and the server for them (the 2-worker goal assumes a core each), so the CPU "
        "seconds, not only the rates, say where the time went. Every peer's scores are "
        "checked against the in-process ones, in order (a position-weighted checksum).",
        "",
        "| goal | target | measured | result |",
        "| --- | --- | --- | --- |",
        *_goal_rows(functions_goals(rows)),
        "",
        *_figure("Scoring over DoExchange", plot, report_dir),
        "Bulk scoring: rows per second, median (min–max) of the repetitions; CPU seconds "
        "per GiB of input, medians.",
        "",
        "| peer | rows | rows/s | × in process | CPU s/GiB: server | workers | client | total |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    base = functions_rows_per_second(rows, IN_PROCESS)
    for peer, label, _ in FUNCTIONS_PEERS:
        found = functions_rows_per_second(rows, peer)
        if found is None:
            continue
        count = max(int(r["rows_per_stream"]) for r in select(bulk, server=peer))
        cpu = [_cpu_per_gib(rows, peer, op) for op, _ in FUNCTIONS_CPU]
        cells = ["—" if c is None else f"{c.median:.2f}" for c in cpu]
        total = sum(c.median for c in cpu if c is not None)
        lines.append(
            f"| {label} | {count:,} | {_rate(found.median, '')} ({_rate(found.low, '')}–"
            f"{_rate(found.high, '')}) | {_times(_ratio(found, base))} | {' | '.join(cells)} | "
            f"{total:.2f} |"
        )
    lines += [
        "",
        "Latency of sequential requests (each one DoExchange, HTTP request or, in process, "
        "one `inplace_predict`):",
        "",
        "| peer | 1 row: p50 | p99 | 1,000 rows: p50 | p99 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for peer, label, _ in FUNCTIONS_PEERS:
        found = [functions_latency(rows, peer, n) for n in (1, 1000)]
        if not any(found):
            continue
        cells = []
        for row in found:
            if row is None:
                cells += ["—", "—"]
            else:
                cells += [_ms(float(row["seconds"])), _ms(float(row["p99_seconds"]))]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    plan = run.get("plan") or {}
    assert isinstance(plan, dict)
    return [*lines, "", *_functions_stream_lines(rows, plan)]


# --- engines: Spark, Dask and Ray through quiver (the paper's Figure 10) --------------------

#: The engines suite's goals (issue 25): Spark through quiver at least this many times faster
#: than Spark's JDBC reader and writer from and to PostgreSQL...
ENGINES_VS_JDBC = 10.0
#: ...at least as fast as Spark on the same rows in local Parquet files...
ENGINES_VS_PARQUET = 1.0
#: ...and a table of N endpoints read at least this many times faster than one of 1.
ENGINES_N_VS_ONE = 1.5
#: The run's software entries the engines suite added (shown in its section, not the sql's).
ENGINES_SOFTWARE = (
    "pyspark",
    "dask",
    "distributed",
    "ray",
    "PostgreSQL JDBC",
    "Java",
    "Java (Spark, JVM connector)",
)


def _engine_ratio(
    rows: list[Row], engine: str, op: str, theirs: tuple[str, int], ours: tuple[str, int]
) -> tuple[float | None, str]:
    """Return how many times ``ours`` is faster than ``theirs``, and it as text."""
    a = engine_seconds(rows, engine, op, *ours)
    b = engine_seconds(rows, engine, op, *theirs)
    ratio = _ratio(b, a)
    if ratio is None or a is None or b is None:
        return None, "—"
    return ratio, f"{_times(ratio)} ({b.median:.3f} s vs {a.median:.3f} s)"


def engines_goals(rows: list[Row]) -> list[Goal]:
    """Evaluate the engines suite's goals (none when it did not run)."""
    if not select(rows, suite="engines", op=("read", "write")):
        return []
    out = []

    def goal(text: str, threshold: float, found: tuple[float | None, str]) -> None:
        ratio, shown = found
        target = f"≥ {threshold:g}×"
        out.append(Goal(text, target, ratio, None if ratio is None else ratio >= threshold, shown))

    for spark, name in ((SPARK, "Spark"), (SPARK_JVM, "Spark, JVM connector")):
        if spark == SPARK_JVM and not select(rows, suite="engines", client=spark, op="read"):
            continue  # not measured here (no JDK or Maven): the run's notes say why
        reference = engine_reference(rows, spark, "read")
        many = f"{reference[1]} endpoints" if reference else "N endpoints"
        if reference is not None:
            for server, endpoints in engine_peers(rows, spark, "read"):
                if server == POSTGRESQL:
                    label = engine_peer_label(server, endpoints)
                    goal(
                        f"{name} read + aggregate: quiver ({many}) / Spark's JDBC reader ({label})",
                        ENGINES_VS_JDBC,
                        _engine_ratio(rows, spark, "read", (server, endpoints), reference),
                    )
        else:
            goal(
                f"{name} read + aggregate: quiver ({many}) / Spark's JDBC reader",
                ENGINES_VS_JDBC,
                (None, "—"),
            )
        writes = engine_peers(rows, spark, "write")
        ours = next((p for p in writes if p[0] == QUIVER), None)
        theirs = next((p for p in writes if p[0] == POSTGRESQL), None)
        goal(
            f"{name} write (overwrite): quiver / Spark's JDBC writer to PostgreSQL",
            ENGINES_VS_JDBC,
            (None, "—")
            if ours is None or theirs is None
            else _engine_ratio(rows, spark, "write", theirs, ours),
        )
        parquet = next((p for p in engine_peers(rows, spark, "read") if p[0] == PARQUET), None)
        goal(
            f"{name} read + aggregate: quiver ({many}) / local Parquet"
            + (f" ({parquet[1]} files)" if parquet else ""),
            ENGINES_VS_PARQUET,
            (None, "—")
            if parquet is None or reference is None
            else _engine_ratio(rows, spark, "read", parquet, reference),
        )
    for engine, name in ENGINE_NAMES:
        quivers = [p for p in engine_peers(rows, engine, "read") if p[0] == QUIVER]
        if not quivers:
            continue
        one = next((p for p in quivers if p[1] == 1), None)
        top = quivers[-1]
        goal(
            f"{name} read + aggregate: quiver, {top[1]} endpoints / 1 endpoint",
            ENGINES_N_VS_ONE,
            (None, "—")
            if one is None or one == top
            else _engine_ratio(rows, engine, "read", one, top),
        )
    return out


def _engine_cpu(rows: list[Row], engine: str, op: str, peer: tuple[str, int], who: str) -> str:
    found = select(
        rows,
        suite="engines",
        client=engine,
        op=f"{op}_cpu_{who}",
        server=peer[0],
        endpoints=peer[1],
    )
    cpu = spread(found, "seconds")
    return "—" if cpu is None else f"{cpu.median:.2f}"


def _engines_table(rows: list[Row]) -> list[str]:
    lines = [
        "| engine | op | source or sink | engine partitions | seconds | rows/s | "
        "× quiver's time | CPU s: engine | server |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for engine, name in ENGINE_NAMES:
        for op in ("read", "write"):
            reference = engine_reference(rows, engine, op)
            ours = None if reference is None else engine_seconds(rows, engine, op, *reference)
            for peer in engine_peers(rows, engine, op):
                found = engine_seconds(rows, engine, op, *peer)
                if found is None:
                    continue
                group = select(
                    rows,
                    suite="engines",
                    client=engine,
                    op=op,
                    server=peer[0],
                    endpoints=peer[1],
                )
                count = int(group[0]["rows_per_stream"])
                partitions = sorted({int(r["streams"] or 0) for r in group})
                shown = ", ".join(str(p) for p in partitions if p) or "—"
                lines.append(
                    f"| {name} | {op} | {engine_peer_label(*peer, op)} | {shown} | "
                    f"{found.median:.3f} ({found.low:.3f}–{found.high:.3f}) | "
                    f"{_rate(count / found.median)} | "
                    f"{_times(_ratio(found, ours))} | "
                    f"{_engine_cpu(rows, engine, op, peer, 'engine')} | "
                    f"{_engine_cpu(rows, engine, op, peer, 'server')} |"
                )
    return lines


def _engines_floor(rows: list[Row]) -> list[str]:
    """Say how much faster than Spark's JDBC reader any read through Spark could be here."""
    reads = engine_peers(rows, SPARK, "read")
    cache = next((p for p in reads if p[0] == SPARK_CACHE), None)
    jdbc = [p for p in reads if p[0] == POSTGRESQL]
    floor = None if cache is None else engine_seconds(rows, SPARK, "read", *cache)
    if floor is None or not jdbc or floor.median <= 0:
        return []
    bounds = []
    for peer in jdbc:
        found = engine_seconds(rows, SPARK, "read", *peer)
        if found is not None:
            bounds.append(
                f"{found.median / floor.median:.1f}× over {engine_peer_label(*peer)} "
                f"({found.median:.3f} s)"
            )
    return [
        f"Spark's own aggregation of its cached rows, with no I/O, took {floor.median:.3f} s: "
        "a read through Spark can gain at most " + " and ".join(bounds) + " here, "
        "however fast its source."
    ]


def _engines_setup_lines(rows: list[Row]) -> list[str]:
    """Say how long each engine took to start and each source took to load."""
    lines = []
    starts = [
        f"{name} {float(r['seconds']):.1f} s"
        for engine, name in ENGINE_NAMES
        for r in select(rows, suite="engines", client=engine, op="startup")[:1]
    ]
    if starts:
        lines.append(f"Engine start-up (once per run, not in the timings): {', '.join(starts)}.")
    loads = []
    for r in select(rows, suite="engines", op="load"):
        server, endpoints = str(r["server"]), int(r["endpoints"] or 0)
        what = {
            QUIVER: f"quiver put, {endpoints} endpoint{'s' if endpoints != 1 else ''}",
            PARQUET: f"Parquet, {endpoints} files (pyarrow)",
            POSTGRESQL: "PostgreSQL COPY (psycopg)",
        }.get(server, server)
        loads.append(f"{what} {float(r['seconds']):.2f} s")
    if loads:
        lines.append(f"Loading the table, once: {', '.join(loads)}.")
    return lines


def _engines_section(
    rows: list[Row], run: dict[str, object], plot: Path | None, report_dir: Path
) -> list[str]:
    measured = select(rows, suite="engines", op=("read", "write"))
    if not measured:
        return []
    count = int(measured[0]["rows_per_stream"])
    nbytes = float(measured[0]["bytes"])
    software = run.get("sql_software") or {}
    assert isinstance(software, dict)
    versions = ", ".join(f"{k} {v}" for k, v in software.items() if k in ENGINES_SOFTWARE)
    if "PostgreSQL" in software:
        versions += f", PostgreSQL {software['PostgreSQL']}"
    plan = run.get("plan") or {}
    assert isinstance(plan, dict)
    warm_ups = plan.get("engines_warm_ups", 1)
    reference = engine_reference(rows, SPARK, "read") or engine_reference(rows, DASK, "read")
    many = reference[1] if reference else "N"
    lines = [
        "## Engines: Spark, Dask and Ray through quiver (the paper's Figure 10)",
        "",
        f"{count:,} rows of the taxi table ({_size(nbytes)} of Arrow data; `bench/taxi.py`) "
        f"stored in a quiver started for the suite twice, with 1 endpoint and with {many} "
        f"(`put(..., partitions=N)`), written to a local directory of {many} Parquet files "
        "of one row group each (pyarrow, snappy; contiguous slices of the rows, as the "
        "endpoints split them), and loaded into a PostgreSQL server started for the suite "
        "(COPY; durability off, as in the sql suite). Each engine runs in a worker process of "
        "its own, started once (its start-up is not in the timings), one engine at a time: "
        "Spark 4 `local[2]` (UI off, `spark.driver.memory` per mode), Dask "
        "`LocalCluster(n_workers=2, threads_per_worker=1, processes=True)`, Ray "
        "`ray.init(num_cpus=2)`. Every engine has two slots, whatever the machine: "
        f"{many} endpoints is twice that.",
        "",
        "Each read aggregates the whole table: group by `passenger_count` (8 groups, the "
        "missing count among them), count the trips, sum `fare_amount`, and count the "
        "non-null values of each of the other 18 columns, so that every column is read "
        "whatever a reader can prune (Spark's JDBC and Parquet readers read only the "
        "columns a query uses); the result is checked against pyarrow's. The sources:",
        "",
        "- quiver through the engine's connector: Spark's Python data source "
        '`spark.read.format("quiver")` (`quiver.spark`, a Spark partition per endpoint), '
        "`quiver.dask.read_table`, `quiver.ray.read_table`; with the connectors' default "
        'transport (`"auto"`: the server is on this host, so its endpoints are read through '
        f"shared memory, docs/shm.md) through 1 and {many} endpoints, and through {many} "
        'with `transport="grpc"` (Flight DoGet over loopback TCP, as a server on another '
        "host is read);",
        "- the same Spark with quiver's JVM connector (`java/spark`, `Spark, JVM connector`): "
        "run on the JDK 22+ `scripts/setup-spark-jvm.sh` built it with, when there is one "
        "(`Java (Spark, JVM connector)` below), whose "
        "foreign-function API lets it map a server's memfds on this host as the Python "
        "connector does, with the same three quiver reads; on an older Java it reads over "
        "gRPC alone. Its writes go over gRPC;",
        "- PostgreSQL through Spark's own JDBC reader (the paper's baseline; PostgreSQL JDBC "
        "driver, `fetchsize` 10,000), in its default single partition and in 2 "
        "(`partitionColumn` `PULocationID` over 1–265, `numPartitions` 2);",
        "- the local Parquet files: `spark.read.parquet` (Spark decides its partitions), "
        f"`dd.read_parquet` (a partition per file), `ray.data.read_parquet` "
        f"(`override_num_blocks` {many});",
        "- Spark only: its cache, the same rows cached in Spark's memory, aggregated with no "
        "I/O: the floor.",
        "",
        "Spark's writes write that cached DataFrame (repartitioned into "
        f"{many} partitions, `.cache()`d and counted first) with mode overwrite: to quiver "
        '(`df.write.format("quiver")`, default transport and gRPC) and through Spark\'s JDBC '
        "writer to PostgreSQL "
        "(`batchsize` 10,000, `reWriteBatchedInserts=true`: multi-row INSERTs, the faster "
        "of the driver's two ways); the rows are counted in the sink after each. Ray's "
        "group-by uses the pull-based sort shuffle: the default hash shuffle starts "
        "aggregator actors for every query, seconds on this machine.",
        "",
        f"{warm_ups} untimed round(s) of every peer, then the repetitions, the peers taking "
        "turns. "
        "Seconds: median (min–max), in the engine's process, from the call to the collected "
        "result. × quiver's time: the peer's median over quiver's (the most endpoints; "
        "above 1, quiver is faster). CPU seconds, medians: the engine's process tree (the "
        "driver, Spark's JVM and Python workers, Dask's scheduler and workers, Ray's raylet "
        "and workers; `/proc/PID/stat` before and after, children reaped included) and the "
        "server's (quiver; PostgreSQL with its backends).",
        "",
        "| goal | target | measured | result |",
        "| --- | --- | --- | --- |",
        *_goal_rows(engines_goals(rows)),
        "",
        *[line for text in _engines_floor(rows) for line in (text, "")],
        *_figure("Engines through quiver", plot, report_dir),
        *_engines_table(rows),
    ]
    for line in _engines_setup_lines(rows):
        lines += ["", line]
    if versions:
        lines += ["", f"- **Engines and peers**: {versions}"]
    return [*lines, ""]


# --- TPC-H against DuckDB (issue 38) ----------------------------------------------------------

#: The tpch suite's goals (issue 38), in the same run: quiver's total time over the 22
#: queries, tables stored, at most this many times DuckDB's...
TPCH_STORED_TOTAL = 0.8
#: ...no query on the stored tables above this many times DuckDB's...
TPCH_STORED_QUERY = 1.5
#: ...the files queried in place, total at most this many times DuckDB's...
TPCH_FILES_TOTAL = 1.2
#: ...and the stored tables' server's RSS while the queries run at most this many times the
#: Arrow size of the tables.
TPCH_RSS_VS_ARROW = 1.3
#: The run's software entries the tpch suite added (shown in its section, not the sql's).
TPCH_SOFTWARE = ("tpchgen-cli",)


def _tpch_row(rows: list[Row], op: str, server: str | None = None) -> Row | None:
    """Return the tpch suite's row ``op`` (of ``server``, when given; the last, if several)."""
    found = select(rows, suite="tpch", op=op)
    if server is not None:
        found = select(found, server=server)
    return found[-1] if found else None


def query_checks(rows: list[Row], setup: str, suite: str = "tpch") -> dict[str, Row]:
    """Return the check of each query's first result on ``setup`` in ``suite``, by query."""
    checks = {}
    for row in select(rows, suite=suite, server=setup):
        op = str(row["op"])
        if op.startswith("check:"):
            checks[op.removeprefix("check:")] = row
    return checks


def _tpch_total_goal(rows: list[Row], setup: str, threshold: float) -> Goal:
    """Return the goal on the total of the 22 medians.

    A query not timed on both engines fails it; the ratio over the queries that were is
    shown beside.
    """
    both = tpch_both(rows, setup, list(tpch.QUERY_IDS))
    missing = [q for q in tpch.QUERY_IDS if q not in both]
    ours, theirs = (tpch_total(rows, e, both) for e in (setup, DUCKDB))
    text = f"TPC-H, total of the 22 queries' medians: {tpch.LABELS[setup]} / DuckDB"
    target = f"≤ {threshold:g}×"
    if ours is None or not theirs:
        return Goal(text, target, None, False, "— (not measured)")
    ratio = ours / theirs
    if missing:
        shown = (
            f"— (not measured: {', '.join(missing)}; the other {len(both)}: {_times(ratio)}, "
            f"{ours:.3f} s vs {theirs:.3f} s)"
        )
        return Goal(text, target, None, False, shown)
    shown = f"{_times(ratio)} ({ours:.3f} s vs {theirs:.3f} s)"
    return Goal(text, target, ratio, ratio <= threshold, shown)


def results_equal_goal(name: str, checks: dict[str, Row]) -> Goal:
    """Return the goal that every TPC-H query's result equals DuckDB's.

    ``checks`` holds each query's ``check:`` row by query id; a query that differs,
    failed or did not run fails the goal.
    """
    count = len(tpch.QUERY_IDS)
    equal = [q for q in tpch.QUERY_IDS if q in checks and not checks[q]["errors"]]
    wrong = [q for q in tpch.QUERY_IDS if q not in equal]
    shown = f"{len(equal)} of {count}"
    if wrong:
        shown += f" (differ, failed or not run: {', '.join(wrong)})"
    return Goal(name, f"{count} of {count}", float(len(equal)), not wrong, shown)


def tpch_goals(rows: list[Row]) -> list[Goal]:
    """Evaluate the tpch suite's goals (none when it did not run).

    A query that failed or was not timed fails the goals it counts in: the totals are over
    all 22 queries, and a result that differs from DuckDB's fails the first goal.
    """
    if not select(rows, suite="tpch"):
        return []
    out = []
    for setup in tpch.SETUPS:
        name = f"TPC-H results equal to DuckDB's: {tpch.LABELS[setup]}"
        out.append(results_equal_goal(name, query_checks(rows, setup)))
    out.append(_tpch_total_goal(rows, QUIVER, TPCH_STORED_TOTAL))
    ratios = {q: tpch_ratio(rows, QUIVER, q) for q in tpch.QUERY_IDS}
    measured = {q: r for q, r in ratios.items() if r is not None}
    text = f"TPC-H, slowest query against DuckDB's: {tpch.LABELS[QUIVER]}"
    target = f"≤ {TPCH_STORED_QUERY:g}× each"
    if measured:
        worst = max(measured, key=lambda q: measured[q])
        over = [q for q, r in measured.items() if r > TPCH_STORED_QUERY]
        shown = f"{_times(measured[worst])} ({worst})"
        if over:
            shown += f"; above {TPCH_STORED_QUERY:g}×: {', '.join(over)}"
        missing = [q for q in tpch.QUERY_IDS if q not in measured]
        if missing:
            shown += f"; not measured: {', '.join(missing)}"
        out.append(Goal(text, target, measured[worst], not over and not missing, shown))
    else:
        out.append(Goal(text, target, None, False, "— (not measured)"))
    out.append(_tpch_total_goal(rows, QUIVER_FILES, TPCH_FILES_TOTAL))
    rss = _tpch_row(rows, "rss", QUIVER)
    arrow = _tpch_row(rows, "arrow")
    text = (
        f"TPC-H, {tpch.LABELS[QUIVER]}: the server's peak RSS while the queries ran / the "
        "Arrow size of the tables"
    )
    if rss is None or arrow is None or not rss.get("rss_bytes") or not arrow["bytes"]:
        out.append(Goal(text, f"≤ {TPCH_RSS_VS_ARROW:g}×", None, None, "—"))
    else:
        peak, nbytes = float(rss["rss_bytes"]), float(arrow["bytes"])
        ratio = peak / nbytes
        shown = f"{_times(ratio)} ({_size(peak)} vs {_size(nbytes)})"
        out.append(
            Goal(text, f"≤ {TPCH_RSS_VS_ARROW:g}×", ratio, ratio <= TPCH_RSS_VS_ARROW, shown)
        )
    return out


def _tpch_cell(found: Spread | None) -> str:
    if found is None:
        return "—"
    return f"{found.median:.3f} ({found.low:.3f}–{found.high:.3f})"


def _tpch_result(check: Row | None) -> str:
    if check is None:
        return "not run"
    if not check["errors"]:
        return "equal"
    return "**failed**" if str(check.get("note") or "").startswith("failed: ") else "**differs**"


def _tpch_table(rows: list[Row]) -> list[str]:
    queries = tpch_queries(rows)
    checks = {setup: query_checks(rows, setup) for setup in tpch.SETUPS}
    lines = [
        "| query | result rows | DuckDB, s | quiver, stored tables, s | × DuckDB | "
        "quiver, files in place, s | × DuckDB | results: stored, in place |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for qid in queries:
        result_rows = sorted(
            {int(r["rows_per_stream"]) for r in select(rows, suite="tpch", op=qid)}
        )
        cells = [qid.upper(), "/".join(f"{n:,}" for n in result_rows)]
        cells.append(_tpch_cell(tpch_seconds(rows, DUCKDB, qid)))
        for setup in tpch.SETUPS:
            cells.append(_tpch_cell(tpch_seconds(rows, setup, qid)))
            cells.append(_times(tpch_ratio(rows, setup, qid)))
        cells.append(", ".join(_tpch_result(checks[s].get(qid)) for s in tpch.SETUPS))
        lines.append(f"| {' | '.join(cells)} |")
    duckdb = tpch_total(rows, DUCKDB, queries)
    cells = ["**total**", "", "—" if duckdb is None else f"{duckdb:.3f}"]
    for setup in tpch.SETUPS:
        # A query not timed on the setup leaves the total of the others, said so.
        both = tpch_both(rows, setup, queries)
        ours, theirs = tpch_total(rows, setup, both), tpch_total(rows, DUCKDB, both)
        if ours is None or not theirs:
            cells += ["—", "—"]
            continue
        partial = "" if len(both) == len(queries) else f" ({len(both)} of {len(queries)})"
        cells += [f"{ours:.3f}{partial}", f"{_times(ours / theirs)}{partial}"]
    cells.append("")
    lines.append(f"| {' | '.join(cells)} |")
    return lines


def _tpch_memory_lines(rows: list[Row]) -> list[str]:
    arrow = _tpch_row(rows, "arrow")
    stored = _tpch_row(rows, "stored", QUIVER)
    loaded = _tpch_row(rows, "rss_loaded", QUIVER)
    peak = _tpch_row(rows, "rss", QUIVER)
    files = _tpch_row(rows, "rss", QUIVER_FILES)
    if arrow is None:
        return []
    text = (
        f"Memory: the 8 tables put are {_size(float(arrow['bytes']))} of Arrow data (the sum "
        "of the `nbytes` of the record batches put, as pyarrow reads them from the files)"
    )
    if stored is not None:
        text += f"; the server says it stores {_size(float(stored['bytes']))} (`stats().bytes`)"
    text += "."
    if loaded is not None and loaded.get("rss_bytes"):
        text += (
            f" The stored tables' server: RSS {_size(float(loaded['rss_bytes']))} after the load"
        )
        if peak is not None and peak.get("rss_bytes"):
            text += (
                f", {_size(float(peak['rss_bytes']))} at the peak while the queries ran "
                "(VmRSS sampled every 10 ms from the first query to the last), VmHWM "
                f"{_size(float(peak['hwm_bytes'] or 0))} at the end (the load included)"
            )
        text += "."
    if files is not None and files.get("rss_bytes"):
        text += (
            f" The files-in-place server's peak RSS while the queries ran: "
            f"{_size(float(files['rss_bytes']))}."
        )
    return [text]


def _tpch_load_lines(rows: list[Row]) -> list[str]:
    loads = [
        r for r in select(rows, suite="tpch", server=QUIVER) if str(r["op"]).startswith("load:")
    ]
    if not loads:
        return []
    seconds = sum(float(r["seconds"]) for r in loads)
    count = sum(int(r["rows_per_stream"]) for r in loads)
    each = ", ".join(
        f"{str(r['op']).removeprefix('load:')} {float(r['seconds']):.2f} s" for r in loads
    )
    text = f"Loading: {count:,} rows put in {seconds:.1f} s ({each})"
    generated = select(rows, suite="tpch", op="generate")
    if generated:
        text += f"; tpchgen-cli generated the files in {float(generated[-1]['seconds']):.1f} s"
    else:
        text += "; the files were generated by an earlier run (kept in `OUT/tpch/`)"
    return [text + "."]


def _tpch_mismatch_lines(rows: list[Row]) -> list[str]:
    lines = []
    for setup in tpch.SETUPS:
        for qid, check in sorted(query_checks(rows, setup).items()):
            if check["errors"]:
                lines.append(f"- {qid.upper()}, {tpch.LABELS[setup]}: {check.get('note') or ''}")
    if not lines:
        return []
    return ["Results that differ from DuckDB's, or queries that failed:", "", *lines, ""]


def _tpch_section(
    rows: list[Row], run: dict[str, object], plot: Path | None, report_dir: Path
) -> list[str]:
    if not select(rows, suite="tpch"):
        return []
    plan = run.get("plan") or {}
    assert isinstance(plan, dict)
    scale = plan.get("tpch_scale")
    at = "?" if scale is None else f"{float(scale):g}"  # type: ignore[arg-type]
    reps = plan.get("reps", run.get("reps"))
    software = run.get("sql_software") or {}
    assert isinstance(software, dict)
    versions = ", ".join(
        f"{k} {software[k]}"
        for k in ("duckdb", "adbc-driver-flightsql", *TPCH_SOFTWARE)
        if k in software
    )
    lineitem = select(rows, suite="tpch", op="load:lineitem")
    size = ""
    if lineitem:
        size = f" (lineitem {int(lineitem[-1]['rows_per_stream']):,} rows)"
    lines = [
        "## TPC-H: quiver against DuckDB (issue 38)",
        "",
        f"TPC-H at scale factor {at}{size}, generated by `tpchgen-cli` as Parquet, one file "
        "per table as it writes them (snappy, `string_view` columns, decimals as "
        "`decimal128(15, 2)`). The 22 queries are DuckDB's `tpch` extension's texts "
        "(`bench/tpch_queries/`: the standard queries with the default substitution "
        "parameters), run unchanged on:",
        "",
        "- quiver, stored tables: a fresh quiver holding the 8 tables, put by the quiver "
        "Python client (`client.put(name, reader)` of the file's 65,536-row record batches, as "
        "`quiver put FILE` reads them; the server's default of one partition per table);",
        "- quiver, files in place: another fresh quiver, started with `--table NAME=PATH` "
        "for each file (both with `quiver serve`'s defaults, its query settings among them: "
        "`--query-memory-limit` 1 GiB per query; `--max-memory` 16 GiB, or twice the "
        "tables' Arrow size when more);",
        "- DuckDB in process, over views of `read_parquet` of the same files "
        "(`con.sql(query).to_arrow_table()`).",
        "",
        "quiver is queried through ADBC Flight SQL (`adbc_driver_flightsql`: `execute`, then "
        "`fetch_arrow_table()`). The clients of all three share one worker process; DuckDB "
        "uses its default threads (one per core), and the servers run on the same cores. "
        "Each query first runs once on every engine, untimed, DuckDB first; each quiver "
        "result is compared with DuckDB's, row by row in order (every query of more than "
        "one result row has an `ORDER BY`; rows tied on its keys would show as a "
        "difference): integers and decimals exactly, to the last "
        "digit, whatever their types (DuckDB sums into `decimal(38, s)`, DataFusion into "
        "`decimal(25, s)` or `int64`); a decimal against DuckDB's `double` (its `avg` and "
        "decimal division) closer than one unit of the decimal's last digit; two doubles "
        f"within a relative {tpch.FLOAT_RELATIVE:g}; strings and dates equal; column names "
        f"are not compared. Then {reps} timed run(s) per engine, the engines taking turns: "
        "seconds from the call to the whole result held as an Arrow table. Median (min–max); "
        "× DuckDB: the median over DuckDB's median. The totals add the medians of the 22 "
        "queries (of those both engines ran, said so, when a query failed).",
        "",
        "| goal | target | measured | result |",
        "| --- | --- | --- | --- |",
        *_goal_rows(tpch_goals(rows)),
        "",
        *_figure("TPC-H against DuckDB", plot, report_dir),
        *_tpch_table(rows),
        "",
        *_tpch_mismatch_lines(rows),
    ]
    for text in (*_tpch_memory_lines(rows), *_tpch_load_lines(rows)):
        lines += [text, ""]
    if versions:
        lines += [f"- **Engines and generator**: {versions}", ""]
    return lines


def _duration(seconds: float) -> str:
    return _ms(seconds) if seconds < 1 else f"{seconds:.3f} s"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def _goals_section(rows: list[Row], mode: str) -> list[str]:
    lines = [
        "## Goals",
        "",
        "Measured in this run, against the Arrow C++ server and the ceilings measured in the "
        "same run.",
    ]
    if mode != "full":
        lines += [
            "",
            f"> This is a **{mode}** run: the headline table is smaller than the 1 GiB of the "
            "goals. Run `python -m bench --full` for the numbers that count.",
        ]
    lines += ["", "| goal | target | measured | result |", "| --- | --- | --- | --- |"]
    lines += _goal_rows(goals(rows))
    if select(rows, suite="sql"):
        lines += [
            "",
            "The goals of query results into pandas are in "
            "[their section](#query-results-into-pandas-the-papers-figure-8).",
        ]
    if select(rows, suite="bytes"):
        lines += [
            "",
            "The goals of bytes stored and sent are in [their section](#bytes-stored-and-sent).",
        ]
    if select(rows, suite="functions"):
        lines += [
            "",
            "The goals of scoring over DoExchange are in "
            "[their section](#functions-scoring-over-doexchange-the-papers-xgbatch).",
        ]
    if select(rows, suite="engines", op=("read", "write")):
        lines += [
            "",
            "The goals of Spark, Dask and Ray through quiver are in "
            "[their section](#engines-spark-dask-and-ray-through-quiver-the-papers-figure-10).",
        ]
    if select(rows, suite="tpch"):
        lines += [
            "",
            "The goals of TPC-H against DuckDB are in "
            "[their section](#tpc-h-quiver-against-duckdb-issue-38).",
        ]
    if select(rows, suite="lake"):
        lines += [
            "",
            "The goals of tables in S3 are in "
            "[their section](#tables-in-s3-tpc-h-doget-and-memory-issue-66).",
        ]
    return lines


def _goal_rows(found: list[Goal]) -> list[str]:
    lines = []
    for goal in found:
        verdict = goal.verdict if goal.passed is None else f"**{goal.verdict}**"
        lines.append(f"| {goal.text} | {goal.target} | {goal.shown} | {verdict} |")
    return lines


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
        for client in HEADLINE_CLIENTS:
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
        for client in (*HEADLINE_CLIENTS, QUIVER_PYTHON_SHM):
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


def _ceilings_section(rows: list[Row]) -> list[str]:
    names = {
        "tcp": "raw loopback TCP, 1 MiB writes (`quiver bench tcp`)",
        "iperf3": "loopback TCP, iperf3 `-l 1M`",
        "memcpy_warm": "memcpy into warm pages (`quiver bench memcpy`)",
        "memcpy_fresh": "memcpy into freshly mapped pages",
    }
    lines = ["## Ceilings", "", "| ceiling | GB/s, median (min–max) | n |", "| --- | --- | --- |"]
    for op, text in names.items():
        found = ceiling(rows, op)
        if found is not None:
            lines.append(f"| {text} | {_gbps(found)} | {found.n} |")
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


def _bytes_row(rows: list[Row], what: str, kind: str, server: str | None = None) -> Row | None:
    """Return the ``bytes`` suite's ``what:kind`` row of ``server`` (the last, if several).

    ``server`` None: whichever (the ``arrow`` rows have none, an empty field in the CSV).
    """
    where = {} if server is None else {"server": server}
    found = select(rows, suite="bytes", op=f"{what}:{kind}", **where)
    return found[-1] if found else None


def _bytes_kinds(rows: list[Row]) -> list[str]:
    """Return the column kinds the ``bytes`` suite measured, in the order it measured them."""
    kinds = [str(r["op"]).split(":", 1)[1] for r in select(rows, suite="bytes")]
    return list(dict.fromkeys(kinds))


def _bytes_ratio(rows: list[Row], what: str, kind: str, server: str) -> float | None:
    """Return bytes ``what`` (``stored``, ``sent``...) by ``server`` / the rows' Arrow size."""
    arrow = _bytes_row(rows, "arrow", kind)
    got = _bytes_row(rows, what, kind, server)
    if arrow is None or got is None or not arrow["bytes"]:
        return None
    return float(got["bytes"]) / float(arrow["bytes"])  # type: ignore[arg-type]


def bytes_goals(rows: list[Row]) -> list[Goal]:
    """Return the ``bytes`` suite's goals: quiver's bytes stored and sent / Arrow size, worst
    kind, at most ``BYTES_VS_ARROW``. A kind not measured leaves the goal unmet only if a
    measured one already misses it (else n/a).
    """  # noqa: D205
    kinds = _bytes_kinds(rows)
    if not kinds:
        return []
    found = []
    for what in ("stored", "sent"):
        ratios = {k: _bytes_ratio(rows, what, k, QUIVER) for k in kinds}
        measured = {k: r for k, r in ratios.items() if r is not None}
        missing = [k for k, r in ratios.items() if r is None]
        text = f"quiver: bytes {what} / Arrow size, worst kind"
        target = f"≤ {BYTES_VS_ARROW:g}×"
        if not measured:
            found.append(Goal(text, target, None, None, "—"))
            continue
        worst = max(measured, key=lambda k: measured[k])
        value = measured[worst]
        shown = f"{value:.2f}× ({worst})"
        passed: bool | None = value <= BYTES_VS_ARROW
        if missing:
            shown += f"; not measured: {', '.join(missing)}"
            passed = None if passed else False
        found.append(Goal(text, target, value, passed, shown))
    return found


def _bytes_cell(rows: list[Row], what: str, kind: str, server: str) -> str:
    """``size (ratio×)`` of a stored or sent row, ``—`` when not measured."""
    row = _bytes_row(rows, what, kind, server)
    if row is None:
        return "—"
    cell = f"{_size(float(row['bytes']))} ({_times(_bytes_ratio(rows, what, kind, server))})"  # type: ignore[arg-type]
    return f"{cell}, {row['note']}" if row.get("note") else cell


def _bytes_section(rows: list[Row]) -> list[str]:
    kinds = _bytes_kinds(rows)
    if not kinds:
        return []
    first = _bytes_row(rows, "arrow", kinds[0])
    count = int(first["rows_per_stream"]) if first else 0  # type: ignore[call-overload]
    lines = [
        "## Bytes stored and sent",
        "",
        f"One column `c` of {count:,} rows of each kind, put by pyarrow's DoPut with its "
        "batches as they are into quiver and into the Arrow C++ server, in the same run "
        "(bench/data.py: `string`, 20-byte utf8 values in one tight array; `string_view`, "
        "the same values as `string_view`; `sliced string` and `sliced int64`; and "
        "`dictionary`, `dictionary<int32, utf8>` of 100 distinct 20-byte values; all but "
        "`string` as a table of batches that are slices of one array, as pyarrow hands out "
        "when it cuts a table: each slice references every buffer of the array, a "
        "`string_view` slice all of its data buffers, which Arrow IPC sends whole). "
        '**Arrow size**: the tight size of the rows, `pa.table({"c": array}).nbytes` of '
        "a fresh array of their values. **Stored**: the server's FlightInfo `total_bytes` "
        "(the Arrow C++ server's is pyarrow's `Table.nbytes` of the batches it holds). "
        "**Sent**: a pyarrow DoGet of the whole table, `get_total_buffer_size()` of each "
        "batch received, summed: every buffer a batch references, whole. **LIMIT 3**: the "
        "same for `SELECT c FROM t LIMIT 3` through quiver's Flight SQL, against the tight "
        "size of those 3 rows. Ratios are to the Arrow size.",
        "",
        "| goal | target | measured | result |",
        "| --- | --- | --- | --- |",
        *_goal_rows(bytes_goals(rows)),
        "",
        "| kind | Arrow size | quiver stored | quiver sent | Arrow C++ stored | "
        "Arrow C++ sent | quiver LIMIT 3 sent |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in kinds:
        arrow = _bytes_row(rows, "arrow", kind)
        limit = _bytes_row(rows, "limit3", kind, QUIVER)
        tight = _bytes_row(rows, "arrow_limit3", kind)
        limit_cell = "—"
        if limit is not None:
            limit_cell = _size(float(limit["bytes"]))  # type: ignore[arg-type]
            if tight is not None:
                limit_cell += f" (3 rows: {_size(float(tight['bytes']))})"  # type: ignore[arg-type]
            if limit.get("note"):
                limit_cell += f", {limit['note']}"
        lines.append(
            f"| {kind} | {'—' if arrow is None else _size(float(arrow['bytes']))} | "  # type: ignore[arg-type]
            f"{_bytes_cell(rows, 'stored', kind, QUIVER)} | "
            f"{_bytes_cell(rows, 'sent', kind, QUIVER)} | "
            f"{_bytes_cell(rows, 'stored', kind, ARROW_CPP)} | "
            f"{_bytes_cell(rows, 'sent', kind, ARROW_CPP)} | {limit_cell} |"
        )
    lines += ["", *_bytes_dictionary_lines(rows), ""]
    return lines


def _bytes_dictionary_lines(rows: list[Row]) -> list[str]:
    """Say how the dictionary kind's sent bytes count the dictionary, with its numbers."""
    text = (
        "How a dictionary counts: once in the Arrow size, and in bytes sent once per batch "
        "received, for every batch references it (`get_total_buffer_size()`), though an IPC "
        "stream need carry it once. The dictionary's sent ratio is that of a reader that "
        "counts the batches apart."
    )
    once = []
    for server, label in ((QUIVER, "quiver"), (ARROW_CPP, "the Arrow C++ server")):
        row = _bytes_row(rows, "sent_once", "dictionary", server)
        if row is None:
            continue
        ratio = _bytes_ratio(rows, "sent_once", "dictionary", server)
        once.append(
            f"{label} {_size(float(row['bytes']))} ({_times(ratio)}) in "  # type: ignore[arg-type]
            f"{row['ops']} batches"
        )
    if once:
        text += (
            " Counting each buffer received once, however many batches share it (what the "
            "reader holds), the dictionary column's DoGet brought " + "; ".join(once) + "."
        )
    return [text]


def _sql_intro(run: dict[str, object], cap: int | None, largest: int) -> list[str]:
    software = run.get("sql_software") or {}
    assert isinstance(software, dict)
    versions = ", ".join(
        f"{k} {v}"
        for k, v in software.items()
        if k not in ENGINES_SOFTWARE
        and k not in TPCH_SOFTWARE
        # The lake suite's DuckDB (``duckdb (DuckDB httpfs, S3)``): shown in its section.
        and not str(k).startswith("duckdb (")
    )
    lines = [
        "## Query results into pandas (the paper's Figure 8)",
        "",
        "`SELECT * FROM taxi_<rows>` from the request to a pandas DataFrame in the client, "
        "for growing results. Each size is a table of its own (`taxi_1m`, `taxi_4m`...) of "
        "the NYC yellow-taxi trip records' 19 columns (6 int64, 2 timestamp[us], 10 double, "
        "1 string; about 3% of the rows with five columns null), generated with numpy "
        "(`bench/taxi.py`). It is stored in quiver (and the Arrow C++ peer) by a plain DoPut, "
        "loaded into a PostgreSQL server started for the suite on loopback (COPY; durability "
        "off, default query settings), and written to a local Parquet file for DuckDB. The "
        "clients:",
        "",
        "- quiver Flight SQL, ADBC: `adbc_driver_flightsql.dbapi`, `execute` then "
        "`fetch_arrow_table().to_pandas()`;",
        "- quiver Flight SQL, pyarrow.flight: GetFlightInfo of a `CommandStatementQuery`, "
        "DoGet of every endpoint in parallel, `to_pandas()`;",
        "- raw DoGet, pyarrow.flight: the same get of the stored table by its path, "
        "from quiver and from the Arrow C++ server; no SQL;",
        "- PostgreSQL through ADBC (`adbc_driver_postgresql`, `fetch_arrow_table()."
        "to_pandas()`), psycopg 3 and ODBC (psqlODBC's Unicode driver through pyodbc): "
        "`fetchall()` then `pd.DataFrame.from_records`;",
        "- DuckDB in process, `read_parquet(...)` of the local file, `.df()`: the floor.",
        "",
        f"The ratios divide by {SQL_REFERENCE.label}'s median: the issue derived its "
        "speed-up goals from a pyarrow.flight DoGet times the 1.3× a query may cost over it. "
        "The goals are also evaluated against quiver Flight SQL through ADBC, whose Go "
        "driver adds a client cost of its own. "
        "Every fetch runs in a fresh worker process of its own (forked from a server that "
        "has imported pyarrow and pandas), so that no client pays for what another keeps: "
        "the worker connects, columnar clients fetch the result twice untimed (a fresh "
        "process's first two fetches fault in their memory), then the timed fetch runs. "
        "Row-based clients are timed on their first fetch (a second one would add minutes; "
        "in a fresh process ODBC's first fetch was no slower than its next, psycopg's up to "
        "a fifth slower). The clients take turns within each repetition. "
        "Columnar clients fetching results of "
        "up to 2M rows (a tenth of a second each) repeat three times as often as the "
        "others, so that one scheduling hiccup does not move a median. "
        "Time to first batch: from GetFlightInfo "
        "to the first record batch of any endpoint.",
    ]
    if cap is not None and largest > cap:
        lines += [
            "",
            f"psycopg and ODBC build a Python object per value: they were run up to "
            f"{cap:,} rows only (minutes per repetition and over 10 GB of objects at 16M "
            "rows); their larger cells read *not run*.",
        ]
    if versions:
        lines += ["", f"- **Clients and peers**: {versions}"]
    return lines


def _sql_table(rows: list[Row], cap: int | None) -> list[str]:
    reference = SQL_REFERENCE
    lines = [
        "Seconds, median (min–max) of the repetitions; the ratio is the client's median over "
        f"{reference.label}'s (higher: slower). Client peak RSS: the median of the worker "
        "processes' peak resident memory, over the warm-ups and the timed fetch; it "
        "includes the interpreter with pyarrow, pandas and every driver's library (a few "
        "hundred MiB).",
        "",
        "| rows | Arrow size | client | seconds | × quiver Flight SQL | time to first batch "
        "| client peak RSS |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for size in sql_sizes(rows):
        sized = select(rows, suite="sql", rows_per_stream=size)
        arrow = _size(float(sized[0]["bytes"]))
        ours = _sql_spread(rows, reference, size)
        for peer in SQL_PEERS:
            group = sql_rows_of(rows, peer, size)
            found = spread(group, "seconds")
            if found is None:
                if peer.row_based and cap is not None and size > cap and sql_rows_of(rows, peer):
                    lines.append(
                        f"| {size:,} | {arrow} | {peer.label} | not run (above "
                        f"{cap:,} rows) | — | — | — |"
                    )
                continue
            ttfb = spread(
                [r for r in group if r.get("ttfb_seconds") is not None],
                lambda r: float(r["ttfb_seconds"]) * 1e3,
            )
            peak = spread([r for r in group if r.get("hwm_bytes") is not None], "hwm_bytes")
            lines.append(
                f"| {size:,} | {arrow} | {peer.label} | "
                f"{found.median:.3f} ({found.low:.3f}–{found.high:.3f}) | "
                f"{_times(_ratio(found, ours))} | "
                f"{'—' if ttfb is None else f'{ttfb.median:.1f} ms'} | "
                f"{'—' if peak is None else _size(peak.median)} |"
            )
    return lines


def _sql_section(
    rows: list[Row], run: dict[str, object], plot: Path | None, report_dir: Path
) -> list[str]:
    if not select(rows, suite="sql"):
        return []
    plan = run.get("plan") or {}
    assert isinstance(plan, dict)
    cap = plan.get("sql_row_clients_max_rows")
    cap = None if cap is None else int(cap)
    lines = [*_sql_intro(run, cap, sql_sizes(rows)[-1]), ""]
    sizes = sql_goal_sizes(rows)
    if any(s not in SQL_GOAL_ROWS for s in sizes):
        lines += [
            f"> This run measured up to {rows_text(sql_sizes(rows)[-1])} rows; the goals are "
            "for 1M and 16M rows: run `python -m bench --only sql --full` for the numbers that "
            "count.",
            "",
        ]
    lines += ["| goal | target | measured | result |", "| --- | --- | --- | --- |"]
    lines += _goal_rows(sql_goals(rows, cap))
    lines += ["", *_figure("Query results into pandas", plot, report_dir)]
    return [*lines, *_sql_table(rows, cap), *_sql_first_batch(rows)]


def _sql_first_batch(rows: list[Row]) -> list[str]:
    """Say how the time to the first batch of quiver Flight SQL grows with the result."""
    peer = sql_clients.QUIVER_FLIGHT_SQL
    found = []
    for size in sql_sizes(rows):
        measured = [r for r in sql_rows_of(rows, peer, size) if r.get("ttfb_seconds") is not None]
        ttfb = spread(measured, "ttfb_seconds")
        if ttfb is not None:
            found.append(f"{ttfb.median * 1e3:.1f} ms at {rows_text(size)} rows")
    if not found:
        return []
    return ["", f"Time to the first record batch, {peer.label}: {', '.join(found)}."]


def _soak_section(rows: list[Row]) -> list[str]:
    soak = select(rows, suite="soak", server=QUIVER)
    if not soak:
        return []
    by_op = {str(r["op"]): r for r in soak}
    total = by_op.get("all")
    if total is None:
        return []
    mib = 2**20
    seconds = float(total["seconds"])
    lines = [
        "## Soak",
        "",
        f"{total['streams']} pyarrow clients, each on its own connection, mixing puts of a "
        f"{int(total['rows_per_stream']):,}-row table, gets, listings and deletes for "
        f"{seconds:.0f} s against a fresh quiver (bench/soak.py): "
        f"{int(total['ops']):,} operations ({int(total['ops']) / seconds:,.0f}/s), "
        f"{total['errors']} errors.",
        "",
        "| op | count | p50 | p99 |",
        "| --- | --- | --- | --- |",
    ]
    for op in ("put", "get", "list", "delete", "all"):
        row = by_op.get(op)
        if row is not None:
            p50 = "" if op == "all" else f"{float(row['seconds']) * 1000:.2f} ms"
            p99 = f"{float(row['p99_seconds']) * 1000:.2f} ms"
            lines.append(f"| {op} | {int(row['ops']):,} | {p50} | {p99} |")
    rss = {op: by_op.get(op) for op in ("rss_before", "rss_peak", "rss_after_deletes")}
    if all(rss.values()):
        before, peak, after = (float(r["rss_bytes"]) / mib for r in rss.values() if r)
        lines += [
            "",
            f"Server RSS: {before:.0f} MiB before, {peak:.0f} MiB at the peak, {after:.0f} MiB "
            "once every table was deleted (jemalloc returns freed pages after its 10 s decay; "
            "the rest is the runtime's threads and allocator caches that the load created).",
        ]
    return [*lines, ""]


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


def _bytes_per_second(row: Row) -> float:
    return float(row["bytes"]) / float(row["seconds"])


def _link_bytes_per_second(rate: str) -> float | None:
    """``tc``'s rate (``1gbit``, ``500mbit``) in bytes per second."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}
    for unit, scale in units.items():
        if rate.endswith(unit):
            try:
                return float(rate[: -len(unit)]) * scale / 8
            except ValueError:
                return None
    return None


def cluster_goals(rows: list[Row], rate: str) -> list[Goal]:
    """Issue 27's goals: reads over 3 nodes >= 2.7x one node; commit overhead < 5 ms;
    re-replication at >= 80% of a node's link. Issue 35's: with TLS between the nodes,
    re-replication and reads over 3 nodes still at >= 80% of the links. Issue 36's: an
    append after 2,000 costs at most 1.5x one of the first.
    """  # noqa: D205
    everything = select(rows, suite="cluster")
    tls = select(everything, server=QUIVER_CLUSTER_TLS)
    cluster = [r for r in everything if r.get("server") != QUIVER_CLUSTER_TLS]
    found = []
    one, three = (spread(select(cluster, op="read", streams=n), _bytes_per_second) for n in (1, 3))
    if one is not None and three is not None:
        ratio = three.median / one.median
        found.append(
            Goal(
                "read of a table spread over 3 nodes / over 1 node",
                "≥ 2.7×",
                ratio,
                ratio >= 2.7,
                _times(ratio),
            )
        )
    alone = spread(select(cluster, op="put_latency", server=QUIVER), "seconds")
    spread_put = spread(select(cluster, op="put_latency", server=QUIVER_CLUSTER), "seconds")
    if alone is not None and spread_put is not None:
        overhead = spread_put.median - alone.median
        found.append(
            Goal(
                "what a cluster commit adds to a 1-row put (median, 3 nodes, 2 copies)",
                "< 5 ms",
                overhead,
                overhead < 0.005,
                _ms(overhead),
            )
        )
    appends = select(cluster, op="append_latency")
    if appends:
        most = max(int(r["rows_per_stream"]) for r in appends)
        early = spread([r for r in appends if int(r["rows_per_stream"]) < most], "seconds")
        late = spread([r for r in appends if int(r["rows_per_stream"]) == most], "seconds")
        if early is not None and late is not None:
            ratio = late.median / early.median
            found.append(
                Goal(
                    f"a 1-row append to a cluster table after {most:,} appends / its first",
                    "≤ 1.5×",
                    ratio,
                    ratio <= 1.5,
                    _times(ratio),
                )
            )
    link = _link_bytes_per_second(rate)
    if link:
        copies = (
            (cluster, f"re-replication of a lost node's partitions / one node's link ({rate})"),
            (tls, f"re-replication with TLS between the nodes / one node's link ({rate})"),
        )
        for measured, what in copies:
            got = spread(select(measured, op="rereplicate"), _bytes_per_second)
            found += _share_of_links(what, got, link)
        got = spread(select(tls, op="read", streams=3), _bytes_per_second)
        found += _share_of_links(
            f"read over 3 nodes with TLS / their links ({rate} each)", got, 3 * link
        )
    return found


def _share_of_links(what: str, got: Spread | None, links: float) -> list[Goal]:
    """Return the goal that ``got`` reaches 80% of ``links`` bytes/s (none if unmeasured)."""
    if got is None:
        return []
    share = got.median / links
    return [Goal(what, "≥ 80%", share, share >= 0.8, f"{share:.0%}")]


def _cluster_section(rows: list[Row], run: dict[str, object]) -> list[str]:
    cluster = select(rows, suite="cluster")
    if not cluster:
        return []
    plan = run.get("plan") or {}
    rate = str(plan.get("cluster_rate", "1gbit")) if isinstance(plan, dict) else "1gbit"
    link = _link_bytes_per_second(rate)
    lines = [
        "## Several nodes (the paper's Figure 1e)",
        "",
        "quiver nodes with `--cluster` over one etcd, in a network namespace of their own; "
        f"`tc` gives each node a link of {rate} each way (docs/cluster.md). Reads: the quiver "
        "Python client gets the whole table, every endpoint at once, from a table spread over "
        "1, 2 and 3 nodes (one copy, two partitions per node). Re-replication: one node of "
        "three is killed; timed from the moment the others see it gone until every partition "
        "has two copies again. Median (min-max).",
        "",
        "| goal | target | measured | result |",
        "| --- | --- | --- | --- |",
        *_goal_rows(cluster_goals(rows, rate)),
        "",
        "| measurement | median | min-max | of the links |",
        "| --- | --- | --- | --- |",
    ]
    for n, server, label in (
        (1, QUIVER_CLUSTER, ""),
        (2, QUIVER_CLUSTER, ""),
        (3, QUIVER_CLUSTER, ""),
        (3, QUIVER_CLUSTER_TLS, ", TLS"),
    ):
        got = spread(select(cluster, op="read", streams=n, server=server), _bytes_per_second)
        if got is not None:
            share = f"{got.median / (n * link):.0%} of {n}" if link else ""
            lines.append(
                f"| read, {n} node(s){label} | {got.median / 1e6:,.0f} MB/s | "
                f"{got.low / 1e6:,.0f}-{got.high / 1e6:,.0f} | {share} |"
            )
    puts = ((QUIVER, "1-row put, single node"), (QUIVER_CLUSTER, "1-row put, cluster"))
    for server, label in puts:
        got = spread(select(cluster, op="put_latency", server=server), "seconds")
        if got is not None:
            lines.append(f"| {label} | {_ms(got.median)} | | |")
    appends = select(cluster, op="append_latency")
    for count in sorted({int(r["rows_per_stream"]) for r in appends}):
        got = spread([r for r in appends if int(r["rows_per_stream"]) == count], "seconds")
        if got is not None:
            label = f"1-row append, cluster, the last 50 of {count:,}"
            lines.append(f"| {label} | {_ms(got.median)} | | |")
    jobs = {
        place: spread(select(cluster, op="write_job", note=place), _bytes_per_second)
        for place in ("spread", "here")
    }
    for place, label in (("spread", "all through one node"), ("here", "each to its node")):
        got = jobs[place]
        if got is not None:
            lines.append(
                f"| write job, 6 tasks, {label} | {got.median / 1e6:,.0f} MB/s | "
                f"{got.low / 1e6:,.0f}-{got.high / 1e6:,.0f} | |"
            )
    if jobs["spread"] is not None and jobs["here"] is not None:
        ratio = jobs["here"].median / jobs["spread"].median
        label = "write job, each task to its node / all through one"
        lines.append(f"| {label} | {_times(ratio)} | | |")
    for server, label in ((QUIVER_CLUSTER, ""), (QUIVER_CLUSTER_TLS, ", TLS")):
        got = spread(select(cluster, op="rereplicate", server=server), _bytes_per_second)
        if got is not None:
            share = f"{got.median / link:.0%} of 1" if link else ""
            lines.append(
                f"| re-replication{label} | {got.median / 1e6:,.0f} MB/s | "
                f"{got.low / 1e6:,.0f}-{got.high / 1e6:,.0f} | {share} |"
            )
    return [*lines, "", *_cluster_sql_lines(cluster)]


def _cluster_sql_lines(cluster: list[Row]) -> list[str]:
    alone = spread(select(cluster, op="sql", server=QUIVER), "seconds")
    spread_sql = spread(select(cluster, op="sql", server=QUIVER_CLUSTER), "seconds")
    if alone is None or spread_sql is None:
        return []
    return [
        "Distributed SQL: a grouped aggregation over the whole table (256 groups) through "
        "Flight SQL, on one node holding it whole and on three holding it spread, where "
        "datafusion-distributed runs the scans and partial aggregates on the nodes holding "
        "the partitions. The nodes share this machine's cores, so the ratio is the cost of "
        "distributing, not a speed-up from more machines. Median (min-max).",
        "",
        "| query | one node | three nodes | three / one |",
        "| --- | --- | --- | --- |",
        f"| aggregation | {_ms(alone.median)} ({_ms(alone.low)}-{_ms(alone.high)}) | "
        f"{_ms(spread_sql.median)} ({_ms(spread_sql.low)}-{_ms(spread_sql.high)}) | "
        f"{_times(spread_sql.median / alone.median)} |",
        "",
    ]


#: The nemesis suite's goals: after a node's SIGKILL, at most this many failed appends per
#: client (the one in flight, if it went through that node)...
NEMESIS_KILL_FAILED_PER_CLIENT = 1
#: ...and a 99th percentile append latency of at most this many seconds.
NEMESIS_KILL_P99_S = 1.0


def _nemesis_value(rows: list[Row], op: str, column: str) -> float | None:
    """``column`` of the nemesis row ``op`` (the last, if a run has several)."""
    found = [r for r in select(rows, suite="nemesis", op=op) if r.get(column) is not None]
    return float(found[-1][column]) if found else None  # type: ignore[arg-type]


def nemesis_goals(rows: list[Row]) -> list[Goal]:
    """Return the nemesis suite's goals, from the same run's numbers: no acknowledged append
    lost; after a node's SIGKILL at most one failed append per client and a p99 append
    latency of at most 1 s; no failed query (one node at most is down at a time, and every
    partition has two copies: each has a live one).
    """  # noqa: D205
    if not select(rows, suite="nemesis"):
        return []
    found = []
    lost = _nemesis_value(rows, "lost", "errors")
    found.append(
        Goal(
            "nemesis: acknowledged appends lost over the run",
            "0",
            lost,
            None if lost is None else lost == 0,
            "—" if lost is None else f"{lost:.0f}",
        )
    )
    worst = _nemesis_value(rows, "append_worst_client:kill", "errors")
    kills = _nemesis_value(rows, "append:kill", "streams")
    found.append(
        Goal(
            "nemesis: failed appends of one client in one SIGKILL's window (the worst)",
            f"≤ {NEMESIS_KILL_FAILED_PER_CLIENT}",
            worst,
            None if not kills or worst is None else worst <= NEMESIS_KILL_FAILED_PER_CLIENT,
            "—" if not kills or worst is None else f"{worst:.0f} (over {kills:.0f} kill(s))",
        )
    )
    p99 = _nemesis_value(rows, "append:kill", "p99_seconds")
    found.append(
        Goal(
            "nemesis: p99 append latency in the SIGKILLs' windows",
            f"≤ {NEMESIS_KILL_P99_S:g} s",
            p99,
            None if p99 is None else p99 <= NEMESIS_KILL_P99_S,
            "—" if p99 is None else _duration(p99),
        )
    )
    failed = _nemesis_value(rows, "queries", "errors")
    asked = _nemesis_value(rows, "queries", "ops") or 0
    found.append(
        Goal(
            "nemesis: failed queries over the run (every partition kept a live copy)",
            "0",
            failed,
            None if failed is None else failed == 0,
            "—" if failed is None else f"{failed:.0f} of {asked:,.0f}",
        )
    )
    return found


def _nemesis_section(rows: list[Row], run: dict[str, object]) -> list[str]:
    nemesis = select(rows, suite="nemesis")
    if not nemesis:
        return []
    plan = run.get("plan") or {}
    calm = plan.get("nemesis_calm_s", 5.0) if isinstance(plan, dict) else 5.0

    def value(op: str, column: str) -> int:
        got = _nemesis_value(rows, op, column)
        return 0 if got is None else int(got)

    seconds = _nemesis_value(rows, "faults", "seconds") or 0.0
    lines = [
        "## Cluster under faults",
        "",
        "`python -m bench --only nemesis` (bench/nemesis_worker.py): etcd and three nodes "
        "(`--replicas 2 --lease-ttl 2`, each with a `--data-dir`) in a network namespace of "
        "their own. Three writers append 20-row batches tagged `(writer, seq)` every 100 ms, "
        "each through the next node in turn, with a request id of its own and a 15 s "
        "deadline, never retried; a query thread runs `SELECT count(*), sum(seq) FROM log` "
        "every 200 ms through the nodes in turn. Appends and queries skip the node a fault "
        "has taken down (killed, paused, cut off), as a client behind a health check would: "
        "a failure is a live node's refusal, or a call in flight to the node when it went "
        f"down. For {seconds:.0f} s a nemesis injects one fault at a time, on the next node "
        f"each time, with {calm:g} s of calm after each. A fault's window runs from its start "
        "to 2 s after its end, and a call counts for it when it was in flight during the "
        "window (`calm`: in no window). At the end the checker reads the table through every "
        "node and every listed copy of every partition.",
        "",
        f"{value('appends', 'ops'):,} appends attempted, {value('acknowledged', 'ops'):,} "
        f"acknowledged, {value('appends', 'errors'):,} failed; {value('faults', 'ops')} faults "
        f"injected; acknowledged appends lost: **{value('lost', 'errors')}**, torn or doubled: "
        f"{value('torn_or_doubled', 'errors')}, never attempted but present: "
        f"{value('invented', 'errors')}; the checker's other problems: "
        f"{value('problems', 'errors')} (listed in the notes); three nodes and every "
        f"partition fully replicated {_nemesis_value(rows, 'settle', 'seconds') or 0:.1f} s "
        "after the load stopped" + (" (**not reached**)." if value("settle", "errors") else "."),
        "",
        "| goal | target | measured | result |",
        "| --- | --- | --- | --- |",
        *_goal_rows(nemesis_goals(rows)),
        "",
        "| fault | injected | appends | failed | worst client | p50 | p99 | queries | failed "
        "queries | stale counts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, what in (*NEMESIS_FAULTS.items(), (NEMESIS_CALM, "no fault's window")):
        appends = select(nemesis, op=f"append:{kind}")
        if not appends:
            continue
        row = appends[-1]
        p50 = _duration(float(row["seconds"])) if int(row["ops"] or 0) else "—"  # type: ignore[call-overload]
        p99 = "—" if row.get("p99_seconds") is None else _duration(float(row["p99_seconds"]))  # type: ignore[arg-type]
        injected = "" if kind == NEMESIS_CALM else f"{row['streams']}"
        lines.append(
            f"| `{kind}`: {what} | {injected} | {int(row['ops'] or 0):,} | {row['errors']} | "  # type: ignore[call-overload]
            f"{value(f'append_worst_client:{kind}', 'errors')} | {p50} | {p99} | "
            f"{value(f'query:{kind}', 'ops'):,} | {value(f'query:{kind}', 'errors')} | "
            f"{value(f'query_stale:{kind}', 'errors')} |"
        )
    lines += [
        "",
        "Worst client: the most failed appends of one writer in one window of the fault. "
        "Latencies: of the acknowledged appends. Stale counts: queries that counted fewer "
        "rows than the appends acknowledged before they started (a node plans over the "
        "catalog it last read while etcd is away).",
        "",
    ]
    return lines


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


def _warm_up_text(run: dict[str, object]) -> str:
    """Say how many untimed rounds preceded each pyarrow get and put measurement."""
    plan = run.get("plan")
    rounds = plan.get("warm_up_reps", 0) if isinstance(plan, dict) else 0
    if not rounds:
        return ""
    return f", after {rounds} untimed warm-up round(s) per server for pyarrow gets and puts"


def _headline_reps_text(run: dict[str, object]) -> str:
    """Say how many repetitions the Python clients' headline had, when not the run's."""
    plan = run.get("plan")
    reps = plan.get("headline_reps", 0) if isinstance(plan, dict) else 0
    if not reps or reps == run.get("reps"):  # (runs before headline_reps have none)
        return ""
    return (
        f" ({reps} for the pyarrow and quiver Python clients' headline get and put, where the "
        "goals are read)"
    )


def _figure(title: str, plot: Path | None, report_dir: Path) -> list[str]:
    if plot is None:
        return []
    link = Path(os.path.relpath(plot, report_dir)).as_posix()
    return [f"![{title}]({link})", ""]


def render(
    rows: list[Row], run: dict[str, object], plots: dict[str, Path], report_path: Path
) -> str:
    """Return the text of BENCHMARKS.md.

    Parameters
    ----------
    rows : list of dict
        The rows of results.csv.
    run : dict
        The run's description (mode, machine, versions, command, notes).
    plots : dict of str to pathlib.Path
        The figures, by file stem, where the report can link them.
    report_path : pathlib.Path
        Where the report will be written (links are relative to it).
    """
    machine = run["machine"]
    assert isinstance(machine, dict)
    mode = str(run["mode"])
    report_dir = report_path.resolve().parent
    lines = [
        "<!-- Generated by `python -m bench` (bench/report.py) from bench/out/results.csv. "
        "Do not edit by hand: regenerate it. -->",
        "# quiver benchmarks",
        "",
        "Generated file: do not edit. Regenerate it from the repository root with "
        "`python -m bench --full` (about an hour with `--reps 2` on 2 cores: the engines "
        "suite 22 minutes, the sql suite 16) or "
        "`python -m bench --quick` (about 6 minutes), using the venv of "
        "`bench/requirements.txt`, PostgreSQL and psqlODBC (`scripts/install-postgres.sh`) and "
        "a release build of quiver (`cargo build --release`; or set `QUIVER_BIN`). "
        "`python -m bench --report-only` "
        "rebuilds this file and the plots from `bench/out/` without measuring.",
        "",
        "It reproduces *Benchmarking Apache Arrow Flight* (Ahmad et al., BID'22) on one "
        "machine: DoGet/DoPut throughput of records of four int64 columns (32 bytes) over "
        "1 to 16 parallel streams on loopback, for quiver and for the Arrow C++ Flight server "
        "that pyarrow ships (a minimal in-memory `FlightServerBase`, `bench/peers/`), measured "
        "by the same clients in the same run, next to the ceilings: raw loopback TCP and "
        "memcpy. Repetitions alternate between the servers. From the same paper's Figure 8, "
        "it also times query results into pandas: quiver's Flight SQL against PostgreSQL "
        "(ODBC, psycopg, ADBC) and DuckDB on Parquet; from its Figure 10, Spark, Dask and Ray "
        "reading (and Spark writing) a taxi table through quiver's connectors, against "
        "Spark's JDBC reader and writer with PostgreSQL and each engine on local Parquet; "
        "and TPC-H's 22 queries on quiver, its tables stored and its files in place, "
        "against DuckDB in process on the same Parquet files.",
        "",
        f"- **Run**: {mode} mode, {run['date']}, {run['reps']} repetitions per measurement"
        f"{_headline_reps_text(run)} (median and min–max shown){_warm_up_text(run)}; "
        f"command `{run['command']}`; "
        f"{run['elapsed']}",
        f"- **Machine**: {machine['nproc']} CPUs ({machine['cpu_model']}), "
        f"{machine['ram_gib']} GiB RAM, {machine['kernel']}",
        f"- **Software**: {run['quiver_version']} (git {run['git']}), "
        f"pyarrow {run['pyarrow']}, pandas {run['pandas']}, Python {run['python']}",
        "",
        *_goals_section(rows, mode),
        "",
        *_headline_section(rows),
        "",
        *_figure("Headline", plots.get("headline"), report_dir),
        *_ceilings_section(rows),
        "",
        *_figure("Throughput vs streams", plots.get("throughput_vs_streams"), report_dir),
        *_figure("Throughput vs records", plots.get("throughput_vs_records"), report_dir),
        *_figure("Throughput vs batch size", plots.get("throughput_vs_batch"), report_dir),
        *_throughput_section(rows),
        "",
        *_small_section(rows),
        "",
        *_figure("Small-object latency", plots.get("small_latency"), report_dir),
        *_json_section(rows),
        "",
        *_figure("JSON vs Flight", plots.get("json_vs_flight"), report_dir),
        *_memory_section(rows),
        "",
        *_bytes_section(rows),
        *_soak_section(rows),
        *_shm_section(rows),
        *_cluster_section(rows, run),
        *_nemesis_section(rows, run),
    ]
    sql = _sql_section(rows, run, plots.get("sql_to_pandas"), report_dir)
    if sql:
        lines += [*sql, ""]
    lines += _functions_section(rows, run, plots.get("functions_xgbatch"), report_dir)
    lines += _engines_section(rows, run, plots.get("engines"), report_dir)
    lines += _tpch_section(rows, run, plots.get("tpch"), report_dir)
    from . import lake  # here: bench.lake imports this module

    lines += lake.section(rows, run, plots.get("lake"), report_dir)
    notes = run.get("notes") or []
    assert isinstance(notes, list)
    if notes:
        lines += ["## Notes from this run", ""]
        lines += [f"- {note}" for note in notes]
        lines.append("")
    return "\n".join(lines)
