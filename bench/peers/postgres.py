"""A PostgreSQL server of the suite's own: a fresh cluster in a temporary directory, on loopback.

The ``sql`` suite fetches the taxi table from PostgreSQL with psycopg, ODBC and ADBC. It
uses the Debian packages' binaries (``scripts/install-postgres.sh``) but not their cluster:
:func:`start` runs ``initdb`` into a temporary directory (as the ``postgres`` user when run
as root, which PostgreSQL requires), starts the server with ``pg_ctl`` on ``127.0.0.1`` and
a free port, with its Unix socket in the same directory, and :meth:`PostgresServer.stop`
stops it and removes the directory. Authentication is ``trust``: it listens on loopback
only.

Durability is off (``fsync``, ``synchronous_commit``, ``full_page_writes``) and WAL is
minimal, so that loading the tables is quick; none of that changes how a ``SELECT`` runs.
Tables are loaded with ``COPY ... FROM STDIN (FORMAT csv)`` in the transaction that creates
them, then frozen and analyzed (``VACUUM (FREEZE, ANALYZE)``), so that the first read does
not set hint bits.
"""

from __future__ import annotations

import contextlib
import io
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.csv as pacsv

if TYPE_CHECKING:
    import psycopg

#: The user and database the suite connects as (the cluster's superuser, ``trust``).
USER = "postgres"
DATABASE = "postgres"
#: Server settings for a quick load; none of them changes how a SELECT runs.
SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "30min",
}
#: PostgreSQL's type for each Arrow type of the taxi table.
TYPES = {
    pa.int64(): "bigint",
    pa.float64(): "double precision",
    pa.string(): "text",
    pa.timestamp("us"): "timestamp",
}
#: Rows per CSV chunk sent to COPY.
COPY_CHUNK_ROWS = 256 * 1024
START_TIMEOUT_S = 60


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's server binaries (or the ``postgres`` user, when root) are not installed."""


def bin_dir() -> Path | None:
    """Return the directory of the newest installed ``initdb``/``pg_ctl``, or ``None``."""
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1].parent
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    return None


def _run_as() -> list[str]:
    """Return the prefix that runs a command as the cluster's owner (``postgres`` if root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError as e:
        raise PostgresUnavailable(
            "running as root, and there is no `postgres` user to own the cluster: "
            "run scripts/install-postgres.sh"
        ) from e
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--"]
    return ["su", "postgres", "-s", "/bin/sh", "-c", '"$0" "$@"']


def available() -> str | None:
    """Return why a server cannot be started here, or ``None`` when it can."""
    if bin_dir() is None:
        return "PostgreSQL is not installed (no initdb/pg_ctl): run scripts/install-postgres.sh"
    try:
        _run_as()
    except PostgresUnavailable as e:
        return str(e)
    return None


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    """A running PostgreSQL server started by :func:`start`.

    Attributes
    ----------
    port : int
        Its TCP port on 127.0.0.1.
    root : pathlib.Path
        The temporary directory of its data, socket and log.
    bin_dir : pathlib.Path
        Where its binaries are.
    log_dir : pathlib.Path
        Where its log is copied when it stops.
    version : str
        The server's version, e.g. ``15.18 (Debian 15.18-0+deb12u1)``.
    """

    port: int
    root: Path
    bin_dir: Path
    log_dir: Path
    version: str

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory."""
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        """The server's log while it runs."""
        return self.root / "postgresql.log"

    @property
    def uri(self) -> str:
        """A libpq URI of the suite's database (psycopg, ADBC)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def odbc_connection_string(self, driver: str) -> str:
        """Return a DSN-less ODBC connection string through ``driver`` (a path or a name).

        Logging is switched off: Debian's ``odbcinst.ini`` turns on psqlODBC's
        communication log, which writes every message to a file.
        """
        return (
            f"DRIVER={{{driver}}};SERVER=127.0.0.1;PORT={self.port};DATABASE={DATABASE};"
            f"UID={USER};PWD=;CommLog=0;Debug=0"
        )

    def connect(self) -> psycopg.Connection:
        """Return an autocommit psycopg connection."""
        import psycopg

        return psycopg.connect(self.uri, autocommit=True)

    def load(self, name: str, table: pa.Table) -> None:
        """Create table ``name`` with ``table``'s columns and COPY its rows in (as CSV)."""
        columns = ", ".join(f'"{f.name}" {TYPES[f.type]}' for f in table.schema)
        with self.connect() as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')
            with conn.transaction(), conn.cursor() as cursor:
                cursor.execute(f'CREATE TABLE "{name}" ({columns})')
                with cursor.copy(f'COPY "{name}" FROM STDIN (FORMAT csv)') as copy:
                    for start in range(0, table.num_rows, COPY_CHUNK_ROWS):
                        copy.write(_csv(table.slice(start, COPY_CHUNK_ROWS)))
            conn.execute(f'VACUUM (FREEZE, ANALYZE) "{name}"')
            (count,) = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()
        if count != table.num_rows:
            raise RuntimeError(f"PostgreSQL table {name} has {count} rows, not {table.num_rows}")

    def drop(self, name: str) -> None:
        """Drop table ``name`` (if it is there)."""
        with self.connect() as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')

    def stop(self) -> int:
        """Stop the server (fast shutdown), keep its log in ``log_dir``, remove its files.

        Returns
        -------
        int
            ``pg_ctl stop``'s exit code.
        """
        code = 0
        if (self.data_dir / "postmaster.pid").exists():
            code = _pg_ctl(self.bin_dir, ["stop", "-D", str(self.data_dir), "-m", "fast", "-w"])
        with contextlib.suppress(OSError):
            self.log_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.log_path, self.log_dir / "postgresql.log")
        shutil.rmtree(self.root, ignore_errors=True)
        return code


