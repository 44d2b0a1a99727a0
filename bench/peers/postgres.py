"""A PostgreSQL server of the suite's own: a fresh cluster in a temporary directory, on loopback.

The ``sql`` suite fetches the taxi table from PostgreSQL with psycopg, ODBC and ADBC. It
uses the Debian packages' binaries (``scripts/install-postgres.sh``) but not their cluster:
:func:`start` runs ``initdb`` into a temporary directory (as the ``postgres`` user when run
as root, which PostgreSQL requires), starts ``postgres`` itself as the harness's child on
``127.0.0.1`` and a free port, with its Unix socket in the same directory, and
:meth:`PostgresServer.stop` stops it (fast shutdown) and removes the directory.
Authentication is ``trust``: it listens on loopback only.

The server is not started with ``pg_ctl``, which detaches it: a harness killed outright
(the kernel's OOM killer, a CI timeout) left that server running with its gigabytes of
tables. As the harness's child it gets the parent-death signal every server of the harness
gets (:func:`bench.servers.stop_with_parent`); its backends end soon after, when they
notice. The next :func:`start` removes what such a server left in its directory.

Durability is off (``fsync``, ``synchronous_commit``, ``full_page_writes``) and WAL is
minimal, so that loading the tables is quick; none of that changes how a ``SELECT`` runs.
Tables are loaded with ``COPY ... FROM STDIN (FORMAT csv)`` in the transaction that creates
them, then frozen and analyzed (``VACUUM (FREEZE, ANALYZE)``), so that the first read does
not set hint bits.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.csv as pacsv

from ..servers import stop_with_parent, terminate

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
#: The start of the temporary directories' names.
ROOT_PREFIX = "quiver-bench-pg-"
#: The file in a server's directory the harness holds a lock on while the server is its.
LOCK_FILE = ".harness.lock"
STOP_TIMEOUT_S = 60


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's server binaries (or the ``postgres`` user, when root) are not installed."""


#: The binaries the suite runs, all from one directory.
BINARIES = ("initdb", "postgres", "pg_isready")


def bin_dir() -> Path | None:
    """Return the directory of the newest installed PostgreSQL with :data:`BINARIES`."""
    candidates = sorted(
        (p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/postgres")),
        key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0,
        reverse=True,
    )
    found = shutil.which("postgres")
    if found:
        candidates.append(Path(found).resolve().parent)
    for directory in candidates:
        if all((directory / name).is_file() for name in BINARIES):
            return directory
    return None


def _owner() -> dict[str, object]:
    """Return the :class:`subprocess.Popen` arguments that run a command as the cluster's
    owner: the ``postgres`` user when root (PostgreSQL refuses to run as root), else none.
    """  # noqa: D205
    if os.geteuid() != 0:
        return {}
    try:
        user = pwd.getpwnam("postgres")
    except KeyError as e:
        raise PostgresUnavailable(
            "running as root, and there is no `postgres` user to own the cluster: "
            "run scripts/install-postgres.sh"
        ) from e
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def available() -> str | None:
    """Return why a server cannot be started here, or ``None`` when it can."""
    if bin_dir() is None:
        return (
            "PostgreSQL is not installed (no initdb/postgres/pg_isready): "
            "run scripts/install-postgres.sh"
        )
    try:
        _owner()
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
    process : subprocess.Popen
        The ``postgres`` process (the postmaster).
    lock : int
        The descriptor of the harness's lock on ``root`` (held until :meth:`stop`).
    """

    port: int
    root: Path
    bin_dir: Path
    log_dir: Path
    version: str
    process: subprocess.Popen
    lock: int

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
            The server's exit code (0 after a clean shutdown; -9 if it had to be killed).
            Fast shutdown (SIGINT) ends the sessions; a server that fails to start gets an
            immediate shutdown (SIGQUIT), which takes its children down with it, so that
            the next attempt does not find their shared memory in use.
        """
        code = terminate(self.process, signal.SIGINT, STOP_TIMEOUT_S)
        with contextlib.suppress(OSError):
            self.log_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.log_path, self.log_dir / "postgresql.log")
        shutil.rmtree(self.root, ignore_errors=True)
        os.close(self.lock)
        return code


