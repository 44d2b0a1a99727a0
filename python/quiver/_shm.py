"""The same-host shared-memory transport: Arrow's Dissociated IPC over a Unix socket.

The server's GetFlightInfo, asked with the ``x-quiver-transport: shm`` header, adds
one endpoint whose location is
``shm+unix:///PATH?want_data=1&free_data=2&put_data=3&want_bundled=4`` and whose ticket
is a one-time capability. Over that socket (``SOCK_SEQPACKET``, one message per
datagram, first byte 0 untagged, 1 tagged, 2 reply, 3 a bundle of length-prefixed
messages) the client sends ``want_bundled`` (or the spec's ``want_data``, which gets one
message per datagram) with the ticket and receives:

- the memfd (or memfds, for a table put in several) holding the table as an Arrow
  IPC stream (``SCM_RIGHTS``, with the first message), which it maps read-only; the
  offsets run over the memfds one after the other;
- the metadata stream: ``[type][sequence number u32][flatbuffer]``, type 1 for a
  header and 0 for End of Stream;
- for each message with a body, a tagged message, tag ``(1 << 56) | seq``, whose body
  is ``[total, count, (offset, length) * count]`` (u64 LE): where the buffers lie.

Each batch is built from its header as received and its body in place in the
mapping: nothing is copied. The Rust core (``quiver._core.shm_get``) does all of
the get, building each batch in Rust; without it, or with ``QUIVER_CORE=0``, the
pure-Python get here does. A put writes the table into sealed memfds (one thread
each, for a large table) and passes them with ``put_data``. When the
table's buffers are released, ``free_data`` returns the offsets and the connection
closes. See docs/shm.md.
"""

from __future__ import annotations

import atexit
import bisect
import concurrent.futures
import contextlib
import fcntl
import itertools
import mmap
import operator
import os
import socket
import struct
import threading
import time
import weakref
from dataclasses import dataclass
from types import ModuleType
from urllib.parse import parse_qs, unquote, urlsplit

import pyarrow as pa

from . import _native
from .errors import QuiverError, from_call, from_reply

#: The URI scheme of a shared-memory location.
SCHEME = "shm+unix"

#: The GetFlightInfo header that asks for a shared-memory endpoint.
TRANSPORT_HEADER = (b"x-quiver-transport", b"shm")

UNTAGGED, TAGGED, REPLY, BUNDLE = 0, 1, 2, 3
END_OF_STREAM, METADATA = 0, 1
BODY_SHARED = 1
SEQUENCE_MASK = 0xFFFF_FFFF
CONTINUATION = b"\xff\xff\xff\xff"

#: Largest datagram expected from the server (a header or a list of buffers).
MAX_MESSAGE = 4 << 20
#: Most memfds passed with one message (the server's limit too).
MAX_FDS = 16
#: Smallest part of a put written into a memfd of its own, by a thread of its own.
PART_BYTES = 64 << 20
#: Offsets per free_data message.
FREE_CHUNK = 8192
#: Longest a put waits for the server to close the connection of the put before it.
FREE_WAIT = 10.0

_CUT_SHORT = int(socket.MSG_TRUNC | socket.MSG_CTRUNC)
#: The seals of a memfd handed to the server or to a function worker: its contents
#: are fixed (no write, shrink or grow) and no seal can be removed.
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class ShmUnavailableError(QuiverError):
    """The shared-memory path cannot be used here (another host, no socket, ...)."""

    code = "UNAVAILABLE"


@dataclass(frozen=True)
class Location:
    """A parsed ``shm+unix://`` location."""

    path: str
    want_data: int
    free_data: int | None
    put_data: int | None
    want_bundled: int | None = None

    @classmethod
    def parse(cls, uri: str) -> Location | None:
        """Return the location ``uri`` names, or ``None`` if it is not ``shm+unix://``."""
        parts = urlsplit(uri)
        if parts.scheme != SCHEME:
            return None
        query = parse_qs(parts.query)

        def tag(name: str) -> int | None:
            values = query.get(name)
            return int(values[0]) if values else None

        want = tag("want_data")
        if want is None:
            raise QuiverError(f"shared-memory location without want_data: {uri}")
        return cls(
            unquote(parts.path), want, tag("free_data"), tag("put_data"), tag("want_bundled")
        )


