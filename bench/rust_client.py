"""The Rust client side: ``quiver bench client``, an arrow-flight client, run as a process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

#: Longest one ``quiver bench`` invocation may take.
TIMEOUT_S = 1800


def run_json_lines(command: list[str]) -> list[dict]:
    """Run ``command`` and return the JSON objects it prints, one a line.

    Raises
    ------
    RuntimeError
        The command failed; the message has its stderr.
    """
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    if result.returncode != 0:
        stderr = result.stderr.strip()[-2000:]
        raise RuntimeError(f"`{' '.join(command)}` exited with {result.returncode}: {stderr}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def measure(
    binary: Path,
    server_uri: str,
    op: str,
    streams: int,
    rows: int,
    batch_rows: int,
    repeat: int,
) -> list[dict]:
    """Run ``quiver bench client`` and return its measurements, one per repetition.

    For ``get`` it first puts one table of ``streams * rows`` records split into ``streams``
    partitions (``bench-rust-get``); for ``put`` it writes ``bench-rust-{i}``.
    """
    return run_json_lines(
        [
            str(binary),
            "bench",
            "client",
            "--server",
            server_uri,
            "--op",
            op,
            "--streams",
            str(streams),
            "--rows",
            str(rows),
            "--batch-rows",
            str(batch_rows),
            "--repeat",
            str(repeat),
        ]
    )


def table_names(op: str, streams: int) -> list[str]:
    """Return the tables a ``quiver bench client`` run leaves on the server."""
    if op == "get":
        return ["bench-rust-get"]
    return [f"bench-rust-{i}" for i in range(streams)]
