"""BENCHMARKS.md: the run's medians, spreads, ratios and goals, generated from results.csv."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .summary import Row, Spread

if TYPE_CHECKING:
    from .run import Suite


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


# --- engines: Spark, Dask and Ray through quiver (the paper's Figure 10) --------------------


# --- TPC-H against DuckDB (issue 38) ----------------------------------------------------------


def _duration(seconds: float) -> str:
    return _ms(seconds) if seconds < 1 else f"{seconds:.3f} s"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def _rate(rows_per_second: float, unit: str = " rows/s") -> str:
    if rows_per_second >= 1e6:
        return f"{rows_per_second / 1e6:.2f}M{unit}"
    return f"{rows_per_second / 1e3:.1f}k{unit}"


def _goals_section(
    rows: list[Row], mode: str, plan: dict[str, object], suites: tuple[Suite, ...]
) -> list[str]:
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
    by_rank = sorted(suites, key=lambda s: s.goals_rank)
    for suite in by_rank:
        if suite.goals is not None and suite.goals_in_table:
            lines += _goal_rows(suite.goals(rows, plan))
    for suite in by_rank:
        if suite.goals_link is not None:
            lines += suite.goals_link(rows)
    return lines


def _goal_rows(found: list[Goal]) -> list[str]:
    lines = []
    for goal in found:
        verdict = goal.verdict if goal.passed is None else f"**{goal.verdict}**"
        lines.append(f"| {goal.text} | {goal.target} | {goal.shown} | {verdict} |")
    return lines


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
    from .suites import SUITES  # here: every suite's module imports this one

    machine = run["machine"]
    assert isinstance(machine, dict)
    mode = str(run["mode"])
    plan = run.get("plan")
    plan = plan if isinstance(plan, dict) else {}
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
        *_goals_section(rows, mode, plan, SUITES),
        "",
    ]
    sections = sorted(
        (section for suite in SUITES for section in suite.sections),
        key=lambda section: section.rank,
    )
    for section in sections:
        lines += section.render(rows, run, plots, report_dir)
    notes = run.get("notes") or []
    assert isinstance(notes, list)
    if notes:
        lines += ["## Notes from this run", ""]
        lines += [f"- {note}" for note in notes]
        lines.append("")
    return "\n".join(lines)
