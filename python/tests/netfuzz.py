"""A network fuzzer for a running quiver server: malformed Flight RPCs over raw HTTP/2.

Each case opens its own HTTP/2 connection (the ``h2`` package over a loopback socket)
and sends one RPC that a Flight client library would never send: mutated FlightData
(bit flips, truncations, boundary values), huge declared gRPC and protobuf lengths,
a schema other than the stored table's, dictionary batches out of order or missing,
compressed IPC buffers (quiver's arrow has no IPC compression) and compression bombs,
random bytes as tickets, descriptors and actions, streams reset or left half-closed.
The answer must be a gRPC status other than INTERNAL or UNKNOWN (save gRPC's own
INTERNAL for a request whose gRPC framing or protobuf does not parse, which tonic's
codec answers before quiver sees the request), or a reset of the broken stream; the caller
then checks that the server still serves what it had.

Run it against a server for longer: ``python python/tests/netfuzz.py URI CASES``.
"""

from __future__ import annotations

import random
import re
import socket
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.events
import pyarrow as pa

SERVICE = "/arrow.flight.protocol.FlightService/"
ANSWER_TIMEOUT_S = 10.0


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def grpc_frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


def path_descriptor(name: bytes) -> bytes:
    return b"\x08\x01" + field(3, name)


def flight_data(
    header: bytes, body: bytes, descriptor: bytes = b"", metadata: bytes = b""
) -> bytes:
    """One FlightData message, protobuf-encoded."""
    out = field(1, descriptor) if descriptor else b""
    out += field(2, header)
    out += field(3, metadata) if metadata else b""
    return out + (field(1000, body) if body else b"")


