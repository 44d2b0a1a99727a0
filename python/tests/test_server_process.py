"""The fixture that runs the server fails loudly instead of skipping."""

from __future__ import annotations

from pathlib import Path

import pytest

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
