"""A function worker: ``python -m quiver.functions.worker --worker-id I MODULE_OR_PATH...``.

``quiver serve --functions ...`` starts N of these (docs/functions.md, "As built").
Each is given one end of a ``SOCK_SEQPACKET`` socketpair as its file descriptor 3.
It imports every module once (a ``.py`` path under its file's stem, its directory
first on ``sys.path``; anything else by :func:`importlib.import_module`), sends its
hello listing the registered functions (or the import's error, then exits 1), and
then answers each ``call`` with exactly one ``result`` or ``error``, one at a time,
until ``shutdown`` or end-of-file on its socket.

Inputs are read in place: inline from the datagram, or from the attached memfd
mapped read-only. Results go back inline up to 60 KiB, else in a new sealed memfd.
A function that raises costs its call, not the worker.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import importlib.util
import mmap
import os
import platform
import signal
import socket
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import pyarrow as pa

from . import Function, FunctionOutputError, _wire, registry

__all__ = ["SOCKET_FD", "load", "main", "serve"]

#: The worker's end of its socketpair.
SOCKET_FD = 3

#: Exit code after a failed import (the hello carried the error).
EXIT_IMPORT_FAILED = 1
#: Exit code after a message that does not follow the protocol.
EXIT_PROTOCOL = 2

#: Longest message and traceback sent in an ``error`` (the tail of a longer traceback).
MAX_MESSAGE_CHARS = 8 << 10
MAX_TRACEBACK_CHARS = 32 << 10

FUNCTION_ERROR = "FUNCTION_ERROR"
FUNCTION_OUTPUT = "FUNCTION_OUTPUT"

_GONE = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN)


def load(modules: Sequence[str]) -> list[ModuleType]:
    """Import each module or ``.py`` path once, in order; return the modules.

    A path (ending in ``.py`` or holding a ``/``) is loaded under its file's stem,
    with its directory put first on ``sys.path`` so that it can import its siblings.

    Raises
    ------
    ImportError
        A path that is not a Python file, or a module that is not found.
    Exception
        Whatever the module's own code raised.
    """
    loaded: list[ModuleType] = []
    seen: set[str] = set()
    for spec in modules:
        if spec in seen:
            continue
        seen.add(spec)
        if spec.endswith(".py") or os.sep in spec:
            loaded.append(_load_path(Path(spec)))
        else:
            loaded.append(importlib.import_module(spec))
    return loaded


def _load_path(path: Path) -> ModuleType:
    path = path.resolve()
    if not path.is_file():
        raise ImportError(f"no such functions file: {path}", path=str(path))
    directory = str(path.parent)
    if directory in sys.path:
        sys.path.remove(directory)
    sys.path.insert(0, directory)
    name = path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module", name=name, path=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def hello(functions: dict[str, Function]) -> dict[str, Any]:
    """Return the hello's header describing ``functions``."""
    from quiver import __version__

    return {
        "op": "hello",
        "protocol": _wire.PROTOCOL_VERSION,
        "quiver": __version__,
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "pid": os.getpid(),
        "functions": [
            {
                "name": f.name,
                "module": f.module,
                "description": f.description,
                "pandas": f.pandas,
                "sql": f.sql,
                "input_schema": _wire.encode_schema(f.input_schema),
                "output_schema": _wire.encode_schema(f.output_schema),
            }
            for f in functions.values()
        ],
    }


def error_fields(error: BaseException, skip_frames: int = 0) -> dict[str, str]:
    """Return ``type``, ``message`` and ``traceback`` of an exception, as the protocol sends them.

    ``type`` is the class's qualified name, without the module for a builtin.
    ``skip_frames`` leaves the traceback's first frames (the worker's own) out.
    """
    cls = type(error)
    name = cls.__qualname__
    if cls.__module__ != "builtins":
        name = f"{cls.__module__}.{name}"
    tb: TracebackType | None = error.__traceback__
    for _ in range(skip_frames):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    text = "".join(traceback.format_exception(cls, error, tb))
    message = str(error)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "..."
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "...\n" + text[-MAX_TRACEBACK_CHARS:]
    return {"type": name, "message": message, "traceback": text}


