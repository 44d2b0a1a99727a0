"""Counting a server's syscalls during one transfer: perf's syscall tracepoints, else strace.

Used only in untimed passes of their own (strace stops the process at every syscall; perf's
counting costs little but something). The counts are the server process's, every thread:

- writes: ``write``, ``writev``, ``sendmsg``, ``sendto`` (what issue 67 is about: an h2
  server's one ``writev`` per 16 KiB frame);
- reads: ``read``, ``readv``, ``recvmsg``, ``recvfrom``.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WRITES = ("write", "writev", "sendmsg", "sendto")
READS = ("read", "readv", "recvmsg", "recvfrom")
#: How long a counter is given to attach before the transfer starts.
ATTACH_S = 0.5
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Counts:
    """A server's write-side and read-side syscalls during a transfer, and who counted."""

    writes: int
    reads: int
    tool: str


def _perf_works() -> bool:
    perf = shutil.which("perf")
    if perf is None:
        return False
    try:
        done = subprocess.run(
            [perf, "stat", "-x,", "-e", "syscalls:sys_enter_writev", "true"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and "syscalls:sys_enter_writev" in done.stderr


def tool() -> str | None:
    """Return the counter this machine has (``perf`` or ``strace``), or ``None``.

    strace is installed from Debian's packages when it is missing and apt-get can
    (idempotent, as root).
    """
    if _perf_works():
        return "perf"
    if shutil.which("strace") is None and shutil.which("apt-get") is not None:
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "strace"],
            capture_output=True,
            timeout=600,
            check=False,
        )
    return "strace" if shutil.which("strace") else None


def _parse_perf(text: str) -> dict[str, int]:
    found = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) >= 3 and fields[2].startswith("syscalls:sys_enter_"):
            name = fields[2].removeprefix("syscalls:sys_enter_")
            found[name] = int(fields[0]) if fields[0].isdigit() else 0
    return found


_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def _parse_strace(text: str) -> dict[str, int]:
    found = {}
    for line in text.splitlines():
        match = _STRACE_ROW.match(line)
        if match:
            found[match.group(2)] = int(match.group(1))
    return found


def count(pid: int, transfer: Callable[[], object], which: str) -> Counts:
    """Count the syscalls of process ``pid`` while ``transfer()`` runs, with ``which``."""
    names = (*WRITES, *READS)
    with tempfile.TemporaryDirectory(prefix="quiver-syscalls-") as tmp:
        out = Path(tmp) / "counts.txt"
        if which == "perf":
            events = ",".join(f"syscalls:sys_enter_{n}" for n in names)
            command = ["perf", "stat", "-x,", "-o", str(out), "-e", events, "-p", str(pid)]
        else:
            command = ["strace", "-f", "-c", "-o", str(out), "-e", f"trace={','.join(names)}"]
            command += ["-p", str(pid)]
        counter = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            time.sleep(ATTACH_S)
            if counter.poll() is not None:
                raise RuntimeError(f"{which} exited at once: {counter.stderr.read()!r}")
            transfer()
        finally:
            if counter.poll() is None:
                counter.send_signal(signal.SIGINT)
            try:
                counter.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                counter.kill()
                counter.wait()
        text = out.read_text() if out.exists() else ""
    found = _parse_perf(text) if which == "perf" else _parse_strace(text)
    if not found:
        raise RuntimeError(f"{which} counted nothing: {text[-300:]!r}")
    return Counts(sum(found.get(n, 0) for n in WRITES), sum(found.get(n, 0) for n in READS), which)
