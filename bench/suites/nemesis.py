"""The nemesis suite: three cluster nodes under faults; losses, failures and latency."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import threading

from .. import servers
from ..report import Goal, _duration, _goal_rows
from ..results import NEMESIS_CALM, NEMESIS_FAULTS, QUIVER_CLUSTER, QUIVER_PYTHON, Measurement
from ..run import Run, Section, Suite, log
from ..summary import Row, select
from .cluster import _cluster_unavailable


def run_nemesis(run: Run) -> None:
    """Three cluster nodes under faults, appends and queries: losses, failures, latency.

    Runs :mod:`bench.nemesis_worker` in a network namespace of its own (``ip netns``) for
    the plan's ``nemesis_seconds``; its progress goes to stderr as it runs, and the nodes'
    and etcd's logs to ``out/logs/nemesis/``, with its JSON lines (``nemesis.jsonl``: one
    per fault injected, when, and the first calls that failed in its window).
    """
    import shutil

    plan = run.plan
    why = _cluster_unavailable()
    if why is None and shutil.which("iptables") is None:
        why = "iptables not found (it cuts a node off the network)"
    if why is not None:
        run.note(f"nemesis suite skipped: {why}")
        return
    log_dir = run.log_dir / "nemesis"
    log(f"nemesis: faults for {plan.nemesis_seconds:.0f} s, logs in {log_dir}")
    namespace = f"quiver-nemesis-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    tail: list[str] = []

    def relay(stream: io.TextIOBase) -> None:
        for line in stream:
            sys.stderr.write(line)
            tail.append(line)
            del tail[:-60]

    try:
        with tempfile.TemporaryFile("w+") as stdout:
            worker = subprocess.Popen(
                ["ip", "netns", "exec", namespace, sys.executable, "-m", "bench.nemesis_worker",
                 "--binary", str(run.binary), "--seconds", str(plan.nemesis_seconds),
                 "--calm", str(plan.nemesis_calm_s), "--log-dir", str(log_dir)],
                stdout=stdout, stderr=subprocess.PIPE, text=True,
                cwd=servers.REPO,
            )  # fmt: skip
            assert worker.stderr is not None
            relaying = threading.Thread(target=relay, args=(worker.stderr,), daemon=True)
            relaying.start()
            try:
                # Bounded: the faults, a last fault begun at the deadline, settling, checking.
                code = worker.wait(timeout=plan.nemesis_seconds + 900)
            except subprocess.TimeoutExpired:
                worker.kill()
                code = worker.wait()
            relaying.join(timeout=10)
            stdout.seek(0)
            lines = [json.loads(line) for line in stdout if line.startswith("{")]
        # Every line, the faults one by one included, for a closer look.
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "nemesis.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    _record_nemesis(run, lines)
    if code != 0:
        raise RuntimeError(f"nemesis worker failed ({code}): {''.join(tail)[-2000:]}")


def _record_nemesis(run: Run, lines: list[dict]) -> None:
    """Turn the nemesis worker's JSON lines into rows and notes."""

    def add(op: str, client: str = QUIVER_PYTHON, **values: object) -> None:
        run.add(Measurement("nemesis", QUIVER_CLUSTER, client, op, **values))  # type: ignore[arg-type]

    for m in lines:
        if m["op"] == "fault":
            kind = m["kind"]
            add(f"append:{kind}", streams=m["injected"], ops=m["ops"], errors=m["failed"],
                seconds=m["p50"] or 0.0, p99_seconds=m["p99"])  # fmt: skip
            add(f"append_worst_client:{kind}", streams=m["injected"],
                errors=m["failed_max_per_client"])  # fmt: skip
            add(f"query:{kind}", client="query", streams=m["injected"], ops=m["queries"],
                errors=m["queries_failed"])  # fmt: skip
            add(f"query_stale:{kind}", client="query", streams=m["injected"],
                ops=m["queries"], errors=m["queries_stale"])  # fmt: skip
            for error in m["errors"][:3]:
                run.note(f"nemesis, {kind}: a failed append: {error}")
            for error in m["query_errors"][:3]:
                run.note(f"nemesis, {kind}: a failed query: {error}")
        elif m["op"] == "summary":
            add("appends", ops=m["attempted"], errors=m["failed"], seconds=m["p50"] or 0.0,
                p99_seconds=m["p99"])  # fmt: skip
            add("acknowledged", ops=m["acknowledged"])
            add("queries", client="query", ops=m["queries"], errors=m["queries_failed"])
            for op in ("lost", "torn_or_doubled", "invented"):
                add(op, ops=m["acknowledged"], errors=m[op])
            add("problems", errors=len(m["problems"]))
            add("faults", ops=m["faults"], seconds=m["seconds"])
            add("settle", seconds=m["settle_seconds"], errors=0 if m["settled"] else 1)
            for problem in m["problems"][:20]:
                run.note(f"nemesis: {problem}")
            if m["node_log_errors"]:
                run.note(
                    f"nemesis: {m['node_log_errors']} ERROR or panic lines in the nodes' logs, "
                    f"e.g. {m['node_log_samples'][:3]}"
                )


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


#: Not run by default: it takes the whole of ``nemesis_seconds`` (30 minutes in full mode).
SUITE = Suite(
    "nemesis",
    run_nemesis,
    by_default=False,
    goals=lambda rows, plan: nemesis_goals(rows),
    goals_rank=100,
    sections=(Section(lambda rows, run, plots, at: _nemesis_section(rows, run), rank=110),),
)
