"""The worker protocol, version 1: what the server and a worker say over their socket.

One datagram per message on a ``SOCK_SEQPACKET`` socketpair: a little-endian ``u32``
length ``n``, ``n`` bytes of a UTF-8 JSON object (the header, with its ``op``), then
the payload, the rest of the datagram. At most one descriptor is attached. Arrow data
is one whole IPC stream, inline as the payload (at most :data:`INLINE_LIMIT` bytes) or
in an attached memfd sealed against writes, shrinking and growing, the payload then
empty. docs/functions.md, "As built", is the specification; the server's side is
``crates/quiver-functions/src/protocol.rs``.

Headers this side sends are padded with spaces so that the payload starts 8-byte
aligned within the datagram: an inline stream's buffers can be read in place.
"""

from __future__ import annotations

import base64
import json
import mmap
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .._shm import SEALS, sealed_memfd

__all__ = [
    "INLINE_LIMIT",
    "MAX_DATAGRAM",
    "PROTOCOL_VERSION",
    "SEALS",
    "Message",
    "ProtocolError",
    "close_mapping",
    "decode",
    "encode",
    "encode_schema",
    "read_stream",
    "receive",
    "sealed_memfd",
    "send",
    "stream_size",
    "write_stream",
]

#: The protocol's version, sent in the hello.
PROTOCOL_VERSION = 1

#: Largest Arrow IPC stream sent inline in a datagram; a larger one goes in a memfd.
INLINE_LIMIT = 61_440

#: Largest datagram received: 64 KiB of payload plus room for its header.
MAX_DATAGRAM = 128 << 10

_LENGTH = struct.Struct("<I")
_ALIGNMENT = 8
_CUT_SHORT = socket.MSG_TRUNC | socket.MSG_CTRUNC


class ProtocolError(Exception):
    """A datagram that does not follow the protocol."""


