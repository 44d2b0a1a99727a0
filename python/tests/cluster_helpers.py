"""A real etcd and real quiver nodes on loopback, for the cluster's tests.

etcd is Debian's ``etcd-server`` (``$ETCD_BIN``, else ``etcd`` on the PATH; the test
command installs it). It listens on 127.0.0.1 with a temporary data directory, and can be
stopped and started again on the same port and data. Nodes listen on 127.0.0.1, 127.0.0.2
and 127.0.0.3, each its own ``quiver serve --cluster`` process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from quiver import testing
from server_process import Server, quiver_bin, start_server

T = TypeVar("T")

#: The nodes of the ``cluster`` fixture (conftest.py), on 127.0.0.1, .2 and .3.
NODES = ("n1", "n2", "n3")

#: A node's lease in the tests: a lost node is noticed within about this many seconds.
LEASE_TTL_S = 2


class Etcd(testing.EtcdProcess):
    """etcd on 127.0.0.1 for the tests: a start failure fails the test."""

    def start(self, timeout: float = testing.ETCD_START_TIMEOUT_S) -> None:
        try:
            super().start(timeout)
        except testing.ServerStartError as error:
            pytest.fail(str(error), pytrace=False)


class Cluster:
    """quiver nodes n1, n2, n3 on 127.0.0.1, .2, .3 over one etcd."""

    def __init__(
        self,
        etcd: Etcd,
        tmp_path: Path,
        replicas: int = 2,
        etcd_flags: tuple[str, ...] = (),
        lease_ttl: int = LEASE_TTL_S,
    ) -> None:
        """``etcd_flags``: how every node and ``quiver cluster status`` reach etcd
        (``--etcd-ca``, ``--etcd-user``, ...)."""
        self.etcd = etcd
        self.tmp_path = tmp_path
        self.replicas = replicas
        self.lease_ttl = lease_ttl
        self.etcd_flags = etcd_flags
        self.nodes: dict[str, Server] = {}
        self.ports: dict[str, int] = {}
        self._shared_bin: Path | None = None

    def start(
        self,
        node_id: str,
        *flags: str,
        data_dir: bool = False,
        uid: int | None = None,
        shm: bool = False,
    ) -> Server:
        """Start node ``node_id`` (n1 on 127.0.0.1, n2 on .2, ...), on its port of before.

        ``uid``: run it as that user (and group), so that firewall rules can single out
        its packets (iptables' owner match). ``shm``: with its shared-memory socket on,
        in the test's directory (else off).
        """
        host = f"127.0.0.{int(node_id[1:])}"
        port = self.ports.setdefault(node_id, testing.free_port(host))
        extra = ["--data-dir", str(self.tmp_path / f"{node_id}-data")] if data_dir else []
        socket = str(self.tmp_path / f"{node_id}.sock") if shm else "off"
        flags = (
            "--cluster",
            self.etcd.url,
            *self.etcd_flags,
            "--node-id",
            node_id,
            "--replicas",
            str(self.replicas),
            "--lease-ttl",
            str(self.lease_ttl),
            "--shm-socket",
            socket,
            *extra,
            *flags,
        )
        log_dir = self.tmp_path / node_id
        if uid is None:
            server = start_server(*flags, log_dir=log_dir, listen=f"{host}:{port}")
        else:
            log_dir.mkdir(parents=True, exist_ok=True)

            def drop_privileges() -> None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)

            started = testing.start_quiver(
                *flags,
                log_dir=log_dir,
                binary=self._binary_for_anyone(),
                preexec_fn=drop_privileges,
                listen=f"{host}:{port}",
            )
            fields = {f.name: getattr(started, f.name) for f in dataclasses.fields(started)}
            server = Server(**fields)
        self.nodes[node_id] = server
        return server

    def _binary_for_anyone(self) -> Path:
        """The quiver binary at a path every user may execute (the build may be under /root)."""
        if self._shared_bin is None:
            directory = Path(tempfile.mkdtemp(prefix="quiver-bin-"))
            directory.chmod(0o755)
            shared = directory / "quiver"
            try:
                os.link(quiver_bin(), shared)
            except OSError:
                shutil.copy2(quiver_bin(), shared)
            shared.chmod(0o755)
            self._shared_bin = shared
        return self._shared_bin

    def uri(self, node_id: str) -> str:
        return self.nodes[node_id].uri

    def kill(self, node_id: str) -> None:
        """SIGKILL a node: no clean leave, its lease runs out."""
        server = self.nodes[node_id]
        server.process.kill()
        server.process.wait(timeout=10)

    def pause(self, node_id: str) -> None:
        """SIGSTOP a node: it holds its connections and answers nothing."""
        self.nodes[node_id].process.send_signal(signal.SIGSTOP)

    def resume(self, node_id: str) -> None:
        """SIGCONT a paused node."""
        self.nodes[node_id].process.send_signal(signal.SIGCONT)

    def status(self) -> dict[str, object]:
        result = subprocess.run(
            [
                str(quiver_bin()),
                "cluster",
                "status",
                "--cluster",
                self.etcd.url,
                *self.etcd_flags,
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
        if self._shared_bin is not None:
            shutil.rmtree(self._shared_bin.parent, ignore_errors=True)
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
