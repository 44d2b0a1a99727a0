"""What every suite shares: the :class:`Run` it measures into and the :class:`Suite` it registers.

Repetitions alternate between the servers (quiver, then the Arrow C++ peer, then quiver...)
so that a noisy moment of the machine does not favour one of them (:func:`alternating`).
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from . import servers
from .peers import postgres
from .plan import Plan
from .results import Measurement, ResultsFile
from .servers import ServerProcess
from .summary import Row

if TYPE_CHECKING:
    from .report import Goal


T = TypeVar("T")


@dataclass
class Run:
    """Everything the suites share: the plan, the servers, the CSV and the notes.

    Attributes
    ----------
    plan : Plan
        What to measure.
    flight_servers : list of ServerProcess
        quiver and the Arrow C++ peer.
    json_server : ServerProcess or None
        The JSON-over-socket peer.
    results : ResultsFile
        Where measurements go.
    binary : pathlib.Path
        The quiver binary (for ``quiver bench``).
    quiver_bench : bool
        Whether ``quiver bench`` is available.
    log_dir : pathlib.Path
        Where servers started by a suite write their logs.
    notes : list of str
        What was skipped, what failed, what is not comparable: printed in BENCHMARKS.md.
    failures : int
        Measurements that raised.
    software : dict of str to str
        Versions of what the ``sql`` suite measured (PostgreSQL, the drivers).
    out_dir : pathlib.Path or None
        The run's output directory (``--out``), where the tpch suite keeps its generated
        tables between runs (``None``: the parent of ``log_dir``).
    """

    plan: Plan
    flight_servers: list[ServerProcess]
    json_server: ServerProcess | None
    results: ResultsFile
    binary: Path
    quiver_bench: bool
    log_dir: Path
    notes: list[str] = field(default_factory=list)
    failures: int = 0
    software: dict[str, str] = field(default_factory=dict)
    out_dir: Path | None = None

    def add(self, measurement: Measurement) -> None:
        """Record a measurement."""
        self.results.add(measurement)

    def note(self, text: str) -> None:
        """Record a note for the report (once) and print it."""
        if text in self.notes:
            return
        self.notes.append(text)
        log(f"note: {text}")

    @contextlib.contextmanager
    def attempt(self, what: str) -> Iterator[None]:
        """Run a measurement; if it raises, note the failure and go on with the next one."""
        try:
            yield
        except Exception as e:
            self.failures += 1
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            self.note(f"FAILED: {what}: {type(e).__name__}: {first_line[:300]}")
            traceback.print_exc(file=sys.stderr)

    def restart_flight_servers(self) -> None:
        """Replace every Flight server by a fresh process (nothing stored, memory returned)."""
        for i, server in enumerate(self.flight_servers):
            with self.attempt(f"restart {server.name}"):
                self.flight_servers[i] = servers.restart(server, self.binary, self.log_dir)
                log(f"restarted {server.name}: {self.flight_servers[i].uri}")

    def servers_alive(self) -> list[ServerProcess]:
        """Return the Flight servers still running (a dead one is noted once)."""
        alive = []
        for server in self.flight_servers:
            if server.alive():
                alive.append(server)
            elif not any(n.startswith(f"{server.name} exited") for n in self.notes):
                self.note(
                    f"{server.name} exited with code {server.process.returncode} during the "
                    f"run; its log: {server.log_path}"
                )
        return alive


def log(text: str) -> None:
    """Print progress to stderr."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def alternating(group: list[T], rep: int) -> list[T]:
    """Return the servers (or clients) in an order that alternates with the repetition."""
    return group if rep % 2 == 0 else list(reversed(group))


def stop_postgres(run: Run, pg: postgres.PostgresServer) -> None:
    """Stop the PostgreSQL server of a suite (sql, engines), noting an exit code not 0."""
    code = pg.stop()
    if code != 0:
        run.note(f"PostgreSQL exited with code {code} at its stop; its log: {run.log_dir}")


#: A part of BENCHMARKS.md: ``render(rows, run, plots, report_dir)`` returns its lines, where
#: ``run`` is the run's description (run.json), ``plots`` the figures by file stem and
#: ``report_dir`` the folder links are relative to.
SectionRender = Callable[[list[Row], dict[str, object], dict[str, Path], Path], list[str]]


@dataclass(frozen=True)
class Section:
    """A part of BENCHMARKS.md that a suite writes.

    Attributes
    ----------
    rank : int
        Where it stands in the report: the sections of every suite are written in ``rank``
        order (equal ranks in the order of ``bench.suites.SUITES``), after the Goals section
        and before the run's notes. The ranks in use: 10 the headline, 20 the ceilings, 30
        the grid, then 40-160 in steps of 10 (``bench/suites/*.py``); a new suite's section
        goes last with the default.
    render : SectionRender
        Returns the section's lines, blank lines included (none: the suite measured nothing
        it shows).
    """

    render: SectionRender
    rank: int = 1000


@dataclass(frozen=True)
class Suite:
    """A suite, as its module registers it in ``bench.suites.SUITES``.

    Attributes
    ----------
    name : str
        What ``--only`` calls it.
    run : callable
        Measures into a :class:`Run` (its rows, notes and failures).
    by_default : bool
        Whether a run without ``--only`` runs it.
    goals : callable or None
        ``goals(rows, plan)``: the suite's goals on the rows of one run (``plan``: the run's
        plan, as run.json has it), printed at the end of a run.
    goals_rank : int
        The order in which goals are printed and listed in the Goals section.
    goals_in_table : bool
        Whether the Goals section's table shows them (else the suite's own section does).
    goals_link : callable or None
        ``goals_link(rows)``: the lines of the Goals section that point at the suite's own
        section of goals (none when it measured nothing).
    sections : tuple of Section
        Its parts of BENCHMARKS.md.
    figures : callable or None
        ``figures(rows, plan, out_dir)``: draws the suite's figures that the rows allow into
        ``out_dir`` and returns their paths.
    """

    name: str
    run: Callable[[Run], None]
    by_default: bool = True
    goals: Callable[[list[Row], dict[str, object]], list[Goal]] | None = None
    goals_rank: int = 1000
    goals_in_table: bool = False
    goals_link: Callable[[list[Row]], list[str]] | None = None
    sections: tuple[Section, ...] = ()
    figures: Callable[[list[Row], dict[str, object], Path], list[Path]] | None = None
