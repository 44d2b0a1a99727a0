"""The put suite: pyarrow DoPut over the grid, the batch-size sweep and the headline table."""

from __future__ import annotations

from ..run import Run, Suite
from .throughput import _run_throughput


def run_put(run: Run) -> None:
    """Time the pyarrow client's puts over the grid, then of the headline table.

    The headline's puts are also made by the quiver Python client, over gRPC.
    """
    _run_throughput(run, "put")


#: Its goals, sections and figures are the get suite's (:mod:`bench.suites.get`).
SUITE = Suite("put", run_put)
