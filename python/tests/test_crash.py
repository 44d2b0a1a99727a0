"""Crash test: SIGKILL a durable server mid-write, restart it, check every write.

CI runs a few cycles; ``scripts/crash-test.sh`` runs the full test (100 cycles
by default) through this same file, setting ``QUIVER_CRASH_CYCLES``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from crash_harness import crash_cycles
from server_process import Server, start_server

#: Cycles CI runs; scripts/crash-test.sh asks for more.
CI_CYCLES = 3


@pytest.fixture
def killable(tmp_path: Path) -> Iterator[list[Server]]:
    """Servers the test kills itself; any left running are killed at teardown."""
    servers: list[Server] = []
    yield servers
    for server in servers:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_acknowledged_writes_survive_sigkill(
    tmp_path: Path, killable: list[Server], fsync: str
) -> None:
    cycles = int(os.environ.get("QUIVER_CRASH_CYCLES", CI_CYCLES))
    seed = int(os.environ.get("QUIVER_CRASH_SEED", 0))

    def start(*flags: str) -> Server:
        server = start_server(*flags, log_dir=tmp_path)
        killable.append(server)
        return server

    report = crash_cycles(
        start,
        tmp_path / "data",
        cycles=cycles,
        seed=seed,
        extra_flags=("--fsync", fsync),
        log=print,
    )
    print(f"--fsync {fsync}: {report.summary()}")
    assert report.cycles == cycles
    assert report.acked_ops > 0
