"""Optional progress bars (tqdm) counting the rows a put or get has moved."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Called with the number of rows just moved.
RowCounter = Callable[[int], None]

_INSTALL_HINT = (
    "progress=True needs tqdm, which is not installed; "
    "install it with: pip install 'quiver-client[progress]'"
)


def ignore_rows(rows: int) -> None:
    """Count nothing: the counter when no progress is shown."""
    del rows


@contextmanager
def row_progress(enabled: bool, *, total: int | None, description: str) -> Iterator[RowCounter]:
    """Yield a thread-safe row counter, drawn as a tqdm bar when ``enabled``.

    Raises
    ------
    ImportError
        ``enabled`` is true and tqdm is not installed.
    """
    if not enabled:
        yield ignore_rows
        return
    try:
        from tqdm.auto import tqdm
    except ImportError as error:
        raise ImportError(_INSTALL_HINT) from error
    lock = threading.Lock()
    with tqdm(total=total, desc=description, unit=" rows", unit_scale=True) as bar:

        def count(rows: int) -> None:
            with lock:
                bar.update(rows)

        yield count
