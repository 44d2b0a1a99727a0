"""A real etcd and real quiver nodes on loopback, for the cluster's tests.

etcd is Debian's ``etcd-server`` (``$ETCD_BIN``, else ``etcd`` on the PATH; the test
command installs it). It listens on 127.0.0.1 with a temporary data directory, and can be
stopped and started again on the same port and data. Nodes listen on 127.0.0.1, 127.0.0.2
and 127.0.0.3, each its own ``quiver serve --cluster`` process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from server_process import Server, quiver_bin, start_server

T = TypeVar("T")

ETCD_START_TIMEOUT_S = 20.0
#: A node's lease in the tests: a lost node is noticed within about this many seconds.
LEASE_TTL_S = 2


def etcd_binary() -> str:
    found = os.environ.get("ETCD_BIN") or shutil.which("etcd")
    if not found:
        pytest.fail(
            "etcd not found: install Debian's etcd-server (scripts/test.sh does) or set ETCD_BIN",
            pytrace=False,
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Etcd:
    """One etcd member on loopback; ``stop`` and ``start`` keep its port and data."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.client_port = free_port()
        self.peer_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / "etcd.log"

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    etcd_binary(),
                    "--name=quiver-test",
                    f"--data-dir={self.data_dir}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=quiver-test={peer}",
                    "--log-level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + ETCD_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"etcd exited:\n{self.log_path.read_text()}", pytrace=False)
            try:
                with socket.create_connection(("127.0.0.1", self.client_port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.1)
        pytest.fail(f"etcd did not start:\n{self.log_path.read_text()}", pytrace=False)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


class Cluster:
    """quiver nodes n1, n2, n3 on 127.0.0.1, .2, .3 over one etcd."""

    def __init__(self, etcd: Etcd, tmp_path: Path, replicas: int = 2) -> None:
        self.etcd = etcd
        self.tmp_path = tmp_path
        self.replicas = replicas
        self.nodes: dict[str, Server] = {}
        self.ports: dict[str, int] = {}

    def start(self, node_id: str, *flags: str, data_dir: bool = False) -> Server:
        """Start node ``node_id`` (n1 on 127.0.0.1, n2 on .2, ...), on its port of before."""
        host = f"127.0.0.{int(node_id[1:])}"
        port = self.ports.setdefault(node_id, free_port(host))
        extra = ["--data-dir", str(self.tmp_path / f"{node_id}-data")] if data_dir else []
        server = start_server(
            "--cluster",
            self.etcd.url,
            "--node-id",
            node_id,
            "--replicas",
            str(self.replicas),
            "--lease-ttl",
            str(LEASE_TTL_S),
            "--shm-socket",
            "off",
            *extra,
            *flags,
            log_dir=self.tmp_path / node_id,
            listen=f"{host}:{port}",
        )
        self.nodes[node_id] = server
        return server

    def uri(self, node_id: str) -> str:
        return self.nodes[node_id].uri

    def kill(self, node_id: str) -> None:
        """SIGKILL a node: no clean leave, its lease runs out."""
        server = self.nodes[node_id]
        server.process.kill()
        server.process.wait(timeout=10)

    def status(self) -> dict[str, object]:
        result = subprocess.run(
            [
                str(quiver_bin()),
                "cluster",
                "status",
                "--cluster",
                self.etcd.url,
                "--replicas",
                str(self.replicas),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            env={k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")},
        )
        assert result.returncode == 0, result.stderr
        status: dict[str, object] = json.loads(result.stdout)
        return status

    def stop_all(self) -> list[str]:
        """Stop the live nodes; return the logs of those that did not exit with 0."""
        failures = []
        for node_id, server in self.nodes.items():
            if server.alive():
                code = server.stop()
                if code != 0:
                    failures.append(f"{node_id} exited with {code}:\n{server.log()}")
        return failures


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll ``probe`` every 0.2 s until it returns a truthy value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})", pytrace=False)
