"""The lake suite's clients, in worker processes (issue 66): :mod:`bench.suites.lake` drives them.

:class:`LakeClient` runs the 22 TPC-H queries (``bench/tpch_queries/``) on each engine of
the suite and checks each quiver result against the reference engine's, as
:class:`bench.tpch.TpchClient` does: ADBC Flight SQL connections to the quiver servers
(tables in S3 with a cold and a warm cache, the same files on local disk), and DuckDB in a
process of its own (:class:`DuckDB`), started from this module (``python -m
bench.lake_worker duckdb CONFIG``) with an interpreter path that may put another DuckDB
first: the suite's peer is DuckDB 1.5.5 with the ``httpfs`` extension of the
``duckdb-extension-httpfs`` wheel (the bench's own DuckDB, 2.0.0, has no ``httpfs`` here:
DuckDB downloads its extensions from its own site).

:class:`LakeReader` reads a table in place with pyarrow.flight (GetFlightInfo of its
name, then DoGet of every endpoint in parallel, each on a connection of its own), counting
the batches and dropping them as they come: the DoGet tables are larger than a worker
should hold. It also reads the same objects straight from S3 (pyarrow's S3 file system),
the link's ceiling, and puts the suite's objects into the bucket at its start.

:func:`relay_main` (``python -m bench.lake_worker relay LISTEN UPSTREAM DELAY_MS``) is the
link's delay on a kernel without ``netem``: a TCP relay in front of the S3 server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

#: Longest the DuckDB process may take to start (load its extension, make its views) or
#: to answer one query.
DUCKDB_TIMEOUT_S = 900.0
#: The line the DuckDB process prints once it is ready, before any answer.
READY = "ready"
#: Bytes of each read of the S3 ceiling (pyarrow's S3 file system).
S3_READ_BYTES = 8 << 20


# --- DuckDB, in a process of its own -----------------------------------------------------------


class DuckDB:
    """A DuckDB process of its own, run by ``python`` with ``pythonpath`` first.

    Parameters
    ----------
    python : str
        The interpreter (the harness's: its pyarrow writes and reads the results).
    pythonpath : list of str
        Put before the repository on its ``PYTHONPATH``: the folder of
        ``pip install --target`` of ``duckdb==1.5.5`` and ``duckdb-extension-httpfs``,
        whose DuckDB then shadows the venv's; empty for the venv's own.
    config : dict
        What :func:`duckdb_main` sets up: ``extension`` (the ``.duckdb_extension`` file
        to ``LOAD``, or ``None``), ``settings`` (``SET name = value``), ``secret`` (the
        ``CREATE SECRET`` statement, or ``None``) and ``views`` (table name to the
        ``read_parquet`` location).

    Raises
    ------
    RuntimeError
        It did not start: the end of its stderr says why.
    """

    def __init__(self, python: str, pythonpath: list[str], config: dict[str, Any]) -> None:
        repo = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*pythonpath, repo])
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self.process = subprocess.Popen(
            [python, "-m", "bench.lake_worker", "duckdb", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=repo,
            text=True,
            preexec_fn=_die_with_parent,
        )
        self.info = self._answer("its start")
        if self.info.get("error"):
            self.close()
            raise RuntimeError(f"DuckDB did not start: {self.info['error']}")

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    def _answer(self, what: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        answer: list[str] = []
        reading = threading.Thread(
            target=lambda: answer.append(self.process.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        )
        reading.start()
        reading.join(DUCKDB_TIMEOUT_S)
        if reading.is_alive():
            self.process.kill()
            raise RuntimeError(f"DuckDB did not answer {what} in {DUCKDB_TIMEOUT_S:g} s")
        if not answer or not answer[0]:
            code = self.process.wait(timeout=30)
            raise RuntimeError(
                f"DuckDB exited (code {code}) before answering {what}: {self._stderr_tail()}"
            )
        return json.loads(answer[0])

    def run(self, sql: str, out: str | None) -> dict[str, Any]:
        """Run ``sql``; write the result to the Arrow IPC file ``out``, if given.

        Returns
        -------
        dict
            ``seconds`` (from the call to the whole result as an Arrow table), ``rows``,
            or ``error``.
        """
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"sql": sql, "out": out}) + "\n")
        self.process.stdin.flush()
        return self._answer("a query")

    def close(self) -> None:
        """End the process (its stdin closed; killed if it lingers)."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._stderr.close()


def _die_with_parent() -> None:
    """In the child: SIGKILL when the worker that started it dies (Linux's prctl)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def duckdb_main(config: dict[str, Any]) -> int:
    """Run DuckDB for :class:`DuckDB`: set it up, then answer one query per stdin line.

    Prints one JSON line when ready (``ready``, ``version``, or ``error``), then one per
    query (``seconds``, ``rows``, or ``error``).
    """
    try:
        import duckdb
        import pyarrow as pa

        connection = duckdb.connect(
            config={
                "allow_unsigned_extensions": "true",
                # Nothing is downloaded: what is not loaded here is not there.
                "autoinstall_known_extensions": "false",
                "autoload_known_extensions": "false",
            }
        )
        if config.get("extension"):
            path = str(config["extension"]).replace("'", "''")
            connection.execute(f"LOAD '{path}'")
        for name, value in config.get("settings", {}).items():
            connection.execute(f"SET {name} = {value}")
        if config.get("secret"):
            connection.execute(config["secret"])
        for table, location in config.get("views", {}).items():
            where = str(location).replace("'", "''")
            connection.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{where}')")
        shown = dict(
            connection.execute(
                "SELECT name, value FROM duckdb_settings() WHERE name IN "
                "('threads', 'enable_external_file_cache', 'parquet_metadata_cache', "
                "'enable_http_metadata_cache', 'http_keep_alive', 's3_url_style')"
            ).fetchall()
        )
        loaded = [
            name
            for (name,) in connection.execute(
                "SELECT extension_name FROM duckdb_extensions() WHERE loaded"
            ).fetchall()
        ]
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    print(
        json.dumps(
            {READY: True, "version": duckdb.__version__, "settings": shown, "loaded": loaded}
        ),
        flush=True,
    )
    for line in sys.stdin:
        request = json.loads(line)
        try:
            started = time.perf_counter()
            table = connection.sql(request["sql"]).to_arrow_table()
            seconds = time.perf_counter() - started
            if request.get("out"):
                with (
                    pa.OSFile(request["out"], "wb") as sink,
                    pa.ipc.new_file(sink, table.schema) as writer,
                ):
                    writer.write_table(table)
            answer: dict[str, Any] = {"seconds": seconds, "rows": table.num_rows}
        except Exception as e:
            answer = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:500]}"}
        print(json.dumps(answer), flush=True)
    return 0


# --- the queries: ADBC Flight SQL and DuckDB ---------------------------------------------------


class LakeClient:
    """In a worker: runs the queries on each engine, times them and checks the results.

    Parameters
    ----------
    uris : dict of str to str
        Each quiver setup's server (``grpc+tcp://...``), by its label.
    reference : str
        The label of the DuckDB engine, whose first result of each query the quiver
        setups' are compared with.
    duckdb : dict
        :class:`DuckDB`'s arguments: ``python``, ``pythonpath``, ``config``.
    """

    def __init__(self, uris: dict[str, str], reference: str, duckdb: dict[str, Any]) -> None:
        from .sql_clients import adbc_flight_sql

        self.reference = reference
        self.results = tempfile.TemporaryDirectory(prefix="quiver-lake-")
        self.duckdb = DuckDB(duckdb["python"], duckdb["pythonpath"], duckdb["config"])
        self.connections = {setup: adbc_flight_sql(uri) for setup, uri in uris.items()}
        self.expected: dict[str, Any] = {}

    def duckdb_info(self) -> dict[str, Any]:
        """Return what the DuckDB process said when ready: version, settings, extensions."""
        return self.duckdb.info

    def run(self, engine: str, qid: str, check: bool) -> dict[str, object]:
        """Run query ``qid`` on ``engine``; time it from the call to the whole Arrow result.

        With ``check``, the reference's result is kept, and a quiver setup's is compared
        with it (:func:`bench.tpch.compare`).

        Returns
        -------
        dict
            ``seconds``, ``rows`` and ``mismatch`` (``None``: equal, or not checked; else
            how it differs).

        Raises
        ------
        RuntimeError
            The query failed (DuckDB's error, or the driver's).
        """
        import pyarrow as pa

        from . import tpch

        text = tpch.query(qid)
        if engine == self.reference:
            out = str(Path(self.results.name) / f"{qid}.arrow") if check else None
            got = self.duckdb.run(text, out)
            if got.get("error"):
                raise RuntimeError(got["error"])
            if out is not None:
                with pa.memory_map(out) as source:
                    self.expected[qid] = pa.ipc.open_file(source).read_all()
                os.unlink(out)
            return {"seconds": got["seconds"], "rows": got["rows"], "mismatch": None}
        started = time.perf_counter()
        table = tpch.fetch_arrow(self.connections[engine], text)
        seconds = time.perf_counter() - started
        mismatch = None
        if check:
            if qid not in self.expected:
                mismatch = "the reference gave no result to compare with"
            else:
                mismatch = tpch.compare(self.expected[qid], table)
        return {"seconds": seconds, "rows": table.num_rows, "mismatch": mismatch}

    def close(self) -> None:
        """Close the connections and end DuckDB."""
        for connection in self.connections.values():
            with contextlib.suppress(Exception):
                connection.close()
        self.duckdb.close()
        self.results.cleanup()


# --- DoGet of a table in place, and the S3 ceiling ---------------------------------------------


class LakeReader:
    """In a worker: reads a table in place through quiver, or its objects straight from S3.

    Parameters
    ----------
    uri : str
        The quiver server (``grpc+tcp://...``); empty for S3 reads only.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def doget(self, name: str) -> dict[str, float]:
        """GetFlightInfo of ``name``'s path descriptor, then DoGet every endpoint in parallel.

        Each endpoint is read on a connection of its own, in a thread of its own; each
        batch is counted and dropped. Timed from GetFlightInfo to the last batch.

        Returns
        -------
        dict
            ``seconds``, ``ttfb_seconds`` (to the first batch of any endpoint), ``rows``,
            ``nbytes`` (Arrow bytes received: the batches' ``nbytes``), ``batches`` and
            ``endpoints``.
        """
        import pyarrow.flight as flight

        from .flight_client import connect

        started = time.perf_counter()
        client = connect(self.uri)
        try:
            info = client.get_flight_info(flight.FlightDescriptor.for_path(name))
            endpoints = list(info.endpoints)
            first: list[float] = []

            def read(endpoint: Any) -> tuple[int, int, int]:
                own = connect(self.uri)
                rows = nbytes = batches = 0
                try:
                    for chunk in own.do_get(endpoint.ticket):
                        if chunk.data is None:
                            continue
                        if not first:
                            first.append(time.perf_counter())
                        rows += chunk.data.num_rows
                        nbytes += chunk.data.nbytes
                        batches += 1
                finally:
                    own.close()
                return rows, nbytes, batches

            with ThreadPoolExecutor(max_workers=max(1, len(endpoints))) as pool:
                parts = list(pool.map(read, endpoints))
        finally:
            client.close()
        seconds = time.perf_counter() - started
        return {
            "seconds": seconds,
            "ttfb_seconds": (first[0] - started) if first else seconds,
            "rows": sum(p[0] for p in parts),
            "nbytes": sum(p[1] for p in parts),
            "batches": sum(p[2] for p in parts),
            "endpoints": len(endpoints),
        }

    def s3_get(self, s3: dict[str, str], paths: list[str]) -> dict[str, float]:
        """Read whole objects from S3 in parallel (pyarrow's S3 file system), dropping them.

        Parameters
        ----------
        s3 : dict
            ``endpoint`` (``host:port``), ``access_key``, ``secret_key``, ``region``.
        paths : list of str
            ``bucket/key`` of each object, each read by a thread of its own.

        Returns
        -------
        dict
            ``seconds`` and ``bytes`` read.
        """
        filesystem = _s3_filesystem(s3)

        def read(path: str) -> int:
            total = 0
            with filesystem.open_input_stream(path) as stream:
                while chunk := stream.read(S3_READ_BYTES):
                    total += len(chunk)
            return total

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, len(paths))) as pool:
            total = sum(pool.map(read, paths))
        return {"seconds": time.perf_counter() - started, "bytes": total}

    def upload(self, s3: dict[str, str], pairs: list[tuple[str, str]]) -> int:
        """Put each local file as its ``bucket/key``, 4 at a time; return the bytes put.

        Here, not in the harness: pyarrow's S3 uploads buffer their parts, which took the
        harness to 1.4 GiB putting 4.5 GiB.
        """
        import shutil

        filesystem = _s3_filesystem(s3)

        def put(pair: tuple[str, str]) -> int:
            path, key = pair
            with open(path, "rb") as source, filesystem.open_output_stream(key) as sink:
                shutil.copyfileobj(source, sink, S3_READ_BYTES)
            return os.path.getsize(path)

        with ThreadPoolExecutor(max_workers=4) as pool:
            return sum(pool.map(put, pairs))

    def close(self) -> None:
        """Nothing to close: every read connects and closes its own."""


