"""The functions suite: the paper's XGBatch scenario, and SQL over a stream."""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

from .. import scoring, servers, workers, xgbatch
from ..plots import _save
from ..report import Goal, _figure, _gbps, _goal_rows, _ms, _rate, _ratio, _size, _times
from ..results import (
    FASTAPI_JSON,
    FUNCTIONS_STREAM_ECHO,
    FUNCTIONS_STREAM_SQL,
    IN_PROCESS,
    IN_PROCESS_THREADS,
    PYARROW_FLIGHT,
    QUIVER,
    QUIVER_1_WORKER,
    QUIVER_2_WORKERS,
    Measurement,
)
from ..run import Run, Section, Suite, alternating, log
from ..servers import ServerProcess
from ..summary import Row, Spread, percentile, select, spread

#: Longest a scoring client worker may take to start (making its rows) or to answer one call
#: (the JSON service's 2,000 requests of 1,000 rows in full mode take about a minute).
FUNCTIONS_TIMEOUT_S = 900.0


#: Rows per request of the two latency measurements.
FUNCTIONS_LATENCY_ROWS = (1, 1000)


#: Untimed requests of 1,000 rows each peer answers before its first bulk repetition (a
#: quiver server holds calls until its workers have loaded the model).
FUNCTIONS_WARM_UPS = 5


#: How far a peer's checksum of its scores may be from the in-process one, relatively (the
#: same booster scores the same rows identically: any difference is a wrong or moved score).
FUNCTIONS_CHECK_TOLERANCE = 1e-9


@dataclass
class FunctionsPeer:
    """One peer of the ``functions`` suite: its label, server (if any) and client worker.

    Attributes
    ----------
    label : str
        The ``server`` column (:data:`bench.results.IN_PROCESS`...).
    client : str
        The ``client`` column: ``in-process``, ``pyarrow`` or ``http-json``.
    rows : int
        Rows of each bulk repetition.
    server : ServerProcess or None
        The scoring server (none in process).
    worker : workers.Worker or None
        The client's worker process, once started.
    latency : bool
        Whether its request latencies are measured.
    """

    label: str
    client: str
    rows: int
    server: ServerProcess | None = None
    worker: workers.Worker | None = None
    latency: bool = True


def run_functions(run: Run) -> None:
    """Score the same rows with the same xgboost model through every peer (XGBatch).

    The harness trains the booster once (in a worker process) and saves it to a temporary
    file that every peer loads: the client's own process (the limit, one thread and all
    of xgboost's), the XGBatch-style pyarrow Flight server, the FastAPI JSON service, and
    quiver serving ``bench.peers.quiver_scoring`` with 1 and 2 workers, each server a
    process of its own. Each peer's client is a worker process (:mod:`bench.scoring`).
    Bulk repetitions alternate between the peers; the CPU time of the server, of quiver's
    workers and of the client is read from ``/proc`` around each. Then each peer's
    latency: sequential requests of 1 and of 1,000 rows. Last, with the scoring servers
    stopped, SQL over a stream against the echo (:func:`_functions_sql_stream`).
    """
    plan = run.plan
    log_dir = run.log_dir / "functions"
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quiver-functions-")))
        model = tmp / "xgbatch.ubj"
        log(
            f"functions: training the booster ({xgbatch.TREES} trees of depth "
            f"{xgbatch.DEPTH} on {xgbatch.TRAIN_ROWS:,} rows)"
        )
        started = time.perf_counter()
        workers.Worker(
            "xgbatch training", xgbatch.train, (str(model),), FUNCTIONS_TIMEOUT_S
        ).close()
        log(f"functions: trained in {time.perf_counter() - started:.1f} s")
        peers = _functions_peers(run, stack, model, log_dir)
        for peer in peers:
            _start_scoring_client(run, stack, peer, model)
        peers = [p for p in peers if p.worker is not None]
        log(
            f"functions: {plan.functions_rows:,} rows ({plan.functions_json_rows:,} for JSON) "
            f"through {', '.join(p.label for p in peers)}"
        )
        expected: dict[int, float] = {}
        for rep in range(plan.reps):
            for peer in alternating(peers, rep):
                with run.attempt(f"functions bulk {peer.label}"):
                    checks = _functions_bulk(run, peer, rep)
                    if peer.label == IN_PROCESS:
                        for count, check in checks.items():
                            expected.setdefault(count, check)
                    for count, check in checks.items():
                        want = expected.get(count)
                        if want is not None and not math.isclose(
                            check, want, rel_tol=FUNCTIONS_CHECK_TOLERANCE
                        ):
                            raise RuntimeError(
                                f"{peer.label}'s scores differ from the in-process ones, or "
                                f"come in another order: the checksum of the first {count:,} "
                                f"is {check:.6f}, not {want:.6f}"
                            )
        for rows in FUNCTIONS_LATENCY_ROWS:
            log(
                f"functions: latency of {rows:,}-row requests, {plan.functions_calls:,} per "
                f"peer after {plan.functions_warm_ups:,} untimed"
            )
            for peer in peers:
                if peer.latency:
                    with run.attempt(f"functions latency {peer.label} {rows} rows"):
                        _functions_latency(run, peer, rows)
    with run.attempt("functions: SQL over a stream"):
        _functions_sql_stream(run, log_dir)