def _connect(location: Location) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        sock.connect(location.path)
    except OSError as e:
        sock.close()
        raise ShmUnavailableError(
            f"cannot connect to the shared-memory socket {location.path}: {e} "
            "(is the server on this host?)"
        ) from e
    return sock


def _tagged(tag: int, body: bytes) -> bytes:
    return bytes([TAGGED]) + struct.pack("<Q", tag) + body


def _raise_reply(message: bytes) -> None:
    code = message[1] if len(message) > 1 else 2
    error = from_reply(code, message[2:])
    if error.code == "PERMISSION_DENIED":
        # The socket refuses only tickets it did not give (unknown, used or
        # expired): another server's socket at the same path, not this server.
        raise ShmUnavailableError(error.message) from error
    raise error


class _Receiver:
    """Reads datagrams into one reused buffer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray(MAX_MESSAGE)

    def receive(self, want_fds: bool = False) -> tuple[bytes, list[int]]:
        """Return the next datagram and the descriptors attached to it (if wanted)."""
        fds: list[int] = []
        if want_fds:
            size, ancillary, flags, _ = self.sock.recvmsg_into(
                [self.buffer], socket.CMSG_SPACE(4 * MAX_FDS)
            )
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(data) - len(data) % 4
                    fds += list(struct.unpack(f"<{usable // 4}i", data[:usable]))
        else:
            size, _, flags, _ = self.sock.recvmsg_into([self.buffer])
        if flags & _CUT_SHORT:
            for fd in fds:
                os.close(fd)
            raise QuiverError("a shared-memory message was cut short", "INTERNAL")
        if size == 0 and not fds:
            raise QuiverError("the server closed the shared-memory connection", "UNAVAILABLE")
        return bytes(self.buffer[:size]), fds


class _Mapping:
    """Holds the mappings; when the last buffer pointing into them goes, ``free_data`` is sent."""

    __slots__ = ("__weakref__", "maps", "views")

    def __init__(self, maps: list[mmap.mmap]) -> None:
        self.maps = maps
        self.views = [pa.py_buffer(memory) for memory in maps]


def _free(sock: socket.socket, tag: int | None, offsets: list[int]) -> None:
    """Send ``free_data`` for ``offsets`` and close the connection (errors ignored)."""
    with contextlib.suppress(OSError):
        if tag is not None:
            for i in range(0, len(offsets), FREE_CHUNK):
                chunk = offsets[i : i + FREE_CHUNK]
                sock.send(_tagged(tag, struct.pack(f"<{len(chunk)}Q", *chunk)))
    sock.close()


def get(location: Location, ticket: bytes) -> pa.Table:
    """Read the table ``ticket`` names from the shared-memory socket at ``location``.

    With the Rust core, the core does it (same protocol, same errors); else Python.
    """
    core = _native.core()
    if core is not None:
        return _get_core(core, location, ticket)
    sock = _connect(location)
    try:
        return _get(sock, location, ticket)
    except BaseException:
        sock.close()
        raise


def _get_core(core: ModuleType, location: Location, ticket: bytes) -> pa.Table:
    """Get in the Rust core; raise its errors as the Python get raises them."""
    want = location.want_bundled if location.want_bundled is not None else location.want_data
    try:
        reader = core.shm_get(location.path, want, location.free_data, ticket)
    except core.CallError as e:
        code, message, details = e.args
        error = from_call(code, message, details)
        # A socket it cannot connect to (no details: not the server's reply) or that
        # refuses the ticket (another server's socket at the path): not this server.
        if error.code == "PERMISSION_DENIED" or (error.code == "UNAVAILABLE" and not details):
            raise ShmUnavailableError(error.message) from e
        raise error from e
    return reader.read_all()


def _get(sock: socket.socket, location: Location, ticket: bytes) -> pa.Table:
    want = location.want_bundled if location.want_bundled is not None else location.want_data
    sock.sendall(_tagged(want, ticket))
    receiver = _Receiver(sock)
    datagram, fds = receiver.receive(want_fds=True)
    try:
        if datagram[:1] == bytes([REPLY]):
            _raise_reply(datagram)
        if not fds:
            raise QuiverError("the server sent no memory handle with the stream", "INTERNAL")
        maps = []
        for fd in fds:
            size = os.fstat(fd).st_size
            maps.append(mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ))
    finally:
        for fd in fds:
            os.close(fd)
    holder = _Mapping(maps)
    # The offsets sent run over the memfds one after the other, in the order passed.
    regions = [pa.foreign_buffer(view.address, view.size, base=holder) for view in holder.views]
    stream = _Stream(sum(region.size for region in regions))
    while True:
        for message in _unbundle(datagram):
            stream.add(message)
        if stream.complete():
            break
        datagram, _ = receiver.receive()
    table = _assemble(regions, stream)
    # Buffers of length 0 may share an offset with the next: each offset is freed once.
    offsets = sorted({offset for offsets, _ in stream.bodies.values() for offset in offsets})
    weakref.finalize(holder, _free, sock, location.free_data, offsets)
    del holder
    return table


def _unbundle(datagram: bytes) -> list[bytes]:
    """Return the messages a datagram holds: itself, or the messages of a bundle."""
    if datagram[:1] != bytes([BUNDLE]):
        return [datagram]
    messages, pos, end = [], 1, len(datagram)
    while pos < end:
        if pos + 4 > end:
            raise QuiverError("a bundle cut inside a message's length", "INTERNAL")
        (length,) = struct.unpack_from("<I", datagram, pos)
        pos += 4
        if pos + length > end or length == 0:
            raise QuiverError("a bundled message longer than its bundle, or empty", "INTERNAL")
        messages.append(datagram[pos : pos + length])
        pos += length
    return messages


class _Stream:
    """The metadata stream and the body messages received so far."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.metadata: dict[int, bytes] = {}
        #: Each body message's buffer offsets (the first is where the body starts)
        #: and where its last buffer ends.
        self.bodies: dict[int, tuple[tuple[int, ...], int]] = {}
        self.end: int | None = None

    def add(self, message: bytes) -> None:
        """Take one message."""
        kind = message[0]
        if kind == UNTAGGED:
            if len(message) < 6:
                raise QuiverError("a metadata message shorter than its prefix", "INTERNAL")
            (seq,) = struct.unpack_from("<I", message, 2)
            if message[1] == END_OF_STREAM:
                if len(message) != 6:
                    raise QuiverError("an End of Stream message of the wrong length", "INTERNAL")
                self.end = seq
            elif message[1] == METADATA:
                self.metadata[seq] = message[6:]
            else:
                raise QuiverError(f"unknown metadata message type {message[1]}", "INTERNAL")
        elif kind == TAGGED:
            (tag,) = struct.unpack_from("<Q", message, 1)
            seq = tag & SEQUENCE_MASK
            self.bodies[seq] = _buffers(tag, message[9:], self.size)
        elif kind == REPLY:
            _raise_reply(message)
        else:
            raise QuiverError(f"unknown message kind {kind}", "INTERNAL")

    def complete(self) -> bool:
        """Whether End of Stream and everything before it arrived."""
        if self.end is None or len(self.metadata) < self.end:
            return False
        if sorted(self.metadata) != list(range(self.end)):
            raise QuiverError("gaps in the metadata stream's sequence numbers", "INTERNAL")
        # Every message but the schema (seq 0) has a body in quiver's streams.
        return all(seq in self.bodies for seq in range(1, self.end))


