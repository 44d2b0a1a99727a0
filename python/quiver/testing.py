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

import contextlib
import json
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow.fs

__all__ = [
    "LISTENING",
    "METRICS",
    "EtcdProcess",
    "S3Response",
    "S3Server",
    "ServerProcess",
    "ServerStartError",
    "find_quiver_binary",
    "find_s3_server_binary",
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
    text = first_line(process, timeout)
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


#: Debian's headless browser and its WebDriver, which the console's browser tests and the
#: bench's console suite drive (python/tests/console_helpers.py, bench/suites/console.py).
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: The flags Chromium runs with in those: headless, as root, in a container.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,860",
)


def first_line(process: subprocess.Popen[bytes], timeout: float) -> str:
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


#: Seconds the S3 server may take to answer its first authenticated request.
S3_START_TIMEOUT_S = 60.0

#: Seconds :meth:`S3Server.stop` waits after SIGTERM, before SIGKILL. ``weed mini``
#: exits within a second; ``weed server``'s filer can wait 15 s more on a flush of its
#: metadata log once its volume server is gone. Objects and the filer's store are
#: written before each request is answered: a kill loses none of them.
S3_STOP_TIMEOUT_S = 3.0

#: The region the S3 server's clients sign for (SeaweedFS accepts any).
S3_REGION = "us-east-1"


def find_s3_server_binary() -> Path:
    """Return the S3 server binary (SeaweedFS's ``weed``) to run.

    It is ``$QUIVER_S3_SERVER_BIN``, else ``bin/weed`` in ``$QUIVER_S3_CACHE`` (by
    default ``~/.cache/quiver/s3``), where ``scripts/install-s3-server.sh`` builds it
    (the path returned may not exist; :meth:`S3Server.start` says so).
    """
    if os.environ.get("QUIVER_S3_SERVER_BIN"):
        return Path(os.environ["QUIVER_S3_SERVER_BIN"])
    cache = os.environ.get("QUIVER_S3_CACHE") or str(Path.home() / ".cache" / "quiver" / "s3")
    return Path(cache) / "bin" / "weed"


@dataclass
class S3Response:
    """What an S3 server answered to :meth:`S3Server.request`.

    Attributes
    ----------
    status : int
        The HTTP status, e.g. 200, 206, 304, 403.
    headers : dict of str to str
        The response's headers, their names in lower case.
    body : bytes
        The response's body (empty for HEAD).
    """

    status: int
    headers: dict[str, str]
    body: bytes