def _functions_peers(
    run: Run, stack: contextlib.ExitStack, model: Path, log_dir: Path
) -> list[FunctionsPeer]:
    """Start the scoring servers; return every peer (one whose server failed is left out)."""
    plan = run.plan
    rows, threads = plan.functions_rows, os.cpu_count() or 1
    peers = [
        FunctionsPeer(IN_PROCESS, "in-process", rows),
        FunctionsPeer(IN_PROCESS_THREADS, "in-process", rows, latency=False),
    ]
    starters = [
        (PYARROW_FLIGHT, "pyarrow", rows, lambda: servers.start_xgbatch_server(log_dir, model)),
        (
            FASTAPI_JSON,
            "http-json",
            min(rows, plan.functions_json_rows),
            lambda: servers.start_json_scoring(log_dir, model),
        ),
    ]
    for label, workers_ in ((QUIVER_1_WORKER, 1), (QUIVER_2_WORKERS, 2)):
        starters.append(
            (
                label,
                "pyarrow",
                rows,
                lambda label=label, n=workers_: servers.start_quiver_functions(
                    run.binary, log_dir, label, n, model
                ),
            )
        )
    for label, client, count, start in starters:
        with run.attempt(f"functions: start {label}"):
            server = start()
            stack.callback(_stop_functions_server, run, server)
            peers.append(FunctionsPeer(label, client, count, server))
    if threads == 1:
        peers = [p for p in peers if p.label != IN_PROCESS_THREADS]
    return peers


def _stop_functions_server(run: Run, server: ServerProcess) -> None:
    code = server.stop()
    if code != 0:
        run.note(f"{server.name} (functions suite) exited with code {code} after SIGTERM")


def _start_scoring_client(
    run: Run, stack: contextlib.ExitStack, peer: FunctionsPeer, model: Path
) -> None:
    """Start the client worker of ``peer`` and warm the peer up with a few requests."""
    with run.attempt(f"functions: client of {peer.label}"):
        if peer.server is None:
            kind, target = "in-process", str(model)
            threads = 1 if peer.label == IN_PROCESS else os.cpu_count() or 1
        else:
            kind = "json" if peer.client == "http-json" else "flight"
            target, threads = peer.server.uri, 1
        worker = workers.Worker(
            f"functions, client of {peer.label}",
            scoring.ScoringClient,
            (kind, target, peer.rows, threads),
            FUNCTIONS_TIMEOUT_S,
        )
        stack.enter_context(worker)
        worker.call("latency", 1000, 0, FUNCTIONS_WARM_UPS)
        peer.worker = worker


