"""A server with --data-dir: tables survive a restart, as written, however written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

import quiver
from server_process import ServerFactory, quiver_bin


def test_every_kind_of_write_survives_a_restart(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    taxi = pa.table(
        {
            "id": pa.array(range(10_000), pa.int64()),
            "fare": pa.array([i / 4 for i in range(10_000)], pa.float64()),
            "zone": pa.array([f"z{i % 97}" for i in range(10_000)]).dictionary_encode(),
            "note": pa.array([None if i % 3 else f"n{i}" for i in range(10_000)], pa.string()),
        }
    )
    more = taxi.slice(0, 500)
    first = start_quiver("--data-dir", str(data))
    with quiver.connect(first.uri) as c:
        c.put("taxi", taxi, partitions=3)
        c.put("taxi", more, mode="append")
        c.put("scratch", taxi)
        c.delete("scratch")
        c.put("old", more)
        c.rename("old", "new")
        c.execute_update("CREATE TABLE expensive AS SELECT id, fare FROM taxi WHERE fare > 2000")
        c.execute_update("INSERT INTO expensive VALUES (-1, 0.5)")
        c.execute_update("CREATE TABLE dropped AS SELECT 1 AS x")
        c.execute_update("DROP TABLE dropped")
        before = {info.name: c.get(info.name) for info in c.list_tables()}
        versions = {info.name: info.version for info in c.list_tables()}
    assert first.stop() == 0

    second = start_quiver("--data-dir", str(data))
    assert "data directory opened" in second.log()
    with quiver.connect(second.uri) as c:
        infos = c.list_tables()
        assert [i.name for i in infos] == ["expensive", "new", "taxi"]
        for info in infos:
            got = c.get(info.name)
            assert got.schema.equals(before[info.name].schema, check_metadata=True)
            assert got.equals(before[info.name]), info.name
            assert info.version == versions[info.name]
        assert c.info("taxi").partitions == 3
        assert c.get("taxi").num_rows == 10_500
        assert c.sql("SELECT count(*) AS n FROM expensive").column("n")[0].as_py() == 1999 + 1
        # And it goes on taking writes.
        c.put("taxi", more, mode="append")
        assert c.get("taxi").num_rows == 11_000


def test_stored_tables_are_not_charged_to_max_memory(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    # The written batches are charged while they arrive; once on disk they are
    # mapped from their file and charged nothing (docs/durability.md, Memory).
    data = tmp_path / "data"
    table = pa.table({"x": pa.array(range(250_000), pa.int64())})  # 2 MB
    server = start_quiver("--data-dir", str(data), "--max-memory", "3MiB")
    with quiver.connect(server.uri) as c:
        for i in range(4):
            c.put(f"t{i}", table)
        assert c.stats().memory_used == 0
    assert server.stop() == 0
    # Four times the limit reads back after a restart.
    small = start_quiver("--data-dir", str(data), "--max-memory", "1MiB")
    with quiver.connect(small.uri) as c:
        assert all(c.get(f"t{i}").equals(table) for i in range(4))


def test_a_second_server_on_the_same_directory_is_refused(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    server = start_quiver("--data-dir", str(data))
    second = subprocess.run(
        [str(quiver_bin()), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert second.returncode != 0
    assert "another quiver server holds the data directory" in second.stderr
    assert str(data / "LOCK") in second.stderr
    # The first is unharmed.
    flight.connect(server.uri).list_actions()


def test_statistics_are_kept_beside_their_segment_and_read_after_a_restart(
    start_quiver: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    ids = pa.table({"id": pa.array(range(4_000), pa.int64())})
    table = pa.Table.from_batches(ids.to_batches(max_chunksize=1_000))
    query = "SELECT count(*) AS n FROM t WHERE id >= 3500"
    first = start_quiver("--data-dir", str(data))
    with quiver.connect(first.uri) as c:
        c.put("t", table)
        # Written when a query first needs them, not at the put.
        assert list(data.glob("*.stats.arrows")) == []
        assert c.sql(query).column("n")[0].as_py() == 500
    [stats] = data.glob("seg-*.stats.arrows")
    written = stats.stat()
    assert first.stop() == 0

    second = start_quiver("--data-dir", str(data))
    with quiver.connect(second.uri) as c:
        plan = "\n".join(str(v) for v in c.sql(f"EXPLAIN {query}").column("plan").to_pylist())
        # The ranges prune 3 of the 4 stored batches...
        assert "pruned_batches=3" in plan, plan
        assert c.sql(query).column("n")[0].as_py() == 500
        # ...read from the file, not computed and written again (a write
        # replaces the file: a new inode).
        kept = stats.stat()
        assert (kept.st_ino, kept.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
        # They go with their segment.
        c.delete("t")
        assert list(data.glob("*.stats.arrows")) == []
