"""What BI tools ask first, through ADBC's Flight SQL driver and raw Flight SQL commands.

DBeaver, Superset and Tableau browse a database before they query it: the catalogs, schemas,
tables (with name patterns) and columns (with types and nullability), the keys, the types,
``SHOW TABLES``, ``DESCRIBE`` and ``information_schema``. These tests ask each of them of a real
server holding a stored table, a view and tables over files (Parquet, partitioned Parquet, CSV),
and check what comes back; docs/protocol.md ("What BI tools ask") lists the same answers. The
JDBC driver's side is java/src/main/java/quiver/jdbc/FlightSqlJdbcCheck.java (test_jdbc.py).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager.dbapi as adbc_errors
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

from quiver._protobuf import field, varint
from server_process import Server, ServerFactory

STORED = "bi_trips"
#: The view's name is the stored table's with '_' made 'x': the pattern ``bi_trips`` matches
#: both, ``bi\_trips`` the stored table alone.
VIEW = "bixtrips"
EXTERNAL = ["flat", "parts", "small"]


def trips() -> pa.Table:
    ids = range(1, 21)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if i % 10 == 0 else f"name-{i}" for i in ids]),
            "fare": pa.array([i * 0.25 for i in ids]),
            "ts": pa.array([dt.datetime(2024, 1, 15, 0, 0, i) for i in ids], pa.timestamp("us")),
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


def files() -> pa.Table:
    return pa.table(
        {
            "k": pa.array([1, 2, 3], pa.int32()),
            "label": ["a", "b", "c"],
            "amount": pa.array([decimal.Decimal("1.25")] * 3, pa.decimal128(10, 2)),
            "day": pa.array([dt.date(2024, 1, i) for i in (1, 2, 3)]),
        }
    )


@pytest.fixture
def bi_server(start_quiver: ServerFactory, tmp_path: Path) -> Server:
    """A server with a stored table, a view over it, and three tables over files."""
    pq.write_table(files(), tmp_path / "flat.parquet")
    for region in ("eu", "us"):
        (tmp_path / "parts" / f"region={region}").mkdir(parents=True)
        pq.write_table(files(), tmp_path / "parts" / f"region={region}" / "a.parquet")
    (tmp_path / "small.csv").write_text("x,y\n1,p\n2,q\n")
    server = start_quiver(
        "--table",
        f"flat={tmp_path / 'flat.parquet'}",
        "--table",
        f"parts={tmp_path / 'parts'}",
        "--table",
        f"small={tmp_path / 'small.csv'}",
    )
    with connect(server) as conn, conn.cursor() as cur:
        assert cur.adbc_ingest(STORED, trips(), mode="create") == 20
        cur.execute(f"CREATE VIEW {VIEW} AS SELECT id, fare FROM {STORED} WHERE id <= 10")
        cur.fetchall()
    return server


def connect(server: Server) -> Any:
    return flight_sql.connect(server.uri.replace("grpc+tcp://", "grpc://"), autocommit=True)


@pytest.fixture
def conn(bi_server: Server) -> Iterator[Any]:
    with connect(bi_server) as c:
        yield c


def objects(conn: Any, **filters: Any) -> dict[str, dict[str, Any]]:
    """``adbc_get_objects``' tables in quiver.public, by name."""
    catalogs = conn.adbc_get_objects(**filters).read_all().to_pylist()
    if not catalogs:
        return {}
    assert [c["catalog_name"] for c in catalogs] == ["quiver"]
    schemas = catalogs[0]["catalog_db_schemas"] or []
    if not schemas:
        return {}
    assert [s["db_schema_name"] for s in schemas] == ["public"]
    return {t["table_name"]: t for t in schemas[0]["db_schema_tables"] or []}


def test_get_info_and_table_types(conn: Any) -> None:
    info = conn.adbc_get_info()
    assert info["vendor_name"] == "quiver"
    assert info["vendor_version"]
    assert info["vendor_arrow_version"]
    assert conn.adbc_get_table_types() == ["TABLE", "EXTERNAL TABLE", "VIEW"]


def test_get_objects_lists_every_kind_of_table(conn: Any) -> None:
    catalogs = conn.adbc_get_objects(depth="catalogs").read_all().to_pylist()
    assert [c["catalog_name"] for c in catalogs] == ["quiver"]
    tables = objects(conn, depth="tables")
    kinds = {name: t["table_type"] for name, t in tables.items()}
    assert kinds == {
        STORED: "TABLE",
        VIEW: "VIEW",
        "flat": "EXTERNAL TABLE",
        "parts": "EXTERNAL TABLE",
        "small": "EXTERNAL TABLE",
    }
    assert list(objects(conn, depth="tables", table_types_filter=["VIEW"])) == [VIEW]
    external = objects(conn, depth="tables", table_types_filter=["EXTERNAL TABLE"])
    assert list(external) == EXTERNAL