# --- the link's delay, where the kernel has no netem ---------------------------------------------

#: The line the relay prints once it listens: this, then ``HOST:PORT``.
RELAY_LISTENING = "relay listening on "
#: Bytes a relay direction holds (queued for its delay, or unsent) before it stops reading
#: its source: twice a 1 Gbit/s link's bytes in flight over 5 ms, so the relay never limits
#: a connection below the link, as TCP's own window would not.
RELAY_HIGH_WATER = 4 << 20


class _Direction:
    """One direction of a relayed connection: what was read, held for the delay, then sent."""

    def __init__(self, loop: Any, delay: float) -> None:
        self.loop = loop
        self.delay = delay
        self.queue: deque[tuple[float, bytes | None]] = deque()  # None: the end of the data
        self.held = 0
        self.source: Any = None  # the transport read from
        self.sink: Any = None  # the transport written to (None: not connected yet)
        self.timer: Any = None
        self.sink_paused = False
        self.source_paused = False
        self.ended = False  # the end of the data was passed on
        self.reverse: _Direction | None = None

    def push(self, data: bytes | None) -> None:
        self.queue.append((self.loop.time() + self.delay, data))
        if data is not None:
            self.held += len(data)
        self._throttle()
        if self.timer is None:
            self.timer = self.loop.call_at(self.queue[0][0], self.drain)

    def drain(self) -> None:
        self.timer = None
        if self.sink is None:
            return  # drained again once connected
        now = self.loop.time()
        while self.queue and self.queue[0][0] <= now:
            _, data = self.queue.popleft()
            if data is not None:
                self.held -= len(data)
                if not self.sink.is_closing():
                    self.sink.write(data)
                continue
            if self.ended:
                continue
            self.ended = True
            if self.reverse is not None and self.reverse.ended:
                # Both ends said they are done: close both connections.
                self.sink.close()
                if self.source is not None:
                    self.source.close()
            elif not self.sink.is_closing() and self.sink.can_write_eof():
                self.sink.write_eof()
        if self.queue:
            self.timer = self.loop.call_at(self.queue[0][0], self.drain)
        self._throttle()

    def _throttle(self) -> None:
        full = self.held > RELAY_HIGH_WATER or self.sink_paused
        if self.source is None:
            return
        if full and not self.source_paused:
            self.source.pause_reading()
            self.source_paused = True
        elif not full and self.source_paused:
            self.source.resume_reading()
            self.source_paused = False

    def set_sink_paused(self, paused: bool) -> None:
        self.sink_paused = paused
        self._throttle()