def _csv(table: pa.Table) -> bytes:
    """Return ``table`` as CSV without a header: nulls empty and unquoted, strings quoted."""
    sink = io.BytesIO()
    pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False))
    return sink.getvalue()


def _check(command: list[str], what: str, **popen: object) -> str:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=START_TIMEOUT_S, **popen
    )
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed ({result.returncode}): {result.stderr.strip()[-1500:]}")
    return result.stdout


def _lock(root: Path) -> int:
    """Take the harness's lock on a server directory; return its descriptor.

    The kernel drops it when the harness ends, however it ends, so a directory whose lock
    can be taken belongs to no running harness.
    """
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _remove_left_behind() -> None:
    """Remove the directories of servers whose harness was killed (their server is gone).

    What a SIGKILLed server leaves outside its directory (a SysV segment of a few bytes, its
    dynamic shared memory in ``/dev/shm``) stays until the machine restarts.
    """
    for root in Path(tempfile.gettempdir()).glob(f"{ROOT_PREFIX}*"):
        try:
            fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                if time.time() - root.stat().st_mtime > START_TIMEOUT_S:
                    shutil.rmtree(root, ignore_errors=True)  # never locked, long ago
            continue  # (or another harness's, just created)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # another harness's server
        finally:
            os.close(fd)
        shutil.rmtree(root, ignore_errors=True)


def _spawn(command: list[str], log_path: Path, owner: dict[str, object]) -> subprocess.Popen:
    """Start ``postgres`` as the harness's child, as ``owner`` (:func:`_owner`)."""
    with log_path.open("ab") as log:
        # The harness's parent-death signal is set after the change of user, which would
        # clear it (Popen changes the user before it calls preexec_fn).
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=stop_with_parent,
            **owner,
        )


def _wait_ready(directory: Path, process: subprocess.Popen, root: Path, port: int) -> bool:
    """Wait until the server accepts connections; ``False`` if it exits or takes too long.

    It asks on the server's own Unix socket (in ``root``), where no other server can answer
    for it, as another could on a loopback port taken between :func:`free_port` and the
    bind.
    """
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        ready = subprocess.run(
            [str(directory / "pg_isready"), "-q", "-h", str(root), "-p", str(port)],
            capture_output=True,
            check=False,
        )
        if ready.returncode == 0:
            return process.poll() is None
        time.sleep(0.1)
    return False


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
        ``initdb`` failed, or the server did not start.
    """
    why = available()
    if why is not None:
        raise PostgresUnavailable(why)
    directory = bin_dir()
    assert directory is not None
    owner = _owner()
    _remove_left_behind()
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
    lock = _lock(root)
    process: subprocess.Popen | None = None
    try:
        if owner:
            os.chown(root, owner["user"], owner["group"])
        data = root / "data"
        _check(
            [str(directory / "initdb"), "-D", str(data), "-U", USER, "-A", "trust",
             "-E", "UTF8", "--locale=C", "--no-sync"],
            "initdb",
            **owner,
        )  # fmt: skip
        version = _check([str(directory / "postgres"), "--version"], "postgres --version")
        version = version.strip().removeprefix("postgres (PostgreSQL) ")
        settings = [arg for k, v in SETTINGS.items() for arg in ("-c", f"{k}={v}")]
        for attempt in range(attempts):
            port = free_port()
            command = [
                str(directory / "postgres"), "-D", str(data), "-k", str(root),
                "-h", "127.0.0.1", "-p", str(port), *settings,
            ]  # fmt: skip
            process = _spawn(command, root / "postgresql.log", owner)
            if _wait_ready(directory, process, root, port):
                return PostgresServer(port, root, directory, log_dir, version, process, lock)
            terminate(process, signal.SIGQUIT, STOP_TIMEOUT_S)
            if attempt == attempts - 1:
                log_tail = (root / "postgresql.log").read_text(errors="replace")[-1500:]
                raise RuntimeError(
                    f"postgres did not start (exit code {process.returncode}) on "
                    f"127.0.0.1:{port}; its log:\n{log_tail}"
                )
    except BaseException:
        if process is not None:
            terminate(process, signal.SIGQUIT, STOP_TIMEOUT_S)
        shutil.rmtree(root, ignore_errors=True)
        os.close(lock)
        raise
    raise AssertionError("unreachable")