class Worker:
    """Answers the server's calls on ``sock`` with ``functions``.

    Parameters
    ----------
    sock : socket.socket
        The worker's end of the socketpair.
    functions : dict of str to Function
        The registered functions, by name.
    worker_id : str
        The worker's id, for its log lines.
    """

    def __init__(
        self, sock: socket.socket, functions: dict[str, Function], worker_id: str = "?"
    ) -> None:
        self.sock = sock
        self.functions = functions
        self.worker_id = worker_id

    def serve(self) -> int:
        """Answer calls until ``shutdown`` or end-of-file; return the exit code."""
        while True:
            try:
                message = _wire.receive(self.sock)
            except _wire.ProtocolError as error:
                self._log(f"exiting: {error}")
                return EXIT_PROTOCOL
            except OSError as error:
                if error.errno in _GONE:
                    return 0
                raise
            if message is None:
                return 0
            op = message.op
            if op == "call":
                try:
                    self.call(message)
                except OSError as error:
                    if error.errno in _GONE:
                        return 0
                    raise
            elif op == "shutdown":
                message.close()
                return 0
            else:
                message.close()
                self._log(f"exiting: an unknown message {op!r}")
                return EXIT_PROTOCOL

    def call(self, message: _wire.Message) -> None:
        """Run one ``call`` and send its ``result`` or ``error``.

        The input's memfd mapping is closed before the answer is sent, unless the
        function kept a reference into it (then the garbage collector unmaps it).
        """
        seq = message.header.get("seq")
        name = message.header.get("function")
        mapping: mmap.mmap | None = None
        try:
            function = self.functions.get(name) if isinstance(name, str) else None
            if function is None:
                missing = LookupError(f"this worker has no function {name!r}")
                self._send_error(seq, FUNCTION_ERROR, error_fields(missing))
                return
            try:
                batches, schema, mapping = _wire.read_stream(message)
                batch = _one_batch(batches, schema)
                del batches
                argument: object = batch.to_pandas() if function.pandas else batch
            except Exception as error:
                self._send_error(seq, FUNCTION_ERROR, _input_error(error))
                return
            rows = batch.num_rows
            del batch
            try:
                result = function.fn(argument)
            except (Exception, SystemExit) as error:
                self._send_error(seq, FUNCTION_ERROR, error_fields(error, skip_frames=1))
                return
            finally:
                del argument
            reply = self._reply(seq, function, result, rows)
            del result
        finally:
            message.close()
            if mapping is not None:
                _wire.close_mapping(mapping)
        header, payload, fd = reply
        try:
            _wire.send(self.sock, header, payload, fd)
        finally:
            if fd is not None:
                os.close(fd)

    def _reply(
        self, seq: object, function: Function, result: object, rows: int
    ) -> tuple[dict[str, Any], object, int | None]:
        """Return the ``result`` message for a function's result, or the ``error`` message."""
        try:
            batches = function.normalize(result, rows)
            payload, fd = _wire.write_stream(batches[0].schema, batches)
        except FunctionOutputError as error:
            return _error_header(seq, FUNCTION_OUTPUT, error_fields(error)), b"", None
        except Exception as error:
            fields = error_fields(error)
            fields["message"] = (
                f"function {function.name}'s result cannot be sent: {fields['message']}"
            )
            return _error_header(seq, FUNCTION_OUTPUT, fields), b"", None
        header = {"op": "result", "seq": seq, "rows": sum(b.num_rows for b in batches)}
        return header, payload if payload is not None else b"", fd

    def _send_error(self, seq: object, kind: str, fields: dict[str, str]) -> None:
        _wire.send(self.sock, _error_header(seq, kind, fields))

    def _log(self, text: str) -> None:
        print(f"quiver function worker {self.worker_id}: {text}", file=sys.stderr, flush=True)


def _error_header(seq: object, kind: str, fields: dict[str, str]) -> dict[str, Any]:
    return {"op": "error", "seq": seq, "kind": kind, **fields}


def _one_batch(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    """Return the call's one input batch (several are joined; none is 0 rows)."""
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    return pa.Table.from_batches(batches, schema).combine_chunks().to_batches()[0]


def _input_error(error: BaseException) -> dict[str, str]:
    fields = error_fields(error)
    fields["message"] = f"cannot read the call's input: {fields['message']}"
    return fields


def serve(sock: socket.socket, modules: Sequence[str], worker_id: str = "?") -> int:
    """Import ``modules``, send the hello on ``sock``, answer calls; return the exit code.

    A failed import sends a hello with ``error`` and returns 1.
    """
    try:
        load(modules)
        functions = registry()
        greeting = hello(functions)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            raise
        with contextlib.suppress(OSError):
            _wire.send(sock, {"op": "hello", "error": error_fields(error)})
        return EXIT_IMPORT_FAILED
    try:
        _wire.send(sock, greeting)
    except OSError as error:
        if error.errno in _GONE:
            return 0
        if error.errno != errno.EMSGSIZE:
            raise
        too_big = ValueError(
            f"the hello describing {len(functions)} functions is too large for one datagram"
        )
        _wire.send(sock, {"op": "hello", "error": error_fields(too_big)})
        return EXIT_IMPORT_FAILED
    return Worker(sock, functions, worker_id).serve()


def main(argv: Sequence[str] | None = None) -> int:
    """Run a worker on file descriptor 3; return its exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m quiver.functions.worker",
        description="Serve quiver functions to the server that started this process on fd 3.",
    )
    parser.add_argument("--worker-id", default="?", help="the worker's id, for log lines")
    parser.add_argument("modules", nargs="+", metavar="MODULE_OR_PATH")
    args = parser.parse_args(argv)
    # A Ctrl-C in the server's terminal reaches the whole process group: the server
    # decides when its workers stop (shutdown, end-of-file, SIGKILL), not the terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.set_inheritable(SOCKET_FD, False)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=SOCKET_FD)
    return serve(sock, args.modules, args.worker_id)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: threads a library started (OpenMP, BLAS) cannot hold
    # the exit up.
    os._exit(code)
