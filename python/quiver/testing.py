"""Running a real quiver server as a child process, for tests and benchmarks.

``quiver serve`` prints one line once it listens, ``quiver listening on <uri>``,
with the port it bound (``--listen 127.0.0.1:0`` picks a free one). This module
starts a command, waits for such a banner line and keeps the process, its URI
and its log together; quiver's own test suite and benchmark harness use it.

>>> from pathlib import Path
>>> from quiver.testing import start_quiver
>>> server = start_quiver("--max-memory", "1GiB", log_dir=Path("/tmp"))  # doctest: +SKIP
>>> server.uri  # doctest: +SKIP
'grpc+tcp://127.0.0.1:40123'
>>> server.stop()  # doctest: +SKIP
0
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "LISTENING",
    "METRICS",
    "EtcdProcess",
    "ServerProcess",
    "ServerStartError",
    "find_quiver_binary",
    "free_port",
    "start",
    "start_quiver",
]

#: What ``quiver serve`` prints before its URI once it listens.
LISTENING = "quiver listening on "
#: What ``quiver serve --metrics-listen`` prints on its second line, before the URL.
METRICS = "quiver metrics on "

#: Seconds :func:`start` waits for the banner by default.
START_TIMEOUT_S = 30.0

#: Seconds a process that printed something else than its banner has to exit by itself.
EXIT_GRACE_S = 2.0

#: Seconds :meth:`ServerProcess.stop` waits after its signal by default, before SIGKILL.
STOP_TIMEOUT_S = 20.0


class ServerStartError(RuntimeError):
    """The server did not start: no binary, or it exited or stayed silent instead of
    printing its banner. The message holds what it wrote to stdout and stderr.
    """  # noqa: D205


@dataclass
class ServerProcess:
    """A running server: its name, URI, process and log.

    Attributes
    ----------
    name : str
        A label, e.g. ``"quiver"``.
    uri : str
        Where it listens, e.g. ``grpc+tcp://127.0.0.1:40123``.
    process : subprocess.Popen
        The child process.
    log_path : pathlib.Path
        Where its stderr goes.
    flags : tuple of str
        The flags it was started with (after ``serve --listen ...`` for quiver).
    stop_timeout : float
        Seconds :meth:`stop` waits by default before SIGKILL.
    killed : bool
        Whether :meth:`stop` had to SIGKILL it.
    """

    name: str
    uri: str
    process: subprocess.Popen[bytes]
    log_path: Path
    flags: tuple[str, ...] = field(default_factory=tuple)
    stop_timeout: float = STOP_TIMEOUT_S
    killed: bool = False

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def alive(self) -> bool:
        """Return whether the process is still running."""
        return self.process.poll() is None

    def log(self) -> str:
        """Return what the server wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")

    def memory(self) -> tuple[int, int]:
        """Return the process's resident set size and its peak (VmRSS, VmHWM), in bytes.

        Linux only: read from ``/proc/<pid>/status``.
        """
        rss = hwm = 0
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
        return rss, hwm

    def metrics_url(self) -> str:
        """Read the metrics URL a server started with ``--metrics-listen`` printed.

        It is the line after the banner, e.g. ``http://127.0.0.1:40124/metrics``.
        """
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode().strip()
        if not line.startswith(METRICS):
            raise ServerStartError(f"{self.name} printed {line!r}, not its metrics address")
        return line.removeprefix(METRICS)

    def stop(self, timeout: float | None = None, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` (SIGTERM), wait ``timeout`` seconds, then SIGKILL; return the exit code.

        ``timeout`` is :attr:`stop_timeout` by default. A server that had to be
        killed sets :attr:`killed`.
        """
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                self.killed = True
                self.process.kill()
        code = self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code


def find_quiver_binary(repo: Path | None = None) -> Path:
    """Return the ``quiver`` binary to run.

    It is ``$QUIVER_BIN``, else ``$CARGO_TARGET_DIR/release/quiver``, else
    ``<repo>/target/release/quiver`` when ``repo`` is given, else ``quiver`` on the
    ``PATH`` (the path returned may not exist; :func:`start_quiver` says so).
    """
    if os.environ.get("QUIVER_BIN"):
        return Path(os.environ["QUIVER_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        return Path(target) / "release" / "quiver"
    if repo is not None:
        return repo / "target" / "release" / "quiver"
    return Path(shutil.which("quiver") or "quiver")


def start(
    command: Sequence[str],
    *,
    banner: str,
    name: str,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = START_TIMEOUT_S,
    preexec_fn: Callable[[], object] | None = None,
    flags: Sequence[str] = (),
    stop_timeout: float = STOP_TIMEOUT_S,
) -> ServerProcess:
    """Start ``command`` and wait until its stdout's first line is ``banner`` and a URI.

    Parameters
    ----------
    command : sequence of str
        The program and its arguments.
    banner : str
        What the line starts with, e.g. :data:`LISTENING`; the rest is the URI.
    name : str
        The label of the :class:`ServerProcess`.
    log_path : pathlib.Path
        Where the process's stderr is written (created or truncated).
    env : mapping, optional
        Its environment (by default this process's, without ``QUIVER_*`` settings:
        the server reads its flags from them).
    cwd : pathlib.Path, optional
        Its working directory.
    timeout : float, default 30
        Seconds to wait for the banner.
    preexec_fn : callable, optional
        Run in the child before ``exec`` (:class:`subprocess.Popen`'s argument).
    flags : sequence of str, optional
        Recorded as :attr:`ServerProcess.flags`.
    stop_timeout : float, default 20
        Recorded as :attr:`ServerProcess.stop_timeout`.

    Returns
    -------
    ServerProcess
        The running server.

    Raises
    ------
    ServerStartError
        The process exited, or did not print the banner within ``timeout``; it is
        killed (after 2 s if it printed another line), and the message holds its
        stdout, exit code and the end of its stderr.
    """
    command = [str(part) for part in command]
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            env=dict(env),
            cwd=cwd,
            preexec_fn=preexec_fn,
        )
    server = ServerProcess(name, "", process, log_path, tuple(flags), stop_timeout)
    text = _first_line(process, timeout)
    if not text.startswith(banner):
        try:
            # A server that cannot start says why and exits: give it a moment, so
            # the exit code is its own.
            process.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        raise ServerStartError(
            f"`{' '.join(command)}` did not print '{banner}<uri>' within {timeout:g} s "
            f"(exit code {process.returncode}); stdout: {text!r}; "
            f"stderr:\n{server.log()[-4000:]}"
        )
    server.uri = text[len(banner) :].strip()
    return server


def start_quiver(
    *flags: str,
    log_dir: Path,
    binary: Path | None = None,
    name: str = "quiver",
    timeout: float = START_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], object] | None = None,
    listen: str = "127.0.0.1:0",
) -> ServerProcess:
    """Start ``quiver serve --listen 127.0.0.1:0 FLAGS`` and wait for its URI.

    Parameters
    ----------
    *flags : str
        More flags of ``quiver serve``.
    log_dir : pathlib.Path
        Where a new log file (``quiver-server-*.log``) receives its stderr.
    binary : pathlib.Path, optional
        The binary; :func:`find_quiver_binary` by default.
    name : str, default "quiver"
        The label of the :class:`ServerProcess`.
    timeout : float, default 30
        Seconds to wait for the banner.
    env : mapping, optional
        Its environment, as for :func:`start`; by default this process's without
        ``QUIVER_*`` settings and with ``QUIVER_LOG=info``.
    preexec_fn : callable, optional
        As for :func:`start`.
    listen : str, default "127.0.0.1:0"
        The address to listen on (another loopback address, such as
        ``127.0.0.2:0``, makes a second "host").

    Raises
    ------
    ServerStartError
        The binary does not exist, or the server did not start.
    """
    binary = binary if binary is not None else find_quiver_binary()
    if not binary.is_file():
        raise ServerStartError(
            f"quiver server binary not found at {binary}: build it with "
            "`cargo build --release -p quiver` or set QUIVER_BIN"
        )
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
        env["QUIVER_LOG"] = "info"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_fd, log_name = tempfile.mkstemp(prefix="quiver-server-", suffix=".log", dir=log_dir)
    os.close(log_fd)
    command = [str(binary), "serve", "--listen", listen, *flags]
    return start(
        command,
        banner=LISTENING,
        name=name,
        log_path=Path(log_name),
        env=env,
        timeout=timeout,
        preexec_fn=preexec_fn,
        flags=flags,
    )


def _first_line(process: subprocess.Popen[bytes], timeout: float) -> str:
    """Read ``process``'s stdout up to its first newline, its exit or ``timeout`` seconds.

    Byte by byte: what follows the first line (``quiver serve`` prints its metrics
    address next) stays in the pipe for the caller.
    """
    assert process.stdout is not None
    line = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if selector.select(timeout=min(remaining, 0.5)):
                chunk = os.read(process.stdout.fileno(), 1)
                if not chunk:
                    break
                line += chunk
            elif process.poll() is not None:
                break
    return line.decode(errors="replace").strip()


#: Seconds etcd may take to accept connections.
ETCD_START_TIMEOUT_S = 20.0


#: Where :func:`free_port` looks first, below Linux's ephemeral range (32768 on).
LISTEN_PORTS = range(20000, 32768)

#: Ports :func:`free_port` tries in :data:`LISTEN_PORTS` before it takes the kernel's choice.
FREE_PORT_TRIES = 64


def _ephemeral_ports() -> range:
    """Return the kernel's source ports for outgoing connections.

    Linux's default range if it cannot be read.
    """
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port free on ``host`` now, outside the kernel's ephemeral range.

    A port the kernel picks for a listener comes from the range it also gives outgoing
    connections: between this call and the server's bind, or while a stopped server is
    down before it starts again on its port, any client's connection can take it (etcd
    then exits with "address already in use"). A port below that range is taken only by
    a listener that asked for it. Ports are tried at random in :data:`LISTEN_PORTS`,
    skipping the ephemeral range; if none binds, the kernel chooses.
    """
    import random
    import socket

    ephemeral = _ephemeral_ports()
    candidates = [p for p in LISTEN_PORTS if p not in ephemeral]
    for port in random.sample(candidates, min(FREE_PORT_TRIES, len(candidates))):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EtcdProcess:
    """One etcd member on a loopback address, for a quiver cluster's tests and benchmarks.

    etcd is ``$ETCD_BIN``, else ``etcd`` on the ``PATH`` (Debian's ``etcd-server``).
    :meth:`stop` and :meth:`start` keep its ports and data directory, as a restart of
    the real service would. ``tls``: its client URL is https (give the certificate
    flags in ``extra_args``, e.g. ``--cert-file``, ``--key-file``, ``--trusted-ca-file``,
    ``--client-cert-auth``), and :attr:`url` is ``etcds://``.
    """

    def __init__(
        self,
        data_dir: Path,
        host: str = "127.0.0.1",
        *,
        tls: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.host = host
        self.tls = tls
        self.extra_args = tuple(extra_args)
        self.client_port = free_port(host)
        self.peer_port = free_port(host)
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The ``--cluster`` URL of quiver nodes using this etcd."""
        scheme = "etcds" if self.tls else "etcd"
        return f"{scheme}://{self.host}:{self.client_port}"

    @property
    def client_url(self) -> str:
        """The client URL of etcd (``etcdctl --endpoints``)."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.client_port}"

    def start(self, timeout: float = ETCD_START_TIMEOUT_S) -> None:
        """Start etcd and wait until it accepts connections."""
        import socket

        binary = os.environ.get("ETCD_BIN") or shutil.which("etcd")
        if not binary:
            raise ServerStartError("etcd not found: install Debian's etcd-server or set ETCD_BIN")
        client = self.client_url
        peer = f"http://{self.host}:{self.peer_port}"
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    binary,
                    "--name=quiver",
                    f"--data-dir={self.data_dir}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=quiver={peer}",
                    "--log-level=warn",
                    *self.extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(f"etcd exited:\n{self.log_path.read_text()[-4000:]}")
            try:
                with socket.create_connection((self.host, self.client_port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise ServerStartError(f"etcd did not start in {timeout} s: {self.log_path}")

    def stop(self) -> None:
        """Stop etcd (SIGTERM, then SIGKILL after 10 s)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None
