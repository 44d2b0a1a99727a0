"""The exceptions quiver raises, and their translation from ``pyarrow.flight`` errors.

Every error the server reports becomes a :class:`QuiverError` subclass carrying the
server's own message, its gRPC status code (:attr:`QuiverError.code`) and, from a
quiver server, its kind (:attr:`QuiverError.kind`: ``TABLE_NOT_FOUND``,
``MEMORY_LIMIT``, ...). The original pyarrow exception is kept as ``__cause__``.

How the class is chosen
-----------------------
A quiver server sends every error status with the standard gRPC rich-error
trailer, ``grpc-status-details-bin``: a ``google.rpc.Status`` whose
``google.rpc.ErrorInfo`` detail has domain ``"quiver"`` and the kind as its
reason. The client reads that trailer (see :mod:`quiver._status` for how, since
pyarrow does not pass it on), then picks the class by the kind
(:data:`KIND_CLASSES`), else by the status code (:data:`CODE_CLASSES`); the
message is the status's own, free of pyarrow's decoration.

Fallback for other Flight servers: a server that sends no details (the Arrow
C++ Flight server, an older quiver) gets its status code and message read from
the text pyarrow makes of the status (``"Flight returned not found error, with
message: ..."``), and ``kind`` is ``None``. That text parsing is used for nothing
else.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import pyarrow as pa
import pyarrow.flight as flight

from . import _native, _status

__all__ = [
    "CODE_CLASSES",
    "KIND_CLASSES",
    "AlreadyExistsError",
    "AuthenticationError",
    "DeadlineExceededError",
    "FunctionError",
    "FunctionNotFoundError",
    "FunctionTimeoutError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "QuiverError",
    "ResourceExhaustedError",
    "ServerUnavailableError",
    "TableNotFoundError",
    "UnimplementedError",
    "VersionConflictError",
    "WorkerDiedError",
    "from_reply",
    "translate",
    "translated_errors",
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
    kind : str, optional
        The kind of error the quiver server reported.

    Attributes
    ----------
    message : str
        The server's message, without pyarrow's decoration.
    code : str or None
        The gRPC status code's name, e.g. ``"NOT_FOUND"``.
    kind : str or None
        What went wrong, as the quiver server classified it (the ``reason`` of
        its ``google.rpc.ErrorInfo``): ``"TABLE_NOT_FOUND"``, ``"HANDLE_NOT_FOUND"``,
        ``"TABLE_EXISTS"``, ``"INVALID_NAME"``, ``"SCHEMA_MISMATCH"``,
        ``"INVALID_PARTITION"``, ``"INVALID_ARGUMENT"``, ``"INVALID_DATA"``,
        ``"INVALID_SQL"``, ``"MEMORY_LIMIT"``, ``"TABLE_LIMIT"``, ``"STORAGE_FULL"``,
        ``"MESSAGE_TOO_LARGE"``, ``"TOO_MANY"``, ``"QUERY_RESOURCES"``,
        ``"VERSION_CHANGED"``, ``"CONFLICT"``, ``"UNAVAILABLE"``, ``"UNIMPLEMENTED"``,
        ``"DEADLINE_EXCEEDED"``,
        ``"IDLE_TIMEOUT"``, ``"CANCELLED"``, ``"UNAUTHENTICATED"``,
        ``"PERMISSION_DENIED"``, ``"IO_ERROR"``, ``"INTERNAL"``, or for functions
        ``"FUNCTION_NOT_FOUND"``, ``"FUNCTION_ERROR"``, ``"FUNCTION_OUTPUT"``,
        ``"FUNCTION_TIMEOUT"``, ``"FUNCTION_WORKER_DIED"`` and
        ``"NO_FUNCTION_WORKERS"``. ``None`` when the
        error did not come with one: from another Flight server, an older quiver
        server, the shared-memory socket, or the client itself.
    """

    code: ClassVar[str | None] = None

    def __init__(self, message: str, code: str | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        if code is not None:
            # An instance attribute shadowing the class default.
            self.code = code  # type: ignore[misc]

    def __str__(self) -> str:
        """Return the message as it is, without ``KeyError``'s quoting."""
        return self.message


class NotFoundError(QuiverError, KeyError):
    """What the call names does not exist (gRPC ``NOT_FOUND``).

    The kind ``HANDLE_NOT_FOUND`` is a SQL result or prepared statement that is
    gone; a missing table is :class:`TableNotFoundError`.
    """

    code = "NOT_FOUND"


class TableNotFoundError(NotFoundError):
    """The named table does not exist (kind ``TABLE_NOT_FOUND``, gRPC ``NOT_FOUND``).

    Also raised for a ``NOT_FOUND`` status without a kind (from another Flight server).
    """


class InvalidArgumentError(QuiverError, ValueError):
    """The request was malformed: bad name, options, schema, data or SQL (``INVALID_ARGUMENT``).

    The kind says which: ``INVALID_NAME``, ``SCHEMA_MISMATCH``, ``INVALID_PARTITION``,
    ``INVALID_ARGUMENT``, ``INVALID_DATA`` or ``INVALID_SQL``.
    """

    code = "INVALID_ARGUMENT"


class AlreadyExistsError(QuiverError):
    """A rename target exists and ``overwrite`` was not given (``ALREADY_EXISTS``)."""

    code = "ALREADY_EXISTS"


class ResourceExhaustedError(QuiverError):
    """A server limit would be passed (``RESOURCE_EXHAUSTED``); nothing was changed.

    The kind says which: ``MEMORY_LIMIT``, ``TABLE_LIMIT``, ``STORAGE_FULL``,
    ``MESSAGE_TOO_LARGE``, ``TOO_MANY`` or ``QUERY_RESOURCES``.
    """

    code = "RESOURCE_EXHAUSTED"


class VersionConflictError(QuiverError):
    """The table changed under the call (``ABORTED``).

    Between GetFlightInfo and DoGet; or, on a cluster, other writes to it reached
    the catalog first, every time the write was tried (kind ``CONFLICT``).

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


class DeadlineExceededError(QuiverError, TimeoutError):
    """The call's deadline passed, or the server gave up on an idle stream.

    gRPC ``DEADLINE_EXCEEDED``; kinds ``DEADLINE_EXCEEDED`` and ``IDLE_TIMEOUT``.
    """

    code = "DEADLINE_EXCEEDED"


class UnimplementedError(QuiverError, NotImplementedError):
    """The server does not support the call or the statement (``UNIMPLEMENTED``)."""

    code = "UNIMPLEMENTED"


class FunctionNotFoundError(NotFoundError):
    """No function of that name is served (kind ``FUNCTION_NOT_FOUND``, gRPC ``NOT_FOUND``).

    The message lists the functions the server serves.
    """


# "function score raised ValueError: bad row (batch 17)"
_RAISED = re.compile(r"^function \S+ raised (?P<type>[\w.]+): ")


class FunctionError(QuiverError):
    """A function raised, or returned what its output schema does not allow (``INTERNAL``).

    Kind ``FUNCTION_ERROR``: the function raised an exception, named by
    :attr:`python_type` (its traceback is in the server's log, not here). Kind
    ``FUNCTION_OUTPUT``: its result does not fit its declared output schema, changed
    schema within a call, or cannot be converted to Arrow. The worker survives either.
    """

    code = "INTERNAL"

    @property
    def python_type(self) -> str | None:
        """The class of the exception the function raised (``"ValueError"``), if it raised."""
        match = _RAISED.match(self.message)
        return match.group("type") if match else None


class FunctionTimeoutError(DeadlineExceededError):
    """A batch ran past the server's ``--function-timeout`` (kind ``FUNCTION_TIMEOUT``).

    Its worker was killed and replaced; gRPC ``DEADLINE_EXCEEDED``.
    """


class WorkerDiedError(QuiverError):
    """The worker running a batch died (kind ``FUNCTION_WORKER_DIED``, gRPC ``INTERNAL``).

    It was replaced. Not retried by itself: a crash caused by the data would repeat.
    """

    code = "INTERNAL"


#: The class of each kind of error a quiver server reports.
KIND_CLASSES: dict[str, type[QuiverError]] = {
    "TABLE_NOT_FOUND": TableNotFoundError,
    "HANDLE_NOT_FOUND": NotFoundError,
    "OBJECT_NOT_FOUND": NotFoundError,
    "TABLE_EXISTS": AlreadyExistsError,
    **dict.fromkeys(
        (
            "INVALID_NAME",
            "SCHEMA_MISMATCH",
            "INVALID_PARTITION",
            "INVALID_ARGUMENT",
            "INVALID_DATA",
            "INVALID_SQL",
        ),
        InvalidArgumentError,
    ),
    **dict.fromkeys(
        (
            "MEMORY_LIMIT",
            "TABLE_LIMIT",
            "STORAGE_FULL",
            "MESSAGE_TOO_LARGE",
            "TOO_MANY",
            "QUERY_RESOURCES",
        ),
        ResourceExhaustedError,
    ),
    "VERSION_CHANGED": VersionConflictError,
    "CONFLICT": VersionConflictError,
    "UNAVAILABLE": ServerUnavailableError,
    "UNIMPLEMENTED": UnimplementedError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
    "IDLE_TIMEOUT": DeadlineExceededError,
    "CANCELLED": QuiverError,
    "UNAUTHENTICATED": AuthenticationError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "IO_ERROR": QuiverError,
    "INTERNAL": QuiverError,
    "FUNCTION_NOT_FOUND": FunctionNotFoundError,
    "FUNCTION_ERROR": FunctionError,
    "FUNCTION_OUTPUT": FunctionError,
    "FUNCTION_TIMEOUT": FunctionTimeoutError,
    "FUNCTION_WORKER_DIED": WorkerDiedError,
    "NO_FUNCTION_WORKERS": ServerUnavailableError,
}

#: The class of each gRPC status code, for errors without a known kind.
CODE_CLASSES: dict[str, type[QuiverError]] = {
    "NOT_FOUND": TableNotFoundError,
    "INVALID_ARGUMENT": InvalidArgumentError,
    "ALREADY_EXISTS": AlreadyExistsError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
    "ABORTED": VersionConflictError,
    "UNAVAILABLE": ServerUnavailableError,
    "UNAUTHENTICATED": AuthenticationError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
    "UNIMPLEMENTED": UnimplementedError,
}

#: The domain of the ``google.rpc.ErrorInfo`` a quiver server sends.
QUIVER_DOMAIN = "quiver"

# gRPC status codes by number.
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

# The exception pyarrow raises for each status code, to check that a captured
# status belongs to the error being translated (first match wins).
_PYARROW_CODES: tuple[tuple[type[Exception], frozenset[str]], ...] = (
    (flight.FlightCancelledError, frozenset({"CANCELLED"})),
    (flight.FlightTimedOutError, frozenset({"DEADLINE_EXCEEDED"})),
    (flight.FlightUnauthenticatedError, frozenset({"UNAUTHENTICATED"})),
    (flight.FlightUnauthorizedError, frozenset({"PERMISSION_DENIED"})),
    (flight.FlightUnavailableError, frozenset({"UNAVAILABLE"})),
    (flight.FlightInternalError, frozenset({"INTERNAL", "ABORTED", "DATA_LOSS"})),
    (flight.FlightServerError, frozenset({"UNKNOWN"})),
    (flight.FlightError, frozenset()),
    (pa.ArrowKeyError, frozenset({"NOT_FOUND"})),
    (pa.ArrowNotImplementedError, frozenset({"UNIMPLEMENTED"})),
    (
        pa.ArrowInvalid,
        frozenset(
            {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "OUT_OF_RANGE"}
        ),
    ),
)


def code_name(code: int) -> str:
    """Return the name of gRPC status code ``code`` (a number); ``"UNKNOWN"`` if unknown."""
    return _CODE_NAMES[code] if 0 <= code < len(_CODE_NAMES) else "UNKNOWN"


def _raised_for(error: BaseException, code: str) -> bool:
    """Whether pyarrow raises an error of ``error``'s type for status ``code``."""
    for cls, codes in _PYARROW_CODES:
        if isinstance(error, cls):
            return code in codes
    # ALREADY_EXISTS (and no other code) becomes a plain ArrowException.
    return type(error) is pa.ArrowException and code == "ALREADY_EXISTS"


def from_status(status: _status.RichStatus, fallback_message: str = "") -> QuiverError:
    """Return the :class:`QuiverError` for a server's decoded ``google.rpc.Status``.

    The class is chosen by the kind (the ErrorInfo's reason in domain ``"quiver"``),
    else by the status code.
    """
    code = code_name(status.code)
    kind = status.reason if status.domain == QUIVER_DOMAIN else None
    cls = KIND_CLASSES.get(kind or "") or CODE_CLASSES.get(code, QuiverError)
    return cls(status.message or fallback_message, code, kind)


# How Arrow's gRPC transport words each status code: "gRPC returned <words> error,
# with message: <server message>[. Detail: ...][. gRPC client debug context: ...]".
_CODE_WORDS: dict[str, tuple[type[QuiverError], str]] = {
    "not found": (TableNotFoundError, "NOT_FOUND"),
    "timeout": (DeadlineExceededError, "DEADLINE_EXCEEDED"),
    "invalid argument": (InvalidArgumentError, "INVALID_ARGUMENT"),
    "already exists": (AlreadyExistsError, "ALREADY_EXISTS"),
    "resource exhausted": (ResourceExhaustedError, "RESOURCE_EXHAUSTED"),
    "aborted": (VersionConflictError, "ABORTED"),
    "unavailable": (ServerUnavailableError, "UNAVAILABLE"),
    "unauthenticated": (AuthenticationError, "UNAUTHENTICATED"),
    "permission denied": (PermissionDeniedError, "PERMISSION_DENIED"),
    "internal": (QuiverError, "INTERNAL"),
    "unknown": (QuiverError, "UNKNOWN"),
    "unimplemented": (UnimplementedError, "UNIMPLEMENTED"),
    "precondition failed": (QuiverError, "FAILED_PRECONDITION"),
    "out-of-range": (QuiverError, "OUT_OF_RANGE"),
    "data loss": (QuiverError, "DATA_LOSS"),
}

_GRPC_MESSAGE = re.compile(
    r"(?:gRPC|Flight) returned (?P<words>[a-z -]+?) error, with message: (?P<message>.*)", re.DOTALL
)
_CANCELLED_MESSAGE = re.compile(
    r"(?:gRPC|Flight) cancelled call, with message: (?P<message>.*)", re.DOTALL
)

# What pyarrow appends after the server's message.
_DECORATION = re.compile(
    r"(?:\. |\n)(?:Detail: |gRPC client debug context: |Client context: |Additional context: )"
    r"|\. Additionally, could not finish writing"
)

# Flight status details of errors raised by the transport itself.
_FLIGHT_CLASSES: tuple[tuple[type[Exception], type[QuiverError], str], ...] = (
    (flight.FlightUnavailableError, ServerUnavailableError, "UNAVAILABLE"),
    (flight.FlightTimedOutError, DeadlineExceededError, "DEADLINE_EXCEEDED"),
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


def rich_status(error: BaseException) -> _status.RichStatus | None:
    """Return the ``google.rpc.Status`` the server sent with ``error``, if any.

    It is the trailer the client's middleware captured for the call that failed
    on this thread (consumed by this call), or else the ``extra_info`` pyarrow
    kept (only when the server also sent Arrow C++'s own status trailers). A
    status whose code is not one pyarrow raises ``error``'s type for belongs to
    another call and is ignored, as are bytes that do not decode.
    """
    candidates = [_status.take_captured()]
    extra_info = getattr(error, "extra_info", None)
    if isinstance(extra_info, bytes) and extra_info:
        candidates.append(extra_info)
    for details in candidates:
        if not details:
            continue
        try:
            status = _status.decode_status(details)
        except ValueError:
            continue
        if status.code != 0 and _raised_for(error, code_name(status.code)):
            return status
    return None


def translate(error: BaseException) -> BaseException:
    """Return the :class:`QuiverError` for a pyarrow Flight error, or ``error`` itself.

    Errors that did not come from the server (a closed client, a schema mismatch
    found before sending, ...) are returned unchanged.
    """
    if isinstance(error, QuiverError) or not isinstance(error, pa.ArrowException):
        return error
    text = str(error)
    status = rich_status(error)
    if status is not None:
        return from_status(status, server_message(text))
    # Fallback for servers that send no details: read pyarrow's text.
    match = _GRPC_MESSAGE.search(text)
    if match and match.group("words") in _CODE_WORDS:
        cls, code = _CODE_WORDS[match.group("words")]
        return cls(server_message(text), code)
    if _CANCELLED_MESSAGE.search(text):
        return QuiverError(server_message(text), "CANCELLED")
    for flight_cls, cls, code in _FLIGHT_CLASSES:
        if isinstance(error, flight_cls):
            return cls(server_message(text), code)
    if isinstance(error, pa.ArrowKeyError):
        # An Arrow C++ server's KeyError, rebuilt from its x-arrow-status trailer.
        return TableNotFoundError(server_message(text), "NOT_FOUND")
    if isinstance(error, flight.FlightError):
        return QuiverError(server_message(text), "INTERNAL")
    return error


#: What the Rust core raises for a failed call (:func:`from_call` translates it).
_CallError = _native.call_error()


def from_call(code: int, message: str, details: bytes) -> QuiverError:
    """Return the :class:`QuiverError` of a call the package's Rust core made.

    ``details`` is the server's ``grpc-status-details-bin`` trailer (empty if it
    sent none): the error's kind comes from it, as for a pyarrow call.
    """
    if details:
        try:
            status = _status.decode_status(details)
        except ValueError:
            status = None
        if status is not None and status.code == code:
            return from_status(status, message)
    name = code_name(code)
    return CODE_CLASSES.get(name, QuiverError)(message, name)


@contextmanager
def translated_errors() -> Iterator[None]:
    """Re-raise Flight errors raised inside the block as :class:`QuiverError`.

    Both pyarrow's and the Rust core's (``quiver._core.CallError``).
    """
    try:
        yield
    except _CallError as error:
        raise from_call(*error.args) from error
    except pa.ArrowException as error:
        converted = translate(error)
        if converted is error:
            raise
        raise converted from error


def from_reply(code: int, body: bytes) -> QuiverError:
    """Return the :class:`QuiverError` of a shared-memory error reply.

    The reply carries the gRPC status code (a number) and the serialized
    ``google.rpc.Status`` a gRPC error's trailer carries, with the message and the
    kind; a body that does not decode as one is taken as the message itself.
    """
    try:
        status = _status.decode_status(body)
    except ValueError:
        status = None
    if status is not None and status.code == code:
        return from_status(status, "")
    name = code_name(code)
    return CODE_CLASSES.get(name, QuiverError)(body.decode(errors="replace"), name)
