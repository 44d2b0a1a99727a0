"""Running the real ``quiver serve`` binary as a child process (:mod:`quiver.testing`).

The tests fail, never skip, when the server cannot start: the message names the
binary, or holds what the server printed.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from quiver import testing

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
LISTENING = testing.LISTENING


class Server(testing.ServerProcess):
    """A running ``quiver serve`` process whose :meth:`stop` fails the test if it hangs."""

    def stop(self, timeout: float | None = None, sig: int = signal.SIGTERM) -> int:
        """SIGTERM the server and return its exit code; fail if it did not stop in time."""
        code = super().stop(timeout, sig)
        if self.killed:
            pytest.fail(
                f"quiver {' '.join(self.flags)} did not stop within {self.stop_timeout} s "
                f"of SIGTERM; its log:\n{self.log()[-4000:]}",
                pytrace=False,
            )
        return code


def quiver_bin() -> Path:
    """Return the path of the server binary the tests run."""
    return testing.find_quiver_binary(REPO)


def start_server(
    *flags: str, log_dir: Path, listen: str = "127.0.0.1:0", env: Mapping[str, str] | None = None
) -> Server:
    """Start ``quiver serve --listen LISTEN FLAGS`` and wait for its URI; ``env`` is added
    to the environment :func:`quiver.testing.start_quiver` gives it."""
    environment = None
    if env is not None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
        environment["QUIVER_LOG"] = "info"
        environment.update(env)
    try:
        started = testing.start_quiver(
            *flags,
            log_dir=log_dir,
            binary=quiver_bin(),
            timeout=START_TIMEOUT_S,
            listen=listen,
            env=environment,
        )
    except testing.ServerStartError as error:
        pytest.fail(str(error), pytrace=False)
    started.stop_timeout = STOP_TIMEOUT_S
    return Server(**{f.name: getattr(started, f.name) for f in dataclasses.fields(started)})


ServerFactory = Callable[..., Server]
