"""The few pieces of the protobuf wire format quiver reads and writes by hand.

The client encodes a handful of Flight SQL messages and decodes the server's rich
error details (``google.rpc.Status``); a reader and a writer of varints and
length-delimited fields are all they need, without a protobuf dependency.
"""

from __future__ import annotations

from collections.abc import Iterator

#: Wire types (https://protobuf.dev/programming-guides/encoding/).
VARINT, I64, LEN, I32 = 0, 1, 2, 5


def varint(value: int) -> bytes:
    """Encode a non-negative integer as a varint."""
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """Encode a length-delimited field (wire type 2)."""
    return varint(number << 3 | LEN) + varint(len(payload)) + payload


def read_varint(data: bytes, position: int) -> tuple[int, int]:
    """Return the varint at ``position`` and the position after it.

    Raises
    ------
    ValueError
        The data ends inside the varint, or it is longer than 10 bytes.
    """
    value = shift = 0
    while True:
        if position >= len(data):
            raise ValueError("truncated protobuf varint")
        if shift > 63:
            raise ValueError("protobuf varint longer than 10 bytes")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(number, wire_type, value)`` for each field of an encoded message.

    A varint's value is an ``int``; a length-delimited, 64-bit or 32-bit field's
    is its ``bytes``.

    Raises
    ------
    ValueError
        The message is truncated or uses a wire type this reader does not know
        (the deprecated groups).
    """
    position = 0
    while position < len(data):
        key, position = read_varint(data, position)
        number, wire_type = key >> 3, key & 7
        value: int | bytes
        if wire_type == VARINT:
            value, position = read_varint(data, position)
        elif wire_type in (LEN, I64, I32):
            if wire_type == LEN:
                length, position = read_varint(data, position)
            else:
                length = 8 if wire_type == I64 else 4
            if position + length > len(data):
                raise ValueError("truncated protobuf field")
            value = bytes(data[position : position + length])
            position += length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type} (field {number})")
        yield number, wire_type, value


def int64(value: int) -> int:
    """Return a varint read as a two's complement int64 (or int32: they sign-extend)."""
    return value - (1 << 64) if value >= 1 << 63 else value
