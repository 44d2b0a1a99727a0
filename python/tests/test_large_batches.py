"""Record batches larger than a gRPC message may be: the client and the CLI split them.

The server refuses a message over ``--max-message-size`` (1 GiB by default), and
pyarrow sends each record batch as one message. A table of one batch of more than
1 GiB (after ``combine_chunks()``, or from one big Parquet row group) must still go
through: the client sends zero-copy slices of the batch (``message_slices``), and
the CLI's encoder (arrow-flight's) splits batches too.

The two 1 GiB tests (marked ``gib``) run in the default test command: about 8 s
together on 2 cores (3 s for the client's, 5 s for the CLI's) and 4 GiB of memory at
their peak. Deselect them with ``-m "not gib"`` on a small machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import quiver
from quiver._convert import MESSAGE_TARGET_BYTES, message_slices
from server_process import Server, quiver_bin

#: The server's default --max-message-size.
DEFAULT_MAX_MESSAGE_SIZE = 1 << 30
#: What a slice's IPC message may hold besides its rows' bytes: the flatbuffer
#: header, and each buffer padded to 8 bytes.
MESSAGE_OVERHEAD = 4096


def one_big_batch() -> pa.RecordBatch:
    """One batch of 1.1 GiB: int64 ids and strings of 0 to 31 characters, made by numpy."""
    rows = 40 << 20
    ids = np.arange(rows, dtype=np.int64)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(np.tile(np.arange(32, dtype=np.int32), rows // 32), out=offsets[1:])
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
    chars = np.tile(letters, -(-int(offsets[-1]) // letters.size))[: offsets[-1]]
    text = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(chars))
    batch = pa.record_batch({"id": ids, "text": text})
    assert batch.nbytes > DEFAULT_MAX_MESSAGE_SIZE  # one message would be refused
    return batch


@pytest.fixture(scope="module")
def big_table() -> pa.Table:
    """A table of one record batch of more than 1 GiB, shared by this module's tests."""
    return pa.Table.from_batches([one_big_batch()])


def assert_stored(client: quiver.Client, name: str, table: pa.Table) -> None:
    """Read ``name`` back and check it equals ``table``, row for row."""
    stored = client.get(name)
    assert stored.num_rows == table.num_rows
    assert stored.equals(table)  # compares across the different batch boundaries


@pytest.mark.gib
def test_client_puts_one_1gib_batch_over_grpc(server: Server, big_table: pa.Table) -> None:
    assert len(big_table.to_batches()) == 1
    with quiver.connect(server.uri, transport="grpc") as client:
        result = client.put("big", big_table)
        assert result.rows == big_table.num_rows
        # Only each slice's own bytes went over the wire (and into the store): a
        # slice sent with its parent's whole buffers would be many GiB.
        assert big_table.nbytes <= result.bytes < big_table.nbytes + (1 << 20)
        assert_stored(client, "big", big_table)


@pytest.fixture
def scratch_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory for a 1 GiB file: in /dev/shm (4 times faster to write) if it has room."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 4 << 30:
        with tempfile.TemporaryDirectory(dir=shm, prefix="quiver-test-") as directory:
            yield Path(directory)
    else:
        yield tmp_path


