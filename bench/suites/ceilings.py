"""The ceilings suite: raw loopback TCP and memcpy, what the Flight numbers are read against."""

from __future__ import annotations

from .. import ceilings
from ..report import _gbps
from ..results import Measurement
from ..run import Run, Section, Suite
from ..summary import Row, ceiling


def run_ceilings(run: Run) -> None:
    """Loopback TCP (``quiver bench tcp``, iperf3) and memcpy: what the Flight numbers are
    read against.
    """  # noqa: D205
    plan = run.plan
    if not run.quiver_bench:
        run.note("ceilings tcp/memcpy skipped: quiver bench not available")
    else:
        for rep in range(plan.ceiling_reps):
            with run.attempt("ceiling tcp"):
                line = ceilings.quiver_tcp(run.binary, plan.tcp_seconds)
                run.add(
                    Measurement(
                        "ceilings",
                        "",
                        "quiver-bench",
                        "tcp",
                        bytes=line["bytes"],
                        seconds=line["seconds"],
                        rep=rep,
                    )
                )
            with run.attempt("ceiling memcpy"):
                for line in ceilings.quiver_memcpy(run.binary, plan.memcpy_bytes):
                    run.add(
                        Measurement(
                            "ceilings",
                            "",
                            "quiver-bench",
                            line["ceiling"],
                            bytes=line["bytes"],
                            seconds=line["seconds"],
                            rep=rep,
                        )
                    )
    if not ceilings.iperf3_available():
        run.note("ceiling iperf3 skipped: iperf3 is not installed")
        return
    for rep in range(plan.ceiling_reps):
        with run.attempt("ceiling iperf3"):
            line = ceilings.iperf3_tcp(max(1.0, plan.tcp_seconds))
            run.add(
                Measurement(
                    "ceilings",
                    "",
                    "iperf3",
                    "iperf3",
                    bytes=line["bytes"],
                    seconds=line["seconds"],
                    rep=rep,
                )
            )


def _ceilings_section(rows: list[Row]) -> list[str]:
    names = {
        "tcp": "raw loopback TCP, 1 MiB writes (`quiver bench tcp`)",
        "iperf3": "loopback TCP, iperf3 `-l 1M`",
        "memcpy_warm": "memcpy into warm pages (`quiver bench memcpy`)",
        "memcpy_fresh": "memcpy into freshly mapped pages",
    }
    lines = ["## Ceilings", "", "| ceiling | GB/s, median (min–max) | n |", "| --- | --- | --- |"]
    for op, text in names.items():
        found = ceiling(rows, op)
        if found is not None:
            lines.append(f"| {text} | {_gbps(found)} | {found.n} |")
    return lines


SUITE = Suite(
    "ceilings",
    run_ceilings,
    sections=(Section(lambda rows, run, plots, at: [*_ceilings_section(rows), ""], rank=20),),
)
