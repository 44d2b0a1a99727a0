"""An XGBatch-style scoring server: pyarrow's ``FlightServerBase`` with ``do_exchange``.

What the BID'22 paper's XGBatch is, and what such services are written as today: one
Python process whose DoExchange reads each record batch of the stream, scores it with the
booster (:func:`bench.xgbatch.score`: ``inplace_predict`` on one thread) and writes the
scores back as one batch, the input's ``app_metadata`` with it. Any descriptor is accepted
(the suite sends quiver's ``{"function": "score"}`` command to both servers).

Run it as ``python -m bench.peers.xgbatch_server --port 0 --model PATH``: it prints
``listening on grpc+tcp://127.0.0.1:PORT`` once bound and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import sys

import pyarrow.flight as flight

from bench import xgbatch
from bench.peers import arguments, serve

#: What the first line on stdout starts with once the server listens.
LISTENING = "listening on "


class XGBatchServer(flight.FlightServerBase):
    """Scores every batch of a DoExchange stream and streams the scores back.

    Parameters
    ----------
    location : str
        The URI to bind, e.g. ``grpc+tcp://127.0.0.1:0``.
    model : str
        The saved booster.
    """

    def __init__(self, location: str, model: str) -> None:
        super().__init__(location)
        self.booster = xgbatch.load(model)
        self.uri = f"grpc+tcp://127.0.0.1:{self.port}"

    def do_exchange(self, context, descriptor, reader, writer):
        """Answer each input batch with one batch of scores, in order."""
        started = False
        for chunk in reader:
            if chunk.data is None:
                if chunk.app_metadata is not None:
                    writer.write_metadata(chunk.app_metadata)
                continue
            result = xgbatch.score_batch(self.booster, chunk.data)
            if not started:
                writer.begin(result.schema)
                started = True
            if chunk.app_metadata is not None:
                writer.write_with_metadata(result, chunk.app_metadata)
            else:
                writer.write_batch(result)
        if not started:
            writer.begin(xgbatch.OUTPUT_SCHEMA)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT."""
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--model", help=f"the saved booster (default: ${xgbatch.MODEL_ENV})")
    args = parser.parse_args(argv)
    server = XGBatchServer(f"grpc+tcp://127.0.0.1:{args.port}", args.model)
    return serve(f"{LISTENING}{server.uri}", server.shutdown)


if __name__ == "__main__":
    sys.exit(main())
