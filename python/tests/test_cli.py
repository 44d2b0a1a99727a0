"""The ``quiver`` CLI (put/get/ls/info/rm) against a real server, with files
written and read by pyarrow."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.flight as flight
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from server_process import Server, quiver_bin


def run_cli(server: Server, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    env["QUIVER_SERVER"] = server.uri
    result = subprocess.run(
        [str(quiver_bin()), *args], capture_output=True, text=True, env=env, timeout=120
    )
    if check and result.returncode != 0:
        pytest.fail(f"quiver {' '.join(args)} failed:\n{result.stderr}", pytrace=False)
    return result


def sample(rows: int = 10_000) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pa.array([None if i % 7 == 0 else f"n{i}" for i in range(rows)]),
            "score": pa.array([i / 3 for i in range(rows)], pa.float64()),
        }
    )


def read_back(path: Path) -> pa.Table:
    if path.suffix == ".parquet":
        return pq.read_table(path)
    if path.suffix == ".csv":
        # An empty field is null, as quiver's CLI reads it.
        return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    if path.suffix == ".arrow":
        return feather.read_table(path)
    with ipc.open_stream(path) as reader:
        return reader.read_all()


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".arrow", ".arrows"])
def test_put_then_get_round_trips_each_format(server: Server, tmp_path: Path, suffix: str) -> None:
    table = sample()
    source = tmp_path / f"in{suffix}"
    if suffix == ".parquet":
        pq.write_table(table, source, row_group_size=3000)
    elif suffix == ".csv":
        pacsv.write_csv(table, source)
    elif suffix == ".arrow":
        feather.write_feather(table, source, compression="uncompressed")
    else:
        with ipc.new_stream(source, table.schema) as writer:
            writer.write_table(table, max_chunksize=2500)

    out = run_cli(server, "put", "t", str(source))
    assert "10000 rows" in out.stdout

    # What a plain pyarrow client sees equals the original table.
    stored = flight.connect(server.uri).do_get(flight.Ticket(b"t")).read_all()
    assert stored.equals(table)

    target = tmp_path / f"out{suffix}"
    run_cli(server, "get", "t", "-o", str(target))
    assert read_back(target).equals(table)


def test_append_ls_info_rm(start_quiver, tmp_path: Path) -> None:
    server = start_quiver("--partitions", "3")
    source = tmp_path / "t.parquet"
    pq.write_table(sample(1000), source)
    run_cli(server, "put", "taxi/2024", str(source), "--partitions", "2")
    out = run_cli(server, "put", "taxi/2024", str(source), "--append")
    assert "appended" in out.stdout
    run_cli(server, "put", "weather", str(source))

    lines = run_cli(server, "ls", "taxi/", "--json").stdout.splitlines()
    listed = [json.loads(line) for line in lines]
    assert [(t["name"], t["rows"], t["columns"]) for t in listed] == [("taxi/2024", 2000, 3)]
    table_out = run_cli(server, "ls").stdout
    assert "taxi/2024" in table_out and "weather" in table_out

    info = run_cli(server, "info", "taxi/2024").stdout
    assert "rows:       2000" in info
    assert "endpoints:  2" in info, "the put's --partitions survives the append"
    assert "id: Int64" in info

    target = tmp_path / "back.parquet"
    run_cli(server, "get", "taxi/2024", "-o", str(target))
    assert pq.read_table(target).column("id").to_pylist() == list(range(1000)) * 2

    assert "deleted 'weather'" in run_cli(server, "rm", "weather").stdout
    assert [json.loads(x)["name"] for x in run_cli(server, "ls", "--json").stdout.splitlines()] == [
        "taxi/2024"
    ]


def test_errors_are_clear_and_fail_the_command(server: Server, tmp_path: Path) -> None:
    missing = run_cli(server, "info", "nope", check=False)
    assert missing.returncode != 0
    assert "NotFound" in missing.stderr and "table 'nope' not found" in missing.stderr

    rm = run_cli(server, "rm", "nope", check=False)
    assert rm.returncode != 0 and "not found" in rm.stderr

    odd = tmp_path / "data.xyz"
    odd.write_text("x")
    unknown = run_cli(server, "put", "t", str(odd), check=False)
    assert unknown.returncode != 0 and "--format" in unknown.stderr

    source = tmp_path / "t.csv"
    pacsv.write_csv(sample(10), source)
    append = run_cli(server, "put", "never-stored", str(source), "--append", check=False)
    assert append.returncode != 0 and "not found" in append.stderr

    nowhere = subprocess.run(
        [str(quiver_bin()), "--server", "grpc+tcp://127.0.0.1:1", "ls"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert nowhere.returncode != 0 and "cannot connect" in nowhere.stderr


def test_a_csv_appended_is_read_with_the_tables_types(server: Server, tmp_path: Path) -> None:
    """A CSV whose text suggests other types than the table's (whole-number fares where
    the table has doubles) is appended with the table's types; a value that is not of
    its column's type, or other columns, fail the command naming the file and column."""
    trips = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "fare": pa.array([7.5, 12.25, 9.0], pa.float64()),
            "zone": pa.array(["a", None, "c"], pa.string()),
        }
    )
    pq.write_table(trips, tmp_path / "trips.parquet")
    (tmp_path / "more.csv").write_text("id,fare,zone\n4,8,b\n5,10,\n")
    run_cli(server, "put", "trips", str(tmp_path / "trips.parquet"))
    appended = run_cli(server, "put", "trips", str(tmp_path / "more.csv"), "--append")
    assert "appended to 'trips': 5 rows" in appended.stdout
    client = flight.FlightClient(server.uri)
    try:
        got = client.do_get(flight.Ticket(b"trips")).read_all()
    finally:
        client.close()
    assert got.schema == trips.schema
    assert got.column("fare").to_pylist() == [7.5, 12.25, 9.0, 8.0, 10.0]
    assert got.column("zone").to_pylist() == ["a", None, "c", "b", None]

    (tmp_path / "bad.csv").write_text("id,fare,zone\n6,cheap,d\n")
    bad = run_cli(server, "put", "trips", str(tmp_path / "bad.csv"), "--append", check=False)
    assert bad.returncode != 0
    assert "bad.csv" in bad.stderr and "cheap" in bad.stderr and "1: fare" in bad.stderr
    (tmp_path / "other.csv").write_text("id,price,zone\n6,1.5,d\n")
    other = run_cli(server, "put", "trips", str(tmp_path / "other.csv"), "--append", check=False)
    assert other.returncode != 0
    assert "(id, price, zone) are not the table's (id, fare, zone)" in other.stderr
    # Neither changed the table.
    client = flight.FlightClient(server.uri)
    try:
        assert client.do_get(flight.Ticket(b"trips")).read_all().num_rows == 5
    finally:
        client.close()


def test_serve_help_documents_every_flag() -> None:
    out = subprocess.run(
        [str(quiver_bin()), "serve", "--help"], capture_output=True, text=True, timeout=30
    ).stdout
    for flag, env in [
        ("--listen", "QUIVER_LISTEN"),
        ("--partitions", "QUIVER_PARTITIONS"),
        ("--max-memory", "QUIVER_MAX_MEMORY"),
        ("--max-message-size", "QUIVER_MAX_MESSAGE_SIZE"),
        ("--advertise", "QUIVER_ADVERTISE"),
    ]:
        assert flag in out and env in out, flag


def test_flags_from_environment(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    env.update({"QUIVER_LISTEN": "127.0.0.1:0", "QUIVER_MAX_MEMORY": "1KiB"})
    process = subprocess.Popen(
        [str(quiver_bin()), "serve"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        assert line.startswith("quiver listening on grpc+tcp://127.0.0.1:")
        uri = line.split()[-1]
        client = flight.connect(uri)
        stats = json.loads(
            next(iter(client.do_action(flight.Action("stats", b"")))).body.to_pybytes()
        )
        assert stats["memory_limit"] == 1024
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