def relay_main(listen: str, upstream: str, delay_ms: float) -> int:
    """Relay TCP from ``listen`` to ``upstream``, each direction's bytes held ``delay_ms``.

    The link's delay where the kernel has no ``netem`` qdisc: every chunk read from either
    side is written to the other ``delay_ms`` later, in order, and a connection to
    ``upstream`` is made one round trip after the client's (a TCP handshake's cost). Each
    direction holds at most :data:`RELAY_HIGH_WATER` bytes before it stops reading. Prints
    :data:`RELAY_LISTENING` and its address, then runs until killed.
    """
    import asyncio

    delay = delay_ms / 1e3
    up_host, up_port = upstream.rsplit(":", 1)
    host, port = listen.rsplit(":", 1)

    class Side(asyncio.Protocol):
        def __init__(self, inbound: _Direction, outbound: _Direction) -> None:
            self.inbound = inbound  # what this side's peer sent: read here
            self.outbound = outbound  # what is written to this side
            self.transport: Any = None

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.inbound.source = transport
            self.outbound.sink = transport
            self.outbound.drain()

        def data_received(self, data: bytes) -> None:
            self.inbound.push(data)

        def eof_received(self) -> bool:
            self.inbound.push(None)
            return True

        def pause_writing(self) -> None:
            self.outbound.set_sink_paused(True)

        def resume_writing(self) -> None:
            self.outbound.set_sink_paused(False)

        def connection_lost(self, exc: object) -> None:
            self.inbound.push(None)
            other = self.inbound.sink
            if other is not None and exc is not None:
                self.inbound.loop.call_later(delay, other.abort)

    async def serve() -> None:
        loop = asyncio.get_running_loop()

        tasks: set[Any] = set()

        def accepted() -> Side:
            to_upstream, to_client = _Direction(loop, delay), _Direction(loop, delay)
            to_upstream.reverse, to_client.reverse = to_client, to_upstream
            client = Side(to_upstream, to_client)

            async def connect() -> None:
                await asyncio.sleep(2 * delay)
                try:
                    await loop.create_connection(
                        lambda: Side(to_client, to_upstream), up_host, int(up_port)
                    )
                except OSError:
                    if client.transport is not None:
                        client.transport.abort()

            task = loop.create_task(connect())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            return client

        server = await loop.create_server(accepted, host, int(port), reuse_address=True)
        bound = server.sockets[0].getsockname()
        print(f"{RELAY_LISTENING}{bound[0]}:{bound[1]}", flush=True)
        await server.serve_forever()

    # select(2), not epoll: epoll waits in whole milliseconds, which made each 2.5 ms
    # direction 3 ms (a round trip of 6.9 ms, not 5); select waits to the microsecond.
    import selectors

    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        loop.run_until_complete(serve())
    finally:
        loop.close()
    return 0


def _s3_filesystem(s3: dict[str, str]) -> Any:
    """Return pyarrow's S3 file system for :meth:`LakeReader.s3_get`'s ``s3``."""
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key=s3["access_key"],
        secret_key=s3["secret_key"],
        region=s3["region"],
        scheme="http",
        endpoint_override=s3["endpoint"],
    )


def main(argv: list[str]) -> int:
    """``python -m bench.lake_worker duckdb CONFIG`` or ``relay LISTEN UPSTREAM DELAY_MS``.

    The DuckDB process of :class:`DuckDB`, or the link's delay (:func:`relay_main`).
    """
    if len(argv) == 2 and argv[0] == "duckdb":
        return duckdb_main(json.loads(argv[1]))
    if len(argv) == 4 and argv[0] == "relay":
        return relay_main(argv[1], argv[2], float(argv[3]))
    print(
        "usage: python -m bench.lake_worker duckdb CONFIG_JSON\n"
        "       python -m bench.lake_worker relay LISTEN UPSTREAM DELAY_MS",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
