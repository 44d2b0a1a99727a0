"""What the security tests share: test certificates, users files, a catalogue of RPCs."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from quiver import _protobuf, _sql
from server_process import Server, quiver_bin, start_server

PASSWORDS = {"reader": "read-pw", "writer": "write-pw", "admin": "admin-pw"}
TABLE = "guarded"
DATA = pa.table({"id": pa.array(range(100), pa.int64()), "x": pa.array([0.5] * 100)})
OTHER = pa.table({"id": pa.array([7, 8], pa.int64()), "x": pa.array([1.0, 2.0])})


# -- certificates (the openssl command-line tool) ---------------------------------------------


@dataclass(frozen=True)
class Certs:
    """PEM files: a CA, a server certificate for 127.0.0.1 it signed, a client certificate it
    signed, and a client certificate signed by another CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path

    @staticmethod
    def read(path: Path) -> bytes:
        return path.read_bytes()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(name: str, cwd: Path) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
        "-subj", f"/CN=quiver test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=cwd,
    )  # fmt: skip


def _make_leaf(name: str, ca: str, usage: str, cwd: Path) -> None:
    (cwd / f"{name}.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        f"extendedKeyUsage={usage}\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
    )
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=cwd,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-set_serial", str(abs(hash(name)) % (1 << 60) + 1), "-days", "2",
        "-extfile", f"{name}.ext", "-out", f"{name}.pem",
        cwd=cwd,
    )  # fmt: skip


def make_certs(directory: Path) -> Certs:
    """Generate the test certificates in ``directory``."""
    _make_ca("ca", directory)
    _make_ca("rogue-ca", directory)
    _make_leaf("server", "ca", "serverAuth", directory)
    _make_leaf("client", "ca", "clientAuth", directory)
    _make_leaf("rogue", "rogue-ca", "clientAuth", directory)
    return Certs(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        rogue_cert=directory / "rogue.pem",
        rogue_key=directory / "rogue.key",
    )


# -- users files (the real `quiver user add` / `quiver user token`) ---------------------------


def user_add(users: Path, name: str, role: str, password: str) -> subprocess.CompletedProcess[str]:
    """Run ``quiver user add NAME --role ROLE --users FILE`` with the password on stdin."""
    return subprocess.run(
        [str(quiver_bin()), "user", "add", name, "--role", role, "--users", str(users)],
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )


