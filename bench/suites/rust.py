"""The rust suite: ``quiver bench client`` (arrow-rs) over the grid and the headline."""

from __future__ import annotations

from .. import flight_client, rust_client
from ..results import Measurement
from ..run import Run, Suite, log
from .throughput import _shape_text


def run_rust(run: Run) -> None:
    """``quiver bench client`` (arrow-rs) over the grid and the headline, against each server."""
    if not run.quiver_bench:
        run.note("Rust client skipped: quiver bench not available")
        return
    plan = run.plan
    shapes = [("rust", *shape) for shape in plan.grid()]
    shapes.append(("headline", 1, plan.headline_rows, plan.batch_rows))
    for op in ("get", "put"):
        for suite, streams, rows, batch_rows in shapes:
            log(f"rust {op}: {_shape_text(streams, rows, batch_rows)}")
            for server in run.servers_alive():
                what = f"rust {op} {server.name} {_shape_text(streams, rows, batch_rows)}"
                with run.attempt(what):
                    lines = rust_client.measure(
                        run.binary, server.uri, op, streams, rows, batch_rows, plan.reps
                    )
                    odd_endpoints = set()
                    for line in lines:
                        endpoints = line.get("endpoints")
                        note = ""
                        if op == "get" and endpoints is not None and endpoints != streams:
                            note = f"{endpoints} endpoint(s)"
                            odd_endpoints.add(endpoints)
                        run.add(
                            Measurement(
                                suite,
                                server.name,
                                "rust",
                                op,
                                streams,
                                rows,
                                batch_rows,
                                bytes=line["bytes"],
                                seconds=line["seconds"],
                                rep=line.get("rep", 0),
                                endpoints=endpoints,
                                note=note,
                            )
                        )
                    if odd_endpoints:
                        run.note(
                            f"rust get from {server.name}, {streams} streams: the server split "
                            f"the table into {sorted(odd_endpoints)} endpoint(s), not {streams} "
                            "(it did not see the partitions option); excluded from the ratios"
                        )
                with run.attempt(f"rust cleanup {server.name}"):
                    client = flight_client.connect(server.uri)
                    for name in rust_client.table_names(op, streams):
                        flight_client.delete(client, name)
                    client.close()


#: Its rows are in the get suite's sections and figures (:mod:`bench.suites.get`).
SUITE = Suite("rust", run_rust)
