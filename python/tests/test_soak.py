"""64 clients mixing puts, gets, listings and deletes for a few seconds (soak.py): no
errors, and the server's memory goes back near where it started once the tables are
deleted. The benchmark harness's ``soak`` suite runs the same soak for its figures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow.flight as flight

from flight_helpers import action
from server_process import ServerFactory

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from bench import soak  # noqa: E402  (the harness's soak, shared with its suite)

SECONDS = float(os.environ.get("QUIVER_SOAK_SECONDS", "10"))
#: RSS after the deletes may exceed the start by this much: the runtime's threads,
#: connection buffers and allocator caches that a first burst of load creates.
RSS_SLACK = 96 << 20


def test_soak_64_clients(start_quiver: ServerFactory) -> None:
    server = start_quiver()
    outcome = soak.run(server.uri, server.process.pid, SECONDS, clients=64, rows=10_000)
    print(outcome.summary())
    assert outcome.errors == [], outcome.errors[:10]
    assert outcome.ops > 64
    assert set(outcome.latencies_ms) == {"put", "get", "list", "delete"}
    client = flight.FlightClient(server.uri)
    stats = action(client, "stats")
    assert stats["tables"] == 0 and stats["memory_used"] == 0, stats
    client.close()
    assert outcome.rss_after < outcome.rss_before + RSS_SLACK, outcome.summary()