def _csv(table: pa.Table) -> bytes:
    """Return ``table`` as CSV without a header: nulls empty and unquoted, strings quoted."""
    sink = io.BytesIO()
    pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False))
    return sink.getvalue()


def _pg_ctl(directory: Path, args: list[str]) -> int:
    command = [*_run_as(), str(directory / "pg_ctl"), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    return result.returncode


def _check(command: list[str], what: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed ({result.returncode}): {result.stderr.strip()[-1500:]}")
    return result.stdout


def start(log_dir: Path, attempts: int = 3) -> PostgresServer:
    """Create a cluster in a temporary directory and start it on a free loopback port.

    Parameters
    ----------
    log_dir : pathlib.Path
        Where the server's log is copied when it stops.
    attempts : int
        Ports tried (another process may take the free port first).

    Raises
    ------
    PostgresUnavailable
        PostgreSQL is not installed.
    RuntimeError
        ``initdb`` or ``pg_ctl start`` failed.
    """
    why = available()
    if why is not None:
        raise PostgresUnavailable(why)
    directory = bin_dir()
    assert directory is not None
    prefix = _run_as()
    root = Path(tempfile.mkdtemp(prefix="quiver-bench-pg-"))
    try:
        if prefix:
            shutil.chown(root, "postgres", "postgres")
        data = root / "data"
        _check(
            [*prefix, str(directory / "initdb"), "-D", str(data), "-U", USER, "-A", "trust",
             "-E", "UTF8", "--locale=C", "--no-sync"],
            "initdb",
        )  # fmt: skip
        version = _check([str(directory / "postgres"), "--version"], "postgres --version")
        version = version.strip().removeprefix("postgres (PostgreSQL) ")
        settings = " ".join(f"-c {k}={v}" for k, v in SETTINGS.items())
        for attempt in range(attempts):
            port = free_port()
            options = f"-k {root} -h 127.0.0.1 -p {port} {settings}"
            command = [
                *prefix, str(directory / "pg_ctl"), "start", "-D", str(data), "-w",
                "-t", str(START_TIMEOUT_S), "-l", str(root / "postgresql.log"), "-o", options,
            ]  # fmt: skip
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode == 0:
                return PostgresServer(port, root, directory, log_dir, version)
            if attempt == attempts - 1:
                log_tail = (root / "postgresql.log").read_text(errors="replace")[-1500:]
                raise RuntimeError(
                    f"pg_ctl start failed ({result.returncode}): {result.stderr.strip()}\n"
                    f"{log_tail}"
                )
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    raise AssertionError("unreachable")
