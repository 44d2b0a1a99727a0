"""The rich error status: its protobuf decoder, and how errors get their class and kind.

The bytes are built here with a protobuf writer of the test's own, so a bug shared
by quiver's reader and writer would not hide. Errors from a real Flight server
come from the Arrow C++ server pyarrow ships (a non-quiver server: no kinds) and
from quiver's own server in test_error_kinds.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import quiver
from quiver import _status, errors


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = b""
    while n > 0x7F:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _len(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def error_info(reason: str, domain: str = "quiver", **metadata: str) -> bytes:
    entries = b"".join(_len(3, _len(1, k) + _len(2, v)) for k, v in metadata.items())
    return _len(1, reason) + _len(2, domain) + entries


def any_of(type_url: str, value: bytes) -> bytes:
    return _len(1, type_url) + _len(2, value)


ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def rpc_status(code: int, message: str, *details: bytes) -> bytes:
    return _int(1, code) + _len(2, message) + b"".join(_len(3, d) for d in details)


def test_decodes_code_message_and_error_info() -> None:
    data = rpc_status(
        5,
        "table 'nope' not found",
        any_of(ERROR_INFO, error_info("TABLE_NOT_FOUND", table="nope", hint="ü")),
    )
    status = _status.decode_status(data)
    assert status == _status.RichStatus(
        5, "table 'nope' not found", "TABLE_NOT_FOUND", "quiver", {"table": "nope", "hint": "ü"}
    )


def test_skips_other_details_unknown_fields_and_wire_types() -> None:
    other = any_of("type.googleapis.com/google.rpc.DebugInfo", _len(1, "trace"))
    unknown = _int(9, 300) + b"\x25" + b"\x01\x02\x03\x04" + b"\x31" + b"\x00" * 8  # 32, 64 bits
    data = unknown + rpc_status(8, "over the limit", other, any_of(ERROR_INFO, error_info("X")))
    status = _status.decode_status(data)
    assert (status.code, status.message, status.reason, status.domain) == (
        8,
        "over the limit",
        "X",
        "quiver",
    )


def test_a_status_without_error_info_has_no_reason() -> None:
    assert _status.decode_status(rpc_status(13, "boom")) == _status.RichStatus(13, "boom")
    assert _status.decode_status(b"") == _status.RichStatus(0, "")


def test_a_negative_code_is_read_as_int32() -> None:
    assert _status.decode_status(_int(1, -1 & (1 << 64) - 1)).code == -1


@pytest.mark.parametrize(
    "data",
    [
        b"\x08",  # a varint cut short
        b"\x12\x05abc",  # a string longer than the message
        b"\x0b",  # a group (wire type 3)
        b"\x08" + b"\xff" * 11,  # a varint of 11 bytes
        rpc_status(5, "x", b"\x0a\x09abc"),  # a detail that is cut short inside
    ],
)
def test_malformed_bytes_are_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="protobuf"):
        _status.decode_status(data)


def _captured(status: bytes) -> None:
    """Leave ``status`` where the middleware leaves a failed call's details."""
    middleware = _status.CAPTURE.start_call(None)
    middleware.received_headers({"content-type": ["application/grpc"]})
    middleware.received_headers({_status.DETAILS_HEADER: [status]})
    middleware.call_completed(RuntimeError("the call failed"))


# (reason, gRPC code, the exception pyarrow raises for that code, the class expected)
KINDS = [
    ("TABLE_NOT_FOUND", 5, pa.ArrowKeyError, quiver.TableNotFoundError),
    ("HANDLE_NOT_FOUND", 5, pa.ArrowKeyError, errors.NotFoundError),
    ("TABLE_EXISTS", 6, pa.ArrowException, quiver.AlreadyExistsError),
    ("INVALID_NAME", 3, pa.ArrowInvalid, quiver.InvalidArgumentError),
    ("SCHEMA_MISMATCH", 3, pa.ArrowInvalid, quiver.InvalidArgumentError),
    ("INVALID_SQL", 3, pa.ArrowInvalid, quiver.InvalidArgumentError),
    ("MEMORY_LIMIT", 8, pa.ArrowInvalid, quiver.ResourceExhaustedError),
    ("QUERY_RESOURCES", 8, pa.ArrowInvalid, quiver.ResourceExhaustedError),
    ("VERSION_CHANGED", 10, flight.FlightInternalError, quiver.VersionConflictError),
    ("UNIMPLEMENTED", 12, pa.ArrowNotImplementedError, errors.UnimplementedError),
    ("IDLE_TIMEOUT", 4, flight.FlightTimedOutError, errors.DeadlineExceededError),
    ("CANCELLED", 1, flight.FlightCancelledError, quiver.QuiverError),
    ("UNAUTHENTICATED", 16, flight.FlightUnauthenticatedError, quiver.AuthenticationError),
    ("PERMISSION_DENIED", 7, flight.FlightUnauthorizedError, quiver.PermissionDeniedError),
    ("IO_ERROR", 13, flight.FlightInternalError, quiver.QuiverError),
]


