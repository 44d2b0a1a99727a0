"""Flight SQL messages, encoded by hand (a few protobuf fields; no protobuf dependency).

quiver's server speaks Flight SQL on the same port as the table store. The
client needs three messages: ``CommandStatementQuery`` (a query's
GetFlightInfo), ``CommandStatementUpdate`` (a statement run by DoPut) and the
``DoPutUpdateResult`` that answers it, each wrapped in ``google.protobuf.Any``
as Flight SQL requires.
"""

from __future__ import annotations

from ._protobuf import VARINT, field, fields, int64

_TYPE_URL = "type.googleapis.com/arrow.flight.protocol.sql."


def _any(message: str, value: bytes) -> bytes:
    return field(1, (_TYPE_URL + message).encode()) + field(2, value)


def statement_query(query: str) -> bytes:
    """``Any(CommandStatementQuery{query})``: the descriptor command of a query."""
    return _any("CommandStatementQuery", field(1, query.encode()))


def statement_update(statement: str) -> bytes:
    """``Any(CommandStatementUpdate{query})``: the descriptor command of a DoPut statement."""
    return _any("CommandStatementUpdate", field(1, statement.encode()))


def update_count(put_result: bytes) -> int:
    """Return the ``record_count`` of a ``DoPutUpdateResult`` (field 1, an int64 varint).

    Raises
    ------
    ValueError
        The message is truncated.
    """
    for number, wire_type, value in fields(put_result):
        if number == 1 and wire_type == VARINT and isinstance(value, int):
            return int64(value)
    return 0
