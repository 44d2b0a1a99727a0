"""Write the seed corpus of the ``put_body`` fuzz target: real DoPut request bodies.

Each seed is what pyarrow's Flight client sends in a DoPut's HTTP/2 DATA frames: IPC
messages (schema, dictionaries, record batches) from pyarrow's own IPC writer, each in a
FlightData (descriptor and put options on the first), each FlightData in its 5-byte gRPC
frame. The target reads a seed's first byte as how to cut the body into frames.

    python fuzz/make_seeds.py fuzz/corpus/put_body
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import pyarrow as pa


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def flight_data(
    header: bytes, body: bytes, descriptor: bytes = b"", metadata: bytes = b""
) -> bytes:
    message = b""
    if descriptor:
        message += field(1, descriptor)
    message += field(2, header)
    if metadata:
        message += field(3, metadata)
    if body:
        message += field(1000, body)
    return b"\x00" + len(message).to_bytes(4, "big") + message


def put_body(
    table: pa.Table, options: bytes = b"", max_chunksize: int | None = None
) -> bytes:
    """The DoPut request body of ``table``, as pyarrow's IPC writer frames it."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max_chunksize)
    descriptor = b"\x08\x01" + field(3, b"t")  # type PATH, path ["t"]
    body = b""
    for i, message in enumerate(pa.ipc.MessageReader.open_stream(sink.getvalue())):
        first = i == 0
        body += flight_data(
            message.metadata.to_pybytes(),
            message.body.to_pybytes() if message.body is not None else b"",
            descriptor if first else b"",
            options if first else b"",
        )
    return body


def seeds() -> dict[str, bytes]:
    n = 64
    typed = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "name": [None if i % 3 == 0 else f"name-{i}" for i in range(n)],
            "dict": pa.array(
                [["red", "green", "blue"][i % 3] for i in range(n)]
            ).dictionary_encode(),
            "list": [[i, None] if i % 4 else None for i in range(n)],
            "struct": [{"flag": i % 2 == 0, "x": float(i)} for i in range(n)],
            "ts": [
                datetime.datetime(2024, 1, 1) + datetime.timedelta(seconds=i)
                for i in range(n)
            ],
            "dec": pa.array([i * 100 for i in range(n)], pa.decimal128(12, 2)),
            "bin": pa.array(
                [bytes([i]) * (i % 5) for i in range(n)], pa.large_binary()
            ),
            "view": pa.array([f"v{i}" * (i % 7) for i in range(n)], pa.string_view()),
        }
    )
    ints = pa.table({"a": pa.array(range(100), pa.int64())})
    return {
        "typed": put_body(typed),
        "typed-small-batches": put_body(typed, max_chunksize=16),
        "ints-append": put_body(ints, b'{"mode":"append"}'),
        "ints-partitions": put_body(ints, b'{"partitions":2}'),
        "empty": put_body(ints.slice(0, 0)),
    }


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/put_body")
    out.mkdir(parents=True, exist_ok=True)
    for name, body in seeds().items():
        for cut in (0, 1, 2, 3):  # whole, pieces of 2 bytes, 4096, 7
            (out / f"{name}-cut{cut}").write_bytes(bytes([cut]) + body)
    print(f"wrote {len(list(out.iterdir()))} seeds to {out}")


if __name__ == "__main__":
    main()
