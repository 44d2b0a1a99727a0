"""The get suite: pyarrow DoGet over the grid, the batch-size sweep and the headline table."""

from __future__ import annotations

from ..run import Run, Section, Suite
from .throughput import _run_throughput, figures, grid_lines, headline_goals, headline_lines


def run_get(run: Run) -> None:
    """Time the pyarrow client's gets over the grid, then of the headline table.

    The headline's gets are also made by the quiver Python client, over gRPC from both
    servers and over shared memory from quiver.
    """
    _run_throughput(run, "get")


#: The headline and the grid are the get, put and rust suites' together
#: (:mod:`bench.suites.throughput`): their goals, sections and figures are registered here,
#: with the first of them to run.
SUITE = Suite(
    "get",
    run_get,
    goals=lambda rows, plan: headline_goals(rows),
    goals_rank=10,
    goals_in_table=True,
    sections=(Section(headline_lines, rank=10), Section(grid_lines, rank=30)),
    figures=figures,
)
