"""Readers racing a writer that replaces the table see whole versions only."""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

from flight_helpers import put
from server_process import ServerFactory

ROWS_PER_BATCH = 5_000
BATCHES = 20
VERSIONS = 30
READERS = 3


def _version_table(value: int) -> pa.Table:
    """A version whose every value is ``value``, over many batches (a torn read would show)."""
    batch = pa.record_batch(
        {
            "v": np.full(ROWS_PER_BATCH, value, dtype=np.int64),
            "s": pa.array([str(value)] * ROWS_PER_BATCH),
        }
    )
    return pa.Table.from_batches([batch] * BATCHES)


def _check_whole(table: pa.Table) -> int:
    assert table.num_rows == ROWS_PER_BATCH * BATCHES
    low, high = pc.min_max(table.column("v")).values()
    assert low == high, f"a read mixed versions {low} and {high}"
    assert pc.all(pc.equal(table.column("s"), str(low))).as_py()
    return low.as_py()


def test_readers_see_whole_versions_while_a_writer_replaces(start_quiver: ServerFactory) -> None:
    server = start_quiver("--partitions", "4")
    writer_client = flight.FlightClient(server.uri)
    put(writer_client, "t", _version_table(0))
    done = threading.Event()
    errors: list[BaseException] = []
    seen: list[set[int]] = [set() for _ in range(READERS)]
    aborted = [0] * READERS

    def write() -> None:
        try:
            for value in range(1, VERSIONS + 1):
                put(writer_client, "t", _version_table(value))
        except BaseException as error:
            errors.append(error)
        finally:
            done.set()

    def read(index: int) -> None:
        client = flight.FlightClient(server.uri)
        try:
            deadline = time.monotonic() + 60
            # Read until the writer is done and this reader has seen a version.
            while (not done.is_set() or not seen[index]) and time.monotonic() < deadline:
                if index % 2 == 0:
                    # The plain-name ticket: one stream, one version.
                    table = client.do_get(flight.Ticket(b"t")).read_all()
                else:
                    # Every endpoint of one FlightInfo: one version, or ABORTED.
                    info = client.get_flight_info(flight.FlightDescriptor.for_path("t"))
                    try:
                        parts = [client.do_get(e.ticket).read_all() for e in info.endpoints]
                    except flight.FlightInternalError as error:
                        if "changed since GetFlightInfo" not in str(error):
                            raise
                        aborted[index] += 1
                        continue
                    table = pa.concat_tables(parts)
                seen[index].add(_check_whole(table))
        except BaseException as error:
            errors.append(error)
        finally:
            client.close()

    threads = [threading.Thread(target=write)]
    threads += [threading.Thread(target=read, args=(i,)) for i in range(READERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a reader or the writer hung"
    assert not errors, errors
    assert all(seen), seen
    final = _check_whole(writer_client.do_get(flight.Ticket(b"t")).read_all())
    assert final == VERSIONS
    writer_client.close()
