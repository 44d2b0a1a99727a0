"""The server's rich error status: reading it off the wire and decoding it.

Every error status a quiver server sends carries the standard gRPC trailer
``grpc-status-details-bin``: a serialized ``google.rpc.Status`` whose details
hold a ``google.rpc.ErrorInfo`` with domain ``"quiver"`` and a reason, the error's
kind (``TABLE_NOT_FOUND``, ``MEMORY_LIMIT``, ...).

pyarrow does not hand that trailer to the caller. ``FlightError.extra_info`` is
filled only when the server also sends Arrow C++'s own ``x-arrow-status`` trailer
(an Arrow C++ server does; quiver's does not), and errors of codes such as
NOT_FOUND, INVALID_ARGUMENT or RESOURCE_EXHAUSTED become ``ArrowKeyError`` or
``ArrowInvalid``, which have no ``extra_info`` at all. But a
:class:`pyarrow.flight.ClientMiddleware` sees the trailing metadata: so every
quiver client installs :data:`CAPTURE`, whose per-call middleware keeps the
trailer and, when the call ends in an error, leaves it in a thread-local slot.

Why a thread-local slot is keyed to the right call: pyarrow's client API is
blocking, and gRPC runs a call's interceptors (which call the middleware) inside
the blocking operation that ends it (the unary call, or the ``read_chunk``,
``close`` or ``read`` that receives its status), on the thread that made that
operation; pyarrow raises the error right after, on that thread. So the slot
holds the status of the call whose error that thread is raising. It is cleared
whenever the thread starts another call, and :func:`take_captured` empties it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyarrow.flight as flight

from ._protobuf import LEN, VARINT, fields, int64

__all__ = [
    "CAPTURE",
    "DETAILS_HEADER",
    "CallStatus",
    "RichStatus",
    "calls_started",
    "decode_status",
    "leave_captured",
    "take_captured",
]

#: The gRPC trailer that carries a serialized ``google.rpc.Status``.
DETAILS_HEADER = "grpc-status-details-bin"

#: The type URL of the ``google.rpc.ErrorInfo`` detail quiver's server sends.
ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo"


@dataclass(frozen=True)
class RichStatus:
    """A decoded ``google.rpc.Status`` and its first ``google.rpc.ErrorInfo``.

    Attributes
    ----------
    code : int
        The gRPC status code, a number (5 is NOT_FOUND).
    message : str
        The server's message.
    reason : str or None
        The ErrorInfo's reason (quiver's error kind), if a detail was an ErrorInfo.
    domain : str or None
        The ErrorInfo's domain (``"quiver"`` from a quiver server).
    metadata : dict of str to str
        The ErrorInfo's metadata.
    """

    code: int
    message: str
    reason: str | None = None
    domain: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


def decode_status(data: bytes) -> RichStatus:
    """Decode a serialized ``google.rpc.Status``.

    ``Status { int32 code = 1; string message = 2; repeated google.protobuf.Any
    details = 3; }``; the first detail whose type URL is
    ``type.googleapis.com/google.rpc.ErrorInfo`` gives the reason, domain and
    metadata (``ErrorInfo { string reason = 1; string domain = 2; map<string,
    string> metadata = 3; }``). Other details and unknown fields are skipped.

    Raises
    ------
    ValueError
        The bytes are not a well-formed message.
    """
    code, message = 0, ""
    info: tuple[str, str, dict[str, str]] | None = None
    for number, wire_type, value in fields(data):
        if number == 1 and wire_type == VARINT and isinstance(value, int):
            code = int64(value)
        elif number == 2 and wire_type == LEN and isinstance(value, bytes):
            message = _text(value)
        elif number == 3 and wire_type == LEN and isinstance(value, bytes) and info is None:
            type_url, payload = _any(value)
            if type_url == ERROR_INFO_TYPE_URL:
                info = _error_info(payload)
    if info is None:
        return RichStatus(code, message)
    reason, domain, metadata = info
    return RichStatus(code, message, reason or None, domain or None, metadata)


def _any(data: bytes) -> tuple[str, bytes]:
    """Return a ``google.protobuf.Any``'s type URL and value."""
    type_url, payload = "", b""
    for number, wire_type, value in fields(data):
        if wire_type == LEN and isinstance(value, bytes):
            if number == 1:
                type_url = _text(value)
            elif number == 2:
                payload = value
    return type_url, payload


def _error_info(data: bytes) -> tuple[str, str, dict[str, str]]:
    """Return a ``google.rpc.ErrorInfo``'s reason, domain and metadata."""
    reason, domain, metadata = "", "", {}
    for number, wire_type, value in fields(data):
        if wire_type != LEN or not isinstance(value, bytes):
            continue
        if number == 1:
            reason = _text(value)
        elif number == 2:
            domain = _text(value)
        elif number == 3:
            # A map entry: { string key = 1; string value = 2; }
            entry = {n: _text(v) for n, t, v in fields(value) if t == LEN and isinstance(v, bytes)}
            metadata[entry.get(1, "")] = entry.get(2, "")
    return reason, domain, metadata


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


class _Slot(threading.local):
    """The serialized status of the call whose error this thread is raising.

    ``started``, while :func:`calls_started` runs on this thread, collects the
    middleware of the calls the thread starts.
    """

    details: bytes | None = None
    started: list[CallStatus] | None = None


_slot = _Slot()


def take_captured() -> bytes | None:
    """Return, and forget, the ``grpc-status-details-bin`` of this thread's failed call.

    ``None`` if the last call this thread made did not fail, or its server sent no
    details (a Flight server other than quiver).
    """
    details, _slot.details = _slot.details, None
    return details


def leave_captured(details: bytes | None) -> None:
    """Leave ``details`` where :func:`take_captured` on this thread will find them.

    For a call whose status another thread received: a DoExchange's writer thread
    can be the one that ends the call, but its error is raised on the reading thread.
    """
    _slot.details = details


@contextmanager
def calls_started() -> Iterator[list[CallStatus]]:
    """Collect the middleware of every call this thread starts inside the block.

    A streaming call's middleware keeps the call's status trailer whichever thread
    receives it; the caller can then hand it to the thread that raises the error
    (:func:`leave_captured`).
    """
    started: list[CallStatus] = []
    outer, _slot.started = _slot.started, started
    try:
        yield started
    finally:
        _slot.started = outer


class CallStatus(flight.ClientMiddleware):  # type: ignore[misc]
    """One call's middleware: keeps the status-details trailer it receives.

    Attributes
    ----------
    details : bytes or None
        The call's ``grpc-status-details-bin`` once received (its trailer), if any.
    """

    def __init__(self) -> None:
        self.details: bytes | None = None

    def received_headers(self, headers: dict[str, list[str | bytes]]) -> None:
        """Keep ``grpc-status-details-bin`` (in the trailers; called for headers too)."""
        values = headers.get(DETAILS_HEADER)
        if values:
            value = values[-1]
            self.details = value if isinstance(value, bytes) else value.encode()

    def call_completed(self, exception: BaseException | None) -> None:
        """On failure, leave the details where the thread about to raise will find them."""
        if exception is not None:
            _slot.details = self.details


class _StatusCapture(flight.ClientMiddlewareFactory):  # type: ignore[misc]
    """Gives each call a :class:`CallStatus`."""

    def start_call(self, info: flight.CallInfo) -> CallStatus:
        """Start a call: forget any status an earlier call on this thread left."""
        _slot.details = None
        call = CallStatus()
        if _slot.started is not None:
            _slot.started.append(call)
        return call


#: The middleware factory every quiver client installs (it keeps no state itself).
CAPTURE = _StatusCapture()