@dataclass
class Message:
    """One received message.

    Attributes
    ----------
    header : dict
        The JSON header; ``header["op"]`` says what the message is.
    payload : memoryview
        The rest of the datagram (empty when the data is in ``fd``).
    fd : int or None
        The attached descriptor, owned by the receiver, who must close it.
    """

    header: dict[str, Any]
    payload: memoryview
    fd: int | None = None

    @property
    def op(self) -> str:
        """The message's kind: ``"call"``, ``"shutdown"``, ..."""
        return str(self.header.get("op", ""))

    def close(self) -> None:
        """Close the attached descriptor, if any."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def encode(header: dict[str, Any]) -> bytes:
    """Return the length prefix and JSON header of a message, padded for alignment.

    The header is padded with spaces (JSON whitespace) so that a payload following
    it starts at a multiple of 8 bytes from the datagram's start.
    """
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(_LENGTH.size + len(text)) % _ALIGNMENT)
    return _LENGTH.pack(len(text)) + text


def decode(datagram: bytes | memoryview) -> tuple[dict[str, Any], memoryview]:
    """Split a datagram into its header (a JSON object) and its payload.

    Raises
    ------
    ProtocolError
        The datagram is shorter than its header says, or the header is not a JSON object.
    """
    view = memoryview(datagram)
    if len(view) < _LENGTH.size:
        raise ProtocolError(f"a datagram of {len(view)} bytes has no header length")
    (length,) = _LENGTH.unpack_from(view)
    end = _LENGTH.size + length
    if end > len(view):
        raise ProtocolError(f"a header of {length} bytes in a datagram of {len(view)}")
    try:
        header = json.loads(bytes(view[_LENGTH.size : end]))
    except (UnicodeDecodeError, ValueError) as error:
        raise ProtocolError(f"a header that is not JSON: {error}") from error
    if not isinstance(header, dict):
        raise ProtocolError(f"a header that is not a JSON object: {header!r}")
    return header, view[end:]


def send(
    sock: socket.socket, header: dict[str, Any], payload: object = b"", fd: int | None = None
) -> None:
    """Send one message: ``header``, then ``payload`` (bytes-like), with ``fd`` attached."""
    view = memoryview(payload)  # type: ignore[arg-type]
    parts: list[Any] = [encode(header)]
    if view.nbytes:
        parts.append(view)
    if fd is None:
        sock.sendmsg(parts)
    else:
        sock.sendmsg(parts, [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])


def receive(sock: socket.socket) -> Message | None:
    """Receive one message; ``None`` at end-of-file (the other side closed).

    Raises
    ------
    ProtocolError
        The datagram or its descriptors were cut short, or it does not decode. Any
        descriptor received with it is closed.
    """
    data, fds, flags, _ = socket.recv_fds(sock, MAX_DATAGRAM, 1)
    if flags & _CUT_SHORT:
        _close_all(fds)
        raise ProtocolError(
            f"a datagram over {MAX_DATAGRAM} bytes or with more than one descriptor"
        )
    if not data and not fds:
        return None
    try:
        header, payload = decode(data)
    except ProtocolError:
        _close_all(fds)
        raise
    return Message(header, payload, fds[0] if fds else None)


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)


def encode_schema(schema: pa.Schema | None) -> str | None:
    """Return a schema as base64 of its IPC schema message, or ``None``."""
    if schema is None:
        return None
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def read_stream(message: Message) -> tuple[list[pa.RecordBatch], pa.Schema, mmap.mmap | None]:
    """Read the Arrow IPC stream a message carries, without copying its buffers.

    An inline stream is read from the payload in place (copied once when it does not
    start 8-byte aligned). A memfd is mapped read-only and closed; the mapping is
    returned so that the caller can close it once no batch points into it.

    Returns
    -------
    batches : list of pyarrow.RecordBatch
        The stream's batches.
    schema : pyarrow.Schema
        The stream's schema.
    mapping : mmap.mmap or None
        The memfd's mapping, or ``None`` for an inline stream.
    """
    mapping: mmap.mmap | None = None
    if message.fd is not None:
        try:
            size = os.fstat(message.fd).st_size
            if size == 0:
                raise ProtocolError("an empty memfd")
            mapping = mmap.mmap(message.fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            message.close()
        source = pa.py_buffer(mapping)
    else:
        source = pa.py_buffer(message.payload)
        if source.address % _ALIGNMENT:
            source = pa.py_buffer(bytes(message.payload))
    try:
        with pa.ipc.open_stream(source) as reader:
            batches = list(reader)
            schema = reader.schema
    except BaseException:
        del source
        if mapping is not None:
            close_mapping(mapping)
        raise
    return batches, schema, mapping


def close_mapping(mapping: mmap.mmap) -> bool:
    """Unmap ``mapping`` unless buffers still point into it; return whether it was.

    A mapping still exported (a function kept a batch) is left to the garbage
    collector, which unmaps it when the last buffer goes.
    """
    try:
        mapping.close()
    except BufferError:
        return False
    return True


def stream_size(schema: pa.Schema, batches: Sequence[pa.RecordBatch]) -> int:
    """Return the bytes of the IPC stream of ``batches``, without writing it."""
    sink = pa.MockOutputStream()
    _write(sink, schema, batches)
    return int(sink.size())


def write_stream(
    schema: pa.Schema, batches: Sequence[pa.RecordBatch]
) -> tuple[pa.Buffer | None, int | None]:
    """Write ``batches`` as one IPC stream: inline, or into a new sealed memfd.

    Returns
    -------
    payload : pyarrow.Buffer or None
        The stream, when it is at most :data:`INLINE_LIMIT` bytes.
    fd : int or None
        Otherwise a memfd holding exactly the stream, sealed with :data:`SEALS`;
        the caller closes it after sending it.
    """
    size = stream_size(schema, batches)
    if size <= INLINE_LIMIT:
        sink = pa.BufferOutputStream()
        _write(sink, schema, batches)
        return sink.getvalue(), None
    return None, sealed_memfd(pa.Table.from_batches(batches, schema), name="quiver-function-result")


def _write(sink: Any, schema: pa.Schema, batches: Sequence[pa.RecordBatch]) -> None:
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
