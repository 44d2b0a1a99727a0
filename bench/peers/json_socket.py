"""The blog's baseline: a table sent as JSON over a plain TCP socket.

The client connects and sends one line of JSON, ``{"rows": N}``. The server answers with the
8-byte big-endian length of the body, then the body: the :func:`bench.data.mixed_frame` of
``N`` rows as ``DataFrame.to_json(orient="records")``, serialized for each request (the frame
itself is built once and kept). Then it closes the connection. ``{"rows": N, "prepare": true}``
only builds the frame, and answers with an empty body.

Run it as ``python -m bench.peers.json_socket --port 0``: it prints
``listening on tcp://127.0.0.1:PORT`` once bound and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import json
import socket
import socketserver
import sys
import threading
import time

import pandas as pd

from bench.data import mixed_frame
from bench.peers import arguments, serve

#: Bytes of the length prefix before the body.
LENGTH_BYTES = 8


class JsonTableServer(socketserver.ThreadingTCPServer):
    """Answers each connection's ``{"rows": N}`` with that mixed table as JSON."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), JsonTableHandler)
        self.frames: dict[int, pd.DataFrame] = {}
        self.frames_lock = threading.Lock()

    def frame(self, rows: int) -> pd.DataFrame:
        """Return the mixed table of ``rows`` rows, built on first use."""
        with self.frames_lock:
            if rows not in self.frames:
                self.frames[rows] = mixed_frame(rows)
            return self.frames[rows]


class JsonTableHandler(socketserver.StreamRequestHandler):
    """One request: read the line, send the length and the JSON."""

    server: JsonTableServer

    def handle(self) -> None:
        """Serialize the requested table and send it."""
        request = json.loads(self.rfile.readline())
        frame = self.server.frame(int(request["rows"]))
        body = b"" if request.get("prepare") else frame.to_json(orient="records").encode()
        self.request.sendall(len(body).to_bytes(LENGTH_BYTES, "big"))
        self.request.sendall(body)


def fetch(port: int, rows: int, prepare: bool = False) -> tuple[bytearray, float]:
    """Ask the server on ``port`` for ``rows`` rows; return the body and when it began arriving.

    Parameters
    ----------
    port : int
        The server's port on 127.0.0.1.
    rows : int
        Rows of the mixed table.
    prepare : bool
        Only have the server build the table (the body is empty).

    Returns
    -------
    body : bytearray
        The JSON text.
    first_byte_at : float
        ``time.perf_counter()`` when the length prefix arrived.
    """
    with socket.create_connection(("127.0.0.1", port)) as conn:
        request = {"rows": rows, "prepare": True} if prepare else {"rows": rows}
        conn.sendall(json.dumps(request).encode() + b"\n")
        header = _receive(conn, LENGTH_BYTES)
        first_byte_at = time.perf_counter()
        return _receive(conn, int.from_bytes(header, "big")), first_byte_at


def _receive(conn: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        n = conn.recv_into(view[received:], min(size - received, 1 << 20))
        if n == 0:
            raise ConnectionError(f"connection closed after {received} of {size} bytes")
        received += n
    return buffer


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT."""
    args = arguments(__doc__.splitlines()[0]).parse_args(argv)
    server = JsonTableServer(args.port)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def shutdown() -> None:
        server.shutdown()
        server.server_close()

    return serve(f"listening on tcp://127.0.0.1:{server.server_address[1]}", shutdown)


if __name__ == "__main__":
    sys.exit(main())
