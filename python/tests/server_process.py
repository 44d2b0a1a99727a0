"""Running the real ``quiver serve`` binary as a child process."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
LISTENING = "quiver listening on "


def quiver_bin() -> Path:
    """Return the path of the server binary the tests run."""
    if os.environ.get("QUIVER_BIN"):
        return Path(os.environ["QUIVER_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR")
    return (Path(target) if target else REPO / "target") / "release" / "quiver"


@dataclass
class Server:
    """A running ``quiver serve`` process."""

    uri: str
    process: subprocess.Popen[bytes]
    log_path: Path
    flags: tuple[str, ...] = field(default_factory=tuple)

    def log(self) -> str:
        """Return what the server wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM the server and return its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                pytest.fail(
                    f"quiver {' '.join(self.flags)} did not stop within {STOP_TIMEOUT_S} s "
                    f"of SIGTERM; its log:\n{self.log()[-4000:]}",
                    pytrace=False,
                )
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode


def start_server(*flags: str, log_dir: Path) -> Server:
    """Start ``quiver serve --listen 127.0.0.1:0 FLAGS`` and wait for its URI."""
    binary = quiver_bin()
    if not binary.is_file():
        pytest.fail(
            f"quiver server binary not found at {binary}: build it with "
            "`cargo build --release -p quiver` or set QUIVER_BIN",
            pytrace=False,
        )
    # The server reads QUIVER_* settings from the environment: keep the test's flags alone.
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    env["QUIVER_LOG"] = "info"
    log_fd, log_name = tempfile.mkstemp(prefix="quiver-server-", suffix=".log", dir=log_dir)
    command = [str(binary), "serve", "--listen", "127.0.0.1:0", *flags]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_fd, env=env)
    os.close(log_fd)
    server = Server(uri="", process=process, log_path=Path(log_name), flags=flags)
    assert process.stdout is not None
    line = b""
    deadline = time.monotonic() + START_TIMEOUT_S
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or process.poll() is not None:
                break
            if selector.select(timeout=min(remaining, 0.5)):
                chunk = os.read(process.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
    text = line.decode(errors="replace").strip()
    if not text.startswith(LISTENING):
        if process.poll() is None:
            process.kill()
        process.wait()
        pytest.fail(
            f"`{' '.join(command)}` did not print '{LISTENING}<uri>' within "
            f"{START_TIMEOUT_S} s (exit code {process.returncode}); stdout: {text!r}; "
            f"stderr:\n{server.log()[-4000:]}",
            pytrace=False,
        )
    server.uri = text[len(LISTENING) :].strip()
    return server


ServerFactory = Callable[..., Server]
