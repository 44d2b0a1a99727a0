"""The servers quiver is compared against, each run as a separate process."""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Callable


def arguments(description: str) -> argparse.ArgumentParser:
    """Return a peer's command line: ``--port`` on 127.0.0.1, more to add."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    return parser


def serve(listening: str, shutdown: Callable[[], None]) -> int:
    """Print ``listening``, serve until SIGTERM or SIGINT, then call ``shutdown``.

    ``listening`` is the line the peer's starter waits for. The peer serves in threads of
    its own (a ``FlightServerBase`` does; a socket server is started in one before).
    """
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(listening, flush=True)
    while not stop.wait(0.5):
        pass
    shutdown()
    return 0
