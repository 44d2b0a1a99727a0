"""A cluster whose catalog is a secured etcd: TLS with client certificates, and etcd's users.

Real etcd (TLS with ``--client-cert-auth``, authentication on, a user whose role reaches
only the cluster's prefix) and real quiver nodes on 127.0.0.1 and .2. The certificates are
made by the openssl tool (security_helpers.make_certs); etcd's users by ``etcdctl``
(Debian's ``etcd-client``, installed by the test command).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import quiver
from cluster_helpers import ETCD_USER, Cluster, Etcd, etcd_flags, start_secured_etcd
from security_helpers import Certs
from server_process import quiver_bin


@pytest.fixture
def secured_etcd(tmp_path: Path) -> Iterator[tuple[Etcd, Certs, Path]]:
    """etcd over TLS that checks client certificates, with authentication on; a user
    ``quiver`` whose role reads and writes ``/quiver/`` only; its password file."""
    etcd, certs, password_file = start_secured_etcd(tmp_path)
    try:
        yield etcd, certs, password_file
    finally:
        etcd.stop()


def serve_fails(etcd: Etcd, tmp_path: Path, *flags: str) -> str:
    """Run ``quiver serve --cluster ...`` that must fail to start; its stderr."""
    result = subprocess.run(
        [
            str(quiver_bin()),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--shm-socket",
            "off",
            "--node-id",
            "n9",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")},
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode != 0, result.stdout + result.stderr
    return result.stderr


def test_nodes_keep_their_catalog_in_an_etcd_with_tls_and_users(
    secured_etcd: tuple[Etcd, Certs, Path], tmp_path: Path
) -> None:
    etcd, certs, password_file = secured_etcd
    cluster = Cluster(etcd, tmp_path, etcd_flags=etcd_flags(certs, password_file))
    try:
        cluster.start("n1")
        cluster.start("n2")
        table = pa.table({"id": pa.array(range(10_000), pa.int64())})
        with quiver.connect(cluster.uri("n1")) as client:
            client.put("secured", table)
        with quiver.connect(cluster.uri("n2")) as client:
            assert client.get("secured").sort_by("id").equals(table)
        status = cluster.status()
        assert sorted(node["id"] for node in status["nodes"]) == ["n1", "n2"]  # type: ignore[index, union-attr]
    finally:
        failures = cluster.stop_all()
    assert not failures, failures


def test_a_node_without_the_right_etcd_credentials_does_not_start(
    secured_etcd: tuple[Etcd, Certs, Path], tmp_path: Path
) -> None:
    etcd, certs, password_file = secured_etcd
    tls = ("--etcd-ca", str(certs.ca), "--etcd-cert", str(certs.client_cert))
    tls += ("--etcd-key", str(certs.client_key))
    # No etcd user: etcd takes the certificate's name, which is no user of it.
    error = serve_fails(etcd, tmp_path, "--cluster", etcd.url, *tls)
    assert "refused this node" in error and "permission denied" in error, error
    # A wrong password.
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-it\n")
    error = serve_fails(
        etcd,
        tmp_path,
        "--cluster",
        etcd.url,
        *tls,
        "--etcd-user",
        ETCD_USER,
        "--etcd-password-file",
        str(wrong),
    )
    assert "refused this node" in error, error
    assert "etcd authentication" in error and ETCD_USER in error, error
    # No client certificate: etcd (--client-cert-auth) refuses the connection.
    error = serve_fails(
        etcd,
        tmp_path,
        "--cluster",
        etcd.url,
        "--etcd-ca",
        str(certs.ca),
        "--etcd-user",
        ETCD_USER,
        "--etcd-password-file",
        str(password_file),
    )
    # TLS 1.3 lets etcd refuse it only after the handshake: the client sees
    # a broken connection ("transport error" or "canceled", by timing), so
    # the message names the flags that may be missing.
    assert "unreachable" in error and "--etcd-cert and --etcd-key" in error, error
    # TLS settings that do not fit the URL are refused before any connection.
    plain = etcd.url.replace("etcds://", "etcd://")
    error = serve_fails(etcd, tmp_path, "--cluster", plain, *tls)
    assert "etcds://" in error, error
    error = serve_fails(etcd, tmp_path, "--cluster", etcd.url)
    assert "--etcd-ca" in error, error
