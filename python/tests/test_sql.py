"""Flight SQL against the real server: pyarrow.flight raw, the quiver client, and ADBC."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight_sql
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

import quiver
from quiver import _sql
from server_process import Server, ServerFactory, quiver_bin


def trips(rows: int = 1000) -> pa.Table:
    return pa.table(
        {
            "VendorID": pa.array([i % 3 for i in range(rows)], pa.int64()),
            "fare": pa.array([i * 0.5 for i in range(rows)], pa.float64()),
            "zone": pa.array([f"z{i % 7}" for i in range(rows)], pa.string()),
            "pickup": pa.array(
                [dt.datetime(2024, 1, 1) + dt.timedelta(minutes=i) for i in range(rows)],
                pa.timestamp("us"),
            ),
        }
    )


@pytest.fixture
def stored(client: quiver.Client) -> pa.Table:
    table = trips()
    client.put("trips", table)
    return table


def adbc_uri(uri: str) -> str:
    return uri.replace("grpc+tcp://", "grpc://")


def test_raw_pyarrow_flight_sql_query(flight_client: flight.FlightClient, stored: pa.Table) -> None:
    command = _sql.statement_query(
        'SELECT "VendorID", sum(fare) AS total FROM trips GROUP BY 1 ORDER BY 1'
    )
    info = flight_client.get_flight_info(flight.FlightDescriptor.for_command(command))
    assert info.schema.names == ["VendorID", "total"]
    parts = [flight_client.do_get(e.ticket).read_all() for e in info.endpoints]
    result = pa.concat_tables(parts)
    expected = stored.group_by("VendorID").aggregate([("fare", "sum")]).sort_by("VendorID")
    assert result.column("VendorID").to_pylist() == expected.column("VendorID").to_pylist()
    assert result.column("total").to_pylist() == pytest.approx(
        expected.column("fare_sum").to_pylist()
    )


def test_client_sql_reads_every_partition_in_order(client: quiver.Client, stored: pa.Table) -> None:
    result = client.sql("SELECT * FROM trips ORDER BY pickup")
    assert result.equals(stored.sort_by("pickup"))
    assert client.sql("SELECT count(*) AS n FROM trips WHERE zone = 'z3'").column("n")[
        0
    ].as_py() == sum(1 for z in stored.column("zone").to_pylist() if z == "z3")


def test_client_sql_reader_streams(client: quiver.Client, stored: pa.Table) -> None:
    reader = client.sql_reader("SELECT fare FROM trips WHERE fare >= 100")
    assert reader.schema.names == ["fare"]
    total = sum(batch.num_rows for batch in reader)
    assert total == sum(1 for f in stored.column("fare").to_pylist() if f >= 100)


def test_client_execute_counts_rows_and_sql_tables_are_stored_tables(
    client: quiver.Client, stored: pa.Table
) -> None:
    assert client.execute_update("CREATE TABLE cheap AS SELECT * FROM trips WHERE fare < 10") == 20
    assert client.info("cheap").num_rows == 20
    assert client.get("cheap").num_rows == 20
    assert client.execute_update("INSERT INTO cheap SELECT * FROM trips WHERE fare >= 499") == 2
    assert client.execute_update("DROP TABLE cheap") == 0
    assert not client.exists("cheap")


def test_execute_is_a_deprecated_alias_of_execute_update(
    client: quiver.Client, stored: pa.Table
) -> None:
    with pytest.warns(DeprecationWarning, match="use Client.execute_update"):
        assert client.execute("CREATE TABLE cheap AS SELECT * FROM trips WHERE fare < 10") == 20
    assert client.info("cheap").num_rows == 20


def test_client_sql_errors(client: quiver.Client, stored: pa.Table) -> None:
    with pytest.raises(quiver.InvalidArgumentError, match="no_such"):
        client.sql("SELECT * FROM no_such")
    with pytest.raises(quiver.InvalidArgumentError):
        client.sql("SELEC 1")
    with pytest.raises(quiver.AlreadyExistsError):
        client.execute_update("CREATE TABLE trips AS SELECT 1")
    with pytest.raises(quiver.QuiverError) as info:
        client.execute_update("DELETE FROM trips")
    assert info.value.code == "UNIMPLEMENTED"
    assert client.get("trips").equals(stored)


def test_query_memory_limit_is_resource_exhausted(start_quiver: ServerFactory) -> None:
    server = start_quiver("--query-memory-limit", "64KiB")
    with quiver.connect(server.uri) as client:
        client.put("trips", trips(20_000))
        with pytest.raises(quiver.ResourceExhaustedError, match="query-memory-limit"):
            client.sql("SELECT * FROM trips ORDER BY zone DESC, fare")
        assert client.sql("SELECT count(*) AS n FROM trips").column("n")[0].as_py() == 20_000


def test_external_tables_from_the_command_line(start_quiver: ServerFactory, tmp_path: Path) -> None:
    table = trips(500)
    pq.write_table(table, tmp_path / "trips.parquet")
    (tmp_path / "zones.csv").write_text("zone,name\nz1,Harbor\nz2,Old Town\n")
    server = start_quiver(
        "--table",
        f"ptrips={tmp_path / 'trips.parquet'}",
        "--table",
        f"zones={tmp_path / 'zones.csv'}",
    )
    with quiver.connect(server.uri) as client:
        result = client.sql(
            "SELECT z.name, count(*) AS n FROM ptrips t JOIN zones z ON t.zone = z.zone "
            "GROUP BY 1 ORDER BY 1"
        )
        assert result.to_pylist() == [{"name": "Harbor", "n": 72}, {"name": "Old Town", "n": 72}]
        # Files are not stored tables: the store does not list them.
        assert client.list_tables() == []


def test_bad_external_table_stops_the_server_with_the_path(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.parquet"
    run = subprocess.run(
        [str(quiver_bin()), "serve", "--listen", "127.0.0.1:0", "--table", f"x={missing}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode != 0
    assert "missing.parquet" in run.stderr


def test_sql_settings_show_in_explain_and_a_bad_one_stops_the_server(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    """``--sql-setting`` sets DataFusion settings over quiver's choices; EXPLAIN's last row,
    ``quiver_settings``, shows what the plan was made under; a setting DataFusion does not
    have stops the server with its name."""
    table = trips(2_000)
    pq.write_table(table, tmp_path / "trips.parquet", row_group_size=500)
    server = start_quiver(
        "--table",
        f"ptrips={tmp_path / 'trips.parquet'}",
        "--sql-setting",
        "execution.batch_size=512",
    )
    with quiver.connect(server.uri) as client:
        explained = client.sql("EXPLAIN SELECT count(*) AS n FROM ptrips WHERE fare > 10")
        types, plans = explained["plan_type"].to_pylist(), explained["plan"].to_pylist()
        rows = dict(zip(types, plans, strict=True))
        settings = rows["quiver_settings"].splitlines()
        assert "execution.batch_size=512" in settings, settings
        assert "execution.parquet.pushdown_filters=false" in settings, settings
        # Filters evaluated while decoding drop exactly the rows the filter drops.
        expected = sum(1 for fare in table["fare"].to_pylist() if fare is not None and fare > 10)
        got = client.sql("SELECT count(*) AS n FROM ptrips WHERE fare > 10")
        assert got["n"][0].as_py() == expected
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    for bad, says in [
        ("execution.no_such_setting=1", "no_such_setting"),
        ("execution.batch_size=lots", "lots"),
    ]:
        run = subprocess.run(
            [str(quiver_bin()), "serve", "--listen", "127.0.0.1:0", "--sql-setting", bad],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
        )
        assert run.returncode != 0
        assert says in run.stderr and "--sql-setting" in run.stderr, run.stderr


# -- ADBC ------------------------------------------------------------------------------------


def test_adbc_query_parameters_and_dataframes(uri: str, stored: pa.Table) -> None:
    with flight_sql.connect(adbc_uri(uri), autocommit=True) as conn, conn.cursor() as cur:
        cur.execute('SELECT "VendorID", fare, zone, pickup FROM trips ORDER BY pickup')
        result = cur.fetch_arrow_table()
        assert result.num_rows == 1000
        assert result.column("fare").to_pylist() == stored.column("fare").to_pylist()
        cur.execute(
            "SELECT fare FROM trips WHERE fare > ? AND zone = ? ORDER BY fare",
            parameters=(490.0, "z1"),
        )
        fares = [row[0] for row in cur.fetchall()]
        expected = [
            f
            for f, z in zip(
                stored.column("fare").to_pylist(), stored.column("zone").to_pylist(), strict=True
            )
            if f > 490 and z == "z1"
        ]
        assert fares == expected
        cur.execute('SELECT * FROM trips WHERE "VendorID" = 1')
        frame = cur.fetch_df()
        assert isinstance(frame, pd.DataFrame)
        assert len(frame) == sum(1 for v in stored.column("VendorID").to_pylist() if v == 1)
        cur.execute("SELECT zone, count(*) AS n FROM trips GROUP BY zone ORDER BY zone")
        polars_frame = pl.from_arrow(cur.fetch_arrow_table())
        assert polars_frame["n"].sum() == 1000


def test_adbc_bulk_ingest_modes(uri: str, client: quiver.Client) -> None:
    table = trips(300)
    with flight_sql.connect(adbc_uri(uri), autocommit=True) as conn, conn.cursor() as cur:
        assert cur.adbc_ingest("ingested", table, mode="create") == 300
        with pytest.raises(flight_sql.Error):
            cur.adbc_ingest("ingested", table, mode="create")
        assert cur.adbc_ingest("ingested", table.slice(0, 10), mode="append") == 10
        assert client.info("ingested").num_rows == 310
        assert cur.adbc_ingest("ingested", table.slice(0, 5), mode="replace") == 5
        assert cur.adbc_ingest("other", table, mode="create_append") == 300
        cur.execute("SELECT count(*) FROM ingested")
        assert cur.fetchone()[0] == 5
    assert client.get("ingested").equals(table.slice(0, 5))


def test_adbc_get_objects_and_table_schema(uri: str, stored: pa.Table) -> None:
    with flight_sql.connect(adbc_uri(uri), autocommit=True) as conn:
        objects = conn.adbc_get_objects(depth="columns").read_all().to_pylist()
        assert [c["catalog_name"] for c in objects] == ["quiver"]
        schemas = objects[0]["catalog_db_schemas"]
        assert [s["db_schema_name"] for s in schemas] == ["public"]
        tables = {t["table_name"]: t for t in schemas[0]["db_schema_tables"]}
        assert tables["trips"]["table_type"] == "TABLE"
        assert [c["column_name"] for c in tables["trips"]["table_columns"]] == stored.schema.names
        assert conn.adbc_get_table_schema("trips") == stored.schema
        assert "TABLE" in conn.adbc_get_table_types()


def test_adbc_statement_update_and_errors(uri: str, stored: pa.Table) -> None:
    with flight_sql.connect(adbc_uri(uri), autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE copy AS SELECT * FROM trips")
        assert cur.rowcount in (1000, -1)
        cur.execute("SELECT count(*) FROM copy")
        assert cur.fetchone()[0] == 1000
        with pytest.raises(flight_sql.ProgrammingError, match="no_such"):
            cur.execute("SELECT * FROM no_such")
        cur.execute("DROP TABLE copy")
        with pytest.raises(flight_sql.Error):
            cur.execute("SELECT * FROM copy")


def test_flight_session_actions_through_adbc(server: Server) -> None:
    """ADBC's session options go through SetSessionOptions/GetSessionOptions, and its close
    through CloseSession: quiver has one catalog and one schema to set."""
    options = adbc_driver_flightsql.ConnectionOptions
    prefix = options.OPTION_SESSION_OPTION_PREFIX.value
    with flight_sql.connect(adbc_uri(server.uri), autocommit=True) as conn:
        conn.adbc_connection.set_options(**{f"{prefix}schema": "public"})
        got = json.loads(conn.adbc_connection.get_option(options.OPTION_SESSION_OPTIONS.value))
        assert got == {"catalog": "quiver", "schema": "public"}
        with pytest.raises(flight_sql.Error, match="schema"):
            conn.adbc_connection.set_options(**{f"{prefix}schema": "elsewhere"})
        with pytest.raises(flight_sql.Error, match="nonsense"):
            conn.adbc_connection.set_options(**{f"{prefix}nonsense": "1"})
        with conn.cursor() as cur:
            cur.execute("SELECT 1 AS one")
            assert cur.fetchall() == [(1,)]
    # Every session action was answered, the close's included.
    assert 'failed rpc="DoAction"' not in server.log()


def test_flight_session_actions_raw(flight_client: flight.FlightClient) -> None:
    """The session actions over plain pyarrow: a session is started by SetSessionOptions
    (its cookie in set-cookie), ended by CloseSession; an action quiver does not offer
    is UNIMPLEMENTED."""
    # CloseSessionResult{status: CLOSED}: field 1, varint 1.
    closed = b"\x08\x01"
    results = list(flight_client.do_action(flight.Action("CloseSession", b"")))
    assert [r.body.to_pybytes() for r in results] == [closed]
    # GetSessionOptionsResult without a session: the defaults.
    got = list(flight_client.do_action(flight.Action("GetSessionOptions", b"")))
    body = got[0].body.to_pybytes()
    assert b"catalog" in body and b"quiver" in body and b"schema" in body and b"public" in body
    # An unknown session is NOT_FOUND.
    options = flight.FlightCallOptions(headers=[(b"cookie", b"arrow_flight_session_id=nope")])
    with pytest.raises(KeyError, match="no session"):
        list(flight_client.do_action(flight.Action("GetSessionOptions", b""), options))
    with pytest.raises(NotImplementedError, match="RenewFlightEndpoint"):
        list(flight_client.do_action(flight.Action("RenewFlightEndpoint", b"")))
    actions = {a.type for a in flight_client.list_actions()}
    assert {"SetSessionOptions", "GetSessionOptions", "CloseSession"} <= actions
