"""The client as a user installs it: the wheel, into a fresh venv, against a real server.

``scripts/test.sh`` builds the wheel once (maturin, abi3) and names it in
``$QUIVER_WHEEL``; the venv these tests run in has that wheel installed, and this file
checks both that and a venv of its own with nothing but the wheel and what it requires.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import quiver

WHEEL = os.environ.get("QUIVER_WHEEL")

needs_wheel = pytest.mark.skipif(
    not WHEEL and not os.environ.get("CI"),
    reason="QUIVER_WHEEL not set: scripts/test.sh builds the wheel and sets it",
)


def wheel_path() -> Path:
    assert WHEEL, "QUIVER_WHEEL is not set: scripts/test.sh builds the wheel and names it"
    path = Path(WHEEL)
    assert path.is_file(), path
    return path


@needs_wheel
def test_the_wheel_is_abi3_and_holds_the_rust_core_and_the_typing_marker() -> None:
    path = wheel_path()
    # One wheel for every CPython >= 3.10: the abi3 tag, cp310 as the floor.
    assert "-cp310-abi3-" in path.name, path.name
    names = zipfile.ZipFile(path).namelist()
    assert any(n.startswith("quiver/_core.") and n.endswith(".so") for n in names), names
    assert "quiver/py.typed" in names
    assert "quiver/client.py" in names


@needs_wheel
def test_the_tests_import_the_installed_wheel_not_the_source_tree() -> None:
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert Path(quiver.__file__).resolve().is_relative_to(site_packages), quiver.__file__
    from quiver import _core

    assert Path(_core.__file__).resolve().is_relative_to(site_packages), _core.__file__


@needs_wheel
def test_the_wheel_installs_into_a_fresh_venv_and_its_client_uses_the_rust_core(
    tmp_path: Path, uri: str
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # The wheel and what it requires (pyarrow), from the package index pip is set up for.
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", WHEEL],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    script = f"""
import pyarrow as pa, quiver
with quiver.connect({uri!r}) as client:
    assert client.data_plane.core is not None, "the Rust core is not in use"
    client.put("from_wheel", pa.table({{"x": list(range(1000))}}))
    table = client.get("from_wheel")
    assert table.column("x").to_pylist() == list(range(1000))
print(quiver.__file__)
"""
    # Run from tmp_path, so no source tree is on the path by accident.
    run = subprocess.run(
        [str(python), "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QUIVER_CORE")},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert str(venv) in run.stdout, run.stdout
