"""Authentication and roles against the real server binary (docs/security.md).

Every RPC, action and Flight SQL command is sent without credentials, with a password where
only a token is taken, with a wrong password, an expired token, a forged one and one signed by
another server: each is refused with UNAUTHENTICATED. Each role is then held to what it may do:
a refused call fails with PERMISSION_DENIED, and the stored tables are unchanged afterwards.
Both wire paths (direct and stock) are covered: DoGet and DoPut take different code there.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

import quiver
from security_helpers import (
    DATA,
    OTHER,
    OTHER_ACTIONS,
    PASSWORDS,
    READ_CALLS,
    TABLE,
    WRITE_CALLS,
    basic,
    bearer,
    do_put,
    expect_code,
    forge,
    get_sql,
    login,
    make_users,
    prepare,
    prepared_query,
    prepared_update,
    refused_with,
    running,
    snapshot,
    sql_update,
    user_add,
)
from server_process import Server, start_server

ALL_CALLS = {**READ_CALLS, **WRITE_CALLS, **OTHER_ACTIONS}


@dataclass
class Secured:
    """A server with --users, its users file and tokens, and credentials it must refuse."""

    server: Server
    users: Path
    api_tokens: dict[str, str]
    refused: dict[str, flight.FlightCallOptions]
    directory: Path

    @property
    def uri(self) -> str:
        return self.server.uri

    def token(self, user: str) -> str:
        return login(self.uri, user)

    def tables(self) -> dict[str, pa.Table]:
        return snapshot(self.uri, self.api_tokens["admin"])


@pytest.fixture(scope="module", params=["direct", "stock"])
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp(f"secured-{request.param}")
    users, api_tokens = make_users(directory)
    secret = directory / "token-secret"
    secret.write_bytes(os.urandom(64))
    flags = ("--users", str(users), "--token-secret-file", str(secret))
    with running(*flags, "--wire-path", request.param, log_dir=directory) as server:
        # A token signed with the same secret that has run out, and one signed by a server
        # with the same users but its own secret.
        with running(*flags, "--token-ttl", "1", log_dir=directory) as short_lived:
            expired = login(short_lived.uri, "admin")
        with running("--users", str(users), log_dir=directory) as other:
            foreign = login(other.uri, "admin")
        time.sleep(2.1)  # the expiry has whole seconds
        refused = {
            "no credentials": flight.FlightCallOptions(),
            "password instead of a token": basic("admin", PASSWORDS["admin"]),
            "wrong password": basic("admin", "not-the-password"),
            "expired token": bearer(expired),
            "forged token": bearer(forge(login(server.uri, "reader"))),
            "another server's token": bearer(foreign),
            "unknown API token": bearer("qk_" + "A" * 43),
            "not a token": bearer("hello"),
        }
        secured = Secured(server, users, api_tokens, refused, directory)
        with flight.FlightClient(server.uri) as client:
            do_put(flight.FlightDescriptor.for_path(TABLE), DATA)(
                client, bearer(api_tokens["admin"])
            )
        yield secured


@pytest.fixture
def pristine(secured: Secured) -> Iterator[Secured]:
    """The secured server with exactly the guarded table, checked unchanged after the test."""
    admin = bearer(secured.api_tokens["admin"])
    with flight.FlightClient(secured.uri) as client:
        for name in secured.tables():
            if name != TABLE:
                list(client.do_action(flight.Action("delete", name.encode()), admin))
        do_put(flight.FlightDescriptor.for_path(TABLE), DATA)(client, admin)
    before = secured.tables()
    yield secured
    assert secured.tables() == before, "a refused call changed the stored tables"


@pytest.mark.parametrize("credentials", [
    "no credentials", "password instead of a token", "wrong password", "expired token",
    "forged token", "another server's token", "unknown API token", "not a token",
])  # fmt: skip
def test_every_rpc_refuses_bad_credentials(pristine: Secured, credentials: str) -> None:
    options = pristine.refused[credentials]
    with flight.FlightClient(pristine.uri) as client:
        for name, call in ALL_CALLS.items():
            try:
                call(client, options)
            except Exception as error:
                if refused_with(error, "unauthenticated"):
                    continue
                pytest.fail(f"{name} with {credentials}: {type(error).__name__}: {error}")
            pytest.fail(f"{name} with {credentials} was served")


def test_refusals_say_why(pristine: Secured) -> None:
    unauthenticated = flight.FlightUnauthenticatedError
    with flight.FlightClient(pristine.uri) as client:
        call = READ_CALLS["ListFlights"]
        for credentials, words in [
            ("no credentials", "requires authentication"),
            ("password instead of a token", "Handshake only"),
            ("expired token", "expired"),
            ("forged token", "signature"),
            ("another server's token", "signature"),
            ("unknown API token", "unknown API token"),
        ]:
            expect_code(unauthenticated, words, call, client, pristine.refused[credentials])


class _SilentHandshake(flight.ClientAuthHandler):
    """A Handshake that sends no credentials of its own."""

    def authenticate(self, outgoing: object, incoming: object) -> None:
        pass

    def get_token(self) -> bytes:
        return b""


def test_handshake_refuses_bad_credentials(pristine: Secured) -> None:
    unauthenticated = flight.FlightUnauthenticatedError
    for user, password in [("admin", "wrong"), ("nobody", "admin-pw"), ("admin", ""), ("", "")]:
        with flight.FlightClient(pristine.uri) as client:
            expect_code(
                unauthenticated,
                "wrong user name or password",
                client.authenticate_basic_token,
                user,
                password,
            )
    for credentials in ("no credentials", "expired token", "forged token", "not a token"):
        with flight.FlightClient(pristine.uri) as client:
            options = pristine.refused[credentials]
            expect_code(unauthenticated, "", client.authenticate, _SilentHandshake(), options)


def test_read_role_reads_everything(pristine: Secured) -> None:
    for options in (bearer(pristine.token("reader")), bearer(pristine.api_tokens["reader"])):
        with flight.FlightClient(pristine.uri) as client:
            for name, call in READ_CALLS.items():
                try:
                    call(client, options)
                except flight.FlightError as error:
                    pytest.fail(f"{name} as reader: {error}")
            assert client.do_get(flight.Ticket(TABLE.encode()), options).read_all() == DATA


def test_read_role_changes_nothing(pristine: Secured) -> None:
    external = pristine.directory / "external.parquet"
    pq.write_table(OTHER, external)
    calls = {
        **WRITE_CALLS,
        "CREATE EXTERNAL TABLE": sql_update(
            f"CREATE EXTERNAL TABLE ext STORED AS PARQUET LOCATION '{external}'"
        ),
    }
    for options in (bearer(pristine.token("reader")), bearer(pristine.api_tokens["reader"])):
        with flight.FlightClient(pristine.uri) as client:
            for name, call in calls.items():
                try:
                    call(client, options)
                except Exception as error:
                    if not refused_with(error, "permission denied"):
                        pytest.fail(f"{name} as reader: {type(error).__name__}: {error}")
                    message = str(error)
                    if "role" not in message:
                        pytest.fail(f"{name} as reader: the refusal does not say why: {message}")
                    continue
                pytest.fail(f"{name} as reader was allowed")


def test_prepared_statements_are_held_to_the_role(pristine: Secured) -> None:
    options = bearer(pristine.token("reader"))
    denied = flight.FlightUnauthorizedError
    with flight.FlightClient(pristine.uri) as client:
        # Preparing is describing; running is where the role counts.
        select = prepare(client, options, f"SELECT * FROM {TABLE} WHERE id < 10")
        query = flight.FlightDescriptor.for_command(prepared_query(select))
        info = client.get_flight_info(query, options)
        assert client.do_get(info.endpoints[0].ticket, options).read_all().num_rows == 10
        for statement in (f"DROP TABLE {TABLE}", f"INSERT INTO {TABLE} VALUES (5, 5.0)"):
            handle = prepare(client, options, statement)
            query = flight.FlightDescriptor.for_command(prepared_query(handle))
            expect_code(denied, "write role", client.get_flight_info, query, options)
            update = flight.FlightDescriptor.for_command(prepared_update(handle))
            expect_code(denied, "write role", do_put(update, pa.table({})), client, options)


def test_write_role_writes_but_reaches_no_files(pristine: Secured) -> None:
    writer = bearer(pristine.token("writer"))
    with flight.FlightClient(pristine.uri) as client:
        do_put(flight.FlightDescriptor.for_path("w"), OTHER)(client, writer)
        WRITE_CALLS["Flight SQL ingest"](client, writer)
        WRITE_CALLS["Flight SQL update INSERT"](client, writer)
        WRITE_CALLS["Flight SQL update CTAS"](client, writer)
        assert client.do_get(flight.Ticket(b"copied"), writer).read_all().num_rows == 103
        list(client.do_action(flight.Action("delete", b"copied"), writer))
        list(client.do_action(flight.Action("delete", b"w"), writer))
        external = pristine.directory / "external.parquet"
        pq.write_table(OTHER, external)
        create = f"CREATE EXTERNAL TABLE ext STORED AS PARQUET LOCATION '{external}'"
        expect_code(
            flight.FlightUnauthorizedError, "admin role", sql_update(create), client, writer
        )
        # Put the guarded table back as it was, for `pristine`'s check.
        do_put(flight.FlightDescriptor.for_path(TABLE), DATA)(client, writer)

        admin = bearer(pristine.api_tokens["admin"])
        sql_update(create)(client, admin)
        (result,) = get_sql("SELECT sum(id) AS s FROM ext")(client, admin)
        assert result.column("s").to_pylist() == [15]
        sql_update("DROP TABLE ext")(client, admin)


def test_quiver_client_logs_in(pristine: Secured) -> None:
    with quiver.connect(pristine.uri, username="writer", password=PASSWORDS["writer"]) as c:
        c.put("via_client", OTHER, partitions=2)
        assert c.get("via_client") == OTHER
        assert c.sql("SELECT count(*) AS n FROM via_client").column("n").to_pylist() == [2]
        c.delete("via_client")
    with quiver.connect(pristine.uri, token=pristine.api_tokens["reader"]) as c:
        assert c.get(TABLE) == DATA
        with pytest.raises(quiver.PermissionDeniedError, match="write role"):
            c.put(TABLE, OTHER)
        with pytest.raises(quiver.PermissionDeniedError):
            c.execute_update(f"DROP TABLE {TABLE}")
    with pytest.raises(quiver.AuthenticationError):
        quiver.connect(pristine.uri, username="writer", password="wrong")
    with quiver.connect(pristine.uri) as c, pytest.raises(quiver.AuthenticationError):
        c.list_tables()


def test_adbc_logs_in_and_is_held_to_its_role(pristine: Secured) -> None:
    kwargs = {"username": "reader", "password": PASSWORDS["reader"]}
    with flight_sql.connect(pristine.uri, db_kwargs=kwargs, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) AS n FROM {TABLE} WHERE id >= ?", parameters=(90,))
            assert cur.fetchall() == [(10,)]
        with conn.cursor() as cur, pytest.raises(Exception, match=r"write role"):
            cur.execute(f"DROP TABLE {TABLE}")
        with conn.cursor() as cur, pytest.raises(Exception, match=r"write role"):
            cur.adbc_ingest(TABLE, OTHER, mode="append")
    wrong = {"username": "reader", "password": "wrong"}
    with pytest.raises(Exception, match=r"wrong user name or password"):
        _adbc_query(pristine.uri, wrong, "SELECT 1")


def _adbc_query(uri: str, db_kwargs: dict[str, str], query: str) -> list[tuple[object, ...]]:
    with (
        flight_sql.connect(uri, db_kwargs=db_kwargs, autocommit=True) as conn,
        conn.cursor() as cur,
    ):
        cur.execute(query)
        return cur.fetchall()


def test_user_add_writes_a_private_file(tmp_path: Path) -> None:
    users = tmp_path / "conf" / "users.toml"
    users.parent.mkdir()
    done = user_add(users, "ann", "read", "first-pw")
    assert done.returncode == 0, done.stderr
    assert "added user 'ann'" in done.stderr
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    text = users.read_text()
    assert "first-pw" not in text and "$argon2id$" in text and 'role = "read"' in text
    done = user_add(users, "ann", "admin", "second-pw")
    assert done.returncode == 0 and "updated user 'ann'" in done.stderr
    assert 'role = "admin"' in users.read_text() and 'role = "read"' not in users.read_text()
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    for bad in (user_add(users, "ann", "root", "pw"), user_add(users, "bo:b", "read", "pw"),
                user_add(users, "bob", "read", "")):  # fmt: skip
        assert bad.returncode != 0
    assert "bob" not in users.read_text()


def test_a_bad_users_file_stops_the_server(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    users.write_text('[users.ann]\nrole = "read"\npassword = "plain text"\n')
    with pytest.raises(pytest.fail.Exception, match="not a password hash"):
        start_server("--users", str(users), log_dir=tmp_path)
    done = subprocess.run(
        [*_serve(), "--users", str(tmp_path / "missing.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "missing.toml" in done.stderr


def _serve() -> list[str]:
    from server_process import quiver_bin

    return [str(quiver_bin()), "serve", "--listen", "127.0.0.1:0"]
