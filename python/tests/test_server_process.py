"""The fixture that runs the server fails loudly instead of skipping."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from quiver import testing
from server_process import start_server


def test_missing_binary_fails_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUIVER_BIN", str(tmp_path / "no-such-quiver"))
    with pytest.raises(pytest.fail.Exception, match="quiver server binary not found at"):
        start_server(log_dir=tmp_path)


def test_a_server_that_cannot_start_shows_its_stderr(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="--max-memory") as raised:
        start_server("--max-memory", "lots", log_dir=tmp_path)
    assert "did not print 'quiver listening on <uri>'" in str(raised.value)


def test_the_banner_gives_the_uri_and_stop_returns_the_exit_code(tmp_path: Path) -> None:
    command = ["sh", "-c", "echo 'listening on tcp://127.0.0.1:9'; exec sleep 30"]
    server = testing.start(command, banner="listening on ", name="sh", log_path=tmp_path / "l")
    assert server.uri == "tcp://127.0.0.1:9"
    assert server.alive()
    assert server.stop() == -signal.SIGTERM
    assert not server.killed


def test_a_process_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    command = ["sh", "-c", "trap '' TERM; echo 'up x'; while :; do sleep 1; done"]
    server = testing.start(command, banner="up ", name="sh", log_path=tmp_path / "l")
    assert server.stop(timeout=0.5) == -signal.SIGKILL
    assert server.killed


def test_a_wrong_banner_is_an_error_with_the_output(tmp_path: Path) -> None:
    command = ["sh", "-c", "echo oops >&2; echo 'something else'"]
    with pytest.raises(testing.ServerStartError, match="something else") as raised:
        testing.start(command, banner="listening on ", name="sh", log_path=tmp_path / "l")
    assert "oops" in str(raised.value)
    assert "exit code 0" in str(raised.value)


def test_a_free_port_is_one_no_outgoing_connection_takes() -> None:
    """etcd and restarted nodes bind ports chosen earlier: an outgoing connection's source
    port must never be one of them (CI once failed on etcd's "address already in use")."""
    import socket

    chosen = {testing.free_port(host) for host in ("127.0.0.1", "127.0.0.2") for _ in range(8)}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        sources = set()
        for _ in range(64):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
                sources.add(client.getsockname()[1])
                listener.accept()[0].close()
    assert not chosen & sources
    assert not chosen & set(testing._ephemeral_ports())
    for port in chosen:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
