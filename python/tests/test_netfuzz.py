"""Malformed Flight RPCs over the network: the server answers each cleanly, keeps
serving its tables unchanged, and its memory does not balloon (netfuzz.py)."""

from __future__ import annotations

import os

import pyarrow.flight as flight

import netfuzz
from flight_helpers import action, get, put, table_names
from server_process import ServerFactory

CASES = int(os.environ.get("QUIVER_NETFUZZ_CASES", "400"))
RSS_GROWTH_LIMIT = 512 << 20


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_malformed_rpcs_leave_the_server_serving(start_quiver: ServerFactory) -> None:
    server = start_quiver("--max-message-size", "64MiB")
    client = flight.FlightClient(server.uri)
    tables = netfuzz.sample_tables()
    for name, table in tables.items():
        put(client, name, table)
    rss_before = rss_bytes(server.process.pid)

    seen = netfuzz.run(server.uri, CASES, seed=5)

    assert sum(seen.values()) == CASES
    kinds = {line.split(" -> ")[0] for line in seen}
    assert len(kinds) >= 12, seen  # most kinds of case were tried
    assert server.process.poll() is None, "the server died"
    names = table_names(client)
    assert set(tables) <= set(names) <= set(tables) | {"fuzz"}, names
    for name, table in tables.items():
        assert get(client, name).equals(table), name
    if "fuzz" in names:  # a mutation that still made a valid put
        action(client, "delete", b"fuzz")
    stats = action(client, "stats")
    assert stats["tables"] == len(tables), stats
    assert stats["rows"] == sum(t.num_rows for t in tables.values()), stats
    assert stats["memory_used"] == stats["bytes"], "memory charged to no table"
    growth = rss_bytes(server.process.pid) - rss_before
    assert growth < RSS_GROWTH_LIMIT, f"RSS grew {growth >> 20} MiB over {CASES} cases"
    client.close()
