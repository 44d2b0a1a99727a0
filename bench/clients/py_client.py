"""The clients suite's Python clients, speaking the Go and Java clients' line protocol.

``python -m bench.clients.py_client pyarrow`` drives pyarrow.flight (the Arrow C++ Flight
client, gRPC C++), ``python -m bench.clients.py_client adbc`` ADBC's Flight SQL driver
(``adbc_driver_flightsql``, whose driver is arrow-go on grpc-go) through its DB-API. Both
with their defaults. ADBC speaks Flight SQL only: its ``get`` is ``SELECT * FROM path``
(GetFlightInfo of a ``CommandStatementQuery``, then DoGet of its endpoints) and its ``put``
is ``adbc_ingest`` (DoPut of a ``CommandStatementIngest``), replacing the table.

Requests and answers are those of ``bench/clients/go/main.go``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from .. import flight_client, sql_clients
from . import tables

#: Most calls one latency request makes.
MAX_LATENCY_CALLS = 100_000


def _count(batches: Any, started: float, out: dict[str, Any]) -> None:
    """Count the rows, batches and buffer bytes of an iterable of record batches."""
    for batch in batches:
        if out["batches"] == 0:
            out["ttfb_seconds"] = time.perf_counter() - started
        out["batches"] += 1
        out["rows"] += batch.num_rows
        out["bytes"] += batch.get_total_buffer_size()


def _empty() -> dict[str, Any]:
    return {"seconds": 0.0, "ttfb_seconds": 0.0, "rows": 0, "batches": 0, "bytes": 0}


class PyarrowClient:
    """pyarrow.flight: GetFlightInfo of the path, DoGet of every endpoint in turn; DoPut."""

    def __init__(self) -> None:
        self.conns: dict[str, flight.FlightClient] = {}
        self.table: pa.Table | None = None
        self.batch_rows = 0

    def conn(self, addr: str) -> flight.FlightClient:
        """Return the client of server ``addr``, connected on first use."""
        if addr not in self.conns:
            self.conns[addr] = flight_client.connect(f"grpc+tcp://{addr}")
        return self.conns[addr]

    def get(self, addr: str, path: str) -> dict[str, Any]:
        """GetFlightInfo of ``path``, DoGet of every endpoint in turn, counted and dropped."""
        client, out = self.conn(addr), _empty()
        started = time.perf_counter()
        info = client.get_flight_info(flight_client.descriptor(path))
        for endpoint in info.endpoints:
            reader = client.do_get(endpoint.ticket)
            _count((chunk.data for chunk in reader if chunk.data is not None), started, out)
        out["seconds"] = time.perf_counter() - started
        out["endpoints"] = len(info.endpoints)
        return out

    def put(self, addr: str, path: str) -> dict[str, Any]:
        """DoPut the prepared table as ``path`` (replacing it)."""
        if self.table is None:
            raise RuntimeError("put before prepare")
        client = self.conn(addr)
        started = time.perf_counter()
        flight_client.put(client, path, self.table, self.batch_rows)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "rows": self.table.num_rows}

    def sql(self, addr: str, query: str) -> dict[str, Any]:
        """Not made by this client."""
        raise NotImplementedError("the pyarrow client makes no Flight SQL query here")

    def close(self) -> None:
        """Close every connection."""
        for client in self.conns.values():
            client.close()


class AdbcClient(PyarrowClient):
    """ADBC's Flight SQL driver: ``SELECT *`` for a get, ``adbc_ingest`` for a put."""

    def __init__(self) -> None:
        super().__init__()
        self.adbc: dict[str, Any] = {}

    def conn(self, addr: str) -> Any:  # type: ignore[override]
        """Return the ADBC connection to server ``addr``, made on first use."""
        if addr not in self.adbc:
            import adbc_driver_flightsql.dbapi

            self.adbc[addr] = adbc_driver_flightsql.dbapi.connect(f"grpc://{addr}", autocommit=True)
        return self.adbc[addr]

    def sql(self, addr: str, query: str) -> dict[str, Any]:
        """Execute ``query``, read its record batches to the end, counted and dropped."""
        out = _empty()
        started = time.perf_counter()
        with self.conn(addr).cursor() as cursor:
            # The statement itself, not cursor.execute: the DB-API prepares every query first
            # (CreatePreparedStatement and its close, two more round trips to a server that
            # has them), where a one-shot query is GetFlightInfo of the statement.
            statement = cursor.adbc_statement
            statement.set_sql_query(query)
            stream, _ = statement.execute_query()
            _count(pa.RecordBatchReader._import_from_c(stream.address), started, out)
        out["seconds"] = time.perf_counter() - started
        return out

    def get(self, addr: str, path: str) -> dict[str, Any]:
        """``SELECT * FROM path``: ADBC gets by Flight SQL only."""
        return self.sql(addr, sql_clients.select_all(path))

    def put(self, addr: str, path: str) -> dict[str, Any]:
        """``adbc_ingest`` of the prepared table as ``path``, replacing it."""
        if self.table is None:
            raise RuntimeError("put before prepare")
        started = time.perf_counter()
        with self.conn(addr).cursor() as cursor:
            rows = cursor.adbc_ingest(path, self.table, mode="replace")
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "rows": self.table.num_rows, "ingested": rows}

    def close(self) -> None:
        """Close every connection."""
        for conn in self.adbc.values():
            conn.close()


def handle(client: PyarrowClient, request: dict[str, Any]) -> dict[str, Any]:
    """Answer one request of the line protocol."""
    op, addr = request.get("op"), str(request.get("addr", ""))
    if op == "prepare":
        client.table = None
        rows = int(request["rows"])
        client.table = tables.make(str(request["kind"]), rows) if rows > 0 else None
        client.batch_rows = int(request["batch_rows"])
        return {"batches": 0 if client.table is None else len(client.table.to_batches())}
    if op == "get":
        return client.get(addr, str(request["path"]))
    if op == "put":
        return client.put(addr, str(request["path"]))
    if op == "sql":
        return client.sql(addr, str(request["query"]))
    if op == "latency":
        calls = int(request["calls"])
        if not 0 < calls <= MAX_LATENCY_CALLS:
            raise ValueError(f"calls must be 1..{MAX_LATENCY_CALLS}")
        path = str(request["path"])
        return {"latencies": [client.get(addr, path)["seconds"] for _ in range(calls)]}
    raise ValueError(f"unknown op {op!r}")


def main(argv: list[str] | None = None) -> int:
    """Answer requests from stdin until it closes or says quit."""
    args = sys.argv[1:] if argv is None else argv
    if args not in (["pyarrow"], ["adbc"]):
        print("usage: python -m bench.clients.py_client pyarrow|adbc < requests", file=sys.stderr)
        return 2
    client = AdbcClient() if args[0] == "adbc" else PyarrowClient()
    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            try:
                request = json.loads(line)
                if request.get("op") == "quit":
                    break
                answer = handle(client, request)
            except Exception as e:
                answer = {"error": f"{type(e).__name__}: {str(e).strip()[:2000]}"}
            print(json.dumps(answer), flush=True)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
