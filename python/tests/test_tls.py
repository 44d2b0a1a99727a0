"""TLS and mutual TLS against the real server binary, with pyarrow, ADBC and the quiver CLI.

The certificates are made for each run by the openssl command-line tool (security_helpers).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

import quiver
from security_helpers import DATA, PASSWORDS, Certs, make_certs, make_users, running
from server_process import Server, quiver_bin

pytestmark = pytest.mark.skipif(
    subprocess.run(["openssl", "version"], capture_output=True).returncode != 0,
    reason="the openssl command-line tool makes the test certificates",
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    return make_users(tmp_path_factory.mktemp("users"))


def tls_flags(certs: Certs) -> tuple[str, ...]:
    return ("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))


@pytest.fixture(params=["direct", "stock"])
def tls_server(
    request: pytest.FixtureRequest, certs: Certs, users: tuple[Path, dict[str, str]], tmp_path: Path
) -> Iterator[Server]:
    flags = (*tls_flags(certs), "--users", str(users[0]), "--wire-path", request.param)
    with running(*flags, "--partitions", "3", log_dir=tmp_path) as server:
        yield server


def test_tls_with_credentials_pyarrow_and_quiver(tls_server: Server, certs: Certs) -> None:
    assert tls_server.uri.startswith("grpc+tls://127.0.0.1:")
    ca = certs.ca.read_bytes()
    with quiver.connect(
        tls_server.uri, username="writer", password=PASSWORDS["writer"], tls_root_certs=ca
    ) as client:
        client.put("secret", DATA)
        # Three endpoints, each at the server's grpc+tls:// location, fetched in parallel.
        info = client.flight_client.get_flight_info(
            flight.FlightDescriptor.for_path("secret"), client._options
        )
        assert [str(e.locations[0].uri.decode()) for e in info.endpoints] == [tls_server.uri] * 3
        assert client.get("secret") == DATA
        assert client.sql("SELECT count(*) AS n FROM secret").column("n").to_pylist() == [100]
    with flight.FlightClient(tls_server.uri, tls_root_certs=ca) as plain:
        token = plain.authenticate_basic_token("reader", PASSWORDS["reader"])
        options = flight.FlightCallOptions(headers=[token])
        assert plain.do_get(flight.Ticket(b"secret"), options).read_all() == DATA


def test_plain_tcp_and_unknown_ca_are_refused(tls_server: Server, certs: Certs) -> None:
    plain_uri = tls_server.uri.replace("grpc+tls://", "grpc+tcp://")
    with flight.FlightClient(plain_uri) as client, pytest.raises(flight.FlightUnavailableError):
        list(client.list_flights())
    # A client that trusts another CA does not accept the server's certificate. (A
    # unary call: pyarrow reports a failed Handshake stream as INTERNAL "could not
    # finish writing", whatever the cause.)
    rogue_ca = certs.rogue_cert.read_bytes()
    with (
        flight.FlightClient(tls_server.uri, tls_root_certs=rogue_ca) as client,
        pytest.raises(flight.FlightUnavailableError),
    ):
        list(client.list_flights())


def test_adbc_over_tls_with_credentials(tls_server: Server, certs: Certs) -> None:
    db_kwargs = {
        "username": "writer",
        "password": PASSWORDS["writer"],
        adbc_driver_flightsql.DatabaseOptions.TLS_ROOT_CERTS.value: certs.ca.read_text(),
    }
    with flight_sql.connect(tls_server.uri, db_kwargs=db_kwargs, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.adbc_ingest("ingested", DATA, mode="create")
        with conn.cursor() as cur:
            cur.execute("SELECT sum(id) AS s FROM ingested WHERE id < ?", parameters=(10,))
            assert cur.fetchall() == [(45,)]


def test_mutual_tls_requires_a_client_certificate(
    certs: Certs, users: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    flags = (*tls_flags(certs), "--tls-client-ca", str(certs.ca), "--users", str(users[0]))
    ca = certs.ca.read_bytes()
    with running(*flags, log_dir=tmp_path) as server:
        with (
            flight.FlightClient(server.uri, tls_root_certs=ca) as anonymous,
            pytest.raises(flight.FlightUnavailableError),
        ):
            # Refused in the TLS handshake: UNAVAILABLE, not UNAUTHENTICATED.
            list(anonymous.list_flights())
        rogue = {
            "cert_chain": certs.rogue_cert.read_bytes(),
            "private_key": certs.rogue_key.read_bytes(),
        }
        with (
            flight.FlightClient(server.uri, tls_root_certs=ca, **rogue) as impostor,
            pytest.raises(flight.FlightUnavailableError),
        ):
            list(impostor.list_flights())
        client_cert = {
            "cert_chain": certs.client_cert.read_bytes(),
            "private_key": certs.client_key.read_bytes(),
        }
        with quiver.connect(
            server.uri, username="writer", password=PASSWORDS["writer"], tls_root_certs=ca,
            **client_cert,
        ) as client:  # fmt: skip
            client.put("mutual", DATA)
            assert client.get("mutual") == DATA
        # The certificate opens the connection; the credentials are still required.
        with (
            quiver.connect(server.uri, tls_root_certs=ca, **client_cert) as client,
            pytest.raises(quiver.AuthenticationError),
        ):
            client.list_tables()


def test_cli_over_tls_with_password_and_api_token(
    tls_server: Server, certs: Certs, users: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    source = tmp_path / "in.parquet"
    pq.write_table(DATA, source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    base = [str(quiver_bin()), "--server", tls_server.uri, "--tls-ca", str(certs.ca)]

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], env={**env, **extra}, capture_output=True, text=True, timeout=120
        )

    login = {"QUIVER_USER": "writer", "QUIVER_PASSWORD": PASSWORDS["writer"]}
    done = cli("put", "from_cli", str(source), **login)
    assert done.returncode == 0, done.stderr
    done = cli("get", "from_cli", "-o", str(tmp_path / "out.parquet"), **login)
    assert done.returncode == 0, done.stderr
    assert pq.read_table(tmp_path / "out.parquet") == DATA

    reader_token = users[1]["reader"]
    done = cli("ls", "--json", "--token", reader_token)
    assert done.returncode == 0 and "from_cli" in done.stdout, done.stderr
    done = cli("rm", "from_cli", "--token", reader_token)
    assert done.returncode != 0 and "PermissionDenied" in done.stderr, done.stderr
    done = cli("ls")
    assert done.returncode != 0 and "Unauthenticated" in done.stderr, done.stderr
    done = cli("ls", QUIVER_USER="writer", QUIVER_PASSWORD="wrong")
    assert done.returncode != 0 and "Unauthenticated" in done.stderr, done.stderr
    done = cli("rm", "from_cli", **login)
    assert done.returncode == 0, done.stderr