def test_get_objects_patterns_escapes_and_case(conn: Any) -> None:
    def names(**filters: Any) -> list[str]:
        return list(objects(conn, depth="tables", **filters))

    assert names(table_name_filter="bi_trips") == [STORED, VIEW]  # '_' is any one character
    assert names(table_name_filter="bi\\_trips") == [STORED]  # '\' escapes it
    assert names(table_name_filter="%s") == [STORED, VIEW, "parts"]
    assert names(table_name_filter="BI_TRIPS") == []  # names are case-sensitive
    assert names(db_schema_filter="pub%", table_name_filter="sma__") == ["small"]
    assert names(db_schema_filter="other") == []
    assert conn.adbc_get_objects(depth="tables", catalog_filter="other").read_all().num_rows == 0
    schemas = conn.adbc_get_objects(depth="db_schemas", db_schema_filter="p_blic")
    assert schemas.read_all().to_pylist()[0]["catalog_db_schemas"][0]["db_schema_name"] == "public"


def test_get_objects_columns_have_types_and_positions(conn: Any) -> None:
    tables = objects(conn, depth="columns", table_name_filter="bi\\_trips")
    columns = tables[STORED]["table_columns"]
    assert [c["column_name"] for c in columns] == ["id", "name", "fare", "ts"]
    assert [c["ordinal_position"] for c in columns] == [1, 2, 3, 4]
    # The server's column metadata: SQL type names as GetXdbcTypeInfo lists them.
    assert [c["xdbc_type_name"] for c in columns] == ["BIGINT", "VARCHAR", "DOUBLE", "TIMESTAMP"]
    assert [c["xdbc_is_autoincrement"] for c in columns] == [False] * 4
    # XDBC (java.sql.Types) codes: the ADBC driver's, from the Arrow types (float64 is FLOAT).
    assert [c["xdbc_data_type"] for c in columns] == [-5, 12, 6, 93]
    assert tables[STORED]["table_constraints"] == []  # no keys

    fare = objects(conn, depth="columns", table_name_filter=VIEW, column_name_filter="f%")
    assert [c["column_name"] for c in fare[VIEW]["table_columns"]] == ["fare"]

    flat = objects(conn, depth="columns", table_name_filter="flat")["flat"]["table_columns"]
    assert [c["xdbc_type_name"] for c in flat] == ["INTEGER", "VARCHAR", "DECIMAL", "DATE"]
    # A decimal's precision and scale are in the schema's metadata (JDBC's COLUMN_SIZE and
    # DECIMAL_DIGITS); the ADBC driver leaves xdbc_column_size and xdbc_decimal_digits null.
    amount = conn.adbc_get_table_schema("flat").field("amount").metadata
    assert amount[b"ARROW:FLIGHT:SQL:PRECISION"] == b"10"
    assert amount[b"ARROW:FLIGHT:SQL:SCALE"] == b"2"
    assert amount[b"ARROW:FLIGHT:SQL:TYPE_NAME"] == b"DECIMAL"
    parts = objects(conn, depth="columns", table_name_filter="parts")["parts"]["table_columns"]
    assert parts[-1]["column_name"] == "region"  # the partition column
    assert parts[-1]["xdbc_type_name"] == "VARCHAR"


def test_get_table_schema_of_each_kind(conn: Any) -> None:
    assert conn.adbc_get_table_schema(STORED) == trips().schema
    assert conn.adbc_get_table_schema(VIEW) == pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("fare", pa.float64())]
    )
    # DataFusion reads Parquet strings as string views; partition columns are dictionaries.
    flat = conn.adbc_get_table_schema("flat")
    assert flat.field("label").type == pa.string_view()
    assert flat.field("amount").type == pa.decimal128(10, 2)
    region = conn.adbc_get_table_schema("parts").field("region")
    assert region.type == pa.dictionary(pa.uint16(), pa.string())
    assert not region.nullable
    assert conn.adbc_get_table_schema("small") == pa.schema([("x", pa.int64()), ("y", pa.string())])
    # The schema carries Flight SQL's column metadata.
    assert conn.adbc_get_table_schema(STORED).field("id").metadata == {
        b"ARROW:FLIGHT:SQL:CATALOG_NAME": b"quiver",
        b"ARROW:FLIGHT:SQL:DB_SCHEMA_NAME": b"public",
        b"ARROW:FLIGHT:SQL:TABLE_NAME": STORED.encode(),
        b"ARROW:FLIGHT:SQL:TYPE_NAME": b"BIGINT",
        b"ARROW:FLIGHT:SQL:IS_AUTO_INCREMENT": b"0",
    }
    with pytest.raises(adbc_errors.ProgrammingError, match="NOT_FOUND"):
        conn.adbc_get_table_schema("no_such_table")


