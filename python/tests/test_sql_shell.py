"""``quiver sql``: one statement from the command line, and the interactive shell in a
real terminal (tmux, terminal.py), against a live server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

import quiver
from server_process import Server, quiver_bin
from terminal import Pane

CITIES = ["c0", "c1", "c2"]


@pytest.fixture
def trips(server: Server) -> pa.Table:
    table = pa.table(
        {
            "id": pa.array(range(30), pa.int64()),
            "fare": pa.array([i * 1.5 for i in range(30)], pa.float64()),
            "city": pa.array([CITIES[i % 3] for i in range(30)]),
        }
    )
    with quiver.connect(server.uri, transport="grpc") as client:
        client.put("trips", table)
    return table


def sql(server: Server, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    result = subprocess.run(
        [str(quiver_bin()), "--server", server.uri, "sql", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


GROUPED = "SELECT city, count(*) AS n, sum(fare) AS total FROM trips GROUP BY city ORDER BY city"


def test_a_statement_prints_a_table(server: Server, trips: pa.Table) -> None:
    out = sql(server, GROUPED).stdout
    lines = out.splitlines()
    assert lines[1].split("|")[1:4] == [" city ", " n  ", " total "], out
    assert "| c1   | 10 | 217.5 |" in lines, out
    assert lines[-1] == "(3 rows)", out
    # A statement that changes tables prints what it changed.
    out = sql(server, "CREATE TABLE cheap AS SELECT * FROM trips WHERE fare < 3").stdout
    assert "| 2     |" in out and out.splitlines()[-1] == "(1 row)", out


def test_results_as_csv_json_and_files(server: Server, trips: pa.Table, tmp_path: Path) -> None:
    expected = trips.group_by("city").aggregate([("id", "count"), ("fare", "sum")])
    expected = expected.rename_columns(["city", "n", "total"]).sort_by("city")
    csv_text = sql(server, GROUPED, "--format", "csv").stdout
    assert csv_text.splitlines() == ["city,n,total", "c0,10,202.5", "c1,10,217.5", "c2,10,232.5"]
    rows = [json.loads(line) for line in sql(server, GROUPED, "--format", "json").stdout.split()]
    assert rows == [{"city": "c0", "n": 10, "total": 202.5}, *rows[1:]]
    assert [r["city"] for r in rows] == CITIES
    nulls = sql(server, "SELECT NULL AS nothing, 1 AS one", "--format", "json").stdout
    assert json.loads(nulls) == {"nothing": None, "one": 1}
    for name, read in [
        ("out.parquet", pq.read_table),
        ("out.arrow", lambda p: pa.ipc.open_file(p).read_all()),
        ("out.csv", pa_csv.read_csv),
    ]:
        path = tmp_path / name
        sql(server, GROUPED, "-o", str(path))
        got = read(path)
        assert got.column("city").to_pylist() == CITIES, name
        assert got.column("total").to_pylist() == expected.column("total").to_pylist(), name
    whole = sql(server, "SELECT * FROM trips ORDER BY id", "-o", str(tmp_path / "all.parquet"))
    assert whole.stdout == ""
    assert pq.read_table(tmp_path / "all.parquet").equals(trips)


def test_parameters_are_bound_with_their_types(server: Server, trips: pa.Table) -> None:
    query = "SELECT count(*) AS n FROM trips WHERE fare > $1 AND city = $2"
    out = sql(server, query, "--param", "10", "--param", "c1", "--format", "csv").stdout
    expected = sum(1 for i in range(30) if i * 1.5 > 10 and CITIES[i % 3] == "c1")
    assert out.splitlines() == ["n", str(expected)]
    out = sql(server, "SELECT id FROM trips WHERE id = ?", "--param", "7", "--format", "csv")
    assert out.stdout.splitlines() == ["id", "7"]


def test_errors_are_clear_and_fail_the_command(server: Server, trips: pa.Table) -> None:
    bad = sql(server, "SELEC 1", check=False)
    assert bad.returncode != 0
    assert "InvalidArgument" in bad.stderr and "SELEC" in bad.stderr, bad.stderr
    missing = sql(server, "SELECT * FROM nowhere", check=False)
    assert missing.returncode != 0 and "nowhere" in missing.stderr, missing.stderr
    unbound = sql(server, "SELECT id FROM trips WHERE id = $1", check=False)
    assert unbound.returncode != 0 and "'$1'" in unbound.stderr, unbound.stderr
    count = sql(
        server, "SELECT id FROM trips WHERE id = $1", "--param", "1", "--param", "2", check=False
    )
    assert count.returncode != 0 and "1 parameter(s)" in count.stderr, count.stderr
    cast = sql(server, "SELECT id FROM trips WHERE id = $1", "--param", "seven", check=False)
    assert cast.returncode != 0 and '"seven"' in cast.stderr, cast.stderr
    binary = sql(server, "SELECT 1", "--format", "parquet", check=False)
    assert binary.returncode != 0 and "-o FILE" in binary.stderr, binary.stderr


def test_timing_goes_to_stderr(server: Server, trips: pa.Table) -> None:
    result = sql(server, "SELECT id FROM trips", "--format", "csv", "--timing")
    assert len(result.stdout.splitlines()) == 31
    assert result.stderr.startswith("30 rows in "), result.stderr


def test_the_shell_in_a_terminal(server: Server, trips: pa.Table, tmp_path: Path) -> None:
    history = tmp_path / "history"
    command = f"QUIVER_HISTORY='{history}' '{quiver_bin()}' --server {server.uri} sql"
    with Pane(command, tmp_path, height=60) as pane:
        # (The screen as tmux reads it has no trailing blanks.)
        pane.wait_for("quiver>")
        # A statement over two lines: the second prompt says it goes on.
        pane.type("SELECT city, count(*) AS n")
        pane.wait_for("     ->")
        pane.type("FROM trips GROUP BY city ORDER BY city;")
        shown = pane.wait_for("(3 rows)")
        assert "| c2   | 10 |" in shown, shown
        pane.type("\\timing")
        pane.wait_for("Timing is on.")
        pane.type("SELECT max(id) AS top FROM trips;")
        shown = pane.wait_for("1 row in ")
        assert "| 29  |" in shown, shown
        pane.send("C-l")
        pane.type("\\d")
        shown = pane.wait_for("trips")
        assert "NAME" in shown and "ROWS" in shown, shown
        pane.type("\\d trips")
        shown = pane.wait_for("fare")
        # An error is printed and the shell goes on.
        pane.type("SELECT * FROM nowhere;")
        pane.wait_for("ERROR: ")
        # Ctrl-C drops a statement being typed.
        pane.send("-l", "SELECT oops")
        pane.send("C-c")
        pane.type("SELECT 41 + 1 AS answer;")
        pane.wait_for("| 42     |")
        pane.type("\\q")
        assert pane.exit_code() == 0
    kept = history.read_text()
    assert "FROM trips GROUP BY city ORDER BY city;" in kept, kept
    assert "SELECT 41 + 1 AS answer;" in kept and "oops" not in kept, kept