def _functions_bulk(run: Run, peer: FunctionsPeer, rep: int) -> dict[int, float]:
    """Time one bulk repetition of ``peer`` and its CPU; record them; return its checks.

    The checks are :func:`bench.scoring.checksum` of the scores, by how many first rows
    each covers.
    """
    assert peer.worker is not None
    server = peer.server
    quiver = peer.label in (QUIVER_1_WORKER, QUIVER_2_WORKERS)

    def cpu() -> tuple[float, dict[int, float], float]:
        assert peer.worker is not None
        return (
            scoring.cpu_seconds(server.pid) if server is not None else 0.0,
            scoring.cpu_of_children(server.pid) if server is not None and quiver else {},
            scoring.cpu_seconds(peer.worker.pid),
        )

    before = cpu()
    got = peer.worker.call("bulk")
    after = cpu()
    nbytes = peer.rows * xgbatch.ROW_BYTES

    def record(op: str, seconds: float) -> None:
        run.add(
            Measurement(
                "functions",
                peer.label,
                peer.client,
                op,
                1,
                peer.rows,
                xgbatch.BATCH_ROWS,
                bytes=nbytes,
                seconds=seconds,
                rep=rep,
            )
        )

    record("bulk", got["seconds"])
    if server is not None:
        record("cpu_server", after[0] - before[0])
    if quiver:
        record("cpu_workers", sum(t - before[1].get(pid, 0.0) for pid, t in after[1].items()))
    record("cpu_client", after[2] - before[2])
    return {int(count): float(check) for count, check in got["checks"].items()}


def _functions_latency(run: Run, peer: FunctionsPeer, rows: int) -> None:
    """Time ``peer``'s sequential requests of ``rows`` rows; record p50 and p99."""
    assert peer.worker is not None
    plan = run.plan
    times = peer.worker.call("latency", rows, plan.functions_calls, plan.functions_warm_ups)
    run.add(
        Measurement(
            "functions",
            peer.label,
            peer.client,
            "latency",
            1,
            rows,
            rows,
            bytes=rows * xgbatch.ROW_BYTES,
            seconds=percentile(times, 50),
            ops=len(times),
            p99_seconds=percentile(times, 99),
        )
    )


#: How often the harness reads the server's ``quiver_memory_used_bytes`` during a stream.
MEMORY_POLL_S = 0.01


#: The gauge of the memory quiver's pool holds (``--max-memory``), from its /metrics.
MEMORY_USED_METRIC = "quiver_memory_used_bytes"


