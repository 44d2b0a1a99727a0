"""The package's Rust core (``quiver._core``), when it is built and wanted.

The core moves table data: DoGet, DoPut and the shared-memory get. pyarrow
stays the type system and makes every other call. Without the core (a source
tree whose extension was never built), or with ``QUIVER_CORE=0`` in the
environment, pyarrow's Flight client moves the data too: the fallback, tested
by running the client's tests both ways (docs/python-core.md).
"""

from __future__ import annotations

import os
from types import ModuleType

#: Set to ``0`` to make new clients move data through pyarrow instead of the core.
ENV_VAR = "QUIVER_CORE"


def core() -> ModuleType | None:
    """Return ``quiver._core``, or ``None`` if it is not built or ``QUIVER_CORE=0``."""
    if os.environ.get(ENV_VAR, "1") == "0":
        return None
    try:
        from . import _core
    except ImportError:
        return None
    return _core


def call_error() -> type[Exception]:
    """Return the exception the core raises for a failed call (a stand-in without it)."""
    try:
        from ._core import CallError
    except ImportError:
        return _NoCore
    return CallError


class _NoCore(Exception):
    """Never raised: stands for ``quiver._core.CallError`` when the core is not built."""
