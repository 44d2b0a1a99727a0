"""Starting, watching and stopping the servers under test, each a separate process on loopback."""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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
    if os.environ.get("QUIVER_BIN"):
        return Path(os.environ["QUIVER_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR")
    return (Path(target) if target else REPO / "target") / "release" / "quiver"


@dataclass
class ServerProcess:
    """A running server: its name, URI and process.

    Attributes
    ----------
    name : str
        The label its measurements carry (``quiver``, ``arrow-cpp``, ``json-socket``).
    uri : str
        Where it listens, e.g. ``grpc+tcp://127.0.0.1:40123``.
    process : subprocess.Popen
        The child process.
    log_path : pathlib.Path
        Where its stderr goes.
    """

    name: str
    uri: str
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def memory(self) -> tuple[int, int]:
        """Return the process's resident set size and its peak (VmRSS, VmHWM), in bytes."""
        rss = hwm = 0
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
        return rss, hwm

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def stop(self) -> int:
        """SIGTERM the server, wait for it (SIGKILL after a while) and return its exit code."""
        terminate(self.process, signal.SIGTERM, STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode


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


def start(name: str, command: list[str], banner: str, log_dir: Path) -> ServerProcess:
    """Start ``command`` and wait until it prints ``banner`` followed by its URI.

    Raises
    ------
    RuntimeError
        The process exited, or did not print the banner in time.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            cwd=REPO,
            preexec_fn=stop_with_parent,
        )
    assert process.stdout is not None
    line = b""
    deadline = time.monotonic() + START_TIMEOUT_S
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n") and process.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if selector.select(timeout=min(remaining, 0.5)):
                chunk = os.read(process.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
    text = line.decode(errors="replace").strip()
    if not text.startswith(banner):
        if process.poll() is None:
            process.kill()
        process.wait()
        log_tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(
            f"`{' '.join(command)}` did not print '{banner}<uri>' (exit code "
            f"{process.returncode}); stdout: {text!r}; stderr:\n{log_tail}"
        )
    return ServerProcess(name, text[len(banner) :].strip(), process, log_path)


def start_quiver(binary: Path, log_dir: Path) -> ServerProcess:
    """Start ``quiver serve`` on a free loopback port."""
    command = [str(binary), "serve", "--listen", "127.0.0.1:0", "--max-memory", "16GiB"]
    return start("quiver", command, "quiver listening on ", log_dir)


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
