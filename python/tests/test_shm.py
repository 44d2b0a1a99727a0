"""The same-host shared-memory data plane (docs/shm.md), against the real server binary.

Covers: round trips of every type through the shm path (and across the two
transports), zero copy, the Dissociated IPC framing read off the socket by hand,
refusal of unsealed, writable, foreign, oversized and out-of-bounds handles,
one-time tickets, a reader keeping a version through replace and delete, a client
that dies without ``free_data``, authorization, and the ``transport`` setting.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import quiver
from flight_helpers import typed_table
from quiver import _core, _shm
from quiver.errors import (
    InvalidArgumentError,
    PermissionDeniedError,
    QuiverError,
    ResourceExhaustedError,
)
from security_helpers import PASSWORDS, make_users
from server_process import ServerFactory


def memfds(pid: int) -> list[str]:
    """The server's open memfds that hold tables (its exports, and memfds clients put)."""
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(("/memfd:quiver:", "/memfd:quiver-put")):
            out.append(target)
    return out


def mapped_memfds() -> list[str]:
    """The memfd mappings of this process."""
    return [line for line in Path("/proc/self/maps").read_text().splitlines() if "memfd:" in line]


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def shm_endpoint(client: flight.FlightClient, name: str) -> tuple[_shm.Location, bytes]:
    options = flight.FlightCallOptions(headers=[_shm.TRANSPORT_HEADER])
    info = client.get_flight_info(flight.FlightDescriptor.for_path(name), options)
    for endpoint in info.endpoints:
        for location in endpoint.locations:
            parsed = _shm.Location.parse(location.uri.decode())
            if parsed is not None:
                return parsed, endpoint.ticket.ticket
    raise AssertionError("no shared-memory endpoint offered")


def numbers(rows: int, seed: int = 0) -> pa.Table:
    return pa.table(
        {f"c{i}": pa.array(range(seed + i, seed + i + rows), pa.int64()) for i in range(4)}
    )


# -- round trips ---------------------------------------------------------------------------


def test_every_type_round_trips_through_shm(uri: str) -> None:
    table = typed_table(batches=12, rows=150)
    with quiver.connect(uri, transport="shm") as shm, quiver.connect(uri, transport="grpc") as grpc:
        shm.put("typed", table)
        assert shm.get("typed").equals(table)
        assert grpc.get("typed").equals(table), "what shm put, gRPC reads"
        grpc.put("typed2", table)
        assert shm.get("typed2").equals(table), "what gRPC put, shm reads"
        # Sliced input, an empty table, and appends.
        sliced = table.slice(77, 500)
        shm.put("sliced", sliced)
        assert shm.get("sliced").equals(sliced)
        empty = table.schema.empty_table()
        shm.put("empty", empty)
        assert shm.get("empty").equals(empty)
        shm.put("grow", numbers(10))
        shm.put("grow", numbers(5, seed=100), mode="append")
        assert shm.get("grow").equals(pa.concat_tables([numbers(10), numbers(5, seed=100)]))


def test_a_put_waits_for_the_server_to_close_the_put_before(uri: str) -> None:
    # The server closes a put's connection once the version that put replaced is freed;
    # the next put to the same socket waits for that close before writing its memfds,
    # so that they get the pages just freed (docs/shm.md, Writing).
    with quiver.connect(uri, transport="shm") as client:
        client.put("again", numbers(1000))
        with flight.FlightClient(uri) as plain:
            location, _ = shm_endpoint(plain, "again")
        [first] = _shm._closing.sockets[location.path]
        client.put("again", numbers(1000, seed=1))
        assert first.fileno() == -1, "the second put waited for the first's close"
        [second] = _shm._closing.sockets[location.path]
        assert second is not first
        assert second.recv(1) == b"", "nothing follows the reply but the close"
        _shm._closing.wait(location.path)
        assert second.fileno() == -1
        assert location.path not in _shm._closing.sockets
        assert client.get("again").equals(numbers(1000, seed=1))


