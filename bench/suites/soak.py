"""The soak suite: many pyarrow clients mixing puts, gets, listings and deletes."""

from __future__ import annotations

from .. import servers, soak
from ..results import QUIVER, Measurement
from ..run import Run, Section, Suite, log
from ..summary import Row, select


def run_soak(run: Run) -> None:
    """Many clients mixing puts, gets, listings and deletes on a fresh quiver (bench/soak.py).

    The server is started for this alone, so its RSS before, at the peak and after every
    table is deleted is the soak's own.
    """
    plan = run.plan
    log(f"soak: {plan.soak_clients} clients for {plan.soak_seconds:.0f} s")
    server = servers.start_quiver(run.binary, run.log_dir / "soak")
    try:
        outcome = soak.run(
            server.uri, server.pid, plan.soak_seconds, plan.soak_clients, plan.soak_rows
        )
    finally:
        code = server.stop()
    if code != 0:
        run.note(f"quiver (soak suite) exited with code {code} after SIGTERM")
    if outcome.errors:
        run.note(f"soak: {len(outcome.errors)} errors, the first: {outcome.errors[0]}")

    def record(op: str, **values: object) -> None:
        run.add(
            Measurement(
                "soak",
                QUIVER,
                "pyarrow",
                op,
                plan.soak_clients,
                plan.soak_rows,
                plan.soak_rows,
                **values,  # type: ignore[arg-type]
            )
        )

    record(
        "all",
        seconds=outcome.seconds,
        ops=outcome.ops,
        errors=len(outcome.errors),
        p99_seconds=outcome.percentile_ms(99) / 1000,
    )
    for op, latencies in sorted(outcome.latencies_ms.items()):
        record(
            op,
            seconds=outcome.percentile_ms(50, op) / 1000,
            ops=len(latencies),
            p99_seconds=outcome.percentile_ms(99, op) / 1000,
        )
    for op, rss in [
        ("rss_before", outcome.rss_before),
        ("rss_peak", outcome.rss_peak),
        ("rss_after_deletes", outcome.rss_after),
    ]:
        record(op, rss_bytes=rss)


def _soak_section(rows: list[Row]) -> list[str]:
    soak = select(rows, suite="soak", server=QUIVER)
    if not soak:
        return []
    by_op = {str(r["op"]): r for r in soak}
    total = by_op.get("all")
    if total is None:
        return []
    mib = 2**20
    seconds = float(total["seconds"])
    lines = [
        "## Soak",
        "",
        f"{total['streams']} pyarrow clients, each on its own connection, mixing puts of a "
        f"{int(total['rows_per_stream']):,}-row table, gets, listings and deletes for "
        f"{seconds:.0f} s against a fresh quiver (bench/soak.py): "
        f"{int(total['ops']):,} operations ({int(total['ops']) / seconds:,.0f}/s), "
        f"{total['errors']} errors.",
        "",
        "| op | count | p50 | p99 |",
        "| --- | --- | --- | --- |",
    ]
    for op in ("put", "get", "list", "delete", "all"):
        row = by_op.get(op)
        if row is not None:
            p50 = "" if op == "all" else f"{float(row['seconds']) * 1000:.2f} ms"
            p99 = f"{float(row['p99_seconds']) * 1000:.2f} ms"
            lines.append(f"| {op} | {int(row['ops']):,} | {p50} | {p99} |")
    rss = {op: by_op.get(op) for op in ("rss_before", "rss_peak", "rss_after_deletes")}
    if all(rss.values()):
        before, peak, after = (float(r["rss_bytes"]) / mib for r in rss.values() if r)
        lines += [
            "",
            f"Server RSS: {before:.0f} MiB before, {peak:.0f} MiB at the peak, {after:.0f} MiB "
            "once every table was deleted (jemalloc returns freed pages after its 10 s decay; "
            "the rest is the runtime's threads and allocator caches that the load created).",
        ]
    return [*lines, ""]


SUITE = Suite(
    "soak", run_soak, sections=(Section(lambda rows, run, plots, at: _soak_section(rows), rank=80),)
)