class S3Server:
    """A real S3-compatible server on a loopback address: SeaweedFS's ``weed mini``.

    One process runs SeaweedFS's master, volume server, filer and S3 gateway, each on
    its own HTTP and gRPC port, all bound to ``host`` only, with its data in
    ``data_dir``. Requests are authenticated (AWS Signature V4) against the identities
    of an S3 config file written beside it: an admin with ``access_key`` and
    ``secret_key`` (every action), and, if ``read_only_key`` is given, a second
    identity that may only read and list. :meth:`stop` and :meth:`start` keep its
    ports and data, as a restart of the real service would.

    The binary is :func:`find_s3_server_binary`'s unless ``binary`` is given
    (``scripts/install-s3-server.sh`` builds it).

    >>> s3 = S3Server(Path("/tmp/s3/data"), access_key="ak", secret_key="sk")  # doctest: +SKIP
    >>> s3.start()  # doctest: +SKIP
    >>> s3.create_bucket("tables")  # doctest: +SKIP
    >>> s3.put_object("tables", "a/b.parquet", b"...")  # doctest: +SKIP
    >>> s3.env()["AWS_ENDPOINT_URL"]  # doctest: +SKIP
    'http://127.0.0.1:23456'
    >>> s3.stop()  # doctest: +SKIP
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        access_key: str,
        secret_key: str,
        read_only_key: tuple[str, str] | None = None,
        host: str = "127.0.0.1",
        binary: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.access_key = access_key
        self.secret_key = secret_key
        self.read_only_key = read_only_key
        self.host = host
        self.binary = binary if binary is not None else find_s3_server_binary()
        self.extra_args = tuple(extra_args)
        # Every listener's port, chosen once: a restart binds the same ones. gRPC ports
        # are given too, as weed's default (HTTP port + 10000) may fall in the kernel's
        # ephemeral range.
        self.ports = {
            name: free_port(host)
            for name in (
                "master",
                "master.grpc",
                "volume",
                "volume.grpc",
                "filer",
                "filer.grpc",
                "s3",
                "s3.grpc",
                "admin",
                "admin.grpc",
            )
        }
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.config_path = data_dir.parent / f"{data_dir.name}.s3.json"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def port(self) -> int:
        """The port of the S3 API."""
        return self.ports["s3"]

    @property
    def endpoint(self) -> str:
        """The S3 API's URL, e.g. ``http://127.0.0.1:23456``."""
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """Return the ``AWS_*`` variables that point an S3 client (quiver) at this server.

        The admin's keys, region ``us-east-1``, the endpoint, and ``AWS_ALLOW_HTTP``
        (the endpoint is plain http).
        """
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": S3_REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def alive(self) -> bool:
        """Return whether the server's process is running (paused counts as running)."""
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        """Return what the server wrote so far, over all its starts."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _write_config(self) -> None:
        """Write the S3 config file and master.toml.

        The config file's identities: the admin, and the read-only one if any.
        """
        identities: list[dict[str, object]] = [
            {
                "name": "quiver_admin",
                "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
        if self.read_only_key is not None:
            access, secret = self.read_only_key
            identities.append(
                {
                    "name": "quiver_reader",
                    "credentials": [{"accessKey": access, "secretKey": secret}],
                    "actions": ["Read", "List"],
                }
            )
        self.config_path.write_text(json.dumps({"identities": identities}, indent=2))
        # One volume per new bucket, where SeaweedFS grows seven at once.
        (self.data_dir / "master.toml").write_text("[master.volume_growth]\ncopy_1 = 1\n")

    def command(self) -> list[str]:
        """Return the ``weed mini`` command line that :meth:`start` runs.

        ``weed mini`` is ``weed server`` set up for one machine: a single master that
        leads at once, its volume server the only one (the first writes are not held
        back waiting for others), the filer announced without waiting for peers, a
        quick shutdown.
        """
        p = self.ports
        return [
            str(self.binary),
            # Its log to stderr (log_path), not to files in the temporary directory.
            "-logtostderr",
            # Its master.toml (_write_config), and no other.
            f"-config_dir={self.data_dir}",
            "mini",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-dir={self.data_dir}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master.grpc']}",
            # No anonymous statistics sent to SeaweedFS's telemetry server.
            "-master.telemetry=false",
            # Each bucket is a collection with volumes of its own (one, master.toml):
            # small volumes, and a fixed number of them whatever the free disk space
            # (mini's default, free space / 1 GiB, lasts a few dozen buckets).
            "-master.volumeSizeLimitMB=64",
            "-volume.max=1000",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume.grpc']}",
            # Stop at once (the default waits a second after its last heartbeat).
            "-volume.preStopSeconds=0",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer.grpc']}",
            f"-filer.localSocket={self.data_dir}/filer.sock",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3.grpc']}",
            f"-s3.localSocket={self.data_dir}/s3.sock",
            f"-s3.config={self.config_path}",
            # Nothing but the S3 API: no Iceberg REST catalog, Lance namespace, WebDAV
            # or admin UI (each on a fixed port otherwise).
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            # The admin server runs anyway, for mini's maintenance worker: on ports of
            # its own, and not also on the fixed legacy one.
            f"-admin.port={p['admin']}",
            f"-admin.port.grpc={p['admin.grpc']}",
            "-admin.port.legacy=0",
            *self.extra_args,
        ]

    def start(self, timeout: float = S3_START_TIMEOUT_S, *, writable: bool = True) -> None:
        """Start the server and wait until it serves reads and, by default, writes.

        Readable: it lists buckets for the admin. Writable: its master also assigns
        space for new objects. A restarted master assigns none for 15 s after it
        starts (SeaweedFS's warm-up, three heartbeats of 5 s, while volume servers
        report what they hold): writes made then wait. ``writable=False`` returns as
        soon as the server reads, for tests that need only that.

        Parameters
        ----------
        timeout : float, default 60
            Seconds to wait for the server to be ready.
        writable : bool, default True
            Whether to wait until it takes writes too, not only reads.

        Raises
        ------
        ServerStartError
            No binary, or the server exited or was not ready within ``timeout``
            seconds (it is then stopped); the message holds the end of its log.
        """
        if self.alive():
            raise ServerStartError(f"the S3 server is already running (pid {self.pid})")
        if not self.binary.is_file():
            raise ServerStartError(
                f"S3 server binary (SeaweedFS's weed) not found at {self.binary}: build it "
                "with `bash scripts/install-s3-server.sh` or set QUIVER_S3_SERVER_BIN"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        with open(self.log_path, "ab") as log:
            log.write(f"==> {' '.join(self.command())}\n".encode())
            log.flush()
            # A session of its own: stop() and pause() signal the whole group.
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        self.paused = False
        deadline = time.monotonic() + timeout
        last = "no answer"
        readable = False
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                raise ServerStartError(
                    f"the S3 server exited with {code}; its log ({self.log_path}) ends:\n"
                    f"{self.log()[-4000:]}"
                )
            try:
                if not readable:
                    response = self.request("GET", "/", timeout=1.0)
                    readable = response.status == 200
                    last = f"list buckets: HTTP {response.status} {response.body[:200]!r}"
                if readable and not writable:
                    return
                if readable:
                    status, body = self._master_assign()
                    if status == 200:
                        return
                    last = f"master's /dir/assign: HTTP {status} {body[:200]!r}"
            except OSError as e:
                last = str(e)
            time.sleep(0.1)
        self.stop()
        raise ServerStartError(
            f"the S3 server was not ready within {timeout:g} s (last: {last}); "
            f"its log ({self.log_path}) ends:\n{self.log()[-4000:]}"
        )

    def _master_assign(self) -> tuple[int, bytes]:
        """Ask the master for a file id (what a write does first); return status and body.

        Nothing is written: the id is left unused.
        """
        import http.client

        connection = http.client.HTTPConnection(self.host, self.ports["master"], timeout=1.0)
        try:
            connection.request("GET", "/dir/assign")
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    @property
    def pid(self) -> int:
        """The process id (of the running server)."""
        assert self.process is not None, "the S3 server is not running"
        return self.process.pid

    def _signal_group(self, sig: int) -> None:
        """Send ``sig`` to the server's process group, if any is left."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): it keeps its connections and answers nothing.

        Returns once every thread of the process is stopped (the signal reaches a
        thread running on another core a moment later).
        """
        self._signal_group(signal.SIGSTOP)
        self.paused = True
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not self._all_threads_stopped():
            time.sleep(0.01)

    def _all_threads_stopped(self) -> bool:
        """Return whether every thread of the process is stopped (``T`` in /proc)."""
        try:
            for task in Path(f"/proc/{self.pid}/task").iterdir():
                stat = (task / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                    return False
        except OSError:
            return True  # gone
        return True

    def resume(self) -> None:
        """Let a paused server run again (SIGCONT)."""
        self._signal_group(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = S3_STOP_TIMEOUT_S) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout`` seconds).

        Every process of its group is gone afterwards; ports and data are kept for
        :meth:`start`.
        """
        if self.process is None:
            return
        if self.process.poll() is None:
            self._signal_group(signal.SIGTERM)
            if self.paused:
                self._signal_group(signal.SIGCONT)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.process.wait(timeout=10)
        # Whatever it started in its group, if anything, goes with it.
        self._signal_group(signal.SIGKILL)
        self.process = None
        self.paused = False
        # weed puts a Unix socket beside each gRPC port in /tmp, and removes it only
        # when it has time to shut down.
        for name, port in self.ports.items():
            if name.endswith(".grpc"):
                service = name.removesuffix(".grpc")
                Path(f"/tmp/seaweedfs-{service}-grpc-{port}.sock").unlink(missing_ok=True)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
        credentials: tuple[str, str] | None = None,
        timeout: float = 10.0,
    ) -> S3Response:
        """Send one request signed with AWS Signature V4 and return the answer.

        For what a higher-level client hides: status codes, conditional and ranged
        requests, other credentials.

        Parameters
        ----------
        method : str
            ``GET``, ``HEAD``, ``PUT``, ``POST`` or ``DELETE``.
        path : str
            ``/``, ``/BUCKET`` or ``/BUCKET/KEY`` (path-style; not yet percent-encoded).
        query : mapping, optional
            Query parameters, e.g. ``{"uploads": ""}``.
        headers : mapping, optional
            More headers, signed too (e.g. ``Range``, ``If-None-Match``).
        body : bytes, default b""
            The request's body.
        credentials : (str, str), optional
            Access key and secret key; the admin's by default.
        timeout : float, default 10
            Seconds to wait for the connection and each read.
        """
        import datetime
        import hashlib
        import hmac
        import http.client
        from urllib.parse import quote

        access, secret = credentials or (self.access_key, self.secret_key)
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        scope = f"{now:%Y%m%d}/{S3_REGION}/s3/aws4_request"
        payload = hashlib.sha256(body).hexdigest()
        signed = {
            "host": f"{self.host}:{self.port}",
            "x-amz-content-sha256": payload,
            "x-amz-date": amz_date,
        }
        signed.update({k.lower(): v.strip() for k, v in (headers or {}).items()})
        names = sorted(signed)
        uri = quote(path, safe="/-_.~")
        query_string = "&".join(
            f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
            for k, v in sorted((query or {}).items())
        )
        canonical = "\n".join(
            [
                method,
                uri,
                query_string,
                "".join(f"{name}:{signed[name]}\n" for name in names),
                ";".join(names),
                payload,
            ]
        )
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        key = f"AWS4{secret}".encode()
        for part in (f"{now:%Y%m%d}", S3_REGION, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        signed["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={access}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}"
        )
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            target = f"{uri}?{query_string}" if query_string else uri
            connection.request(method, target, body=body or None, headers=signed)
            response = connection.getresponse()
            data = response.read()
            return S3Response(
                response.status, {k.lower(): v for k, v in response.getheaders()}, data
            )
        finally:
            connection.close()

    def filesystem(self) -> pyarrow.fs.S3FileSystem:
        """Return a pyarrow S3 file system signed in as the admin (it may create buckets)."""
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=S3_REGION,
            scheme="http",
            endpoint_override=f"{self.host}:{self.port}",
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
        )

    def _expect(self, response: S3Response, what: str, *ok: int) -> None:
        """Raise OSError with the server's answer unless its status is one of ``ok``."""
        if response.status not in ok:
            raise OSError(
                f"S3 {what}: HTTP {response.status}: {response.body[:500].decode(errors='replace')}"
            )

    def create_bucket(self, name: str) -> None:
        """Create the bucket ``name`` (CreateBucket; nothing if the admin has it already)."""
        response = self.request("PUT", f"/{name}")
        if response.status == 409 and b"BucketAlreadyOwnedByYou" in response.body:
            return
        self._expect(response, f"CreateBucket {name}", 200)

    def put_object(self, bucket: str, key: str, data: bytes) -> str:
        """Write the object ``key`` of ``bucket`` in one request (PutObject); return its ETag.

        The ETag is the MD5 of ``data`` in quotes, as S3 gives for one PutObject.
        """
        response = self.request("PUT", f"/{bucket}/{key}", body=data, timeout=60.0)
        self._expect(response, f"PutObject {bucket}/{key}", 200)
        return response.headers["etag"]

    def delete_object(self, bucket: str, key: str) -> None:
        """Delete the object ``key`` of ``bucket`` (DeleteObject; nothing if it is absent)."""
        response = self.request("DELETE", f"/{bucket}/{key}")
        self._expect(response, f"DeleteObject {bucket}/{key}", 204, 200)
