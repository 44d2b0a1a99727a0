"""The suites, one module each, registered in :data:`SUITES` in the order they run.

A suite's module (``bench/suites/NAME.py``) holds its run function, its goals, its parts of
BENCHMARKS.md and its figures, and ends with ``SUITE = Suite(...)``
(:class:`bench.run.Suite`): a new suite is a new module and its line in :data:`SUITES`.
``--only`` chooses among them (:data:`SUITE_NAMES`), the report writes their sections
(:func:`bench.report.render`) and the plots draw their figures (:func:`bench.plots.draw_all`).
"""

from __future__ import annotations

from ..run import Suite
from .bytes import SUITE as BYTES
from .ceilings import SUITE as CEILINGS
from .clients import SUITE as CLIENTS
from .cluster import SUITE as CLUSTER
from .console import SUITE as CONSOLE
from .engines import SUITE as ENGINES
from .functions import SUITE as FUNCTIONS
from .get import SUITE as GET
from .json import SUITE as JSON
from .lake import SUITE as LAKE
from .memory import SUITE as MEMORY
from .nemesis import SUITE as NEMESIS
from .put import SUITE as PUT
from .rust import SUITE as RUST
from .shm import SUITE as SHM
from .small import SUITE as SMALL
from .soak import SUITE as SOAK
from .sql import SUITE as SQL
from .tpch import SUITE as TPCH

#: Every suite, in the order a run runs them.
SUITES: tuple[Suite, ...] = (
    CEILINGS,
    GET,
    PUT,
    MEMORY,
    RUST,
    SMALL,
    BYTES,
    JSON,
    SQL,
    SOAK,
    SHM,
    FUNCTIONS,
    ENGINES,
    TPCH,
    LAKE,
    CLUSTER,
    CLIENTS,
    CONSOLE,
    NEMESIS,
)
#: The suites ``--only`` can choose from, in the order they run.
SUITE_NAMES = tuple(s.name for s in SUITES)
#: The suites a run without ``--only`` runs: all but ``nemesis``, which takes the whole of
#: ``nemesis_seconds`` (30 minutes in full mode) and is run when asked for.
DEFAULT_SUITE_NAMES = tuple(s.name for s in SUITES if s.by_default)
#: The suites by name.
BY_NAME = {s.name: s for s in SUITES}
