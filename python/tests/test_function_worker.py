"""The function worker (``python -m quiver.functions.worker``) against a server played here.

Each test spawns the real worker process with one end of a ``SOCK_SEQPACKET``
socketpair as its fd 3 and speaks protocol version 1 (docs/functions.md, "As built")
on the other end, encoding and decoding the datagrams by hand rather than through
``quiver.functions._wire``, so that the worker is checked against the specification.
"""

from __future__ import annotations

import base64
import fcntl
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import functions_fixture
import quiver
import quiver.functions as qf

FIXTURE = Path(functions_fixture.__file__).resolve()
INLINE_LIMIT = 61_440
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
TIMEOUT_S = 30.0
WORKER_FD = 3


class Worker:
    """A worker process and the server's end of its socketpair."""

    def __init__(self, *modules: str | Path, cwd: Path | None = None) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(TIMEOUT_S)
        fd = theirs.fileno()

        def as_fd_3() -> None:
            os.dup2(fd, WORKER_FD)

        env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
        env["PYTHONUNBUFFERED"] = "1"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "quiver.functions.worker", "--worker-id", "7"]
            + [str(m) for m in modules],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(WORKER_FD,),
            preexec_fn=as_fd_3,
            env=env,
            cwd=cwd,
        )
        theirs.close()
        self.seq = 0

    def send(self, header: dict[str, Any], payload: bytes = b"", fd: int | None = None) -> None:
        text = json.dumps(header).encode()
        datagram = struct.pack("<I", len(text)) + text + payload
        fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))] if fd else []
        self.sock.sendmsg([datagram], fds)

    def receive(self) -> tuple[dict[str, Any], bytes, int | None, int]:
        """The next message: header, payload, attached fd, and the payload's offset."""
        data, fds, flags, _ = socket.recv_fds(self.sock, 1 << 20, 4)
        assert not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC)
        assert data, "the worker closed its socket"
        assert len(fds) <= 1
        (length,) = struct.unpack_from("<I", data)
        header = json.loads(data[4 : 4 + length])
        return header, data[4 + length :], fds[0] if fds else None, 4 + length

    def hello(self) -> dict[str, Any]:
        header, payload, fd, _ = self.receive()
        assert header["op"] == "hello" and not payload and fd is None
        return header

    def call(self, function: str, batch: pa.RecordBatch, *, memfd: bool = False) -> int:
        self.seq += 1
        stream = ipc_stream(batch)
        header = {"op": "call", "function": function, "seq": self.seq}
        if memfd or len(stream) > INLINE_LIMIT:
            fd = sealed_memfd(stream)
            try:
                self.send(header, fd=fd)
            finally:
                os.close(fd)
        else:
            self.send(header, stream)
        return self.seq

    def answer(self, seq: int) -> tuple[dict[str, Any], pa.Table | None]:
        """The answer to call ``seq``: its header and, for a result, its batches."""
        header, payload, fd, offset = self.receive()
        assert header["seq"] == seq
        if header["op"] == "error":
            assert not payload and fd is None
            return header, None
        assert header["op"] == "result", header
        if fd is None:
            assert 0 < len(payload) <= INLINE_LIMIT
            # The worker pads its header so that the stream starts 8-byte aligned.
            assert offset % 8 == 0
            return header, read_ipc(payload)
        try:
            assert not payload
            assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS == SEALS
            size = os.fstat(fd).st_size
            assert size > INLINE_LIMIT
            with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapping:
                table = read_ipc(bytes(mapping))
        finally:
            os.close(fd)
        return header, table

    def run(self, function: str, batch: pa.RecordBatch, *, memfd: bool = False) -> pa.Table:
        header, table = self.answer(self.call(function, batch, memfd=memfd))
        assert header["op"] == "result", header
        assert table is not None
        assert header["rows"] == table.num_rows
        return table

    def wait(self, timeout: float = TIMEOUT_S) -> int:
        return self.process.wait(timeout=timeout)

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace")

    def close(self) -> None:
        self.sock.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=TIMEOUT_S)
        if self.process.stderr is not None:
            self.process.stderr.close()