def _functions_sql_stream(run: Run, log_dir: Path) -> None:
    """Time SQL over a stream against the echo of the same stream, on a fresh quiver.

    The server is capped at ``Plan.functions_stream_max_memory`` (``--max-memory``) and
    gets ``Plan.functions_stream_bytes`` per stream, several times its cap, so a server
    that held the stream would refuse it; the harness polls its ``/metrics`` for the peak
    of ``quiver_memory_used_bytes`` during each stream. A server that answers SQL over a
    stream with ``UNIMPLEMENTED`` gets its echo measured and the SQL rows recorded as not
    available (a note on each row), not as a failure.
    """
    plan = run.plan
    server = servers.start_quiver_stream(run.binary, log_dir, plan.functions_stream_max_memory)
    try:
        metrics = server.metrics_url()
        with workers.Worker(
            "functions, stream client", scoring.StreamClient, (server.uri,), FUNCTIONS_TIMEOUT_S
        ) as worker:
            ops: dict[str, str | None] = {FUNCTIONS_STREAM_ECHO: None}
            # A probe that fails otherwise is a failure of the SQL rows only: the echo is
            # still measured.
            unavailable: str | None = ""
            with run.attempt("functions: SQL over a stream, a first small statement"):
                unavailable = worker.call("probe", FUNCTIONS_STREAM_SQL["stream_filter"])
            if unavailable is None:
                ops.update(FUNCTIONS_STREAM_SQL)
            elif unavailable:
                for op in FUNCTIONS_STREAM_SQL:
                    run.add(
                        Measurement(
                            "functions", QUIVER, "pyarrow", op, 1, 0, xgbatch.BATCH_ROWS,
                            note=f"not available: {unavailable}",
                        )
                    )  # fmt: skip
                run.note(
                    "functions: SQL over a stream is not available from this server "
                    f"(it answered UNIMPLEMENTED: {unavailable}); its echo was measured alone"
                )
            log(
                f"functions: SQL over a stream, {_stream_size(plan.functions_stream_bytes)} per "
                f"stream through a quiver of --max-memory "
                f"{_stream_size(plan.functions_stream_max_memory)}: {', '.join(ops)}"
            )
            worker.call("stream", None, plan.functions_stream_bytes // 8)  # warm-up
            for rep in range(plan.reps):
                for op in alternating(list(ops), rep):
                    with run.attempt(f"functions {op}"):
                        _functions_stream(run, worker, server, metrics, op, ops[op], rep)
    finally:
        code = server.stop()
        if code != 0:
            run.note(f"{server.name} (functions suite) exited with code {code} after SIGTERM")


def _stream_size(nbytes: int) -> str:
    return f"{nbytes / 2**30:g} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:g} MiB"


def _functions_stream(
    run: Run,
    worker: workers.Worker,
    server: ServerProcess,
    metrics: str,
    op: str,
    sql: str | None,
    rep: int,
) -> None:
    """Time one stream through ``sql`` (``None``: the echo) and record it with its peak."""
    peak = [0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError, ValueError):
                peak[0] = max(peak[0], _memory_used(metrics))
            done.wait(MEMORY_POLL_S)

    poller = threading.Thread(target=poll, name="memory poll", daemon=True)
    poller.start()
    try:
        got = worker.call("stream", sql, run.plan.functions_stream_bytes)
    finally:
        done.set()
        poller.join()
    run.add(
        Measurement(
            "functions",
            QUIVER,
            "pyarrow",
            op,
            1,
            int(got["rows"]),
            xgbatch.BATCH_ROWS,
            bytes=int(got["bytes"]),
            seconds=float(got["seconds"]),
            rep=rep,
            wire_bytes=int(got["bytes_out"]),
            rss_bytes=peak[0],
            hwm_bytes=_hwm(server),
        )
    )


def _hwm(server: ServerProcess) -> int | None:
    """Return the server's ``VmHWM`` (its peak RSS since it started), or ``None``."""
    try:
        return server.memory()[1]
    except OSError:
        return None


def _memory_used(metrics: str) -> int:
    """Return the server's ``quiver_memory_used_bytes`` now, from its ``/metrics``."""
    with urllib.request.urlopen(metrics, timeout=5) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith(MEMORY_USED_METRIC + " ") or line.startswith(MEMORY_USED_METRIC + "{"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise ValueError(f"no {MEMORY_USED_METRIC} in {metrics}")


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


def _rate_ratio(rows: list[Row], ours: str, theirs: str) -> tuple[float | None, str]:
    """Return the ratio of two peers' median scoring rates, and it as text with both rates."""
    a = functions_rows_per_second(rows, ours)
    b = functions_rows_per_second(rows, theirs)
    ratio = _ratio(a, b)
    if ratio is None or a is None or b is None:
        return None, "—"
    return ratio, f"{_times(ratio)} ({_rate(a.median)} vs {_rate(b.median)})"


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


def _goals_link(rows: list[Row]) -> list[str]:
    if not select(rows, suite="functions"):
        return []
    return [
        "",
        "The goals of scoring over DoExchange are in "
        "[their section](#functions-scoring-over-doexchange-the-papers-xgbatch).",
    ]


def _figures(rows: list[Row], plan: dict[str, object], out_dir: Path) -> list[Path]:
    drawn = []
    if select(rows, suite="functions", op=("bulk", "latency")):
        drawn.append(functions_xgbatch(rows, out_dir / "functions_xgbatch.png"))
    if select(rows, suite="functions", op=FUNCTIONS_STREAM_OPS):
        drawn.append(functions_sql_stream(rows, out_dir / "functions_sql_stream.png"))
    return drawn


SUITE = Suite(
    "functions",
    run_functions,
    goals=lambda rows, plan: functions_goals(rows),
    goals_rank=60,
    goals_link=_goals_link,
    sections=(
        Section(
            lambda rows, run, plots, at: _functions_section(
                rows, run, plots.get("functions_xgbatch"), at
            ),
            rank=130,
        ),
    ),
    figures=_figures,
)