@pytest.mark.gib
def test_cli_puts_an_arrow_file_of_one_1gib_batch(
    server: Server, big_table: pa.Table, scratch_dir: Path
) -> None:
    path = scratch_dir / "big.arrow"
    with ipc.new_file(path, big_table.schema) as writer:
        writer.write_batch(big_table.to_batches()[0])
    with ipc.open_file(pa.memory_map(str(path))) as reader:
        assert reader.num_record_batches == 1

    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    env["QUIVER_SERVER"] = server.uri
    put = subprocess.run(
        [str(quiver_bin()), "put", "big", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert put.returncode == 0, put.stderr
    assert f"{big_table.num_rows} rows" in put.stdout
    path.unlink()
    with quiver.connect(server.uri, transport="grpc") as client:
        assert_stored(client, "big", big_table)


# -- message_slices, without a server ---------------------------------------------------


def ipc_body_size(batch: pa.RecordBatch) -> int:
    """Bytes of ``batch``'s IPC message (its dictionaries go in messages of their own)."""
    return int(pa.ipc.get_record_batch_size(batch))


def check_slices(batch: pa.RecordBatch, target: int) -> list[pa.RecordBatch]:
    """Split ``batch`` and check the slices are consecutive, complete and in order."""
    slices = list(message_slices(batch, target))
    assert sum(s.num_rows for s in slices) == batch.num_rows
    assert pa.Table.from_batches(slices, batch.schema).equals(pa.Table.from_batches([batch]))
    return slices


def test_a_batch_under_the_target_is_sent_as_it_is() -> None:
    batch = pa.record_batch({"a": np.arange(1000)})
    assert list(message_slices(batch, 8000)) == [batch]
    assert next(message_slices(batch, 8000)) is batch
    assert next(message_slices(batch)) is batch  # the default target is far larger


def test_a_batch_without_rows_is_sent_as_it_is() -> None:
    empty = pa.record_batch({"a": pa.array([], pa.int64()), "s": pa.array([], pa.string())})
    assert [s.num_rows for s in message_slices(empty, 1)] == [0]


def test_fixed_width_columns_are_split_into_zero_copy_slices() -> None:
    batch = pa.record_batch({"a": np.arange(100_000), "b": np.arange(100_000) * 0.5})
    slices = check_slices(batch, 64 << 10)
    assert len(slices) == 25  # 1.6 MB in pieces of at most 64 KiB
    parent = batch.column("a").buffers()[1].address
    for s in slices:
        assert s.column("a").buffers()[1].address == parent  # a view, not a copy
        assert ipc_body_size(s) <= (64 << 10) + MESSAGE_OVERHEAD


def test_strings_of_uneven_sizes_are_cut_by_their_bytes() -> None:
    # The first 90% of the rows are short, the rest 1000 characters: an even
    # split by row count would put most of the bytes in the last slices.
    short = ["x"] * 9000
    long = ["y" * 1000] * 1000
    batch = pa.record_batch({"s": pa.array(short + long), "i": np.arange(10_000)})
    slices = check_slices(batch, 64 << 10)
    for s in slices:
        assert ipc_body_size(s) <= (64 << 10) + MESSAGE_OVERHEAD
    assert slices[0].num_rows > 5 * slices[-1].num_rows


def test_a_row_larger_than_the_target_is_sent_alone_and_whole() -> None:
    lists = [[1, 2], list(range(100_000)), [3]] + [[i] for i in range(1000)]
    batch = pa.record_batch({"l": pa.array(lists, pa.list_(pa.int64()))})
    slices = check_slices(batch, 16 << 10)
    huge = [s for s in slices if ipc_body_size(s) > (16 << 10) + MESSAGE_OVERHEAD]
    assert len(huge) == 1
    assert huge[0].num_rows == 1
    assert huge[0].column("l")[0].as_py() == list(range(100_000))


def test_a_batch_of_one_huge_row_is_sent_whole() -> None:
    batch = pa.record_batch({"s": pa.array(["z" * 100_000])})
    assert list(message_slices(batch, 1000)) == [batch]


def test_nested_columns_are_sliced_with_their_children() -> None:
    rows = 20_000
    item = pa.struct([("name", pa.string()), ("tags", pa.list_(pa.string()))])
    values = [
        None if i % 11 == 0 else {"name": f"n{i}", "tags": [f"t{j}" for j in range(i % 5)]}
        for i in range(rows)
    ]
    maps = [[(f"k{i % 3}", i)] for i in range(rows)]
    batch = pa.record_batch(
        {
            "item": pa.array(values, item),
            "map": pa.array(maps, pa.map_(pa.string(), pa.int64())),
            "lists": pa.array([[[i], [i, i]] for i in range(rows)], pa.list_(pa.list_(pa.int32()))),
        }
    )
    slices = check_slices(batch, 32 << 10)
    assert len(slices) > 10
    for s in slices:
        assert ipc_body_size(s) <= (32 << 10) + MESSAGE_OVERHEAD


def test_a_dictionary_larger_than_the_target_does_not_count_per_message() -> None:
    # The dictionary goes in a message of its own, once: the slices are cut by the
    # indices' bytes, not cut to single rows because the dictionary is large.
    dictionary = pa.array([f"{i:08d}" * 100 for i in range(1000)])  # 800 KB
    indices = pa.array(np.arange(100_000) % 1000, pa.int32())
    batch = pa.record_batch({"d": pa.DictionaryArray.from_arrays(indices, dictionary)})
    slices = check_slices(batch, 64 << 10)
    assert len(slices) == 7  # 400 KB of indices in pieces of at most 64 KiB


def test_the_default_target_is_far_below_the_default_message_limit() -> None:
    assert 1 << 20 <= MESSAGE_TARGET_BYTES <= DEFAULT_MAX_MESSAGE_SIZE // 8
