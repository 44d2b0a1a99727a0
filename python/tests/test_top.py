"""``quiver top`` against a live server: in a real terminal (tmux), and ``--once``.

tmux runs ``quiver top`` in a pane of a known size (terminal.py); the test reads the
screen while RPCs run, then quits it with Ctrl-C as a user would.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pyarrow as pa

import quiver
from quiver.testing import find_quiver_binary
from server_process import REPO, Server, ServerFactory
from terminal import SCREEN_TIMEOUT_S, Pane


def busy_server(start_quiver: ServerFactory) -> tuple[Server, str]:
    server = start_quiver("--metrics-listen", "127.0.0.1:0")
    url = server.metrics_url()
    with quiver.connect(server.uri, transport="grpc") as client:
        client.put("trips", pa.table({"x": list(range(1000))}))
    return server, url


def test_top_in_a_terminal_shows_the_server_live_and_quits_on_ctrl_c(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    server, url = busy_server(start_quiver)
    binary = find_quiver_binary(REPO)
    with Pane(f"'{binary}' top --metrics {url} --interval 0.5", tmp_path) as pane:
        with quiver.connect(server.uri, transport="grpc") as client:
            deadline = time.monotonic() + SCREEN_TIMEOUT_S
            shown = ""
            # Gets go on while top redraws: the screen must show them.
            for _ in range(400):
                client.get("trips")
                shown = pane.screen()
                if "DoGet" in shown and "tables 1" in shown:
                    break
                assert time.monotonic() < deadline, f"top never showed the DoGets:\n{shown}"
                time.sleep(0.05)
        assert "quiver top" in shown and url in shown, shown
        assert "rows 1000" in shown, shown
        assert "RPC (slowest)" in shown and "Ctrl-C to quit" in shown, shown
        row = next(line for line in shown.splitlines() if line.startswith("DoGet"))
        assert float(row.split()[1]) > 0, row  # calls/s in the last interval
        pane.send("C-c")
        assert pane.exit_code() == 0


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