def rows(conn: Any, sql: str) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table().to_pylist()


def test_show_tables_lists_every_table_and_information_schema(conn: Any) -> None:
    def key(row: dict[str, Any]) -> tuple[str, str]:
        return row["table_schema"], row["table_name"]

    shown = rows(conn, "SHOW TABLES")
    listed = rows(conn, "SELECT * FROM information_schema.tables")
    assert sorted(listed, key=key) == sorted(shown, key=key)
    public = {r["table_name"]: r["table_type"] for r in shown if r["table_schema"] == "public"}
    # External tables are BASE TABLE here (DataFusion's word); GetTables says EXTERNAL TABLE.
    assert public == {
        "flat": "BASE TABLE",
        STORED: "BASE TABLE",
        "parts": "BASE TABLE",
        "small": "BASE TABLE",
        VIEW: "VIEW",
    }
    assert {r["table_catalog"] for r in shown} == {"quiver"}
    meta = {r["table_name"] for r in shown if r["table_schema"] == "information_schema"}
    assert {"tables", "columns", "views", "schemata", "df_settings"} <= meta


def test_describe_and_show_columns(conn: Any) -> None:
    described = rows(conn, f"DESCRIBE {STORED}")
    assert [(r["column_name"], r["is_nullable"]) for r in described] == [
        ("id", "NO"),
        ("name", "YES"),
        ("fare", "YES"),
        ("ts", "YES"),
    ]
    # Arrow's type names, not SQL's.
    assert [r["data_type"] for r in described][:3] == ["Int64", "Utf8", "Float64"]
    assert described[3]["data_type"].startswith("Timestamp")
    shown = rows(conn, f"SHOW COLUMNS FROM {STORED}")
    assert [(r["table_catalog"], r["table_schema"], r["table_name"]) for r in shown] == [
        ("quiver", "public", STORED)
    ] * 4
    assert [(r["column_name"], r["data_type"], r["is_nullable"]) for r in shown] == [
        (r["column_name"], r["data_type"], r["is_nullable"]) for r in described
    ]
    assert [r["column_name"] for r in rows(conn, f"DESCRIBE {VIEW}")] == ["id", "fare"]
    assert [(r["column_name"], r["data_type"]) for r in rows(conn, "DESCRIBE parts")] == [
        ("k", "Int32"),
        ("label", "Utf8View"),
        ("amount", "Decimal128(10, 2)"),
        ("day", "Date32"),
        ("region", "Dictionary(UInt16, Utf8)"),
    ]
    assert [r["data_type"] for r in rows(conn, "DESCRIBE small")] == ["Int64", "Utf8"]
    with pytest.raises(adbc_errors.ProgrammingError, match=r"INVALID_ARGUMENT.*no_such_table"):
        rows(conn, "DESCRIBE no_such_table")


def test_information_schema_columns_and_views(conn: Any) -> None:
    columns = rows(
        conn,
        "SELECT table_name, column_name, ordinal_position, is_nullable, data_type "
        "FROM information_schema.columns WHERE table_schema = 'public' "
        "ORDER BY table_name, ordinal_position",
    )
    stored = [r for r in columns if r["table_name"] == STORED]
    assert [r["column_name"] for r in stored] == ["id", "name", "fare", "ts"]
    # DataFusion counts ordinal_position from 0 (SQL, GetTables and JDBC from 1).
    assert [r["ordinal_position"] for r in stored] == [0, 1, 2, 3]
    assert [r["is_nullable"] for r in stored] == ["NO", "YES", "YES", "YES"]
    assert {r["table_name"] for r in columns} == {STORED, VIEW, *EXTERNAL}
    views = rows(conn, "SELECT table_name, definition FROM information_schema.views")
    definitions = {r["table_name"]: r["definition"] for r in views}
    assert definitions[VIEW] == (
        f"CREATE VIEW {VIEW} AS SELECT id, fare FROM {STORED} WHERE id <= 10"
    )
    # DataFusion lists every table there, with no definition but a view's.
    assert {name for name, text in definitions.items() if text is None} == {STORED, *EXTERNAL}


# Raw Flight SQL commands: what the drivers answer without asking (JDBC's getTypeInfo) or ask
# only in passing.

TYPE_URL = "type.googleapis.com/arrow.flight.protocol.sql."


def command(name: str, body: bytes = b"") -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_command(
        field(1, (TYPE_URL + name).encode()) + field(2, body)
    )


