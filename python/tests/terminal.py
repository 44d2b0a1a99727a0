"""A program in a real terminal: a tmux pane of a known size, read with ``capture-pane``.

``scripts/install-os-tools.sh`` installs tmux when it is missing; without it the tests
that need a terminal skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

#: Every wait on the terminal is bounded.
SCREEN_TIMEOUT_S = 20.0


def tmux() -> str:
    found = shutil.which("tmux")
    if found is None:
        ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
        message = "tmux is not installed (scripts/install-os-tools.sh installs it)"
        if ci:
            pytest.fail(message)
        pytest.skip(message)
    return found


class Pane:
    """``command`` (a shell command line) running in a tmux pane of ``width`` x
    ``height``. Its exit code is written to a side file when it ends, renamed into
    place so that it is never read half-written; the pane then closes."""

    def __init__(self, command: str, directory: Path, width: int = 120, height: int = 30) -> None:
        self.tmux = tmux()
        self.session = f"quiver-{uuid.uuid4().hex[:8]}"
        self.exit_file = directory / f"{self.session}.exit"
        line = (
            f"{command}; echo $? > '{self.exit_file}.tmp' && "
            f"mv '{self.exit_file}.tmp' '{self.exit_file}'"
        )
        subprocess.run(
            [
                self.tmux,
                "new-session",
                "-d",
                "-s",
                self.session,
                "-x",
                str(width),
                "-y",
                str(height),
                line,
            ],
            check=True,
            timeout=10,
        )

    def screen(self) -> str:
        return subprocess.run(
            [self.tmux, "capture-pane", "-p", "-t", self.session],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout

    def send(self, *keys: str) -> None:
        """tmux ``send-keys``: text, or key names as ``Enter`` and ``C-c``."""
        subprocess.run([self.tmux, "send-keys", "-t", self.session, *keys], check=True, timeout=10)

    def type(self, line: str) -> None:
        """Types ``line`` literally, then Enter. (A ``;`` goes as its byte: tmux takes an
        argument ending in one for the end of its own command.)"""
        for index, piece in enumerate(line.split(";")):
            if index:
                self.send("-H", "3b")
            if piece:
                self.send("-l", piece)
        self.send("Enter")

    def wait_for(self, text: str, count: int = 1) -> str:
        """The screen once ``text`` shows ``count`` times on it."""
        deadline = time.monotonic() + SCREEN_TIMEOUT_S
        while True:
            shown = self.screen()
            if shown.count(text) >= count:
                return shown
            assert time.monotonic() < deadline, f"never showed {text!r}:\n{shown}"
            time.sleep(0.05)

    def exit_code(self) -> int:
        """Waits for the program to end; its exit code."""
        deadline = time.monotonic() + SCREEN_TIMEOUT_S
        while not self.exit_file.exists():
            assert time.monotonic() < deadline, f"did not end:\n{self.screen()}"
            time.sleep(0.05)
        return int(self.exit_file.read_text().strip())

    def close(self) -> None:
        subprocess.run(
            [self.tmux, "kill-session", "-t", self.session], capture_output=True, timeout=10
        )

    def __enter__(self) -> Pane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
