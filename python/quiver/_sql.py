"""Flight SQL messages, encoded by hand (a few protobuf fields; no protobuf dependency).

quiver's server speaks Flight SQL on the same port as the table store. The
client needs three messages: ``CommandStatementQuery`` (a query's
GetFlightInfo), ``CommandStatementUpdate`` (a statement run by DoPut) and the
``DoPutUpdateResult`` that answers it, each wrapped in ``google.protobuf.Any``
as Flight SQL requires.
"""

from __future__ import annotations

_TYPE_URL = "type.googleapis.com/arrow.flight.protocol.sql."


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """Encode a length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _any(message: str, value: bytes) -> bytes:
    return _field(1, (_TYPE_URL + message).encode()) + _field(2, value)


def statement_query(query: str) -> bytes:
    """``Any(CommandStatementQuery{query})``: the descriptor command of a query."""
    return _any("CommandStatementQuery", _field(1, query.encode()))


def statement_update(statement: str) -> bytes:
    """``Any(CommandStatementUpdate{query})``: the descriptor command of a DoPut statement."""
    return _any("CommandStatementUpdate", _field(1, statement.encode()))


def update_count(put_result: bytes) -> int:
    """Return the ``record_count`` of a ``DoPutUpdateResult`` (field 1, an int64 varint)."""
    position = 0
    while position < len(put_result):
        key, position = _read_varint(put_result, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _read_varint(put_result, position)
            if number == 1:
                return value - (1 << 64) if value >= 1 << 63 else value
        elif wire_type == 2:
            length, position = _read_varint(put_result, position)
            position += length
        else:
            break
    return 0


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise ValueError("truncated protobuf varint in the server's answer")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position
