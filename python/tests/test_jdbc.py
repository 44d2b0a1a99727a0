"""Apache Arrow's Flight SQL JDBC driver against the real server, as a JDBC client sees it.

The Java side is ``java/src/main/java/quiver/jdbc/FlightSqlJdbcCheck.java``.
``scripts/setup-java.sh`` installs a JDK and Maven when they are missing, resolves the driver jar
(its version is pinned in ``java/flight-sql-jdbc-driver.version``) from Maven Central, and compiles
the check into a cache outside the repository (``$QUIVER_JAVA_CACHE``, default
``~/.cache/quiver/java``). This test runs that script (fast once set up), stores a table through
plain Flight DoPut, and runs the check against the server.

With ``CI=true`` a machine where Java cannot be set up fails the test; elsewhere it is skipped
only when the script says Java cannot be installed here (not root, no sudo, no apt-get).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from flight_helpers import put, table_names
from server_process import REPO, Server

SETUP = REPO / "scripts" / "setup-java.sh"
SETUP_TIMEOUT_S = 1200.0  # a fresh machine installs a JDK and Maven, and fetches a 45 MB jar
CHECK_TIMEOUT_S = 300.0
CANNOT_INSTALL = 3  # setup-java.sh's exit code when no JDK can be installed here

TABLE = "jdbc_trips"
ROWS = 1000
TS_BASE = dt.datetime(2024, 1, 15)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def java_cache() -> Path:
    configured = os.environ.get("QUIVER_JAVA_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "quiver" / "java"


def trips(rows: int) -> pa.Table:
    """The table FlightSqlJdbcCheck expects: keep the two in step (see its class comment)."""
    ids = range(1, rows + 1)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if i % 10 == 0 else f"name-{i}" for i in ids], pa.string()),
            "fare": pa.array([i * 0.25 for i in ids], pa.float64()),
            "ts": pa.array(
                [TS_BASE + dt.timedelta(microseconds=i * 1_000_001) for i in ids],
                pa.timestamp("us"),
            ),
        },
        schema=pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False),
                pa.field("name", pa.string()),
                pa.field("fare", pa.float64()),
                pa.field("ts", pa.timestamp("us")),
            ]
        ),
    )


@pytest.fixture(scope="session")
def jdbc_check() -> Path:
    """The compiled check's launcher, once ``scripts/setup-java.sh`` has (re)built what it needs."""
    try:
        done = subprocess.run(
            ["bash", str(SETUP)],
            capture_output=True,
            text=True,
            timeout=SETUP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"{SETUP} did not finish within {SETUP_TIMEOUT_S:.0f} s:\n{e.stdout}\n{e.stderr}",
            pytrace=False,
        )
    output = f"{done.stdout}{done.stderr}"
    if done.returncode == CANNOT_INSTALL and not in_ci():
        pytest.skip(f"Java for the JDBC test cannot be installed here: {done.stderr.strip()}")
    if done.returncode != 0:
        pytest.fail(f"{SETUP} exited with {done.returncode}:\n{output}", pytrace=False)
    launcher = java_cache() / "bin" / "flight-sql-jdbc-check"
    if not launcher.is_file():
        pytest.fail(f"{SETUP} succeeded but wrote no {launcher}:\n{output}", pytrace=False)
    return launcher


def jdbc_url(server: Server) -> str:
    address = urlparse(server.uri)
    return f"jdbc:arrow-flight-sql://{address.hostname}:{address.port}/?useEncryption=false"


def test_flight_sql_jdbc_driver(
    jdbc_check: Path, server: Server, flight_client: flight.FlightClient
) -> None:
    table = trips(ROWS)
    put(flight_client, TABLE, table, max_chunksize=300)

    command = [
        str(jdbc_check),
        jdbc_url(server),
        TABLE,
        str(ROWS),
        "--catalog=quiver",
        "--schema=public",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"`{' '.join(command)}` did not finish within {CHECK_TIMEOUT_S:.0f} s; its output:\n"
            f"{e.stdout}\n{e.stderr}\nserver log:\n{server.log()[-20000:]}",
            pytrace=False,
        )
    if done.returncode != 0:
        pytest.fail(
            f"`{' '.join(command)}` exited with {done.returncode}:\n{done.stdout}\n"
            f"stderr:\n{done.stderr[-5000:]}\nserver log:\n{server.log()[-20000:]}",
            pytrace=False,
        )

    print(done.stdout)  # what was checked, for -s / -rP

    # What the JDBC side did is visible to plain Flight: the table is intact, the copy is gone.
    assert flight_client.do_get(flight.Ticket(TABLE.encode())).read_all().equals(table)
    assert f"{TABLE}_copy" not in table_names(flight_client)