def ipc_stream(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def read_ipc(data: bytes) -> pa.Table:
    """The stream as a table whose chunks are its batches as sent, empty ones included."""
    with pa.ipc.open_stream(data) as reader:
        return pa.Table.from_batches(list(reader), reader.schema)


def sealed_memfd(data: bytes) -> int:
    fd = os.memfd_create("test-function-input", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    return fd


def schema_of(encoded: str | None) -> pa.Schema | None:
    return None if encoded is None else pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded)))


@pytest.fixture
def worker() -> Iterator[Worker]:
    w = Worker(FIXTURE)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def ready(worker: Worker) -> Worker:
    worker.hello()
    return worker


# -- the hello --------------------------------------------------------------------------


def test_the_hello_describes_the_worker_and_every_function(worker: Worker) -> None:
    hello = worker.hello()
    assert hello["protocol"] == 1
    assert hello["quiver"] == quiver.__version__
    assert hello["python"] == ".".join(map(str, sys.version_info[:3]))
    assert hello["pyarrow"] == pa.__version__
    assert hello["pid"] == worker.process.pid
    assert "error" not in hello
    functions = {f["name"]: f for f in hello["functions"]}
    assert list(functions) == [
        "score",
        "identity",
        "double",
        "first_col",
        "raises",
        "empty",
        "wrong_output",
        "slow_even",
        "crash",
        "hang",
        "worker_pid",
    ]
    score = functions["score"]
    assert score == {
        "name": "score",
        "module": "functions_fixture",
        "description": "The probability that a row is positive.",
        "pandas": False,
        "sql": True,
        "input_schema": score["input_schema"],
        "output_schema": score["output_schema"],
    }
    assert schema_of(score["input_schema"]) == functions_fixture.FEATURES
    assert schema_of(score["output_schema"]) == functions_fixture.SCORE_SCHEMA
    assert functions["identity"]["input_schema"] is None
    assert functions["identity"]["output_schema"] is None
    assert functions["double"]["pandas"] is True


