"""``quiver top`` against a live server: in a real terminal (tmux), and ``--once``.

tmux runs ``quiver top`` in a pane of a known size; the test reads the screen
with ``capture-pane`` while RPCs run, then quits it with Ctrl-C as a user would.
``scripts/install-os-tools.sh`` installs tmux when it is missing; without it the
terminal test skips, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import quiver
from quiver.testing import find_quiver_binary
from server_process import REPO, Server, ServerFactory

#: Every wait on the terminal is bounded.
SCREEN_TIMEOUT_S = 20.0


def busy_server(start_quiver: ServerFactory) -> tuple[Server, str]:
    server = start_quiver("--metrics-listen", "127.0.0.1:0")
    url = server.metrics_url()
    with quiver.connect(server.uri, transport="grpc") as client:
        client.put("trips", pa.table({"x": list(range(1000))}))
    return server, url


def tmux() -> str:
    found = shutil.which("tmux")
    if found is None:
        ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
        message = "tmux is not installed (scripts/install-os-tools.sh installs it)"
        if ci:
            pytest.fail(message)
        pytest.skip(message)
    return found


def test_top_in_a_terminal_shows_the_server_live_and_quits_on_ctrl_c(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    tmux_bin = tmux()
    server, url = busy_server(start_quiver)
    session = f"quiver-top-{uuid.uuid4().hex[:8]}"
    exit_file = tmp_path / "exit"
    binary = find_quiver_binary(REPO)
    # The pane's shell records top's exit code, then the pane closes. The code is
    # written to a side file and renamed, so the test never reads a half-written one.
    command = (
        f"'{binary}' top --metrics {url} --interval 0.5; "
        f"echo $? > '{exit_file}.tmp' && mv '{exit_file}.tmp' '{exit_file}'"
    )
    subprocess.run(
        [tmux_bin, "new-session", "-d", "-s", session, "-x", "120", "-y", "30", command],
        check=True,
        timeout=10,
    )

    def screen() -> str:
        return subprocess.run(
            [tmux_bin, "capture-pane", "-p", "-t", session],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout

    try:
        with quiver.connect(server.uri, transport="grpc") as client:
            deadline = time.monotonic() + SCREEN_TIMEOUT_S
            shown = ""
            # Gets go on while top redraws: the screen must show them.
            for _ in range(400):
                client.get("trips")
                shown = screen()
                if "DoGet" in shown and "tables 1" in shown:
                    break
                assert time.monotonic() < deadline, f"top never showed the DoGets:\n{shown}"
                time.sleep(0.05)
        assert "quiver top" in shown and url in shown, shown
        assert "rows 1000" in shown, shown
        assert "RPC (slowest)" in shown and "Ctrl-C to quit" in shown, shown
        row = next(line for line in shown.splitlines() if line.startswith("DoGet"))
        assert float(row.split()[1]) > 0, row  # calls/s in the last interval
        subprocess.run([tmux_bin, "send-keys", "-t", session, "C-c"], check=True, timeout=10)
        deadline = time.monotonic() + SCREEN_TIMEOUT_S
        while not exit_file.exists():
            assert time.monotonic() < deadline, f"top did not quit on Ctrl-C:\n{screen()}"
            time.sleep(0.05)
        assert exit_file.read_text().strip() == "0"
    finally:
        subprocess.run([tmux_bin, "kill-session", "-t", session], capture_output=True, timeout=10)


def test_top_once_prints_one_view(start_quiver: ServerFactory) -> None:
    _, url = busy_server(start_quiver)
    out = subprocess.run(
        [str(find_quiver_binary(REPO)), "top", "--metrics", url, "--once", "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert out.startswith(f"quiver top  {url}"), out
    assert "tables 1  rows 1000" in out, out
    assert "DoPut" in out, out
    assert "\x1b" not in out, "--once writes no terminal escapes"


def test_top_says_when_it_cannot_read_the_metrics(tmp_path: Path) -> None:
    run = subprocess.run(
        [str(find_quiver_binary(REPO)), "top", "--metrics", "http://127.0.0.1:9/metrics", "--once"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode != 0
    assert "error:" in run.stderr and "refused" in run.stderr.lower(), run.stderr
