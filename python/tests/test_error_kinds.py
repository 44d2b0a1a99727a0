"""Each exception class and kind, from the real server's rich error status.

The server sends every error with a ``grpc-status-details-bin`` trailer
(``google.rpc.Status`` + a quiver ``ErrorInfo``); the client picks the class by
its kind. Each test makes the server fail one way through the client's public API
and checks the class, ``code``, ``kind`` and the server's clean message.

Puts go over gRPC here (``transport="grpc"``): the shared-memory socket's error
replies carry a status code and a message but no details, so their errors have
the right class and ``kind`` None (the last test).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import quiver
from quiver import errors
from quiver._core import CallError
from security_helpers import make_users, running
from server_process import ServerFactory


def _raises(
    cls: type[quiver.QuiverError], kind: str, code: str, call: object, *, via_pyarrow: bool = True
) -> quiver.QuiverError:
    assert callable(call)
    with pytest.raises(cls) as raised:
        call()
    error = raised.value
    assert type(error) is cls, f"{type(error).__name__}: {error}"
    assert (error.kind, error.code) == (kind, code), str(error)
    assert error.message == str(error)
    assert "Flight returned" not in error.message
    assert "gRPC returned" not in error.message
    assert "Detail:" not in error.message
    if via_pyarrow:
        # The Flight call's own error: pyarrow's, or the Rust core's (quiver._core).
        assert isinstance(error.__cause__, (pa.ArrowException, CallError)), repr(error.__cause__)
    return error


@pytest.fixture
def grpc_client(uri: str) -> Iterator[quiver.Client]:
    with quiver.connect(uri, transport="grpc") as client:
        yield client


def test_table_not_found(grpc_client: quiver.Client) -> None:
    client = grpc_client
    error = _raises(
        quiver.TableNotFoundError, "TABLE_NOT_FOUND", "NOT_FOUND", lambda: client.get("nope")
    )
    assert error.message == "table 'nope' not found"
    assert isinstance(error, KeyError)
    _raises(quiver.TableNotFoundError, "TABLE_NOT_FOUND", "NOT_FOUND", lambda: client.delete("x"))
    _raises(
        quiver.TableNotFoundError,
        "TABLE_NOT_FOUND",
        "NOT_FOUND",
        lambda: client.put("nope", pa.table({"a": [1]}), mode="append"),
    )


def test_a_sql_result_fetched_twice_is_a_handle_not_found(client: quiver.Client) -> None:
    client.put("t", pa.table({"a": [1, 2, 3]}))
    endpoint = client._sql_info("SELECT a FROM t").endpoints[0]
    with errors.translated_errors():
        assert client.flight_client.do_get(endpoint.ticket).read_all().column_names == ["a"]

    def again() -> None:
        with errors.translated_errors():
            client.flight_client.do_get(endpoint.ticket).read_all()

    error = _raises(errors.NotFoundError, "HANDLE_NOT_FOUND", "NOT_FOUND", again)
    assert not isinstance(error, quiver.TableNotFoundError)


def test_table_exists(client: quiver.Client) -> None:
    client.put("a", pa.table({"x": [1]}))
    client.put("b", pa.table({"x": [2]}))
    _raises(
        quiver.AlreadyExistsError, "TABLE_EXISTS", "ALREADY_EXISTS", lambda: client.rename("a", "b")
    )
    _raises(
        quiver.AlreadyExistsError,
        "TABLE_EXISTS",
        "ALREADY_EXISTS",
        lambda: client.execute_update("CREATE TABLE a AS SELECT 1 AS x"),
    )


def test_invalid_arguments_say_which(grpc_client: quiver.Client) -> None:
    client = grpc_client
    client.put("t", pa.table({"a": [1]}))
    invalid = quiver.InvalidArgumentError
    _raises(invalid, "INVALID_NAME", "INVALID_ARGUMENT", lambda: client.get(" padded"))
    _raises(
        invalid,
        "SCHEMA_MISMATCH",
        "INVALID_ARGUMENT",
        lambda: client.put("t", pa.table({"b": ["x"]}), mode="append"),
    )
    _raises(invalid, "INVALID_SQL", "INVALID_ARGUMENT", lambda: client.sql("SELEC 1"))


@pytest.mark.parametrize("transport", ["grpc", "shm"])
def test_memory_limit(start_quiver: ServerFactory, transport: str) -> None:
    # Over shared memory the kind comes in the socket's reply, not a gRPC trailer.
    server = start_quiver("--max-memory", "1MiB")
    with quiver.connect(server.uri, transport=transport) as client:
        big = pa.table({"a": np.arange(1 << 20)})  # 8 MiB
        error = _raises(
            quiver.ResourceExhaustedError,
            "MEMORY_LIMIT",
            "RESOURCE_EXHAUSTED",
            lambda: client.put("big", big),
            via_pyarrow=transport == "grpc",
        )
        assert "--max-memory" in error.message
        assert not client.exists("big")


def test_table_limit(start_quiver: ServerFactory) -> None:
    server = start_quiver("--max-table-rows", "1000")
    with quiver.connect(server.uri, transport="grpc") as client:
        client.put("t", pa.table({"a": np.arange(600)}))
        _raises(
            quiver.ResourceExhaustedError,
            "TABLE_LIMIT",
            "RESOURCE_EXHAUSTED",
            lambda: client.execute_update("INSERT INTO t SELECT * FROM t"),
        )
        _raises(
            quiver.ResourceExhaustedError,
            "TABLE_LIMIT",
            "RESOURCE_EXHAUSTED",
            lambda: client.put("t", pa.table({"a": np.arange(600)}), mode="append"),
        )


def test_query_resources(start_quiver: ServerFactory) -> None:
    server = start_quiver("--query-memory-limit", "64KiB")
    with quiver.connect(server.uri) as client:
        client.put("u", pa.table({"a": np.arange(20_000), "s": [str(i) for i in range(20_000)]}))
        _raises(
            quiver.ResourceExhaustedError,
            "QUERY_RESOURCES",
            "RESOURCE_EXHAUSTED",
            lambda: client.sql("SELECT * FROM u ORDER BY s DESC, a"),
        )


def test_message_too_large(start_quiver: ServerFactory) -> None:
    server = start_quiver("--max-message-size", "1MiB")
    with quiver.connect(server.uri, transport="grpc") as client:
        _raises(
            quiver.ResourceExhaustedError,
            "MESSAGE_TOO_LARGE",
            "RESOURCE_EXHAUSTED",
            lambda: client.put("t", pa.table({"a": np.arange(512 * 1024)})),  # one 4 MiB batch
        )


@pytest.mark.parametrize("core", [True, False], ids=["core", "pyarrow"])
def test_version_changed_in_the_endpoint_threads(
    uri: str, monkeypatch: pytest.MonkeyPatch, core: bool
) -> None:
    # Four partitions, read in parallel: by the Rust core, or (QUIVER_CORE=0) by a pool of
    # pyarrow threads, where each thread's error must carry its own call's status.
    # (gRPC: shm tickets hold the version they read.)
    if core:
        monkeypatch.delenv("QUIVER_CORE", raising=False)
    else:
        monkeypatch.setenv("QUIVER_CORE", "0")
    client = quiver.connect(uri, transport="grpc")
    assert (client.data_plane.core is not None) == core
    client.put("t", pa.table({"v": np.arange(100)}), partitions=4)
    other = quiver.connect(uri, transport="grpc")
    real_flight_info = client.data_plane.info
    threads: set[str] = set()

    def flight_info_then_replace(name: str) -> flight.FlightInfo:
        info = real_flight_info(name)
        other.put("t", pa.table({"v": np.arange(100)}), partitions=4)
        return info

    real_translate = errors.translate

    def translate(error: BaseException) -> BaseException:
        threads.add(threading.current_thread().name)
        return real_translate(error)

    monkeypatch.setattr(client.data_plane, "info", flight_info_then_replace)
    monkeypatch.setattr(errors, "translate", translate)
    _raises(quiver.VersionConflictError, "VERSION_CHANGED", "ABORTED", lambda: client.get("t"))
    if not core:
        assert any(name.startswith("quiver-get") for name in threads), threads
    other.close()
    client.close()


def test_unimplemented(client: quiver.Client) -> None:
    client.put("t", pa.table({"a": [1]}))
    _raises(
        errors.UnimplementedError,
        "UNIMPLEMENTED",
        "UNIMPLEMENTED",
        lambda: client.execute_update("DELETE FROM t"),
    )


def test_idle_timeout(start_quiver: ServerFactory) -> None:
    server = start_quiver("--stream-idle-timeout", "1")

    def silent() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"a": np.arange(1000)})
        time.sleep(3)
        yield pa.record_batch({"a": np.arange(1000)})

    with quiver.connect(server.uri) as client:
        client.put("t", pa.table({"a": np.arange(10)}))
        error = _raises(
            errors.DeadlineExceededError,
            "IDLE_TIMEOUT",
            "DEADLINE_EXCEEDED",
            lambda: client.put("t", silent(), mode="append"),
        )
        assert isinstance(error, TimeoutError)


def test_unauthenticated_and_permission_denied(tmp_path: Path) -> None:
    users, tokens = make_users(tmp_path)
    with running("--users", str(users), log_dir=tmp_path) as server:
        with quiver.connect(server.uri, token="not-a-token") as client:
            _raises(
                quiver.AuthenticationError,
                "UNAUTHENTICATED",
                "UNAUTHENTICATED",
                client.list_tables,
            )
        reader = quiver.connect(server.uri, token=tokens["reader"])
        with reader:
            _raises(
                quiver.PermissionDeniedError,
                "PERMISSION_DENIED",
                "PERMISSION_DENIED",
                lambda: reader.put("t", pa.table({"a": [1]})),
            )


def test_a_server_without_details_still_gets_classes(client: quiver.Client) -> None:
    # Not this server: a plain pyarrow client (no capturing middleware) leaves only the
    # text, and the fallback reads it. The same kind of error, without its kind.
    plain = flight.FlightClient(client.uri)
    try:
        plain.get_flight_info(flight.FlightDescriptor.for_path("nope"))
    except pa.ArrowException as e:
        error = errors.translate(e)
    else:
        pytest.fail("no error")
    plain.close()
    assert type(error) is quiver.TableNotFoundError
    assert (error.kind, error.message) == (None, "table 'nope' not found")


def test_concurrent_failures_each_get_their_own_kind(client: quiver.Client) -> None:
    # The status is captured per call, on the thread that receives it: threads failing
    # different ways at once never see each other's kinds.
    client.put("a", pa.table({"x": [1]}))
    client.put("b", pa.table({"x": [1]}))
    calls = [
        ("TABLE_NOT_FOUND", lambda: client.info("missing")),
        ("INVALID_NAME", lambda: client.info(" padded")),
        ("TABLE_EXISTS", lambda: client.rename("a", "b")),
    ]
    wrong: list[tuple[str, str | None]] = []
    counted: list[int] = []

    def work(offset: int) -> None:
        n = 0
        for i in range(60):
            kind, call = calls[(offset + i) % len(calls)]
            try:
                call()
            except quiver.QuiverError as e:
                n += 1
                if e.kind != kind:
                    wrong.append((kind, e.kind))
        counted.append(n)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counted == [60] * 6
    assert wrong == []


def test_shared_memory_errors_keep_their_class(start_quiver: ServerFactory) -> None:
    # The shared-memory socket replies with a status code and a message only: the class
    # comes from the code (no text parsing), the kind is not known.
    server = start_quiver("--max-memory", "1MiB")
    with quiver.connect(server.uri, transport="shm") as client:
        client.put("t", pa.table({"a": [1]}))
        with pytest.raises(quiver.ResourceExhaustedError) as full:
            client.put("big", pa.table({"a": np.arange(1 << 20)}))
        assert full.value.code == "RESOURCE_EXHAUSTED"
        assert "--max-memory" in full.value.message
        with pytest.raises(quiver.InvalidArgumentError) as mismatch:
            client.put("t", pa.table({"b": ["x"]}), mode="append")
        assert mismatch.value.code == "INVALID_ARGUMENT"
        assert mismatch.value.message.startswith("schema mismatch")