@pytest.mark.parametrize(("reason", "code", "raised", "expected"), KINDS)
def test_the_kind_chooses_the_class(
    reason: str, code: int, raised: type[Exception], expected: type[quiver.QuiverError]
) -> None:
    _captured(rpc_status(code, "clean message", any_of(ERROR_INFO, error_info(reason))))
    error = errors.translate(raised("Flight returned some error, with message: decorated"))
    assert type(error) is expected
    assert isinstance(error, quiver.QuiverError)
    assert (error.kind, error.code, error.message) == (
        reason,
        errors.code_name(code),
        "clean message",
    )
    assert _status.take_captured() is None  # consumed


def test_without_a_known_kind_the_code_chooses() -> None:
    _captured(rpc_status(8, "full", any_of(ERROR_INFO, error_info("SOMETHING_NEW"))))
    error = errors.translate(pa.ArrowInvalid("gRPC returned resource exhausted error, ..."))
    assert type(error) is quiver.ResourceExhaustedError
    assert error.kind == "SOMETHING_NEW"
    # Another domain's reason is not a quiver kind.
    _captured(rpc_status(5, "gone", any_of(ERROR_INFO, error_info("TABLE_EXISTS", "other.com"))))
    error = errors.translate(pa.ArrowKeyError("x"))
    assert type(error) is quiver.TableNotFoundError
    assert error.kind is None


def test_a_status_of_another_call_is_not_used() -> None:
    # A NOT_FOUND left behind cannot describe an ArrowInvalid: the text decides.
    _captured(rpc_status(5, "stale", any_of(ERROR_INFO, error_info("TABLE_NOT_FOUND"))))
    error = errors.translate(
        pa.ArrowInvalid("gRPC returned invalid argument error, with message: bad name")
    )
    assert type(error) is quiver.InvalidArgumentError
    assert (error.message, error.kind) == ("bad name", None)


def test_a_new_call_forgets_the_last_failure() -> None:
    _captured(rpc_status(5, "stale", any_of(ERROR_INFO, error_info("TABLE_NOT_FOUND"))))
    _status.CAPTURE.start_call(None)
    assert _status.take_captured() is None


def test_the_capture_is_per_thread() -> None:
    _captured(rpc_status(5, "main", any_of(ERROR_INFO, error_info("TABLE_NOT_FOUND"))))
    seen: list[bytes | None] = []
    thread = threading.Thread(target=lambda: seen.append(_status.take_captured()))
    thread.start()
    thread.join()
    assert seen == [None]
    assert _status.take_captured() is not None


def test_undecodable_details_fall_back_to_the_text() -> None:
    _captured(b"\x12\x05abc")
    error = errors.translate(pa.ArrowKeyError("Flight returned not found error, with message: x"))
    assert type(error) is quiver.TableNotFoundError
    assert (error.message, error.kind) == ("x", None)


def test_shm_replies_take_the_kind_from_their_status() -> None:
    detailed = errors.from_reply(
        8, rpc_status(8, "clean", any_of(ERROR_INFO, error_info("MEMORY_LIMIT")))
    )
    assert (type(detailed), detailed.kind, detailed.message) == (
        quiver.ResourceExhaustedError,
        "MEMORY_LIMIT",
        "clean",
    )
    # A body that is no google.rpc.Status is the message itself, chosen by code.
    plain = errors.from_reply(8, b"no memory for the export")
    assert type(plain) is quiver.ResourceExhaustedError
    assert (plain.kind, plain.message) == (None, "no memory for the export")


def test_errors_all_lists_every_exception_class() -> None:
    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
    }
    assert classes <= set(errors.__all__)
    assert classes <= set(quiver.__all__)
    for name in errors.__all__:
        assert hasattr(errors, name), name


class _ArrowCppServer(flight.FlightServerBase):
    """Arrow C++'s Flight server: errors as pyarrow sends them, never a quiver kind."""

    def get_flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        raise KeyError(f"no flight {descriptor.path[0].decode()}")

    def do_action(
        self, context: flight.ServerCallContext, action: flight.Action
    ) -> Iterator[bytes]:
        if action.type == "rich":
            status = rpc_status(13, "rich", any_of(ERROR_INFO, error_info("IO_ERROR")))
            raise flight.FlightInternalError("disk on fire", status)
        raise flight.FlightUnauthorizedError("not you")


@pytest.fixture
def arrow_cpp_client() -> Iterator[quiver.Client]:
    server = _ArrowCppServer("grpc+tcp://127.0.0.1:0")
    try:
        with quiver.connect(f"127.0.0.1:{server.port}") as client:
            yield client
    finally:
        server.shutdown()


def test_a_server_without_details_gets_classes_from_the_text(
    arrow_cpp_client: quiver.Client,
) -> None:
    with pytest.raises(quiver.TableNotFoundError) as missing:
        arrow_cpp_client.info("t")
    assert missing.value.kind is None
    assert missing.value.message.startswith("'no flight t'")  # KeyError's repr, the server's
    with pytest.raises(quiver.PermissionDeniedError) as denied:
        arrow_cpp_client.stats()
    assert (denied.value.message, denied.value.kind) == ("not you", None)


def test_extra_info_from_an_arrow_cpp_server_is_read_too(arrow_cpp_client: quiver.Client) -> None:
    with pytest.raises(quiver.QuiverError) as raised:
        arrow_cpp_client._action("rich")
    assert (raised.value.code, raised.value.kind, raised.value.message) == (
        "INTERNAL",
        "IO_ERROR",
        "rich",
    )
