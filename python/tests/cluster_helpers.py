"""A real etcd and real quiver nodes on loopback, for the cluster's tests.

etcd is Debian's ``etcd-server`` (``$ETCD_BIN``, else ``etcd`` on the PATH; the test
command installs it). It listens on 127.0.0.1 with a temporary data directory, and can be
stopped and started again on the same port and data. Nodes listen on 127.0.0.1, 127.0.0.2
and 127.0.0.3, each its own ``quiver serve --cluster`` process.

``QUIVER_TEST_SECURE_CLUSTER=1`` runs the cluster's tests (test_cluster.py,
test_cluster_faults.py, test_cluster_sql.py, test_cluster_console.py; scripts/test.sh
runs them so once more) on a secure cluster, with nothing else changed in what they
check:

- etcd (the ``etcd`` fixture) over TLS with ``--client-cert-auth``, its authentication on,
  and the nodes its user ``quiver``, whose role reaches ``/quiver/`` only
  (:func:`start_secured_etcd`; the certificates are openssl's, security_helpers.py);
- each node with its certificate from ``quiver cluster init-ca`` / ``issue-cert``
  (``--tls-cert``, ``--tls-key``), ``--cluster-ca`` and ``--tls-client-ca`` of that CA:
  mutual TLS between the nodes, and towards clients;
- every node with the same ``--users`` file and ``--token-secret-file``: the tests' clients
  are the user ``admin`` (admin role), with the bearer token one Handshake gave, on every
  node, and the client certificate the CA issued.

Tests get their clients from the cluster (:meth:`Cluster.client`,
:meth:`Cluster.flight_client`, :meth:`Cluster.connection`), so one test body runs in
both modes; a :class:`Cluster` a test makes itself is secure the same way, a node run as
another user (``uid``) included. Every test of those four files runs in both modes: the
shared-memory reads and the network cut (iptables' owner match) too. The other files'
cluster tests set up their own security and are not made to run with the variable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow.flight as flight
import pytest

import quiver
from quiver import splits, testing
from security_helpers import PASSWORDS, Certs, make_certs, user_add
from server_process import Server, quiver_bin, start_server

T = TypeVar("T")

#: The nodes of the ``cluster`` fixture (conftest.py), on 127.0.0.1, .2 and .3.
NODES = ("n1", "n2", "n3")

#: A node's lease in the tests: a lost node is noticed within about this many seconds.
LEASE_TTL_S = 2

#: Whether the cluster's tests run on a secure cluster (the module's docstring).
SECURE = os.environ.get("QUIVER_TEST_SECURE_CLUSTER", "") not in ("", "0")

#: The user of a secured etcd that the nodes are, and its password.
ETCD_USER, ETCD_PASSWORD = "quiver", "etcd-secret-pw"

#: The quiver user of the tests' clients on a secure cluster.
CLIENT_USER = "admin"


class Etcd(testing.EtcdProcess):
    """etcd on 127.0.0.1 for the tests: a start failure fails the test."""

    #: How quiver nodes and ``quiver cluster status`` reach it (``--etcd-ca``,
    #: ``--etcd-user``, ...): nothing for a plain etcd; see :func:`start_secured_etcd`.
    flags: tuple[str, ...] = ()

    def start(self, timeout: float = testing.ETCD_START_TIMEOUT_S) -> None:
        try:
            super().start(timeout)
        except testing.ServerStartError as error:
            pytest.fail(str(error), pytrace=False)


def etcdctl(etcd: Etcd, certs: Certs, *args: str) -> None:
    """Run ``etcdctl`` on ``etcd`` with the test client's certificate; it must succeed."""
    binary = shutil.which("etcdctl")
    if binary is None:
        pytest.fail("etcdctl not found: scripts/install-cluster-tools.sh installs it")
    result = subprocess.run(
        [
            binary,
            f"--endpoints={etcd.client_url}",
            f"--cacert={certs.ca}",
            f"--cert={certs.client_cert}",
            f"--key={certs.client_key}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "ETCDCTL_API": "3"},
        check=False,
    )
    assert result.returncode == 0, f"etcdctl {args}: {result.stderr}"


def etcd_flags(certs: Certs, password_file: Path) -> tuple[str, ...]:
    """The flags of a node (and of ``quiver cluster status``) for a secured etcd."""
    return (
        "--etcd-ca",
        str(certs.ca),
        "--etcd-cert",
        str(certs.client_cert),
        "--etcd-key",
        str(certs.client_key),
        "--etcd-user",
        ETCD_USER,
        "--etcd-password-file",
        str(password_file),
    )


def start_secured_etcd(directory: Path) -> tuple[Etcd, Certs, Path]:
    """Start etcd over TLS that checks client certificates, with authentication on, and a
    user ``quiver`` whose role reads and writes ``/quiver/`` only. Return it (its
    :attr:`~Etcd.flags` set for that user), its certificates (``directory/pki``) and the
    user's password file."""
    (directory / "pki").mkdir(parents=True)
    certs = make_certs(directory / "pki")
    etcd = Etcd(
        directory / "etcd",
        tls=True,
        extra_args=(
            f"--cert-file={certs.server_cert}",
            f"--key-file={certs.server_key}",
            f"--trusted-ca-file={certs.ca}",
            "--client-cert-auth",
        ),
    )
    etcd.start()
    try:
        etcdctl(etcd, certs, "user", "add", "root:root-pw")
        etcdctl(etcd, certs, "user", "add", f"{ETCD_USER}:{ETCD_PASSWORD}")
        etcdctl(etcd, certs, "role", "add", "quiver")
        grant = ("role", "grant-permission", "quiver", "--prefix=true", "readwrite", "/quiver/")
        etcdctl(etcd, certs, *grant)
        etcdctl(etcd, certs, "user", "grant-role", ETCD_USER, "quiver")
        etcdctl(etcd, certs, "auth", "enable")
    except BaseException:
        etcd.stop()
        raise
    password_file = directory / "etcd-password"
    password_file.write_text(ETCD_PASSWORD + "\n")
    password_file.chmod(0o600)
    etcd.flags = etcd_flags(certs, password_file)
    return etcd, certs, password_file


def quiver_cluster(*args: str) -> None:
    """Run ``quiver cluster ARGS``; it must succeed."""
    done = subprocess.run(
        [str(quiver_bin()), "cluster", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


@dataclasses.dataclass(frozen=True)
class Secrets:
    """What a secure cluster runs with (the module's docstring): a CA of ``quiver cluster
    init-ca`` and a certificate of it per node and for the client, one users file and one
    token secret for every node."""

    directory: Path
    users: Path
    token_secret: Path

    @staticmethod
    def make(directory: Path) -> Secrets:
        pki = directory / "pki"
        quiver_cluster("init-ca", "--dir", str(pki))
        for node_id in NODES:
            host = f"127.0.0.{int(node_id[1:])}"
            quiver_cluster("issue-cert", "--dir", str(pki), "--node", node_id, "--host", host)
        quiver_cluster("issue-cert", "--dir", str(pki), "--node", "client", "--host", "localhost")
        users = directory / "users.toml"
        done = user_add(users, CLIENT_USER, "admin", PASSWORDS[CLIENT_USER])
        assert done.returncode == 0, done.stderr
        token_secret = directory / "token-secret"
        token_secret.write_bytes(os.urandom(64))
        token_secret.chmod(0o600)
        return Secrets(directory, users, token_secret)

    @property
    def ca(self) -> Path:
        return self.directory / "pki" / "ca.pem"

    def node_flags(self, node_id: str) -> tuple[str, ...]:
        """TLS (mutual, between the nodes and towards clients) and the users of a node."""
        pki = self.directory / "pki"
        return (
            "--tls-cert", str(pki / f"{node_id}.pem"),
            "--tls-key", str(pki / f"{node_id}.key"),
            "--tls-client-ca", str(self.ca),
            "--cluster-ca", str(self.ca),
            "--users", str(self.users),
            "--token-secret-file", str(self.token_secret),
        )  # fmt: skip

    def tls(self) -> dict[str, bytes]:
        """The TLS keyword arguments of a client (pyarrow's and quiver's)."""
        pki = self.directory / "pki"
        return {
            "tls_root_certs": self.ca.read_bytes(),
            "cert_chain": (pki / "client.pem").read_bytes(),
            "private_key": (pki / "client.key").read_bytes(),
        }


class _BearerFactory(flight.ClientMiddlewareFactory):  # type: ignore[misc]
    """Sends ``authorization: Bearer TOKEN`` with every call of a pyarrow client."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.header = {"authorization": f"Bearer {token}"}

    def start_call(self, info: flight.CallInfo) -> flight.ClientMiddleware:
        return _Bearer(self.header)


class _Bearer(flight.ClientMiddleware):  # type: ignore[misc]
    def __init__(self, header: dict[str, str]) -> None:
        super().__init__()
        self.header = header

    def sending_headers(self) -> dict[str, str]:
        return self.header


class Cluster:
    """quiver nodes n1, n2, n3 on 127.0.0.1, .2, .3 over one etcd."""

    def __init__(
        self,
        etcd: Etcd,
        tmp_path: Path,
        replicas: int = 2,
        etcd_flags: tuple[str, ...] | None = None,
        lease_ttl: int = LEASE_TTL_S,
        secure: bool | None = None,
    ) -> None:
        """``etcd_flags``: how every node and ``quiver cluster status`` reach etcd
        (``--etcd-ca``, ``--etcd-user``, ...; by default ``etcd.flags``). ``secure``: TLS
        and users on every node, as the module's docstring says (by default when
        ``QUIVER_TEST_SECURE_CLUSTER`` is set)."""
        self.etcd = etcd
        self.tmp_path = tmp_path
        self.replicas = replicas
        self.lease_ttl = lease_ttl
        self.etcd_flags = etcd.flags if etcd_flags is None else etcd_flags
        secure = SECURE if secure is None else secure
        self.secrets = Secrets.make(tmp_path / "secure") if secure else None
        self.nodes: dict[str, Server] = {}
        self.ports: dict[str, int] = {}
        self._shared_bin: Path | None = None
        self._private_dirs: list[Path] = []
        self._token: str | None = None
        self._token_lock = threading.Lock()

    def start(
        self,
        node_id: str,
        *flags: str,
        data_dir: bool = False,
        uid: int | None = None,
        shm: bool = False,
    ) -> Server:
        """Start node ``node_id`` (n1 on 127.0.0.1, n2 on .2, ...), on its port of before.

        ``uid``: run it as that user (and group), so that firewall rules can single out
        its packets (iptables' owner match); the files of its access flags (a secure
        cluster's certificates, keys and secrets) are copied to a directory of that
        user's. ``shm``: with its shared-memory socket on, in the test's directory (else
        off).
        """
        host = f"127.0.0.{int(node_id[1:])}"
        port = self.ports.setdefault(node_id, testing.free_port(host))
        extra = ["--data-dir", str(self.tmp_path / f"{node_id}-data")] if data_dir else []
        socket = str(self.tmp_path / f"{node_id}.sock") if shm else "off"
        access = self.access_flags(node_id)
        if uid is not None:
            access = self._files_for(uid, access)
        flags = (
            "--cluster",
            self.etcd.url,
            *access,
            "--node-id",
            node_id,
            "--replicas",
            str(self.replicas),
            "--lease-ttl",
            str(self.lease_ttl),
            "--shm-socket",
            socket,
            *extra,
            *flags,
        )
        log_dir = self.tmp_path / node_id
        if uid is None:
            server = start_server(*flags, log_dir=log_dir, listen=f"{host}:{port}")
        else:
            log_dir.mkdir(parents=True, exist_ok=True)

            def drop_privileges() -> None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)

            started = testing.start_quiver(
                *flags,
                log_dir=log_dir,
                binary=self._binary_for_anyone(),
                preexec_fn=drop_privileges,
                listen=f"{host}:{port}",
            )
            fields = {f.name: getattr(started, f.name) for f in dataclasses.fields(started)}
            server = Server(**fields)
        self.nodes[node_id] = server
        return server

    def _files_for(self, uid: int, flags: tuple[str, ...]) -> tuple[str, ...]:
        """``flags`` with each file they name copied to a directory only ``uid`` reads
        (the test's own directory is root's alone)."""
        directory = Path(tempfile.mkdtemp(prefix="quiver-files-"))
        self._private_dirs.append(directory)
        os.chown(directory, uid, uid)
        copied = []
        for index, flag in enumerate(flags):
            if flag.startswith("/") and Path(flag).is_file():
                copy = directory / f"{index}-{Path(flag).name}"
                shutil.copy2(flag, copy)
                os.chown(copy, uid, uid)
                flag = str(copy)
            copied.append(flag)
        return tuple(copied)

    def _binary_for_anyone(self) -> Path:
        """The quiver binary at a path every user may execute (the build may be under /root)."""
        if self._shared_bin is None:
            directory = Path(tempfile.mkdtemp(prefix="quiver-bin-"))
            directory.chmod(0o755)
            shared = directory / "quiver"
            try:
                os.link(quiver_bin(), shared)
            except OSError:
                shutil.copy2(quiver_bin(), shared)
            shared.chmod(0o755)
            self._shared_bin = shared
        return self._shared_bin

    def access_flags(self, node_id: str) -> tuple[str, ...]:
        """How node ``node_id`` reaches etcd, and on a secure cluster its TLS and users."""
        secure = self.secrets.node_flags(node_id) if self.secrets is not None else ()
        return (*self.etcd_flags, *secure)

    def uri(self, node_id: str) -> str:
        return self.nodes[node_id].uri

    def _uri_of(self, node: str) -> str:
        """``node``: a node's id, or a URI (an endpoint's location)."""
        return self.nodes[node].uri if node in self.nodes else node

    def connect_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`quiver.connect` for this cluster's nodes: none,
        or on a secure cluster TLS with the client certificate and the admin's token."""
        if self.secrets is None:
            return {}
        return {**self.secrets.tls(), "token": self.token()}

    def token(self) -> str:
        """The bearer token of the tests' admin, from one Handshake with a live node: every
        node takes it (one ``--token-secret-file``)."""
        assert self.secrets is not None, "a cluster without --users has no tokens"
        with self._token_lock:
            if self._token is None:
                live = [n for n in NODES if n in self.nodes and self.nodes[n].alive()]
                assert live, "no live node to log in at"
                options = flight.FlightCallOptions(timeout=10)
                with flight.FlightClient(self.uri(live[0]), **self.secrets.tls()) as client:
                    _, value = client.authenticate_basic_token(
                        CLIENT_USER, PASSWORDS[CLIENT_USER], options
                    )
                assert value.startswith(b"Bearer "), value
                self._token = value[len(b"Bearer ") :].decode()
            return self._token

    def client(self, node: str, **kwargs: Any) -> quiver.Client:
        """A quiver client of ``node`` (its id, or a URI) with ``kwargs``
        (``timeout``, ``transport``, ...), and on a secure cluster its TLS and token."""
        return quiver.connect(self._uri_of(node), **self.connect_kwargs(), **kwargs)

    def flight_client(self, node: str) -> flight.FlightClient:
        """A plain ``pyarrow.flight`` client of ``node`` (its id, or a URI); on a secure
        cluster with its TLS, sending the admin's token with every call."""
        if self.secrets is None:
            return flight.FlightClient(self._uri_of(node))
        return flight.FlightClient(
            self._uri_of(node),
            **self.secrets.tls(),
            middleware=[_BearerFactory(self.token())],
        )

    def adbc(self, node: str) -> Any:
        """An ADBC Flight SQL connection (autocommit) to ``node`` (its id, or a URI); on a
        secure cluster with its TLS, client certificate and the admin's token."""
        uri = self._uri_of(node).replace("grpc+tcp://", "grpc://")
        options: dict[str, str] = {}
        if self.secrets is not None:
            tls = self.secrets.tls()
            options = {
                adbc_driver_flightsql.DatabaseOptions.TLS_ROOT_CERTS.value: tls[
                    "tls_root_certs"
                ].decode(),
                adbc_driver_flightsql.DatabaseOptions.MTLS_CERT_CHAIN.value: tls[
                    "cert_chain"
                ].decode(),
                adbc_driver_flightsql.DatabaseOptions.MTLS_PRIVATE_KEY.value: tls[
                    "private_key"
                ].decode(),
                adbc_driver_flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value: (
                    f"Bearer {self.token()}"
                ),
            }
        return flight_sql.connect(uri, db_kwargs=options, autocommit=True)

    def connection(self, node: str, **settings: Any) -> splits.Connection:
        """The :class:`quiver.splits.Connection` of ``node`` (its id, or a URI)."""
        return splits.Connection(self._uri_of(node), **self.connect_kwargs(), **settings)

    def kill(self, node_id: str) -> None:
        """SIGKILL a node: no clean leave, its lease runs out."""
        server = self.nodes[node_id]
        server.process.kill()
        server.process.wait(timeout=10)

    def pause(self, node_id: str) -> None:
        """SIGSTOP a node: it holds its connections and answers nothing."""
        self.nodes[node_id].process.send_signal(signal.SIGSTOP)

    def resume(self, node_id: str) -> None:
        """SIGCONT a paused node."""
        self.nodes[node_id].process.send_signal(signal.SIGCONT)

    def rebalance(self, on: bool) -> None:
        """Turn the cluster's rebalancing on or off (``quiver cluster rebalance``)."""
        quiver_cluster(
            "rebalance", "on" if on else "off", "--cluster", self.etcd.url, *self.etcd_flags
        )

    def status(self) -> dict[str, object]:
        result = subprocess.run(
            [
                str(quiver_bin()),
                "cluster",
                "status",
                "--cluster",
                self.etcd.url,
                *self.etcd_flags,
                "--replicas",
                str(self.replicas),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            env={k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")},
        )
        assert result.returncode == 0, result.stderr
        status: dict[str, object] = json.loads(result.stdout)
        return status

    def stop_all(self) -> list[str]:
        """Stop the live nodes; return the logs of those that did not exit with 0."""
        failures = []
        for node_id, server in self.nodes.items():
            if server.alive():
                code = server.stop()
                if code != 0:
                    failures.append(f"{node_id} exited with {code}:\n{server.log()}")
        if self._shared_bin is not None:
            shutil.rmtree(self._shared_bin.parent, ignore_errors=True)
        for directory in self._private_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        return failures


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll ``probe`` every 0.2 s until it returns a truthy value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})", pytrace=False)
