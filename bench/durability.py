"""``python -m bench.durability``: what --data-dir costs and how fast a restart is.

Measures, against the real ``quiver serve`` binary on loopback:

1. put throughput of one large table and the rate of small puts, in memory and
   with ``--data-dir`` under ``--fsync never`` and ``--fsync always``;
2. the restart time of a server whose data directory holds ``--store-gib`` of
   tables, with the files in the page cache (warm) and evicted from it (cold),
   and the first read of a table after the cold restart.

Prints one JSON line per measurement. Uses about ``--store-gib`` + 1 GiB of disk
under ``--dir`` (default: a temporary directory), removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import quiver

from . import servers


def table(mib: int, seed: int = 0) -> pa.Table:
    """About ``mib`` MiB of int64, float64 and short-string columns."""
    gen = np.random.default_rng(seed)
    rows = mib * (1 << 20) // 32  # 8 + 8 + ~16 bytes a row
    words = pa.array([f"word-{i:06d}" for i in range(4096)])
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "x": pa.array(gen.standard_normal(rows)),
            "s": words.take(pa.array(gen.integers(0, len(words), rows))),
        }
    )


def start(log_dir: Path, *flags: str) -> tuple[servers.ServerProcess, float]:
    """Start quiver with ``flags``; return it and the seconds until it listened."""
    began = time.monotonic()
    command = [str(servers.quiver_bin()), "serve", "--listen", "127.0.0.1:0", *flags]
    command += ["--max-memory", "16GiB"]
    server = servers.start("quiver", command, "quiver listening on ", log_dir)
    return server, time.monotonic() - began


def emit(**fields: object) -> None:
    """Print one measurement as a JSON line."""
    print(json.dumps(fields), flush=True)


def evict(directory: Path) -> None:
    """Drop the directory's files from the page cache (they are synced, so clean)."""
    for path in directory.iterdir():
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def put_costs(root: Path, put_mib: int, reps: int, small_puts: int) -> None:
    """Time large and small puts in memory and under each --fsync mode."""
    big = table(put_mib)
    small = table(1).slice(0, 1000)
    modes = {
        "memory": (),
        "fsync never": ("--data-dir", str(root / "never"), "--fsync", "never"),
        "fsync always": ("--data-dir", str(root / "always"), "--fsync", "always"),
    }
    for mode, flags in modes.items():
        server, _ = start(root / "logs", *flags)
        try:
            with quiver.connect(server.uri) as client:
                seconds = []
                for _ in range(reps):
                    began = time.perf_counter()
                    client.put("big", big)
                    seconds.append(time.perf_counter() - began)
                best = statistics.median(seconds)
                emit(
                    measure="put",
                    mode=mode,
                    mib=put_mib,
                    median_s=round(best, 3),
                    gib_per_s=round(big.nbytes / best / (1 << 30), 3),
                )
                began = time.perf_counter()
                for i in range(small_puts):
                    client.put(f"small{i % 10}", small)
                elapsed = time.perf_counter() - began
                emit(
                    measure="small puts",
                    mode=mode,
                    rows=small.num_rows,
                    puts=small_puts,
                    puts_per_s=round(small_puts / elapsed, 1),
                    ms_per_put=round(1000 * elapsed / small_puts, 2),
                )
        finally:
            server.stop()


def restart_time(root: Path, store_gib: float, table_mib: int) -> None:
    """Fill a data directory with ``store_gib`` GiB, then time warm and cold restarts."""
    data = root / "store"
    flags = ("--data-dir", str(data))
    part = table(table_mib, seed=1)
    count = max(1, round(store_gib * 1024 / table_mib))
    server, _ = start(root / "logs", *flags)
    with quiver.connect(server.uri) as client:
        began = time.perf_counter()
        for i in range(count):
            client.put(f"t{i:03d}", part)
        fill = time.perf_counter() - began
    server.stop()
    stored = sum(p.stat().st_size for p in data.iterdir() if p.is_file())
    emit(
        measure="fill",
        tables=count,
        stored_gib=round(stored / (1 << 30), 2),
        seconds=round(fill, 1),
    )
    for cache in ("warm", "cold"):
        if cache == "cold":
            evict(data)
        server, seconds = start(root / "logs", *flags)
        rss, _ = server.memory()
        try:
            with quiver.connect(server.uri) as client:
                stats = client.stats()
                began = time.perf_counter()
                first = client.get("t000")
                read = time.perf_counter() - began
                assert first.num_rows == part.num_rows
        finally:
            server.stop()
        emit(
            measure="restart",
            cache=cache,
            tables=stats.tables,
            stored_gib=round(stored / (1 << 30), 2),
            seconds_to_listen=round(seconds, 3),
            rss_mib_after_open=rss >> 20,
            first_get_s=round(read, 3),
            first_get_mib=table_mib,
        )


def main() -> None:
    """Parse the command line and run both measurements."""
    parser = argparse.ArgumentParser(prog="python -m bench.durability", description=__doc__)
    parser.add_argument("--dir", type=Path, help="where to put data directories")
    parser.add_argument("--store-gib", type=float, default=4.0)
    parser.add_argument("--table-mib", type=int, default=256)
    parser.add_argument("--put-mib", type=int, default=512)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--small-puts", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="quiver-durability-", dir=args.dir))
    try:
        put_costs(root, args.put_mib, args.reps, args.small_puts)
        restart_time(root, args.store_gib, args.table_mib)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