def _buffers(tag: int, body: bytes, size: int) -> tuple[tuple[int, ...], int]:
    """Return the offsets of a body message's buffers and where the last one ends.

    Every buffer is checked to lie in the region.
    """
    if tag >> 56 != BODY_SHARED:
        raise QuiverError(f"body type {tag >> 56}: only type 1 (shared memory) is read", "INTERNAL")
    if (tag >> 32) & 0xFF_FFFF:
        raise QuiverError("reserved tag bits set in a body message", "INTERNAL")
    if len(body) < 16 or len(body) % 16:
        raise QuiverError("a body message that is not u64 pairs", "INTERNAL")
    total, count = struct.unpack_from("<QQ", body)
    if len(body) != 16 * (count + 1):
        raise QuiverError("a body message whose count does not match its pairs", "INTERNAL")
    words = struct.unpack_from(f"<{2 * count}Q", body, 16)
    offsets, lengths = words[0::2], words[1::2]
    if sum(lengths) != total:
        raise QuiverError("a body message whose total does not match its buffers", "INTERNAL")
    end = max(map(operator.add, offsets, lengths)) if count else 0
    if end > size:
        offset, length = next((o, n) for o, n in zip(offsets, lengths, strict=True) if o + n > size)
        raise QuiverError(
            f"a buffer at {offset} of {length} bytes lies outside the {size}-byte region",
            "INTERNAL",
        )
    if count and min(offsets) < offsets[0]:
        raise QuiverError("a body message whose first buffer is not its lowest", "INTERNAL")
    return offsets, end


