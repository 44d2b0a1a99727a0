"""A JSON scoring service: FastAPI on uvicorn, one worker, the way such services are written.

``POST /score`` with ``{"rows": [[f0, ..., f19], ...]}`` (rows as lists of lists, validated
by a pydantic model) answers ``{"scores": [...]}``: the same booster and the same scoring
as every peer of the functions suite (:func:`bench.xgbatch.predict`: ``inplace_predict``
on one thread) after ``numpy.asarray`` of the rows. ``GET /health`` answers
``{"ok": true}``.

Run it as ``python -m bench.peers.json_scoring --port 0 --model PATH``: it prints
``listening on http://127.0.0.1:PORT`` once its socket listens, and stops on SIGTERM or
SIGINT (uvicorn's graceful shutdown, then exit code 0).
"""

from __future__ import annotations

import signal
import socket
import sys

import numpy as np
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from bench import xgbatch
from bench.peers import arguments

#: What the first line on stdout starts with once the server listens.
LISTENING = "listening on "
#: Pending connections the socket queues before uvicorn accepts them.
BACKLOG = 128
#: Seconds an idle kept-alive connection stays open (uvicorn's default is 5).
KEEP_ALIVE_S = 3600


class Rows(BaseModel):
    """A scoring request: rows of the 20 features, in order."""

    rows: list[list[float]]


class Scores(BaseModel):
    """A scoring response: one probability per row, in the rows' order."""

    scores: list[float]


def make_app(model: str | None) -> FastAPI:
    """Return the service, with the booster at ``model`` loaded."""
    app = FastAPI(title="XGBatch JSON scoring")
    booster = xgbatch.load(model)

    @app.post("/score")
    def score(request: Rows) -> Scores:
        x = np.asarray(request.rows, dtype=np.float32).reshape(-1, len(xgbatch.FEATURES))
        return Scores(scores=xgbatch.predict(booster, x).tolist())

    @app.get("/health")
    def health() -> dict[str, bool]:
        return {"ok": True}

    return app


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT."""
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--model", help=f"the saved booster (default: ${xgbatch.MODEL_ENV})")
    args = parser.parse_args(argv)
    app = make_app(args.model)
    # IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off on the connections it
    # accepts only when the listening socket says TCP (``base_events._set_nodelay``).
    # With proto 0 every response's headers and body went out as two writes, the second
    # waiting for the client's delayed ACK: 48 ms per request, a GET /health included.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(BACKLOG)
    # The client keeps one connection for the whole suite, idle while the other peers
    # are measured: uvicorn's default keep-alive of 5 s closed it under the client, whose
    # next request then failed with a broken pipe.
    config = uvicorn.Config(
        app,
        workers=1,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    server = uvicorn.Server(config)
    # uvicorn handles SIGTERM and SIGINT itself, then raises the signal again with the
    # handlers it found: these make that a clean exit, as the other peers' stops are.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: sys.exit(0))
    print(f"{LISTENING}http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
