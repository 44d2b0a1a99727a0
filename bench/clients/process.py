"""A client process of the clients suite: its requests and answers, one JSON line each."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

from .. import servers

#: Longest a client may take to say it is ready (a JVM's start).
READY_TIMEOUT_S = 120.0
#: Longest one request may take (a 1 GiB put by the slowest client, with room).
CALL_TIMEOUT_S = 900.0


class ClientError(RuntimeError):
    """A client answered with an error, or died, or took too long."""


class ClientProcess:
    """A client (``bench/clients/*``) in a process of its own, dying with the harness.

    Parameters
    ----------
    name : str
        The client (``go``, ``java``, ``pyarrow``, ``adbc``): its log is ``name.log``.
    command : list of str
        What runs it.
    log_dir : pathlib.Path
        Where its stderr goes.
    """

    def __init__(self, name: str, command: list[str], log_dir: Path) -> None:
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(servers.REPO), str(servers.REPO / "python"), env.get("PYTHONPATH")])
        )
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=servers.REPO,
                env=env,
                preexec_fn=servers.stop_with_parent,
            )
        self._buffer = b""
        try:
            ready = self._line(READY_TIMEOUT_S)
            if not json.loads(ready).get("ready"):
                raise ClientError(f"{name}: unexpected first line {ready!r}")
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        """The client's process id."""
        return self.process.pid

    def _line(self, timeout: float) -> str:
        """Return the next line the client writes, waiting at most ``timeout`` seconds."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClientError(f"{self.name}: no answer in {timeout:.0f} s ({self.log_path})")
            readable, _, _ = select.select([fd], [], [], min(left, 1.0))
            if readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    code = self.process.poll()
                    raise ClientError(f"{self.name} exited (code {code}); its log: {self.log_path}")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def call(self, request: dict[str, Any], timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        """Send one request and return its answer (an error answer raises)."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError as e:
            raise ClientError(f"{self.name} is gone; its log: {self.log_path}") from e
        answer = json.loads(self._line(timeout))
        if "error" in answer:
            raise ClientError(f"{self.name} {request.get('op')}: {answer['error']}")
        return answer

    def close(self) -> None:
        """Ask the client to quit; kill it if it does not within seconds."""
        if self.process.poll() is None and self.process.stdin is not None:
            try:
                self.process.stdin.write(b'{"op": "quit"}\n')
                self.process.stdin.close()
            except OSError:
                pass
        servers.terminate(self.process, 15, 10.0)
        if self.process.stdout is not None:
            self.process.stdout.close()
