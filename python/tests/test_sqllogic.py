"""SQL behaviour as sqllogictest-style files: each statement beside its expected result.

Every ``tests/sql/*.slt`` file runs against a fresh real server, through ADBC's
Flight SQL driver. The format is sqllogictest's:

    statement ok
    CREATE TABLE t AS VALUES (1, 'a')

    statement error <regular expression the error message must match>
    SELECT * FROM missing

    query IT rowsort          (column types, ignored; "rowsort" sorts the rows)
    SELECT * FROM t
    ----
    1 a

Values print as: NULL, true/false, integers, floats rounded to 6 significant
digits, timestamps in ISO form, ``(empty)`` for an empty string; columns are
separated by one space.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import pytest

SLT_DIR = Path(__file__).parent / "sql"


@dataclass
class Record:
    """One statement or query of a file, with where it starts."""

    line: int
    kind: str  # "ok", "error" or "query"
    sql: str
    error: str = ""
    sort: bool = False
    expected: tuple[str, ...] = ()


def parse(path: Path) -> Iterator[Record]:
    """Yield the records of an .slt file."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        start = i + 1
        words = line.split(maxsplit=2)
        i += 1
        sql: list[str] = []
        while i < len(lines) and lines[i].strip() and lines[i].strip() != "----":
            sql.append(lines[i])
            i += 1
        text = "\n".join(sql)
        if words[0] == "statement" and words[1] == "ok":
            yield Record(start, "ok", text)
        elif words[0] == "statement" and words[1] == "error":
            yield Record(start, "error", text, error=words[2] if len(words) > 2 else "")
        elif words[0] == "query":
            expected: list[str] = []
            if i < len(lines) and lines[i].strip() == "----":
                i += 1
                while i < len(lines) and lines[i].strip():
                    expected.append(lines[i].strip())
                    i += 1
            yield Record(
                start, "query", text, sort="rowsort" in words[2:], expected=tuple(expected)
            )
        else:
            raise ValueError(f"{path.name}:{start}: unknown record {line!r}")


def render(value: object) -> str:
    """How a value prints in an expected result."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, str) and value == "":
        return "(empty)"
    return str(value)


def run(cur: flight_sql.Cursor, sql: str) -> list[tuple[object, ...]]:
    """Execute ``sql`` and fetch every row (errors may come at either step)."""
    cur.execute(sql)
    return cur.fetchall()


@pytest.mark.parametrize("path", sorted(SLT_DIR.glob("*.slt")), ids=lambda p: p.name)
def test_slt(path: Path, uri: str) -> None:
    with (
        flight_sql.connect(uri.replace("grpc+tcp://", "grpc://"), autocommit=True) as conn,
        conn.cursor() as cur,
    ):
        for record in parse(path):
            where = f"{path.name}:{record.line}"
            if record.kind == "error":
                with pytest.raises(flight_sql.Error) as raised:
                    run(cur, record.sql)
                assert re.search(record.error, str(raised.value)), f"{where}: {raised.value}"
                continue
            try:
                rows = run(cur, record.sql)
            except flight_sql.Error as e:
                pytest.fail(f"{where}: {record.sql}\n{e}", pytrace=False)
            if record.kind == "query":
                got = [" ".join(render(v) for v in row) for row in rows]
                if record.sort:
                    got.sort()
                assert got == list(record.expected), f"{where}: {record.sql}"