def test_a_module_that_fails_to_import_sends_its_error_and_exits_1(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import quiver.functions\nraise RuntimeError('no model file')\n")
    w = Worker(broken)
    try:
        hello = w.hello()
        assert hello["op"] == "hello"
        assert hello["error"]["type"] == "RuntimeError"
        assert hello["error"]["message"] == "no model file"
        assert "broken.py" in hello["error"]["traceback"]
        assert "functions" not in hello
        assert w.wait() == 1
    finally:
        w.close()


@pytest.mark.parametrize(
    ("source", "type_", "words"),
    [
        ("@qf.function(name='not a name')\ndef f(b): return b\n", "ValueError", "identifier"),
        (
            "@qf.function\ndef f(b): return b\n@qf.function(name='f')\ndef g(b): return b\n",
            "ValueError",
            "two functions are named f",
        ),
        ("import no_such_module_here\n", "ModuleNotFoundError", "no_such_module_here"),
    ],
)
def test_bad_declarations_are_hello_errors(
    tmp_path: Path, source: str, type_: str, words: str
) -> None:
    module = tmp_path / "declared.py"
    module.write_text("import quiver.functions as qf\n" + source)
    w = Worker(module)
    try:
        error = w.hello()["error"]
        assert error["type"] == type_
        assert words in error["message"]
        assert w.wait() == 1
    finally:
        w.close()


def test_modules_are_found_by_name_and_paths_import_their_siblings(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("OFFSET = 10\n")
    (tmp_path / "by_path.py").write_text(
        "import helper, quiver.functions as qf\n"
        "@qf.function\ndef shifted(b): return b['x'].to_numpy() + helper.OFFSET\n"
    )
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "by_name.py").write_text(
        "import quiver.functions as qf\n@qf.function\ndef named(b): return b\n"
    )
    w = Worker(tmp_path / "by_path.py", "pkg.by_name", "pkg.by_name", cwd=tmp_path)
    try:
        hello = w.hello()
        assert [(f["name"], f["module"]) for f in hello["functions"]] == [
            ("shifted", "by_path"),
            ("named", "pkg.by_name"),
        ]
        table = w.run("shifted", pa.record_batch({"x": [1, 2]}))
        assert table.to_pydict() == {"shifted": [11, 12]}
    finally:
        w.close()


# -- calls ------------------------------------------------------------------------------


def test_a_small_call_is_answered_inline(ready: Worker) -> None:
    batch = pa.record_batch({"x": [1, 2, 3], "s": ["a", None, "c"]})
    table = ready.run("identity", batch)
    assert table.to_batches() == [batch]


def test_a_call_in_a_memfd_is_answered_in_a_sealed_memfd(ready: Worker) -> None:
    batch = pa.record_batch({"x": np.arange(100_000, dtype=np.int64)})
    assert len(ipc_stream(batch)) > INLINE_LIMIT
    table = ready.run("identity", batch, memfd=True)
    assert table.combine_chunks().to_batches() == [batch]
    # A small input in a memfd is read all the same, and answered inline.
    assert ready.run("identity", batch.slice(0, 5), memfd=True).num_rows == 5


def test_input_memfds_are_closed_and_unmapped_after_the_call(ready: Worker) -> None:
    batch = pa.record_batch({"x": np.arange(50_000, dtype=np.int64)})
    for _ in range(3):
        ready.run("first_col", batch, memfd=True)
        ready.run("identity", batch, memfd=True)
    # The worker closes a result's memfd after sending it; it answers one call at a
    # time, so once a small inline call is answered the last memfd call is over.
    ready.run("identity", pa.record_batch({"x": [1]}))
    pid = ready.process.pid
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "test-function-input" not in maps
    links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    assert not [link for link in links if "memfd:" in link], links


def test_pandas_functions_get_and_return_dataframes(ready: Worker) -> None:
    table = ready.run("double", pa.record_batch({"x": [1, 2, 3], "y": [0.5, 1.5, 2.5]}))
    assert table.to_pydict() == {"x": [2, 4, 6], "y": [0.5, 1.5, 2.5]}


def test_an_array_becomes_the_declared_column(ready: Worker) -> None:
    table = ready.run("first_col", pa.record_batch({"a": [3, 4], "b": ["x", "y"]}))
    assert table.schema == pa.schema([("first", pa.int64())])
    assert table.to_pydict() == {"first": [3, 4]}


def test_scores_equal_in_process_predict(ready: Worker) -> None:
    batch = functions_fixture.features(10_000)
    table = ready.run("score", batch)
    assert table.schema == functions_fixture.SCORE_SCHEMA
    expected = functions_fixture.predict(batch)
    np.testing.assert_array_equal(table.column("score").to_numpy(), expected)


def test_an_empty_result_is_one_batch_of_no_rows(ready: Worker) -> None:
    header, table = ready.answer(ready.call("empty", pa.record_batch({"x": [1, 2]})))
    assert header["rows"] == 0
    assert table is not None
    assert table.schema == pa.schema([("x", pa.int64())])
    assert [len(chunk) for chunk in table.column(0).chunks] == [0]
    # An input of no rows is a call too.
    assert ready.run("identity", pa.record_batch({"x": pa.array([], pa.int64())})).num_rows == 0


def test_a_function_that_raises_costs_its_call_not_the_worker(ready: Worker) -> None:
    header, table = ready.answer(ready.call("raises", pa.record_batch({"x": [1]})))
    assert table is None
    assert header["kind"] == "FUNCTION_ERROR"
    assert header["type"] == "ValueError"
    assert header["message"] == "bad row"
    assert 'raise ValueError("bad row")' in header["traceback"]
    assert "functions_fixture.py" in header["traceback"]
    # The worker's own frames are left out.
    assert "worker.py" not in header["traceback"]
    assert ready.run("identity", pa.record_batch({"x": [1]})).num_rows == 1


def test_a_result_that_does_not_fit_the_output_schema_is_function_output(ready: Worker) -> None:
    header, table = ready.answer(ready.call("wrong_output", pa.record_batch({"x": [1]})))
    assert table is None
    assert header["kind"] == "FUNCTION_OUTPUT"
    assert "x: string" in header["message"] and "x: int64" in header["message"]
    assert ready.run("first_col", pa.record_batch({"x": [1]})).num_rows == 1


def test_an_unknown_function_is_an_error_answer(ready: Worker) -> None:
    header, _ = ready.answer(ready.call("nope", pa.record_batch({"x": [1]})))
    assert header["op"] == "error"
    assert header["kind"] == "FUNCTION_ERROR"
    assert "nope" in header["message"]


def test_calls_are_answered_one_each_in_order(ready: Worker) -> None:
    seqs = [ready.call("identity", pa.record_batch({"x": [i]})) for i in range(20)]
    for i, seq in enumerate(seqs):
        _, table = ready.answer(seq)
        assert table is not None and table.to_pydict() == {"x": [i]}


# -- stopping ---------------------------------------------------------------------------


def test_end_of_file_on_the_socket_exits_the_worker(ready: Worker) -> None:
    ready.sock.close()
    assert ready.wait() == 0


def test_shutdown_exits_the_worker(ready: Worker) -> None:
    ready.send({"op": "shutdown"})
    assert ready.wait() == 0


def test_a_worker_ignores_sigint_from_the_terminal(ready: Worker) -> None:
    ready.process.send_signal(2)
    time.sleep(0.2)
    assert ready.run("identity", pa.record_batch({"x": [1]})).num_rows == 1


def test_a_malformed_message_exits_the_worker_with_2(ready: Worker) -> None:
    ready.sock.send(b"\xff\xff\xff\x7f{}")
    assert ready.wait() == 2
    assert "quiver function worker 7" in ready.stderr()


# -- the decorator, in-process -----------------------------------------------------------


def test_the_decorator_returns_the_function_unchanged() -> None:
    def plain(batch: pa.RecordBatch) -> pa.RecordBatch:
        """First paragraph,
        on two lines.

        Second paragraph.
        """
        return batch

    assert qf.function(plain) is plain
    registered = qf.registry()["plain"]
    assert registered.fn is plain
    assert registered.description == "First paragraph, on two lines."
    assert registered.module == __name__
    assert qf.function(name="renamed", description="given")(plain) is plain
    assert qf.registry()["renamed"].description == "given"


def test_normalization_of_results() -> None:
    declared = qf.Function(
        name="f",
        fn=lambda b: b,
        module="m",
        description="",
        input_schema=None,
        output_schema=pa.schema([("y", pa.float32())]),
        pandas=False,
        sql=True,
    )
    # A numpy array of another type is converted to the declared one.
    [batch] = declared.normalize(np.array([1.0, 2.0]), 2)
    assert batch.schema == declared.output_schema
    with pytest.raises(qf.FunctionOutputError, match="3 values for 2 rows"):
        declared.normalize([1.0, 2.0, 3.0], 2)
    with pytest.raises(qf.FunctionOutputError, match="array of double"):
        declared.normalize(pa.array([1.0, 2.0]), 2)
    with pytest.raises(qf.FunctionOutputError, match="returned NoneType"):
        declared.normalize(None, 2)
    table = pa.table({"y": pa.array([1, 2, 3], pa.float32())})
    assert [b.num_rows for b in declared.normalize(pa.concat_tables([table, table]), 3)] == [3, 3]
    assert [b.num_rows for b in declared.normalize(table.slice(0, 0), 3)] == [0]
    undeclared = qf.Function("g", lambda b: b, "m", "", None, None, False, True)
    [batch] = undeclared.normalize([1, 2], 2)
    assert batch.schema == pa.schema([("g", pa.int64())])
