"""The exceptions quiver raises, and their translation from ``pyarrow.flight`` errors.

Every error the server reports becomes a :class:`QuiverError` subclass chosen by
its gRPC status code, carrying the server's own message. The original pyarrow
exception is kept as ``__cause__``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import pyarrow as pa
import pyarrow.flight as flight

__all__ = [
    "AlreadyExistsError",
    "InvalidArgumentError",
    "QuiverError",
    "ResourceExhaustedError",
    "ServerUnavailableError",
    "TableNotFoundError",
    "VersionConflictError",
]


class QuiverError(Exception):
    """Base class of every error the quiver client raises for a failed call.

    Parameters
    ----------
    message : str
        What went wrong, in the server's words when the server reported it.
    code : str, optional
        The gRPC status code's name (``"INTERNAL"``, ...) when it is not the
        one implied by the subclass.

    Attributes
    ----------
    message : str
        The server's message, without pyarrow's decoration.
    code : str or None
        The gRPC status code's name, e.g. ``"NOT_FOUND"``.
    """

    code: ClassVar[str | None] = None

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            # An instance attribute shadowing the class default.
            self.code = code  # type: ignore[misc]

    def __str__(self) -> str:
        """Return the message as it is, without ``KeyError``'s quoting."""
        return self.message


class TableNotFoundError(QuiverError, KeyError):
    """The named table does not exist (gRPC ``NOT_FOUND``)."""

    code = "NOT_FOUND"


class InvalidArgumentError(QuiverError, ValueError):
    """The request was malformed: bad name, options, schema or data (``INVALID_ARGUMENT``)."""

    code = "INVALID_ARGUMENT"


class AlreadyExistsError(QuiverError):
    """A rename target exists and ``overwrite`` was not given (``ALREADY_EXISTS``)."""

    code = "ALREADY_EXISTS"


class ResourceExhaustedError(QuiverError):
    """The server's memory or message-size limit would be passed (``RESOURCE_EXHAUSTED``)."""

    code = "RESOURCE_EXHAUSTED"


class VersionConflictError(QuiverError):
    """The table changed between GetFlightInfo and DoGet (``ABORTED``).

    :meth:`quiver.Client.get` retries on this error by itself.
    """

    code = "ABORTED"


class ServerUnavailableError(QuiverError, ConnectionError):
    """The server cannot be reached (``UNAVAILABLE``)."""

    code = "UNAVAILABLE"


class AuthenticationError(QuiverError):
    """No credentials, or wrong, expired or forged ones (``UNAUTHENTICATED``)."""

    code = "UNAUTHENTICATED"


class PermissionDeniedError(QuiverError, PermissionError):
    """The user's role does not allow the call (``PERMISSION_DENIED``)."""

    code = "PERMISSION_DENIED"


# How Arrow's gRPC transport words each status code: "gRPC returned <words> error,
# with message: <server message>[. Detail: ...][. gRPC client debug context: ...]".
_CODE_WORDS: dict[str, tuple[type[QuiverError], str]] = {
    "not found": (TableNotFoundError, "NOT_FOUND"),
    "invalid argument": (InvalidArgumentError, "INVALID_ARGUMENT"),
    "already exists": (AlreadyExistsError, "ALREADY_EXISTS"),
    "resource exhausted": (ResourceExhaustedError, "RESOURCE_EXHAUSTED"),
    "aborted": (VersionConflictError, "ABORTED"),
    "unavailable": (ServerUnavailableError, "UNAVAILABLE"),
    "unauthenticated": (AuthenticationError, "UNAUTHENTICATED"),
    "permission denied": (PermissionDeniedError, "PERMISSION_DENIED"),
    "internal": (QuiverError, "INTERNAL"),
    "unknown": (QuiverError, "UNKNOWN"),
    "unimplemented": (QuiverError, "UNIMPLEMENTED"),
    "precondition failed": (QuiverError, "FAILED_PRECONDITION"),
    "out-of-range": (QuiverError, "OUT_OF_RANGE"),
    "data loss": (QuiverError, "DATA_LOSS"),
}

_GRPC_MESSAGE = re.compile(
    r"(?:gRPC|Flight) returned (?P<words>[a-z -]+?) error, with message: (?P<message>.*)", re.DOTALL
)
_CANCELLED_MESSAGE = re.compile(r"gRPC cancelled call, with message: (?P<message>.*)", re.DOTALL)

# What pyarrow appends after the server's message.
_DECORATION = re.compile(
    r"(?:\. |\n)(?:Detail: |gRPC client debug context: |Client context: |Additional context: )"
    r"|\. Additionally, could not finish writing"
)

# Flight status details of errors raised by the transport itself.
_FLIGHT_CLASSES: tuple[tuple[type[Exception], type[QuiverError], str], ...] = (
    (flight.FlightUnavailableError, ServerUnavailableError, "UNAVAILABLE"),
    (flight.FlightTimedOutError, QuiverError, "DEADLINE_EXCEEDED"),
    (flight.FlightCancelledError, QuiverError, "CANCELLED"),
    (flight.FlightUnauthenticatedError, AuthenticationError, "UNAUTHENTICATED"),
    (flight.FlightUnauthorizedError, PermissionDeniedError, "PERMISSION_DENIED"),
)


def server_message(text: str) -> str:
    """Strip pyarrow's decoration from an error's text, keeping the server's message."""
    for pattern in (_GRPC_MESSAGE, _CANCELLED_MESSAGE):
        match = pattern.search(text)
        if match:
            text = match.group("message")
            break
    cut = _DECORATION.search(text)
    if cut:
        text = text[: cut.start()]
    return text.strip()


def translate(error: BaseException) -> BaseException:
    """Return the :class:`QuiverError` for a pyarrow Flight error, or ``error`` itself.

    Errors that did not come from the server (a closed client, a schema mismatch
    found before sending, ...) are returned unchanged.
    """
    if isinstance(error, QuiverError) or not isinstance(error, pa.ArrowException):
        return error
    text = str(error)
    match = _GRPC_MESSAGE.search(text)
    if match and match.group("words") in _CODE_WORDS:
        cls, code = _CODE_WORDS[match.group("words")]
        return cls(server_message(text), code)
    if _CANCELLED_MESSAGE.search(text):
        return QuiverError(server_message(text), "CANCELLED")
    for flight_cls, cls, code in _FLIGHT_CLASSES:
        if isinstance(error, flight_cls):
            return cls(server_message(text), code)
    if isinstance(error, flight.FlightError):
        return QuiverError(server_message(text), "INTERNAL")
    return error


@contextmanager
def translated_errors() -> Iterator[None]:
    """Re-raise pyarrow Flight errors raised inside the block as :class:`QuiverError`."""
    try:
        yield
    except pa.ArrowException as error:
        converted = translate(error)
        if converted is error:
            raise
        raise converted from error


# gRPC status codes by number, as the shared-memory socket reports them.
_CODE_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)


def from_status_code(code: int, message: str) -> QuiverError:
    """Return the :class:`QuiverError` for gRPC status ``code`` (a number) and ``message``."""
    name = _CODE_NAMES[code] if 0 <= code < len(_CODE_NAMES) else "UNKNOWN"
    for cls, class_code in _CODE_WORDS.values():
        if class_code == name:
            return cls(message, name)
    return QuiverError(message, name)
