"""``python -m bench``: run the benchmark suite and regenerate BENCHMARKS.md.

From the repository root, with the venv of ``bench/requirements.txt``::

    python -m bench --quick            # about 6 minutes
    python -m bench --full             # the paper's grid, 5 repetitions
    python -m bench --only get,small   # some suites
    python -m bench --full --only ceilings,get,put,rust --headline-only   # the goals' table
    python -m bench --suite functions  # one suite (--suite is --only)
    python -m bench --only sql --sql-rows 1e6 --reps 3   # one size of the sql suite
    python -m bench --suite engines --engines-rows 2e6   # Spark, Dask, Ray on 2M rows
    python -m bench --only tpch --tpch-scale 1   # the 22 TPC-H queries against DuckDB
    python -m bench --only lake        # tables in S3 over a shaped link (root: a netns)
    python -m bench --only console     # the web console in headless Chromium (issue 69)
    python -m bench --full --only nemesis   # 30 minutes of cluster faults (not by default)
    python -m bench --report-only      # redraw and rewrite from bench/out/
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import resource
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa

from . import plots, report, servers
from .plan import plan_for
from .results import ResultsFile, git_revision, machine_info, now, read_results, read_run_info
from .results import write_run_info as save_run_info
from .run import Run, log
from .suites import DEFAULT_SUITE_NAMES, SUITE_NAMES, SUITES

DEFAULT_OUT = servers.REPO / "bench" / "out"
DEFAULT_REPORT = servers.REPO / "BENCHMARKS.md"
DEFAULT_PLOTS = servers.REPO / "bench" / "plots"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="quiver's benchmark suite: Flight throughput vs the Arrow C++ server and "
        "the ceilings, small-object latency, JSON over a socket.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="mode",
        action="store_const",
        const="quick",
        help="small sizes, 3 repetitions, about 6 minutes (the default)",
    )
    mode.add_argument(
        "--full",
        dest="mode",
        action="store_const",
        const="full",
        help="1-16 streams, up to 30M records per stream, 5 repetitions",
    )
    mode.add_argument(
        "--smoke",
        dest="mode",
        action="store_const",
        const="smoke",
        help="tiny sizes, 1 repetition: checks that the harness works",
    )
    parser.set_defaults(mode="quick")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="where results.csv, run.json, plots and logs go (default: %(default)s)",
    )
    parser.add_argument(
        "--only",
        default=",".join(DEFAULT_SUITE_NAMES),
        help=f"comma-separated suites to run, of: {','.join(SUITE_NAMES)} (default: all but "
        "nemesis, which runs only when asked for)",
    )
    parser.add_argument(
        "--suite",
        dest="only",
        default=argparse.SUPPRESS,
        help="the same as --only (e.g. --suite functions)",
    )
    parser.add_argument("--reps", type=int, help="repetitions (default: the mode's)")
    parser.add_argument(
        "--headline-only",
        action="store_true",
        help="the get, put and rust suites measure the single-stream headline table only "
        "(no streams x records grid, no batch-size sweep)",
    )
    parser.add_argument(
        "--sql-rows",
        help="comma-separated result sizes of the sql suite, in rows (default: the mode's)",
    )
    parser.add_argument(
        "--engines-rows",
        help="rows of the taxi table the engines suite reads and writes (default: the mode's)",
    )
    parser.add_argument(
        "--tpch-scale",
        type=float,
        help="TPC-H scale factor of the tpch suite (default: the mode's: 0.01 smoke, 1 quick, "
        "10 full)",
    )
    parser.add_argument(
        "--lake-scale",
        type=float,
        help="TPC-H scale factor of the lake suite's tables in S3 (default: the mode's: 0.01 "
        "smoke, 1 quick and full)",
    )
    parser.add_argument(
        "--nemesis-seconds",
        type=float,
        help="how long the nemesis suite injects faults (default: the mode's: 30 s smoke, "
        "150 s quick, 1800 s full)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        default=DEFAULT_REPORT,
        help="the markdown report to write (default: %(default)s)",
    )
    parser.add_argument(
        "--plots-dir",
        type=Path,
        default=DEFAULT_PLOTS,
        help="where the report's figures are copied (default: %(default)s)",
    )
    parser.add_argument(
        "--no-report", action="store_true", help="write results.csv and plots into --out only"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing: redraw and rewrite the report from --out",
    )
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(args.only) - set(SUITE_NAMES))
    if unknown:
        parser.error(
            f"unknown suite(s) {', '.join(unknown)}: expected some of {', '.join(SUITE_NAMES)}"
        )
    if args.sql_rows is not None:
        try:
            args.sql_rows = tuple(int(float(s)) for s in args.sql_rows.split(",") if s.strip())
        except ValueError:
            parser.error(f"--sql-rows: expected comma-separated row counts, got {args.sql_rows!r}")
        if not args.sql_rows or min(args.sql_rows) < 1:
            parser.error("--sql-rows: expected positive row counts")
    if args.engines_rows is not None:
        try:
            args.engines_rows = int(float(args.engines_rows))
        except ValueError:
            parser.error(f"--engines-rows: expected a row count, got {args.engines_rows!r}")
        if args.engines_rows < 1:
            parser.error("--engines-rows: expected a positive row count")
    if args.tpch_scale is not None and not 0 < args.tpch_scale <= 1000:
        parser.error("--tpch-scale: expected a scale factor above 0 (1: 1 GB of TPC-H data)")
    if args.lake_scale is not None and not 0 < args.lake_scale <= 1000:
        parser.error("--lake-scale: expected a scale factor above 0 (1: 1 GB of TPC-H data)")
    if args.nemesis_seconds is not None and args.nemesis_seconds <= 0:
        parser.error("--nemesis-seconds: expected a positive number of seconds")
    return args


def measure(args: argparse.Namespace, argv: list[str]) -> tuple[dict[str, object], int]:
    """Start the servers, run the suites, stop the servers; return the run info and failures."""
    started = time.monotonic()
    machine = machine_info()
    plan = plan_for(args.mode, int(float(machine["ram_gib"]) * 2**30))
    if args.reps:
        plan = dataclasses.replace(
            plan, reps=args.reps, sql_reps=args.reps, headline_reps=args.reps
        )
    if args.headline_only:
        plan = dataclasses.replace(plan, streams=(), rows_per_stream=(), batch_sweep=())
    if args.sql_rows:
        plan = dataclasses.replace(plan, sql_rows=args.sql_rows)
    if args.engines_rows:
        plan = dataclasses.replace(plan, engines_rows=args.engines_rows)
    if args.nemesis_seconds:
        plan = dataclasses.replace(plan, nemesis_seconds=args.nemesis_seconds)
    if args.tpch_scale:
        plan = dataclasses.replace(plan, tpch_scale=args.tpch_scale)
    if args.lake_scale:
        plan = dataclasses.replace(plan, lake_scale=args.lake_scale)
    binary = servers.quiver_bin()
    if not binary.is_file():
        raise SystemExit(
            f"quiver binary not found at {binary}: build it with `cargo build --release` "
            "or set QUIVER_BIN"
        )
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    run_columns = {"mode": plan.mode, **machine}
    results = ResultsFile(out / "results.csv", run_columns)
    log(f"{plan.mode} mode: suites {','.join(args.only)}; results in {out / 'results.csv'}")

    running: list[servers.ServerProcess] = []
    notes: list[str] = []
    software: dict[str, str] = {}
    run: Run | None = None
    json_server = None
    try:
        flight_servers = [servers.start_quiver(binary, out / "logs")]
        running += flight_servers
        flight_servers.append(servers.start_arrow_cpp(out / "logs"))
        running.append(flight_servers[-1])
        json_server = None
        if "json" in args.only:
            json_server = servers.start_json_socket(out / "logs")
            running.append(json_server)
        log("servers: " + ", ".join(f"{s.name} {s.uri} (pid {s.pid})" for s in running))
        run = Run(
            plan=plan,
            flight_servers=flight_servers,
            json_server=json_server,
            results=results,
            binary=binary,
            quiver_bench=servers.quiver_bench_available(binary),
            log_dir=out / "logs",
            notes=notes,
            software=software,
            out_dir=out,
        )
        noted_peak = 0.0
        for suite in SUITES:
            if suite.name in args.only:
                with run.attempt(f"suite {suite.name}"):
                    suite.run(run)
                # The clients of the small, bytes, json, memory, shm and soak suites live in this
                # process: a run that grows it towards the machine's memory measures the
                # kernel's reclaim, not the servers. Noted when it grew.
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB to GiB
                if round(peak, 1) > round(noted_peak, 1):
                    run.note(f"the harness's peak RSS rose to {peak:.1f} GiB in suite {suite.name}")
                    noted_peak = peak
        failures = run.failures
    finally:
        # The sql suite replaces the Flight servers by fresh ones: stop what runs now.
        if run is not None:
            running = [*run.flight_servers, *([json_server] if json_server else [])]
        for server in running:
            code = server.stop()
            if code != 0:
                notes.append(f"{server.name} exited with code {code} after SIGTERM")
    elapsed = time.monotonic() - started
    log(f"measured in {elapsed:.0f} s")
    info: dict[str, object] = {
        "mode": plan.mode,
        "date": now(),
        "reps": plan.reps,
        "plan": dataclasses.asdict(plan),
        "suites": args.only,
        "command": " ".join(["python -m bench", *argv]).strip(),
        "elapsed": f"measured in {elapsed:.0f} s",
        "machine": machine,
        "quiver_version": servers.quiver_version(binary),
        "git": git_revision(servers.REPO),
        "pyarrow": pa.__version__,
        "pandas": pd.__version__,
        "python": platform.python_version(),
        "sql_software": software,
        "notes": notes,
    }
    save_run_info(out / "run.json", info)
    return info, failures


def write_report(args: argparse.Namespace, info: dict[str, object]) -> None:
    """Draw the figures into ``--out`` and, unless ``--no-report``, write the report."""
    out: Path = args.out
    rows = read_results(out / "results.csv")
    plan = info["plan"]
    assert isinstance(plan, dict)
    drawn = plots.draw_all(rows, plan, out / "plots")
    log(f"plots: {', '.join(p.name for p in drawn)} in {out / 'plots'}")
    if args.no_report:
        return
    plots_dir: Path = args.plots_dir
    plots_dir.mkdir(parents=True, exist_ok=True)
    linked = {}
    for path in drawn:
        target = plots_dir / path.name
        if target.resolve() != path.resolve():
            shutil.copyfile(path, target)
        linked[path.stem] = target
    report_path: Path = args.report
    report_path.write_text(report.render(rows, info, linked, report_path))
    log(f"report: {report_path}")


def main(argv: list[str] | None = None) -> int:
    """Run the suite; exit with 1 if a measurement failed."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.report_only:
        info = read_run_info(args.out / "run.json")
        failures = 0
    else:
        info, failures = measure(args, argv)
    write_report(args, info)
    rows = read_results(args.out / "results.csv")
    plan = info.get("plan") or {}
    assert isinstance(plan, dict)
    goals = [
        goal
        for suite in sorted(SUITES, key=lambda s: s.goals_rank)
        if suite.goals is not None
        for goal in suite.goals(rows, plan)
    ]
    for goal in goals:
        log(f"goal: {goal.text}: {goal.shown} (target {goal.target}) {goal.verdict}")
    if failures:
        log(f"{failures} measurement(s) failed: see the notes in run.json and the report")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