def fetch(client: flight.FlightClient, descriptor: flight.FlightDescriptor) -> pa.Table:
    info = client.get_flight_info(descriptor)
    tables = [client.do_get(e.ticket).read_all() for e in info.endpoints]
    assert [t.schema for t in tables] == [info.schema] * len(tables)
    return pa.concat_tables(tables)


@pytest.fixture
def raw(bi_server: Server) -> Iterator[flight.FlightClient]:
    client = flight.FlightClient(bi_server.uri)
    yield client
    client.close()


def test_xdbc_type_info_lists_the_sql_types(raw: flight.FlightClient) -> None:
    types = fetch(raw, command("CommandGetXdbcTypeInfo")).to_pylist()
    by_name = {t["type_name"]: t for t in types}
    # Ordered by data type (the XDBC code, as JDBC's getTypeInfo orders its rows).
    assert [(name, t["data_type"]) for name, t in by_name.items()] == [
        ("BOOLEAN", -7),
        ("TINYINT", -6),
        ("BIGINT", -5),
        ("BYTEA", -3),
        ("DECIMAL", 3),
        ("INTEGER", 4),
        ("SMALLINT", 5),
        ("REAL", 7),
        ("DOUBLE", 8),
        ("VARCHAR", 12),
        ("DATE", 91),
        ("TIME", 92),
        ("TIMESTAMP", 93),
    ]
    assert by_name["VARCHAR"]["literal_prefix"] == "'"
    assert by_name["DECIMAL"]["create_params"] == ["precision", "scale"]
    assert by_name["DECIMAL"]["maximum_scale"] == 38
    # Asked for one type (data_type, field 1): that one.
    one = fetch(raw, command("CommandGetXdbcTypeInfo", varint(1 << 3) + varint(93)))
    assert one.column("type_name").to_pylist() == ["TIMESTAMP"]


def test_key_commands_answer_empty_with_their_schemas(raw: flight.FlightClient) -> None:
    table = field(3, STORED.encode())
    primary = fetch(raw, command("CommandGetPrimaryKeys", table))
    assert primary.num_rows == 0
    assert primary.schema.names == [
        "catalog_name",
        "db_schema_name",
        "table_name",
        "column_name",
        "key_sequence",
        "key_name",
    ]
    foreign = [
        "pk_catalog_name",
        "pk_db_schema_name",
        "pk_table_name",
        "pk_column_name",
        "fk_catalog_name",
        "fk_db_schema_name",
        "fk_table_name",
        "fk_column_name",
        "key_sequence",
        "fk_key_name",
        "pk_key_name",
        "update_rule",
        "delete_rule",
    ]
    for name, body in [
        ("CommandGetImportedKeys", table),
        ("CommandGetExportedKeys", table),
        ("CommandGetCrossReference", table + field(6, VIEW.encode())),
    ]:
        keys = fetch(raw, command(name, body))
        assert (keys.num_rows, keys.schema.names) == (0, foreign), name
        assert keys.schema.field("update_rule").type == pa.uint8()


def sql_info(raw: flight.FlightClient, *ids: int) -> dict[int, Any]:
    body = field(1, b"".join(varint(i) for i in ids))
    info = fetch(raw, command("CommandGetSqlInfo", body))
    return dict(
        zip(info.column("info_name").to_pylist(), info.column("value").to_pylist(), strict=True)
    )


def test_sql_info_answers_what_jdbc_asks(raw: flight.FlightClient) -> None:
    """The entries JDBC's ``DatabaseMetaData`` reads (the driver throws on a missing one)."""
    info = sql_info(raw, 516, 522, 523, 528, 538, 540, 559, 562, 517)
    assert info[516] is True  # SQL_NULL_PLUS_NULL_IS_NULL
    assert info[522] == 0b11  # SQL_SUPPORTED_GROUP_BY: unrelated, beyond select
    assert info[523] is True  # SQL_SUPPORTS_LIKE_ESCAPE_CLAUSE
    assert info[528] == 2  # SQL_OUTER_JOINS_SUPPORT_LEVEL: full
    assert info[538] == 0b111  # SQL_SUPPORTED_SUBQUERIES: comparisons, EXISTS, IN
    assert info[540] == 0b11  # SQL_SUPPORTED_UNIONS: UNION, UNION ALL
    assert info[559] == 1024  # SQL_MAX_TABLE_NAME_LENGTH
    assert info[562] == 0  # SQL_DEFAULT_TRANSACTION_ISOLATION: none
    converts = dict(info[517])  # SQL_SUPPORTS_CONVERT: BIGINT (0) to VARCHAR (19)
    assert 19 in converts[0]