def test_each_offset_is_freed_once(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A column without nulls has an empty validity buffer at its values' offset.
    # The pure-Python get's _free (the core's frees: test_core_get_frees_each_offset_once...).
    monkeypatch.setenv("QUIVER_CORE", "0")
    freed: list[list[int]] = []
    monkeypatch.setattr(_shm, "_free", lambda _sock, _tag, offsets: freed.append(offsets))
    table = typed_table(batches=3, rows=100)
    with quiver.connect(uri, transport="shm") as client:
        client.put("freed", table)
        got = client.get("freed")
        assert got.equals(table)
        del got
        gc.collect()
    assert len(freed) == 1
    assert freed[0] == sorted(set(freed[0]))
    assert len(freed[0]) > 3


def test_get_is_zero_copy_and_shared(uri: str, server) -> None:
    table = numbers(200_000)
    with quiver.connect(uri, transport="shm") as client:
        client.put("big", table)
        first = client.get("big")
        second = client.get("big")
        assert first.equals(table) and second.equals(table)
        # Both results point into one mapping of the server's memfd.
        maps = mapped_memfds()
        assert maps, "the result is a mapping of the server's memfd"
        address = first.column(0).chunk(0).buffers()[1].address
        spans = []
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            spans.append((lo, hi))
        assert any(lo <= address < hi for lo, hi in spans)
        # One export per version in the server, however many readers.
        assert len(memfds(server.process.pid)) == 1


@pytest.fixture(params=["core", "python"])
def get_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the Rust core's shared-memory get, then the pure-Python one."""
    if request.param == "core":
        monkeypatch.setenv("QUIVER_CORE", "1")
    else:
        monkeypatch.setenv("QUIVER_CORE", "0")
    return str(request.param)


def test_many_batches_round_trip_exactly(
    flight_client: flight.FlightClient, uri: str, get_path: str
) -> None:
    table = numbers(512 * 64).combine_chunks()
    batches = table.to_batches(max_chunksize=64)
    assert len(batches) == 512
    with quiver.connect(uri, transport="grpc") as client:
        client.put("many", batches)
        # Put in three memfds: the offsets run over them one after the other.
        location, ticket = put_ticket(client, "many3")
        parts = [pa.Table.from_batches(batches[i : i + 200]) for i in range(0, 512, 200)]
        fds = [_shm.sealed_memfd(part) for part in parts]
        send_put(location, ticket, fds)
        for fd in fds:
            os.close(fd)
    for name in ("many", "many3"):
        got = _shm.get(*shm_endpoint(flight_client, name))
        assert got.equals(table)
        assert [b.num_rows for b in got.to_batches()] == [64] * 512, "batch boundaries kept"


def test_core_get_is_zero_copy_and_frees_on_release(
    flight_client: flight.FlightClient, uri: str, server
) -> None:
    table = numbers(200_000)
    with quiver.connect(uri, transport="grpc") as client:
        client.put("t", table.combine_chunks().to_batches(max_chunksize=20_000))
    got = _shm._get_core(_core, *shm_endpoint(flight_client, "t"))
    assert got.equals(table) and got.column(0).num_chunks == 10
    # Every buffer of every batch lies in this process's mapping of the server's memfd.
    spans = []
    for line in mapped_memfds():
        if "memfd:quiver:" in line:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            spans.append((lo, hi))
    assert spans, "the server's memfd is mapped"
    for column in got.columns:
        for chunk in column.chunks:
            values = chunk.buffers()[1]
            assert any(
                lo <= values.address and values.address + values.size <= hi for lo, hi in spans
            )
    del values, chunk, column
    pid = server.process.pid
    with quiver.connect(uri, transport="grpc") as client:
        client.delete("t")
    time.sleep(0.2)
    assert len(memfds(pid)) == 1, "the reader holds the deleted version's memfd"
    # Released: free_data for every offset, and the server lets the memfd go.
    del got
    gc.collect()
    assert wait_until(lambda: memfds(pid) == []), memfds(pid)
    assert not [line for line in mapped_memfds() if "memfd:quiver:" in line], "unmapped"


def test_get_of_a_table_holding_a_zero_row_batch(uri: str) -> None:
    # A gRPC put of an empty table stores one batch of zero rows: its body has no
    # bytes, and the stream built from the mapping must skip it, not read it.
    empty = pa.table({"x": pa.array([], pa.int64()), "s": pa.array([], pa.string())})
    with quiver.connect(uri, transport="grpc") as grpc, quiver.connect(uri) as shm:
        grpc.put("empty", empty)
        assert shm.get("empty").equals(empty)
        grpc.put("empty", pa.table({"x": [1], "s": ["a"]}), mode="append")
        assert shm.get("empty").to_pydict() == {"x": [1], "s": ["a"]}


# -- the framing, read by hand --------------------------------------------------------------


@pytest.mark.parametrize("want", ["want_data", "want_bundled"])
def test_framing_follows_dissociated_ipc(
    flight_client: flight.FlightClient, uri: str, want: str
) -> None:
    with quiver.connect(uri, transport="grpc") as client:
        client.put("framed", numbers(1000).combine_chunks().to_batches(max_chunksize=300))
    location, ticket = shm_endpoint(flight_client, "framed")
    assert location.want_data == 1 and location.free_data == 2 and location.want_bundled == 4
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(location.path)
    sock.send(bytes([1]) + struct.pack("<Q", getattr(location, want)) + ticket)
    messages, fds, datagrams = [], [], 0
    while True:
        data, ancillary, flags, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(4))
        assert not flags & socket.MSG_TRUNC
        datagrams += 1
        for _level, _kind, payload in ancillary:
            fds += struct.unpack(f"<{len(payload) // 4}i", payload)
        if want == "want_bundled":
            # A bundle: [3] then ([length u32 LE][message])*, at most 64 KiB.
            assert data[0] == 3 and len(data) <= 64 << 10
            pos = 1
            while pos < len(data):
                (length,) = struct.unpack_from("<I", data, pos)
                messages.append((data[pos + 4 : pos + 4 + length], len(fds)))
                pos += 4 + length
            assert pos == len(data)
        else:
            messages.append((data, len(fds)))
        if messages[-1][0][:2] == bytes([0, 0]):
            break
    # want_data: one message per datagram; want_bundled: all of them in one here.
    assert datagrams == (len(messages) if want == "want_data" else 1)
    # The memfd comes with the first message, and is sealed read-only.
    assert messages[0][1] == 1 and len(fds) == 1
    seals = fcntl.fcntl(fds[0], fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
    size = os.fstat(fds[0]).st_size
    region = mmap.mmap(fds[0], size, prot=mmap.PROT_READ)
    os.close(fds[0])
    metadata = [m for m, _ in messages if m[0] == 0 and m[1] == 1]
    tagged = [m for m, _ in messages if m[0] == 1]
    end = messages[-1][0]
    # Metadata: sequence numbers from 0, schema first, one per message.
    seqs = [struct.unpack_from("<I", m, 2)[0] for m in metadata]
    assert seqs == list(range(len(metadata)))
    assert len(metadata) == 1 + 4, "schema and 4 batches (300+300+300+100 rows)"
    # End of Stream: type 0 and the next sequence number, exactly 5 bytes.
    assert len(end) == 6 and struct.unpack_from("<I", end, 2)[0] == len(metadata)
    # Body messages: tag = (1 << 56) | seq, reserved bits zero, type-1 pairs.
    offsets = []
    for message, seq in zip(tagged, range(1, len(metadata)), strict=True):
        (tag,) = struct.unpack_from("<Q", message, 1)
        assert tag >> 56 == 1 and (tag >> 32) & 0xFFFFFF == 0 and tag & 0xFFFFFFFF == seq
        total, count = struct.unpack_from("<QQ", message, 9)
        pairs = [struct.unpack_from("<QQ", message, 25 + 16 * i) for i in range(count)]
        assert len(message) == 25 + 16 * count and sum(n for _, n in pairs) == total
        for offset, length in pairs:
            assert offset + length <= size
        offsets += [offset for offset, _ in pairs]
    # The first batch's first column, read where its pair says.
    (_, _count) = struct.unpack_from("<QQ", tagged[0], 9)
    values_offset, values_len = struct.unpack_from("<QQ", tagged[0], 25 + 16)
    first = struct.unpack_from(f"<{values_len // 8}q", region, values_offset)
    assert list(first) == list(range(300))
    # free_data for every offset: the server is done and closes the connection.
    sock.send(
        bytes([1])
        + struct.pack("<Q", location.free_data)
        + struct.pack(f"<{len(offsets)}Q", *offsets)
    )
    sock.settimeout(10)
    assert sock.recv(16) == b""
    region.close()
    sock.close()


def _received(table: pa.Table) -> tuple[pa.Buffer, _shm._Stream]:
    """Return ``table`` as a stream in memory, and what a server would send of it.

    Every header in the returned region is overwritten with zeros: a reader that
    took the headers from the region rather than from the metadata stream fails.
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    original = sink.getvalue()
    memory = bytearray(original.to_pybytes())
    stream = _shm._Stream(len(memory))
    reader = pa.BufferReader(original)
    seq = 0
    while True:
        at = reader.tell()
        try:
            message = pa.ipc.read_message(reader)
        except EOFError:
            break
        stream.metadata[seq] = message.metadata.to_pybytes()
        if message.body is not None and message.body.size:
            start = message.body.address - original.address
            stream.bodies[seq] = ((start,), start + message.body.size)
            memory[at:start] = bytes(start - at)
        seq += 1
    stream.end = seq
    return pa.py_buffer(memory), stream


def test_batches_are_built_from_the_metadata_received_and_the_bodies_in_place() -> None:
    table = typed_table()
    region, stream = _received(table)
    assert stream.complete()
    # The region's own headers are gone: read as a stream, it ends after the schema
    # (a zero length where the first batch's prefix was is an End of Stream).
    assert pa.ipc.open_stream(region).read_all().num_rows == 0
    got = _shm._assemble([region], stream)
    assert got.equals(table)
    # The bodies are not copied: a fixed-width column's values lie in the region.
    values = got.column("i64").chunk(0).buffers()[1]
    assert region.address <= values.address < region.address + region.size
    last = max(stream.bodies)
    offsets, end = stream.bodies[last]
    stream.bodies[last] = (offsets, end + 8)  # a header whose body is too short for its pairs
    with pytest.raises(QuiverError, match="does not cover its buffers"):
        _shm._assemble([region], stream)


def _datagrams(stream: _shm._Stream) -> list[bytes]:
    """The messages a server sends of ``stream`` (one pair per body), End of Stream last."""
    out = []
    assert stream.end is not None
    for seq in range(stream.end):
        out.append(bytes([0, 1]) + struct.pack("<I", seq) + stream.metadata[seq])
        if seq in stream.bodies:
            (start, *_), end = stream.bodies[seq]
            pairs = struct.pack("<QQQQ", end - start, 1, start, end - start)
            out.append(bytes([1]) + struct.pack("<Q", (1 << 56) | seq) + pairs)
    out.append(bytes([0, 0]) + struct.pack("<I", stream.end))
    return out


def _bundle(messages: list[bytes]) -> bytes:
    return bytes([3]) + b"".join(struct.pack("<I", len(m)) + m for m in messages)


def _fake_server(
    tmp_path: Path, datagrams: list[bytes], fd: int | None
) -> tuple[_shm.Location, list[bytes], threading.Thread]:
    """A one-connection shared-memory socket sending ``datagrams`` (``fd`` with the first).

    Returns its location, what the client sent (appended as received, until it closes)
    and the serving thread.
    """
    path = str(tmp_path / "fake.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(1)
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener, contextlib.suppress(OSError):
            conn.settimeout(10)
            received.append(conn.recv(1 << 16))
            for i, datagram in enumerate(datagrams):
                handles = struct.pack("<i", fd) if i == 0 and fd is not None else b""
                ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, handles)] if handles else []
                conn.sendmsg([datagram], ancillary)
            while data := conn.recv(1 << 20):
                received.append(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return _shm.Location(path, 1, 2, None, 4), received, thread


SEALED = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


def test_core_get_frees_each_offset_once_when_released(tmp_path: Path) -> None:
    table = typed_table(batches=5, rows=100)
    region, stream = _received(table)  # headers zeroed in the region: read from the socket
    fd = memfd_with(region.to_pybytes(), SEALED)
    location, received, thread = _fake_server(tmp_path, [_bundle(_datagrams(stream))], fd)
    try:
        got = _shm._get_core(_core, location, b"ticket")
    finally:
        os.close(fd)
    assert got.equals(table)
    assert received[0] == bytes([1]) + struct.pack("<Q", 4) + b"ticket", "want_bundled"
    values = got.column("i64").chunk(0).buffers()[1].address
    spans = [line.split()[0].split("-") for line in mapped_memfds() if "memfd:test" in line]
    assert any(int(lo, 16) <= values < int(hi, 16) for lo, hi in spans), "in the memfd"
    time.sleep(0.1)
    assert len(received) == 1, "nothing is freed while the table lives"
    del got
    gc.collect()
    thread.join(10)
    assert not thread.is_alive(), "the connection closed"
    freed = []
    for message in received[1:]:
        assert message[:9] == bytes([1]) + struct.pack("<Q", 2), "free_data"
        freed += struct.unpack(f"<{(len(message) - 9) // 8}Q", message[9:])
    assert sorted(freed) == sorted({offsets[0] for offsets, _ in stream.bodies.values()})


def _cases() -> dict[str, tuple[str, type[QuiverError]]]:
    return {
        "outside": ("outside the", QuiverError),
        "short body": ("does not cover its buffers", QuiverError),
        "cut bundle": ("longer than its bundle", QuiverError),
        "garbage header": ("message 1", QuiverError),
        "unsealed": ("sealed", QuiverError),
        "no memfd": ("no memory handle", QuiverError),
        "closed early": ("closed the shared-memory connection", QuiverError),
        "refused ticket": ("unknown ticket", _shm.ShmUnavailableError),
        "refused request": ("bad request", InvalidArgumentError),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_core_get_refuses_malformed_streams(tmp_path: Path, case: str) -> None:
    match, error = _cases()[case]
    region, stream = _received(typed_table(batches=3, rows=50))
    messages = _datagrams(stream)
    seals = SEALED
    send_fd = True
    body = next(i for i, m in enumerate(messages) if m[0] == 1)
    if case == "outside":
        messages[body] = messages[body][:25] + struct.pack("<QQ", region.size - 8, 16)
        messages[body] = messages[body][:9] + struct.pack("<Q", 16) + messages[body][17:]
    elif case == "short body":
        # The header's body length stays; the pairs say the body is longer.
        (start, length) = struct.unpack_from("<QQ", messages[body], 25)
        messages[body] = messages[body][:9] + struct.pack("<QQQQ", length + 8, 1, start, length + 8)
    elif case == "garbage header":
        messages[1] = messages[1][:6] + b"\xff" * (len(messages[1]) - 6)
    elif case == "unsealed":
        seals = 0
    elif case == "no memfd":
        send_fd = False
    elif case == "closed early":
        messages = messages[:-1]
    datagrams = [_bundle(messages)]
    if case == "cut bundle":
        datagrams = [datagrams[0][:-1]]
    elif case == "refused ticket":
        datagrams = [bytes([2, 7]) + b"unknown ticket"]
    elif case == "refused request":
        datagrams = [bytes([2, 3]) + b"bad request"]
    fd = memfd_with(region.to_pybytes(), seals)
    location, _received_messages, thread = _fake_server(
        tmp_path, datagrams, fd if send_fd else None
    )
    try:
        with pytest.raises(error, match=match):
            _shm._get_core(_core, location, b"ticket")
    finally:
        os.close(fd)
    thread.join(10)
    assert not thread.is_alive(), "the client closed the connection"


def test_malformed_bundles_are_refused() -> None:
    message = bytes([0, 0, 1, 0, 0, 0])
    bundle = bytes([3]) + struct.pack("<I", len(message)) + message
    assert _shm._unbundle(bundle) == [message]
    assert _shm._unbundle(message) == [message]
    with pytest.raises(QuiverError, match="longer than its bundle"):
        _shm._unbundle(bundle[:-1])
    with pytest.raises(QuiverError, match="cut inside"):
        _shm._unbundle(bundle + b"\x01")
    with pytest.raises(QuiverError, match="or empty"):
        _shm._unbundle(bytes([3, 0, 0, 0, 0]))


def test_tickets_are_single_use_and_unforgeable(
    flight_client: flight.FlightClient, uri: str
) -> None:
    with quiver.connect(uri, transport="grpc") as client:
        client.put("t", numbers(10))
    location, ticket = shm_endpoint(flight_client, "t")
    assert _shm.get(location, ticket).equals(numbers(10))
    with pytest.raises(_shm.ShmUnavailableError, match="unknown, used or expired"):
        _shm.get(location, ticket)
    forged = ticket[:-1] + bytes([ticket[-1] ^ 1])
    with pytest.raises(_shm.ShmUnavailableError):
        _shm.get(location, forged)
    # A gRPC ticket is no shared-memory ticket.
    with pytest.raises(InvalidArgumentError, match="not a quiver shared-memory ticket"):
        _shm.get(location, b"t")


# -- puts that must be refused -------------------------------------------------------------


def put_ticket(client: quiver.Client, name: str) -> tuple[_shm.Location, bytes]:
    import base64

    grant = client._action("shm-put", json.dumps({"table": name}).encode())
    location = _shm.Location.parse(str(grant["location"]))
    assert location is not None
    return location, base64.b64decode(str(grant["ticket"]))


def send_put(location: _shm.Location, ticket: bytes, fd: int | list[int]) -> None:
    fds = fd if isinstance(fd, list) else [fd]
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(location.path)
        sock.sendmsg(
            [bytes([1]) + struct.pack("<Q", location.put_data) + ticket],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"<{len(fds)}i", *fds))],
        )
        reply = sock.recv(1 << 16)
    assert reply[0] == 2
    if reply[1] != 0:
        _shm._raise_reply(reply)


def stream_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def memfd_with(data: bytes, seals: int) -> int:
    fd = os.memfd_create("test", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def test_bad_handles_are_refused_and_nothing_changes(uri: str, tmp_path: Path) -> None:
    sealed = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
    data = stream_bytes(numbers(8))
    with quiver.connect(uri, transport="grpc") as client:
        client.put("kept", numbers(3))
        cases = {
            "unsealed": memfd_with(data, 0),
            "writable": memfd_with(data, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW),
        }
        regular = tmp_path / "file.arrows"
        regular.write_bytes(data)
        cases["a regular file"] = os.open(regular, os.O_RDONLY)
        # A buffer pointing past its body: patch the data buffer's (offset, length).
        header_end = data.index(struct.pack("<qq", 0, 64))
        outside = bytearray(data)
        outside[header_end : header_end + 16] = struct.pack("<qq", 1 << 40, 64)
        cases["out of bounds"] = memfd_with(bytes(outside), sealed)
        cases["not arrow"] = memfd_with(b"\x00" * 4096, sealed)
        for what, fd in cases.items():
            location, ticket = put_ticket(client, "kept")
            with pytest.raises(InvalidArgumentError) as caught:
                send_put(location, ticket, fd)
            os.close(fd)
            message = str(caught.value)
            if what in ("unsealed", "writable"):
                assert "not sealed" in message
            if what == "a regular file":
                assert "memfd" in message
            if what == "out of bounds":
                assert "outside" in message
        # A put without a handle.
        location, ticket = put_ticket(client, "kept")
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            sock.connect(location.path)
            sock.send(bytes([1]) + struct.pack("<Q", location.put_data) + ticket)
            reply = sock.recv(4096)
        assert reply[:2] == bytes([2, 3]) and b"no memfd" in reply
        assert client.get("kept").equals(numbers(3))


def test_a_put_of_several_memfds_is_one_table(flight_client: flight.FlightClient, uri: str) -> None:
    parts = [numbers(300), numbers(5, seed=1000), numbers(1000, seed=2000)]
    whole = pa.concat_tables(parts)
    with quiver.connect(uri, transport="grpc") as client:
        location, ticket = put_ticket(client, "several")
        fds = [_shm.sealed_memfd(part) for part in parts]
        sizes = [os.fstat(fd).st_size for fd in fds]
        inodes = [os.fstat(fd).st_ino for fd in fds]
        send_put(location, ticket, fds)
        for fd in fds:
            os.close(fd)
        assert client.get("several").equals(whole)
    with quiver.connect(uri, transport="shm") as client:
        assert client.get("several").equals(whole)
    # Read by hand: the three memfds come with the first datagram, and the offsets
    # run over them one after the other.
    location, ticket = shm_endpoint(flight_client, "several")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(location.path)
    sock.send(bytes([1]) + struct.pack("<Q", location.want_data) + ticket)
    data, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(4 * 16))
    received = [fd for _l, _k, p in ancillary for fd in struct.unpack(f"<{len(p) // 4}i", p)]
    # The very memfds the client put, in order: no copy was made to serve them.
    assert [os.fstat(fd).st_ino for fd in received] == inodes
    for fd in received:
        os.close(fd)
    bodies = []
    while data[:2] != bytes([0, 0]):
        if data[0] == 1:
            bodies.append(struct.unpack_from("<Q", data, 25)[0])
        data = sock.recv(1 << 20)
    sock.close()
    # The last batch (the third memfd's) lies past the first two memfds.
    assert bodies[-1] > sizes[0] + sizes[1]
    assert max(bodies) < sum(sizes)


def test_several_memfds_must_agree(uri: str) -> None:
    with quiver.connect(uri, transport="grpc") as client:
        client.put("agreed", numbers(3))
        other = pa.table({"x": pa.array(["a", "b"])})
        fds = [_shm.sealed_memfd(numbers(4)), _shm.sealed_memfd(other)]
        location, ticket = put_ticket(client, "agreed")
        with pytest.raises(InvalidArgumentError, match="memfd 2 of 2's schema differs"):
            send_put(location, ticket, fds)
        unsealed = memfd_with(stream_bytes(numbers(4)), 0)
        location, ticket = put_ticket(client, "agreed")
        with pytest.raises(InvalidArgumentError, match="memfd 3 of 3 is not sealed"):
            send_put(location, ticket, [fds[0], fds[0], unsealed])
        # More descriptors than the server takes with one message.
        location, ticket = put_ticket(client, "agreed")
        with pytest.raises(InvalidArgumentError, match="more than 16 descriptors"):
            send_put(location, ticket, [fds[0]] * 17)
        for fd in [*fds, unsealed]:
            os.close(fd)
        assert client.get("agreed").equals(numbers(3))


def test_large_puts_are_split_at_batch_boundaries_over_several_memfds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = numbers(100_000).combine_chunks()
    batches = pa.Table.from_batches(table.to_batches(max_chunksize=10_000))
    monkeypatch.setattr(_shm, "PART_BYTES", batches.nbytes // 8)
    parts = _shm._parts(batches, cores=4)
    assert len(parts) == 4
    assert pa.concat_tables(parts).equals(batches)
    # Cut at batch boundaries only, and about evenly.
    assert all(part.num_rows % 10_000 == 0 for part in parts)
    assert max(p.num_rows for p in parts) <= 4 * min(p.num_rows for p in parts)
    # Small tables, one batch, or one core: one memfd.
    assert len(_shm._parts(numbers(10), cores=4)) == 1
    assert len(_shm._parts(table, cores=4)) == 1
    assert len(_shm._parts(batches, cores=1)) == 1
    assert len(_shm._parts(batches, cores=64)) == 8
    fds = _shm.sealed_memfds(batches)
    try:
        read = [pa.ipc.open_stream(pa.OSFile(f"/proc/self/fd/{fd}")).read_all() for fd in fds]
        assert pa.concat_tables(read).equals(batches)
    finally:
        for fd in fds:
            os.close(fd)


def test_oversized_handle_is_refused(start_quiver: ServerFactory) -> None:
    server = start_quiver("--max-memory", "1MiB")
    with quiver.connect(server.uri, transport="shm") as client:
        with pytest.raises(ResourceExhaustedError, match="max-memory"):
            client.put("big", numbers(100_000))
        assert not client.exists("big")


# -- lifetimes ------------------------------------------------------------------------------


def test_reader_keeps_its_version_through_replace_and_delete(uri: str, server) -> None:
    with quiver.connect(uri, transport="shm") as client:
        client.put("t", numbers(50_000))
        held = client.get("t")
        client.put("t", numbers(10, seed=7))
        assert client.get("t").equals(numbers(10, seed=7))
        client.delete("t")
        assert held.equals(numbers(50_000)), "the reader's data is unchanged"
        pid = server.process.pid
        # The old version's export lives while the reader holds it ...
        assert len(memfds(pid)) >= 1
        del held
        gc.collect()
        # ... and goes once it freed its offsets.
        assert wait_until(lambda: memfds(pid) == []), memfds(pid)


def test_client_that_dies_without_free_data(uri: str, server) -> None:
    with quiver.connect(uri, transport="grpc") as client:
        client.put("t", numbers(100_000))
    script = textwrap.dedent(
        f"""
        import os, quiver
        table = quiver.connect({uri!r}, transport="shm").get("t")
        assert table.num_rows == 100_000
        print("got", flush=True)
        os._exit(0)  # no free_data, no close
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert out.stdout.strip() == b"got", out.stderr.decode()
    with quiver.connect(uri, transport="grpc") as client:
        client.delete("t")
    pid = server.process.pid
    assert wait_until(lambda: memfds(pid) == []), memfds(pid)


def test_server_memory_does_not_grow_per_reader(uri: str, server) -> None:
    def rss() -> int:
        for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError

    table = numbers(1_000_000)  # 32 MB
    with quiver.connect(uri, transport="shm") as client:
        client.put("t", table)
        readers = [client.get("t")]
        after_one = rss()
        readers += [client.get("t") for _ in range(8)]
        assert all(r.equals(table) for r in readers)
        assert rss() - after_one < table.nbytes / 4


# -- access and the transport setting --------------------------------------------------------


def test_shm_needs_an_authorized_caller(start_quiver: ServerFactory, tmp_path: Path) -> None:
    users, _tokens = make_users(tmp_path)
    server = start_quiver("--users", str(users))
    writer, reader = PASSWORDS["writer"], PASSWORDS["reader"]
    with quiver.connect(server.uri, username="writer", password=writer, transport="shm") as w:
        w.put("t", numbers(10))
        assert w.get("t").equals(numbers(10))
    with quiver.connect(server.uri, username="reader", password=reader, transport="shm") as r:
        assert r.get("t").equals(numbers(10))
        with pytest.raises(PermissionDeniedError):
            r.put("t", numbers(3))
    # No credentials, no ticket.
    plain = flight.FlightClient(server.uri)
    with pytest.raises(flight.FlightUnauthenticatedError):
        shm_endpoint(plain, "t")
    plain.close()


def test_transport_setting(start_quiver: ServerFactory) -> None:
    server = start_quiver("--shm-socket", "off")
    with (
        quiver.connect(server.uri, transport="shm") as client,
        pytest.raises(QuiverError, match="shared-memory"),
    ):
        client.put("t", numbers(3))
    with quiver.connect(server.uri) as client:  # auto: falls back to gRPC
        client.put("t", numbers(3))
        assert client.get("t").equals(numbers(3))
    with (
        quiver.connect(server.uri, transport="shm") as client,
        pytest.raises(QuiverError, match="no shared-memory endpoint"),
    ):
        client.get("t")
    with pytest.raises(ValueError, match="transport"):
        quiver.connect(server.uri, transport="udp")  # type: ignore[arg-type]
