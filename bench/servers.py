"""Starting, watching and stopping the servers under test, each a separate process on loopback.

Each server is a :class:`quiver.testing.ServerProcess`, started by the helper the
client's tests use too.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from quiver import testing
from quiver.testing import ServerProcess

from .xgbatch import MODEL_ENV

#: The repository root (``bench/`` is one of its folders).
REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: prctl(2) option: the signal a process gets when its parent dies (Linux).
PR_SET_PDEATHSIG = 1
#: Loaded before any fork: the child only calls into it.
_LIBC = ctypes.CDLL(None, use_errno=True)


def quiver_bin() -> Path:
    """Return the quiver binary the suite runs.

    It is ``$QUIVER_BIN``, else ``$CARGO_TARGET_DIR/release/quiver``, else
    ``target/release/quiver`` in the repository.
    """
    return testing.find_quiver_binary(REPO)


def terminate(process: subprocess.Popen, sig: int, timeout: float) -> int:
    """Send ``sig`` to a running ``process``, wait ``timeout`` seconds for it to end, then
    SIGKILL it; return its exit code.
    """  # noqa: D205
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def stop_with_parent() -> None:
    """In the child, before exec: ask the kernel for SIGKILL when the harness dies.

    Every long-lived process the harness starts passes this as ``preexec_fn``.

    A harness killed outright (the kernel's OOM killer, a CI timeout) runs no cleanup;
    without this its servers stay behind holding the tables they were given, gigabytes
    that the next run then misses. SIGKILL, not SIGTERM: the Arrow C++ peer's graceful
    shutdown waited on a DoGet to the dead harness and never ended.
    """
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def start(
    name: str,
    command: list[str],
    banner: str,
    log_dir: Path,
    extra_env: dict[str, str] | None = None,
) -> ServerProcess:
    """Start ``command`` and wait until it prints ``banner`` followed by its URI.

    The process runs in the repository, with it on ``PYTHONPATH`` (the Python peers
    are ``bench.peers`` modules) and ``extra_env`` in its environment, and dies with the
    harness (:func:`stop_with_parent`).

    Raises
    ------
    RuntimeError
        The process exited, or did not print the banner in time
        (:class:`quiver.testing.ServerStartError`).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env.update(extra_env or {})
    return testing.start(
        command,
        banner=banner,
        name=name,
        log_path=log_dir / f"{name}.log",
        env=env,
        cwd=REPO,
        timeout=START_TIMEOUT_S,
        preexec_fn=stop_with_parent,
        stop_timeout=STOP_TIMEOUT_S,
    )


def start_quiver(
    binary: Path,
    log_dir: Path,
    name: str = "quiver",
    extra: Sequence[str] = (),
    max_memory: str = "16GiB",
) -> ServerProcess:
    """Start ``quiver serve`` on a free loopback port.

    ``name`` names its log (``<name>.log``); ``extra`` are more flags (the tpch suite's
    ``--table NAME=PATH``); ``max_memory`` is its ``--max-memory``.
    """
    command = [str(binary), "serve", "--listen", "127.0.0.1:0", "--max-memory", max_memory]
    return start(name, [*command, *extra], "quiver listening on ", log_dir)


def start_arrow_cpp(log_dir: Path) -> ServerProcess:
    """Start the pyarrow (Arrow C++) Flight peer on a free loopback port."""
    command = [sys.executable, "-m", "bench.peers.cpp_flight_server", "--port", "0"]
    return start("arrow-cpp", command, "listening on ", log_dir)


def restart(server: ServerProcess, binary: Path, log_dir: Path) -> ServerProcess:
    """Stop a Flight server and start a fresh one of the same kind (its memory returned).

    The Arrow C++ peer keeps what its allocator once held (gigabytes after the get and put
    suites), which a later suite's client may need.
    """
    server.stop()
    if server.name == "quiver":
        return start_quiver(binary, log_dir)
    if server.name == "arrow-cpp":
        return start_arrow_cpp(log_dir)
    raise ValueError(f"no way to restart {server.name}")


def start_json_socket(log_dir: Path) -> ServerProcess:
    """Start the JSON-over-socket peer on a free loopback port."""
    command = [sys.executable, "-m", "bench.peers.json_socket", "--port", "0"]
    return start("json-socket", command, "listening on ", log_dir)


def start_quiver_functions(
    binary: Path, log_dir: Path, name: str, workers: int, model: Path
) -> ServerProcess:
    """Start ``quiver serve`` with the functions suite's module and ``workers`` workers.

    The workers are this interpreter (``--function-python``), which imports the
    repository's ``quiver`` package, and load the booster at ``model``
    (``$BENCH_XGBATCH_MODEL``, which the server passes on to them).
    """
    command = [
        str(binary), "serve", "--listen", "127.0.0.1:0", "--max-memory", "4GiB",
        "--functions", "bench.peers.quiver_scoring",
        "--function-workers", str(workers),
        "--function-python", sys.executable,
    ]  # fmt: skip
    return start(name, command, "quiver listening on ", log_dir, {MODEL_ENV: str(model)})


def start_quiver_stream(binary: Path, log_dir: Path, max_memory: int) -> ServerProcess:
    """Start ``quiver serve`` for the functions suite's streams: no functions, capped memory.

    ``--max-memory`` is ``max_memory`` bytes; ``--metrics-listen`` on a free port, whose
    URL is the second line the server prints (:meth:`ServerProcess.metrics_url`).
    """
    command = [
        str(binary), "serve", "--listen", "127.0.0.1:0", "--max-memory", str(max_memory),
        "--metrics-listen", "127.0.0.1:0",
    ]  # fmt: skip
    return start("quiver-stream", command, "quiver listening on ", log_dir)


def start_xgbatch_server(log_dir: Path, model: Path) -> ServerProcess:
    """Start the XGBatch-style pyarrow Flight scoring server on a free loopback port."""
    command = [sys.executable, "-m", "bench.peers.xgbatch_server", "--port", "0"]
    return start("pyarrow-flight", [*command, "--model", str(model)], "listening on ", log_dir)


def start_json_scoring(log_dir: Path, model: Path) -> ServerProcess:
    """Start the FastAPI + uvicorn JSON scoring service on a free loopback port."""
    command = [sys.executable, "-m", "bench.peers.json_scoring", "--port", "0"]
    return start("fastapi-json", [*command, "--model", str(model)], "listening on ", log_dir)


def quiver_bench_available(binary: Path) -> bool:
    """Whether the binary has the ``bench`` subcommand (the Rust client and the ceilings)."""
    try:
        result = subprocess.run(
            [str(binary), "bench", "--help"], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def quiver_version(binary: Path) -> str:
    """Return ``quiver --version``, or why it could not be read."""
    try:
        result = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e})"
    return result.stdout.strip()