def ipc_messages(table: pa.Table, **options: object) -> list[tuple[bytes, bytes]]:
    """(header, body) of each IPC message pyarrow writes for ``table``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(**options)) as w:
        w.write_table(table, max_chunksize=64)
    return [
        (m.metadata.to_pybytes(), m.body.to_pybytes() if m.body is not None else b"")
        for m in pa.ipc.MessageReader.open_stream(sink.getvalue())
    ]


def put_messages(
    name: bytes, messages: list[tuple[bytes, bytes]], metadata: bytes = b""
) -> list[bytes]:
    """The FlightData messages of a DoPut of ``messages`` to table ``name``."""
    return [
        flight_data(h, b, path_descriptor(name) if i == 0 else b"", metadata if i == 0 else b"")
        for i, (h, b) in enumerate(messages)
    ]


@dataclass
class Case:
    """One RPC: its path, the request body, and how the stream ends."""

    kind: str
    path: str
    body: bytes
    ending: str = "end"  # "end", "reset" (RST_STREAM CANCEL), "open" (close the socket)


def sample_tables() -> dict[str, pa.Table]:
    n = 200
    return {
        "numbers": pa.table({"a": pa.array(range(n), pa.int64()), "b": [str(i) for i in range(n)]}),
        "dicts": pa.table(
            {
                "d": pa.array([["x", "y", "z"][i % 3] for i in range(n)]).dictionary_encode(),
                "l": [[i, None] if i % 4 else None for i in range(n)],
            }
        ),
    }


def cases(rng: random.Random, tables: dict[str, pa.Table]) -> Callable[[], Case]:
    """A generator of random cases over the stored ``tables``."""
    puts = {name: put_messages(b"fuzz", ipc_messages(t)) for name, t in tables.items()}
    compressed = {
        codec: put_messages(b"fuzz", ipc_messages(tables["numbers"], compression=codec))
        for codec in ("lz4", "zstd")
    }
    # 32 MiB of zeros, a few KiB compressed: refused before anything inflates it.
    bomb = put_messages(
        b"fuzz",
        ipc_messages(pa.table({"z": pa.array([0] * (4 << 20), pa.int64())}), compression="zstd"),
    )

    def mutate(data: bytes) -> bytes:
        data = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            if not data:
                break
            at = rng.randrange(len(data))
            choice = rng.randrange(5)
            if choice == 0:
                data[at] ^= 1 << rng.randrange(8)
            elif choice == 1:
                del data[at:]
            elif choice == 2:
                value = rng.choice([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF])
                data[at : at + 4] = value.to_bytes(4, "little")
            elif choice == 3:
                del data[at : at + rng.randint(1, 64)]
            else:
                data[at] = rng.randrange(256)
        return bytes(data)

    def framed(messages: list[bytes]) -> bytes:
        return b"".join(grpc_frame(m) for m in messages)

    def make() -> Case:
        kind = rng.choice(
            [
                "mutated-message",
                "mutated-body",
                "truncated",
                "huge-grpc-length",
                "huge-field-length",
                "wrong-schema-append",
                "dictionary-out-of-order",
                "compressed",
                "compression-bomb",
                "random-ticket",
                "random-descriptor",
                "random-action",
                "random-bytes-any-rpc",
                "reset-mid-put",
                "half-closed-put",
            ]
        )
        messages = puts[rng.choice(list(puts))]
        put = SERVICE + "DoPut"
        if kind == "mutated-message":
            i = rng.randrange(len(messages))
            body = [*messages[:i], mutate(messages[i]), *messages[i + 1 :]]
            return Case(kind, put, framed(body))
        if kind == "mutated-body":
            return Case(kind, put, mutate(framed(messages)))
        if kind == "truncated":
            data = framed(messages)
            return Case(kind, put, data[: rng.randrange(len(data))])
        if kind == "huge-grpc-length":
            declared = rng.choice([0x7FFFFFFF, 0xFFFFFFFF, 1 << 30, (1 << 30) + 1])
            return Case(kind, put, b"\x00" + declared.to_bytes(4, "big") + messages[0][:100])
        if kind == "huge-field-length":
            header, _ = ipc_messages(tables["numbers"])[1]
            huge = varint(rng.choice([1 << 31, 1 << 40, (1 << 63) - 1, 1 << 62]))
            tag = rng.choice([b"\x12", b"\x1a", b"\xc2\x3e", b"\x0a"])
            return Case(kind, put, framed([messages[0], tag + huge + header[:64]]))
        if kind == "wrong-schema-append":
            target = rng.choice([b"numbers", b"dicts"])
            other = ipc_messages(tables["numbers" if target == b"dicts" else "dicts"])
            body = put_messages(target, other, b'{"mode":"append"}')
            return Case(kind, put, framed(body))
        if kind == "dictionary-out-of-order":
            dicts = puts["dicts"]
            order = [dicts[0], *rng.sample(dicts[1:], len(dicts) - 1)]
            if rng.random() < 0.5:
                order = [m for m in order if m is not dicts[1]]  # no dictionary at all
            return Case(kind, put, framed(order))
        if kind == "compressed":
            return Case(kind, put, framed(compressed[rng.choice(["lz4", "zstd"])]))
        if kind == "compression-bomb":
            return Case(kind, put, framed(bomb))
        if kind == "random-ticket":
            ticket = rng.randbytes(rng.randrange(200))
            return Case(kind, SERVICE + "DoGet", grpc_frame(field(1, ticket)))
        if kind == "random-descriptor":
            rpc = rng.choice(["GetFlightInfo", "GetSchema", "PollFlightInfo"])
            return Case(kind, SERVICE + rpc, grpc_frame(rng.randbytes(rng.randrange(200))))
        if kind == "random-action":
            action = field(1, rng.randbytes(rng.randrange(20))) + field(2, rng.randbytes(100))
            if rng.random() < 0.5:
                action = field(1, rng.choice([b"delete", b"rename", b"stats"])) + field(
                    2, rng.randbytes(rng.randrange(100))
                )
            return Case(kind, SERVICE + "DoAction", grpc_frame(action))
        if kind == "random-bytes-any-rpc":
            rpc = rng.choice(
                ["DoPut", "DoGet", "DoAction", "ListFlights", "Handshake", "DoExchange", "Nope"]
            )
            return Case(kind, SERVICE + rpc, rng.randbytes(rng.randrange(1, 300)))
        if kind == "reset-mid-put":
            data = framed(messages)
            return Case(kind, put, data[: rng.randrange(len(data))], ending="reset")
        data = framed(messages)
        return Case(kind, put, data[: rng.randrange(len(data))], ending="open")

    return make


def send(host: str, port: int, case: Case) -> str:
    """Send ``case`` on a fresh connection; return the gRPC status name, or what happened."""
    sock = socket.create_connection((host, port), timeout=ANSWER_TIMEOUT_S)
    try:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        conn.send_headers(
            stream,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", case.path),
                (":authority", f"{host}:{port}"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        sock.sendall(conn.data_to_send())
        data = case.body
        while data:
            size = min(
                len(data), conn.max_outbound_frame_size, conn.local_flow_control_window(stream)
            )
            if size <= 0:
                break  # the server stopped reading: it has answered or will
            conn.send_data(stream, data[:size])
            data = data[size:]
            sock.sendall(conn.data_to_send())
        if case.ending == "end":
            conn.end_stream(stream)
        elif case.ending == "reset":
            conn.reset_stream(stream, error_code=8)
            sock.sendall(conn.data_to_send())
            return "reset-by-client"
        else:
            sock.sendall(conn.data_to_send())
            return "left-open"
        sock.sendall(conn.data_to_send())
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        status = None
        while time.monotonic() < deadline:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return status or "connection-closed"
            for event in conn.receive_data(chunk):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    for key, value in event.headers:
                        if key == b"grpc-status":
                            status = CODES.get(value.decode(), value.decode())
                        # gRPC's own code for a request that does not parse
                        # (doc/statuscodes.md), from tonic's codec.
                        if (
                            key == b"grpc-message"
                            and status == "INTERNAL"
                            and TONIC_FRAMING.search(urllib.parse.unquote(value.decode()))
                        ):
                            status = "INTERNAL (gRPC framing or protobuf, from tonic)"
                if isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                if isinstance(event, h2.events.StreamEnded):
                    return status or "no-status"
                if isinstance(event, h2.events.StreamReset):
                    return f"reset-{event.error_code}"
            sock.sendall(conn.data_to_send())
        return "no-answer"
    finally:
        sock.close()


CODES = {
    "0": "OK",
    "1": "CANCELLED",
    "2": "UNKNOWN",
    "3": "INVALID_ARGUMENT",
    "4": "DEADLINE_EXCEEDED",
    "5": "NOT_FOUND",
    "6": "ALREADY_EXISTS",
    "7": "PERMISSION_DENIED",
    "8": "RESOURCE_EXHAUSTED",
    "9": "FAILED_PRECONDITION",
    "10": "ABORTED",
    "11": "OUT_OF_RANGE",
    "12": "UNIMPLEMENTED",
    "13": "INTERNAL",
    "14": "UNAVAILABLE",
}
#: tonic's codec answers INTERNAL, as gRPC specifies, to a request whose gRPC framing
#: (the compressed-flag byte, a message cut short) or protobuf does not parse, before
#: quiver sees it.
TONIC_FRAMING = re.compile(
    r"^protocol error: |failed to decode Protobuf message|^Unexpected EOF decoding stream"
)
BAD = {"UNKNOWN", "INTERNAL", "no-answer", "no-status"}


def run(uri: str, count: int, seed: int = 0) -> Counter[str]:
    """Send ``count`` random cases to the server at ``uri``; count answers by kind/status.

    Raises AssertionError on an answer no malformed request may get (INTERNAL,
    UNKNOWN, none at all).
    """
    host, port = uri.removeprefix("grpc+tcp://").rsplit(":", 1)
    make = cases(random.Random(seed), sample_tables())
    seen: Counter[str] = Counter()
    for _ in range(count):
        case = make()
        answer = send(host, int(port), case)
        seen[f"{case.kind} -> {answer}"] += 1
        assert answer not in BAD, f"{case.kind}: {answer} ({case.path}, {len(case.body)} bytes)"
    return seen


if __name__ == "__main__":
    counts = run(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10_000)
    for line, n in sorted(counts.items()):
        print(f"{n:7d}  {line}")
    print(f"{sum(counts.values())} cases")
