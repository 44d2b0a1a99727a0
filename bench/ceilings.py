"""The ceilings the Flight numbers are read against: loopback TCP and memory copy bandwidth."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from quiver import testing

from . import servers
from .rust_client import run_json_lines


def quiver_tcp(binary: Path, seconds: float) -> dict:
    """Raw loopback TCP with 1 MiB writes (``quiver bench tcp``)."""
    lines = run_json_lines([str(binary), "bench", "tcp", "--seconds", str(seconds)])
    return next(line for line in lines if line.get("ceiling") == "tcp")


def quiver_memcpy(binary: Path, nbytes: int) -> list[dict]:
    """Copy bandwidth into fresh and into warm pages (``quiver bench memcpy``)."""
    return run_json_lines([str(binary), "bench", "memcpy", "--bytes", str(nbytes)])


def iperf3_available() -> bool:
    """Whether ``iperf3`` is installed."""
    return shutil.which("iperf3") is not None


def iperf3_tcp(seconds: float) -> dict:
    """Loopback TCP measured by iperf3 (``-l 1M``), as in the paper's Figure 5.

    Returns
    -------
    dict
        ``{"ceiling": "iperf3", "bytes", "seconds", "gbps"}`` as the receiver counted them.

    Raises
    ------
    RuntimeError
        iperf3 failed.
    """
    port = testing.free_port()
    server = subprocess.Popen(
        # Not one-off (-1): a client attempt made before the server listens would
        # use up its one session; the server is terminated below instead.
        ["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=servers.stop_with_parent,
    )
    client = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-J", "-l", "1M", "-t", str(seconds)]
    try:
        deadline = time.monotonic() + 10
        while True:
            result = subprocess.run(
                client, capture_output=True, text=True, timeout=seconds + 60, check=False
            )
            # iperf3 -J can exit with 0 and an "error" in its JSON when the connection is
            # refused: that is a retry too.
            refused = "unable to connect" in result.stdout
            if result.returncode == 0 and not refused:
                break
            if time.monotonic() > deadline or server.poll() is not None:
                break
            time.sleep(0.1)  # the server is not listening yet
        if result.returncode != 0:
            raise RuntimeError(f"iperf3 failed: {result.stdout[-1000:]}{result.stderr[-1000:]}")
        report = json.loads(result.stdout)
        received = report.get("end", {}).get("sum_received")
        if received is None:
            raise RuntimeError(
                f"iperf3 reported no result: {report.get('error', result.stdout[-500:])}"
            )
        nbytes, secs = int(received["bytes"]), float(received["seconds"])
        return {"ceiling": "iperf3", "bytes": nbytes, "seconds": secs, "gbps": nbytes / secs / 1e9}
    finally:
        if server.poll() is None:
            server.terminate()
        server.wait()
