"""Bytes stored and sent follow the rows, not the buffers they were cut from.

A string view column keeps every data buffer any of its views pointed into, and a
slice of any column keeps the whole buffers it points into: pyarrow's batches of a
Parquet file, a table cut into batches by ``slice``, a ``LIMIT``'s rows. quiver
copies such batches into buffers of their own when they are well over what their
rows need: when it stores them (through every way in) and when it sends them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import quiver
from server_process import Server, quiver_bin

ROWS = 200_000
SLICE = 20_000

#: Stored or sent bytes may be at most this much above the rows' own.
OVER = 1.1


def values() -> list[str]:
    # Longer than 12 bytes: held in the data buffers, not inlined in the views.
    return [f"value number {i:08d}" for i in range(ROWS)]


def sliced(column: pa.Array) -> pa.Table:
    """``column`` as batches of ``SLICE`` rows, each a slice sharing all its buffers."""
    return pa.Table.from_batches(
        [pa.record_batch({"s": column.slice(i, SLICE)}) for i in range(0, ROWS, SLICE)]
    )


def received_bytes(table: pa.Table) -> int:
    """The bytes of ``table``'s buffers, each counted for every batch holding it: what
    a stream of its batches carried."""
    return sum(batch.get_total_buffer_size() for batch in table.to_batches())


def put_with_quiver(uri: str, table: pa.Table) -> None:
    with quiver.connect(uri, transport="grpc") as client:
        client.put("t", table)


def put_with_pyarrow(uri: str, table: pa.Table) -> None:
    with flight.connect(uri) as client:
        writer, _ = client.do_put(flight.FlightDescriptor.for_path("t"), table.schema)
        writer.write_table(table)
        writer.close()


def put_over_shm(uri: str, table: pa.Table) -> None:
    with quiver.connect(uri, transport="shm") as client:
        client.put("t", table)


PUTS: dict[str, Callable[[str, pa.Table], None]] = {
    "quiver": put_with_quiver,
    "pyarrow": put_with_pyarrow,
    "shm": put_over_shm,
}


@pytest.mark.parametrize("how", PUTS)
def test_string_views_are_stored_and_sent_at_the_size_of_their_rows(uri: str, how: str) -> None:
    column = pa.array(values(), pa.string_view())
    tight = pa.table({"s": column}).nbytes
    table = sliced(column)
    # Each batch drags the whole column's data along: ten times the rows' bytes.
    assert received_bytes(table) > 8 * tight
    PUTS[how](uri, table)
    with quiver.connect(uri, transport="grpc") as client:
        info = client.info("t")
        assert info.num_rows == ROWS
        assert info.num_bytes <= OVER * tight, (info.num_bytes, tight)
        got = client.get("t")
        assert got.column("s").to_pylist() == values()
        assert received_bytes(got) <= OVER * tight, (received_bytes(got), tight)
        three = client.sql("SELECT s FROM t LIMIT 3")
        assert three.num_rows == 3
        assert received_bytes(three) < 4096, received_bytes(three)
    with quiver.connect(uri, transport="shm") as client:
        got = client.get("t")
        assert got.column("s").to_pylist() == values()
    with flight.connect(uri) as client:
        got = client.do_get(flight.Ticket(b"t")).read_all()
        assert received_bytes(got) <= OVER * tight, (received_bytes(got), tight)


def test_string_views_sliced_by_the_server_are_sent_at_the_size_of_their_rows(
    server: Server, tmp_path: Path
) -> None:
    # One tight batch of 29 MB. The server cuts it into messages of 2 MiB of rows (a
    # slice each) for clients that take no larger ones, as the CLI's.
    column = pa.array(values() * 4, pa.string_view())
    table = pa.table({"s": column})
    with quiver.connect(server.uri, transport="grpc") as client:
        client.put("big", table)
        assert client.info("big").num_bytes <= OVER * table.nbytes
    target = tmp_path / "big.arrow"
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    subprocess.run(
        [str(quiver_bin()), "--server", server.uri, "get", "big", "-o", str(target)],
        check=True,
        env=env,
        timeout=120,
    )
    # The file holds the batches as received, each with the buffers it came with.
    with pa.ipc.open_file(target) as reader:
        got = reader.read_all()
    assert len(got.to_batches()) > 10
    assert got.column("s").to_pylist() == values() * 4
    assert target.stat().st_size <= OVER * table.nbytes, (target.stat().st_size, table.nbytes)


@pytest.mark.parametrize("kind", [pa.string(), pa.string_view(), pa.int64()])
def test_a_table_made_of_a_few_rows_of_a_large_one_stores_those_rows(
    client: quiver.Client, kind: pa.DataType
) -> None:
    data = values() if kind != pa.int64() else list(range(ROWS))
    client.put("big", pa.table({"c": pa.array(data, kind)}))
    client.execute_update("CREATE TABLE few AS SELECT c FROM big LIMIT 10")
    info = client.info("few")
    assert info.num_rows == 10
    assert info.num_bytes < 4096, info.num_bytes
    few = client.get("few").column("c").to_pylist()
    assert len(set(few)) == 10 and set(few) <= set(data), few