def _prefixed(header: bytes) -> bytes:
    return CONTINUATION + struct.pack("<i", len(header)) + header


class _Feed:
    """The IPC stream pyarrow reads: each header as received, each body in the region.

    The reader asks for a message's prefix, its flatbuffer, then its body: the
    first two come from the metadata stream, the body is a zero-copy slice of the
    region starting at the message's first buffer (quiver's server starts every
    body message with the buffer at the body's start). No page of the mapping is
    touched here.
    """

    def __init__(self, regions: list[pa.Buffer], stream: _Stream) -> None:
        self.regions = regions
        self.bases = list(itertools.accumulate((r.size for r in regions[:-1]), initial=0))
        self.stream = stream
        self.seq = 0
        self.pending = b""
        self.body: tuple[int, int, int] | None = None
        self.closed = False

    def read(self, n: int = -1) -> bytes | pa.Buffer:
        """Return the next ``n`` bytes of the stream."""
        if not self.pending and self.body is not None:
            seq, start, end = self.body
            self.body = None
            index = bisect.bisect_right(self.bases, start) - 1
            region, local = self.regions[index], start - self.bases[index]
            if n < end - start or local + n > region.size:
                raise QuiverError(
                    f"message {seq}: its header's body length ({n}) does not cover its "
                    f"buffers or runs past its memfd",
                    "INTERNAL",
                )
            return region.slice(local, n)
        metadata = self.stream.metadata
        while len(self.pending) < n and self.body is None and self.seq in metadata:
            self.pending += _prefixed(metadata[self.seq])
            offsets, end = self.stream.bodies.get(self.seq, ((), 0))
            # A body of no bytes (a batch of zero rows) is never read: its header's
            # body length is 0, so the next read is already the next message.
            if offsets and end > offsets[0]:
                self.body = (self.seq, offsets[0], end)
            self.seq += 1
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def readable(self) -> bool:
        """Say it can be read."""
        return True

    def seekable(self) -> bool:
        """Say it cannot seek."""
        return False

    def writable(self) -> bool:
        """Say it cannot be written."""
        return False

    def close(self) -> None:
        """Mark it closed."""
        self.closed = True


def _assemble(regions: list[pa.Buffer], stream: _Stream) -> pa.Table:
    """Build the table from the metadata received and the bodies in ``regions``."""
    return pa.ipc.open_stream(pa.PythonFile(_Feed(regions, stream), mode="r")).read_all()


# -- put ---------------------------------------------------------------------------------


def put(location: Location, ticket: bytes, table: pa.Table) -> bytes:
    """Write ``table`` into sealed memfds and hand them to the server; return its JSON reply.

    Before writing, waits (up to :data:`FREE_WAIT`) until the server has closed the
    connections of this process's earlier puts to the same socket: it closes one once
    the version that put replaced is freed, so that the new memfds get the pages just
    freed rather than pages the hypervisor may have taken back (docs/shm.md).
    """
    if location.put_data is None:
        raise ShmUnavailableError("the server's shared-memory location takes no puts")
    _closing.wait(location.path)
    fds = sealed_memfds(table)
    try:
        sock = _connect(location)
        try:
            sock.sendmsg(
                [_tagged(location.put_data, ticket)],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"<{len(fds)}i", *fds))],
            )
            reply, _ = _Receiver(sock).receive()
        except BaseException:
            sock.close()
            raise
    finally:
        for fd in fds:
            os.close(fd)
    if reply[:1] != bytes([REPLY]) or len(reply) < 2:
        sock.close()
        raise QuiverError("the server answered a put with something else", "INTERNAL")
    if reply[1] != 0:
        sock.close()
        _raise_reply(reply)
    _closing.add(location.path, sock)
    return reply[2:]