def user_token(users: Path, name: str, role: str) -> str:
    """Run ``quiver user token NAME --role ROLE --users FILE``; return the token it printed."""
    done = subprocess.run(
        [str(quiver_bin()), "user", "token", name, "--role", role, "--users", str(users)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def make_users(directory: Path) -> tuple[Path, dict[str, str]]:
    """A users file with reader, writer and admin, and one API token per role."""
    users = directory / "users.toml"
    for user, password in PASSWORDS.items():
        done = user_add(users, user, _role_of(user), password)
        assert done.returncode == 0, done.stderr
    tokens = {role: user_token(users, f"{role}-token", _role_of(role)) for role in PASSWORDS}
    return users, tokens


def _role_of(user: str) -> str:
    return {"reader": "read", "writer": "write", "admin": "admin"}[user]


@contextmanager
def running(*flags: str, log_dir: Path) -> Iterator[Server]:
    """A server for the length of the block; it must exit cleanly."""
    server = start_server(*flags, log_dir=log_dir)
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, f"quiver exited with {code}:\n{server.log()[-4000:]}"


# -- credentials ----------------------------------------------------------------------------


def bearer(token: str) -> flight.FlightCallOptions:
    return flight.FlightCallOptions(headers=[(b"authorization", b"Bearer " + token.encode())])


def basic(user: str, password: str) -> flight.FlightCallOptions:
    value = base64.b64encode(f"{user}:{password}".encode())
    return flight.FlightCallOptions(headers=[(b"authorization", b"Basic " + value)])


def login(uri: str, user: str, **kwargs: object) -> str:
    """Handshake as ``user``; return the bearer token."""
    with flight.FlightClient(uri, **kwargs) as client:
        _, value = client.authenticate_basic_token(user, PASSWORDS[user])
    assert value.startswith(b"Bearer ")
    return value[len(b"Bearer ") :].decode()


def forge(token: str) -> str:
    """The token with its role raised to admin and its signature kept."""
    prefix, payload, mac = token.split(".")
    raw = bytearray(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    raw[8] = 3
    return ".".join([prefix, base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("="), mac])


# -- Flight SQL messages the tests need beyond quiver._sql ------------------------------------


def _varint_field(number: int, value: int) -> bytes:
    return _protobuf.varint(number << 3) + _protobuf.varint(value)


def ingest_command(table: str) -> bytes:
    """CommandStatementIngest creating ``table`` (or appending if it exists)."""
    options = _varint_field(1, 1) + _varint_field(2, 2)  # if_not_exist CREATE, if_exists APPEND
    return _sql._any(
        "CommandStatementIngest", _protobuf.field(1, options) + _protobuf.field(2, table.encode())
    )


def prepare_request(query: str) -> bytes:
    return _sql._any("ActionCreatePreparedStatementRequest", _protobuf.field(1, query.encode()))


def prepared_query(handle: bytes) -> bytes:
    return _sql._any("CommandPreparedStatementQuery", _protobuf.field(1, handle))


def prepared_update(handle: bytes) -> bytes:
    return _sql._any("CommandPreparedStatementUpdate", _protobuf.field(1, handle))


def _fields(data: bytes) -> dict[int, bytes | int]:
    return {number: value for number, _, value in _protobuf.fields(data)}


def prepare(client: flight.FlightClient, options: flight.FlightCallOptions, query: str) -> bytes:
    """CreatePreparedStatement; return the statement's handle."""
    (result,) = list(
        client.do_action(flight.Action("CreatePreparedStatement", prepare_request(query)), options)
    )
    value = _fields(result.body.to_pybytes())[2]  # Any.value
    assert isinstance(value, bytes)
    handle = _fields(value)[1]  # ActionCreatePreparedStatementResult.prepared_statement_handle
    assert isinstance(handle, bytes)
    return handle


# -- the RPCs ---------------------------------------------------------------------------------

Call = Callable[[flight.FlightClient, flight.FlightCallOptions], object]


def do_put(
    descriptor: flight.FlightDescriptor, table: pa.Table, put_options: bytes | None = None
) -> Call:
    def call(client: flight.FlightClient, options: flight.FlightCallOptions) -> object:
        writer, reader = client.do_put(descriptor, table.schema, options)
        if put_options is not None:
            writer.write_metadata(put_options)
        writer.write_table(table)
        writer.done_writing()
        answer = reader.read()
        writer.close()
        return answer

    return call


def do_action(kind: str, body: bytes = b"") -> Call:
    return lambda client, options: list(client.do_action(flight.Action(kind, body), options))


def get_sql(query: str) -> Call:
    """GetFlightInfo of a statement, then DoGet of its endpoints."""

    def call(client: flight.FlightClient, options: flight.FlightCallOptions) -> object:
        info = client.get_flight_info(
            flight.FlightDescriptor.for_command(_sql.statement_query(query)), options
        )
        return [client.do_get(e.ticket, options).read_all() for e in info.endpoints]

    return call


def sql_update(statement: str) -> Call:
    return do_put(
        flight.FlightDescriptor.for_command(_sql.statement_update(statement)), pa.table({})
    )


def do_exchange(
    client: flight.FlightClient, options: flight.FlightCallOptions, command: bytes = b"echo"
) -> object:
    """DoExchange of ``OTHER`` under ``command``: the echo, or a JSON command."""
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(command), options)
    writer.begin(OTHER.schema)
    writer.write_table(OTHER)
    writer.done_writing()
    table = reader.read_all()
    writer.close()
    return table


PATH = flight.FlightDescriptor.for_path(TABLE)

#: Every RPC and action, each as a call that needs at most the read role.
READ_CALLS: dict[str, Call] = {
    "ListFlights": lambda c, o: list(c.list_flights(b"", o)),
    "GetFlightInfo": lambda c, o: c.get_flight_info(PATH, o),
    "GetSchema": lambda c, o: c.get_schema(PATH, o),
    "DoGet": lambda c, o: c.do_get(flight.Ticket(TABLE.encode()), o).read_all(),
    "ListActions": lambda c, o: c.list_actions(o),
    "DoExchange": do_exchange,
    "DoExchange SQL over a stream": lambda c, o: do_exchange(
        c, o, json.dumps({"sql": "SELECT * FROM input"}).encode()
    ),
    "DoAction list-functions": do_action("list-functions"),
    "DoAction stats": do_action("stats"),
    "DoAction health": do_action("health"),
    "Flight SQL query": get_sql(f"SELECT count(*) FROM {TABLE}"),
    "Flight SQL metadata (GetTables)": lambda c, o: c.get_flight_info(
        flight.FlightDescriptor.for_command(_sql._any("CommandGetTables", b"")), o
    ),
    "DoAction CreatePreparedStatement": do_action(
        "CreatePreparedStatement", prepare_request(f"SELECT * FROM {TABLE}")
    ),
}

#: Every call that changes tables: the write role at least.
WRITE_CALLS: dict[str, Call] = {
    "DoPut replace": do_put(PATH, OTHER),
    "DoPut append": do_put(PATH, OTHER, b'{"mode": "append"}'),
    "DoPut new table": do_put(flight.FlightDescriptor.for_path("intruder"), OTHER),
    "DoAction delete": do_action("delete", TABLE.encode()),
    "DoAction rename": do_action("rename", json.dumps({"from": TABLE, "to": "moved"}).encode()),
    "DoAction publish": do_action(
        "publish", json.dumps({"into": "published", "from": [TABLE], "mode": "replace"}).encode()
    ),
    "Flight SQL ingest": do_put(flight.FlightDescriptor.for_command(ingest_command(TABLE)), OTHER),
    "Flight SQL update INSERT": sql_update(f"INSERT INTO {TABLE} VALUES (1, 1.0)"),
    "Flight SQL update CTAS": sql_update(f"CREATE TABLE copied AS SELECT * FROM {TABLE}"),
    "Flight SQL update DROP": sql_update(f"DROP TABLE {TABLE}"),
    "Flight SQL update CREATE VIEW": sql_update(f"CREATE VIEW v AS SELECT * FROM {TABLE}"),
    "Flight SQL query running DROP": get_sql(f"DROP TABLE {TABLE}"),
    "Flight SQL query running CTAS": get_sql(f"CREATE TABLE copied AS SELECT * FROM {TABLE}"),
}

#: Calls that need every credential check but touch nothing (the Handshake aside).
OTHER_ACTIONS: dict[str, Call] = {
    "DoAction ClosePreparedStatement": do_action(
        "ClosePreparedStatement",
        _sql._any("ActionClosePreparedStatementRequest", _protobuf.field(1, b"x")),
    ),
    "DoAction CancelFlightInfo": do_action("CancelFlightInfo", b""),
    "DoAction CancelQuery": do_action("CancelQuery", b""),
}


_CLASSES = {
    "unauthenticated": flight.FlightUnauthenticatedError,
    "permission denied": flight.FlightUnauthorizedError,
}


def refused_with(error: BaseException, words: str) -> bool:
    """Whether ``error`` is the server's status ``words`` ("unauthenticated", "permission
    denied"). pyarrow raises the matching Flight class, except where it drops the status
    detail (GetSchema raises a plain ``ArrowIOError`` saying "Flight returned
    unauthenticated error")."""
    return isinstance(error, _CLASSES[words]) or f"returned {words} error" in str(error)


def expect_code(
    error: type[Exception], words: str, call: Callable[..., object], *args: object
) -> str:
    """Run ``call(*args)``; it must fail with ``error`` (a pyarrow Flight error class) whose
    message holds ``words``. Return the message."""
    with pytest.raises(error) as raised:
        call(*args)
    message = str(raised.value)
    assert words in message, message
    return message


def snapshot(uri: str, token: str) -> dict[str, pa.Table]:
    """Every table of the server, read with ``token``."""
    options = bearer(token)
    with flight.FlightClient(uri) as client:
        names = [info.descriptor.path[0].decode() for info in client.list_flights(b"", options)]
        return {
            n: client.do_get(flight.Ticket(n.encode()), options).read_all() for n in sorted(names)
        }