class _Closing:
    """Connections of stored puts, by socket path, that the server has not closed yet."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sockets: dict[str, list[socket.socket]] = {}

    def add(self, path: str, sock: socket.socket) -> None:
        """Keep ``sock`` until the next put to ``path`` waits for its close.

        Connections the server has closed already, to any socket, are closed
        here: only those of puts whose frees are pending stay open.
        """
        with self.lock:
            for kept in self.sockets.values():
                still_open = [s for s in kept if not _closed_by_peer(s)]
                for s in kept:
                    if s not in still_open:
                        s.close()
                kept[:] = still_open
            self.sockets.setdefault(path, []).append(sock)

    def close_all(self) -> None:
        """Close every connection kept (at exit: nothing waits for them any more)."""
        with self.lock:
            for kept in self.sockets.values():
                for s in kept:
                    s.close()
            self.sockets.clear()

    def wait(self, path: str) -> None:
        """Wait until the server has closed every connection kept for ``path``; close them."""
        with self.lock:
            waiting = self.sockets.pop(path, [])
        deadline = time.monotonic() + FREE_WAIT
        for sock in waiting:
            with sock, contextlib.suppress(OSError):
                sock.settimeout(max(deadline - time.monotonic(), 0.0))
                # Nothing follows the reply: the next receive is the close.
                while sock.recv(1):
                    pass


def _closed_by_peer(sock: socket.socket) -> bool:
    """Return whether the server has closed ``sock`` (nothing else follows a put's reply)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


_closing = _Closing()
atexit.register(_closing.close_all)


def _parts(table: pa.Table, cores: int) -> list[pa.Table]:
    """Split ``table`` at batch boundaries into up to ``cores`` parts of similar size.

    No part is smaller than :data:`PART_BYTES` (a thread and a memfd cost more than
    they save below that), and there are at most :data:`MAX_FDS`.
    """
    count = min(cores, MAX_FDS, table.nbytes // PART_BYTES)
    batches = table.to_batches()
    if count <= 1 or len(batches) <= 1:
        return [table]
    target = table.nbytes / count
    parts: list[list[pa.RecordBatch]] = [[]]
    written = 0
    for batch in batches:
        if parts[-1] and written >= target * len(parts) and len(parts) < count:
            parts.append([])
        parts[-1].append(batch)
        written += batch.nbytes
    return [pa.Table.from_batches(part, table.schema) for part in parts]


def sealed_memfds(table: pa.Table) -> list[int]:
    """Return memfds holding ``table`` as Arrow IPC streams, one after the other, sealed.

    A large table is written into several memfds at once, one thread each: filling
    the fresh pages of a memfd costs more than copying into them (docs/shm.md), and
    writers of one memfd take turns on its lock, where writers of several do not.
    """
    parts = _parts(table, len(os.sched_getaffinity(0)))
    if len(parts) == 1:
        return [sealed_memfd(table)]
    with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:
        futures = [pool.submit(sealed_memfd, part) for part in parts]
        concurrent.futures.wait(futures)
    fds = [f.result() for f in futures if f.exception() is None]
    failed = next((f.exception() for f in futures if f.exception() is not None), None)
    if failed is not None:
        for fd in fds:
            os.close(fd)
        raise failed
    return fds


def sealed_memfd(table: pa.Table, *, name: str = "quiver-put") -> int:
    """Return a memfd holding ``table`` as an Arrow IPC stream, sealed with :data:`SEALS`.

    Written with ``write(2)`` through a file opened on the memfd, not through a
    mapping: the kernel fills the memfd's pages as it allocates them, where a
    mapping would fault (or populate) every page first, which costs twice as
    much on these machines (docs/shm.md). The memfd holds exactly the stream.
    Puts use it, and function workers for their results; ``name`` is the
    memfd's (``/proc/PID/fd`` shows it).
    """
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        sink = pa.OSFile(f"/proc/self/fd/{fd}", "wb")
        try:
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
        finally:
            sink.close()
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd
