"""The bytes suite: bytes stored and sent against the Arrow size of the rows, per column kind."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.flight as flight

from .. import data, flight_client, sql_clients
from ..report import Goal, _goal_rows, _size, _times
from ..results import ARROW_CPP, PYARROW, QUIVER, Measurement
from ..run import Run, Section, Suite, log
from ..servers import ServerProcess
from ..summary import Row, select

#: The query whose result the ``bytes`` suite counts, per table, through quiver's Flight SQL.
BYTES_LIMIT_QUERY = "SELECT c FROM {table} LIMIT 3"


def run_bytes(run: Run) -> None:
    """Bytes each server stores and sends for one column of each kind, against its Arrow size.

    A server that keeps what it was given as it came can hold, and send back, far more
    than the rows need: a slice of an array keeps every buffer of the array, and the IPC
    writer cannot trim a ``string_view`` slice's data buffers, so each of ten slices of one
    ``string_view`` array travels with all of its data. For each kind of
    :data:`bench.data.BYTES_KINDS` (``Plan.bytes_rows`` rows), the table is put by pyarrow's
    DoPut with its batches as they are into quiver and the Arrow C++ peer; then, per server,
    the bytes stored (FlightInfo ``total_bytes``) and the bytes a pyarrow DoGet of the whole
    table received (``get_total_buffer_size()`` of each batch, summed: a buffer several
    batches share, a dictionary, counts once per batch; also each buffer once,
    ``sent_once``), and for quiver the bytes of a 3-row ``LIMIT`` through Flight SQL, each
    against the tight Arrow size of the same rows (``pa.table({"c": array}).nbytes`` of a
    fresh array of their values). The values received are checked against those put.
    Sizes, not times: one measurement each.
    """
    rows = run.plan.bytes_rows
    alive = run.servers_alive()
    log(f"bytes: {len(data.BYTES_KINDS)} column kinds of {rows:,} rows, stored and sent")
    for kind in data.BYTES_KINDS:
        with run.attempt(f"bytes {kind}"):
            _measure_bytes(run, kind, rows, alive)


def _bytes_table_name(kind: str) -> str:
    return "bytes_" + kind.replace(" ", "_")


#: How a ``bytes`` row is recorded: ``(op, server, bytes, rows=..., **columns)``.
_BytesRecord = Callable[..., None]


def _decoded(array: pa.Array) -> pa.Array:
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


class _SameRows:
    """Checks, batch by batch, that a DoGet brings ``column``'s values back in order.

    A dictionary is compared by its values (a server may rebuild it); a batch of another
    type than ``column``'s is cast to it first (the type is noted apart).
    """

    def __init__(self, column: pa.Array) -> None:
        self.want = _decoded(column)
        self.offset = 0
        self.types: set[pa.DataType] = set()
        self.differs = False

    def __call__(self, batch: pa.RecordBatch) -> None:
        got = batch.column(0)
        self.types.add(got.type)
        got = _decoded(got)
        expected = self.want.slice(self.offset, len(got))
        self.offset += len(got)
        try:
            same = got.cast(expected.type).equals(expected)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            same = False
        self.differs = self.differs or not same


def _measure_bytes(run: Run, kind: str, rows: int, alive: list[ServerProcess]) -> None:
    """Put ``kind``'s table into every server; record its Arrow size, stored and sent bytes."""
    column = data.bytes_column(kind, data.bytes_values(kind, rows))
    table = data.bytes_table(kind, column)
    batch_rows = max(b.num_rows for b in table.to_batches())
    name = _bytes_table_name(kind)

    def record(op: str, server: str, nbytes: int, count: int = rows, **extra: object) -> None:
        run.add(
            Measurement(
                "bytes", server, PYARROW, f"{op}:{kind}", 1, count, batch_rows,
                bytes=nbytes, **extra,  # type: ignore[arg-type]
            )
        )  # fmt: skip

    record("arrow", "", pa.table({"c": column}).nbytes)
    for server in alive:
        with run.attempt(f"bytes {kind} {server.name}"):
            client = flight_client.connect(server.uri)
            try:
                # The batches as they are: none cut further (max_chunksize, the largest).
                flight_client.put(client, name, table, batch_rows)
                info = client.get_flight_info(flight_client.descriptor(name))
                if info.total_bytes is not None and info.total_bytes >= 0:
                    record("stored", server.name, info.total_bytes)
                else:
                    run.note(f"bytes: {server.name}'s FlightInfo reports no total_bytes")
                check = _SameRows(column)
                got = flight_client.received(client, info, check)
                if got.rows != rows or check.differs:
                    raise RuntimeError(f"{server.name} sent back {got.rows} rows, not those put")
                note = _type_note(run, kind, server.name, check.types, column.type)
                record(
                    "sent", server.name, got.buffer_bytes, ops=got.batches,
                    endpoints=got.endpoints, note=note,
                )  # fmt: skip
                record("sent_once", server.name, got.distinct_bytes, ops=got.batches, note=note)
                if server.name == QUIVER:
                    _record_limit(run, kind, client, column, record)
            finally:
                flight_client.delete(client, name)
                client.close()


def _type_note(run: Run, kind: str, server: str, types: set[pa.DataType], want: pa.DataType) -> str:
    """Return a row's note when a server sent another type than it was given (noted too)."""
    other = sorted(str(t) for t in types if t != want)
    if not other:
        return ""
    run.note(f"bytes {kind}: {server} sent the column as {', '.join(other)}, not {want}")
    return f"sent as {', '.join(other)}"


def _record_limit(
    run: Run, kind: str, client: flight.FlightClient, column: pa.Array, record: _BytesRecord
) -> None:
    """Run the 3-row ``LIMIT`` through quiver's Flight SQL; record its bytes and tight size."""
    query = BYTES_LIMIT_QUERY.format(table=_bytes_table_name(kind))
    info = client.get_flight_info(sql_clients.flight_sql_descriptor(query))
    batches: list[pa.RecordBatch] = []
    got = flight_client.received(client, info, batches.append)
    if got.rows != 3:
        raise RuntimeError(f"{query!r} returned {got.rows} rows, not 3")
    types = {b.column(0).type for b in batches}
    note = _type_note(run, kind, QUIVER, types, column.type)
    values = [v for b in batches for v in _decoded(b.column(0)).to_pylist()]
    tight = data.bytes_column(kind, values)
    record("arrow_limit3", "", pa.table({"c": tight}).nbytes, count=3)
    record(
        "limit3", QUIVER, got.buffer_bytes, count=3, ops=got.batches, endpoints=got.endpoints,
        note=note,
    )  # fmt: skip


#: The bytes suite's goals: quiver stores, and sends for a whole-table DoGet, at most this
#: many times the tight Arrow size of the rows, for the worst column kind.
BYTES_VS_ARROW = 1.1


def _bytes_row(rows: list[Row], what: str, kind: str, server: str | None = None) -> Row | None:
    """Return the ``bytes`` suite's ``what:kind`` row of ``server`` (the last, if several).

    ``server`` None: whichever (the ``arrow`` rows have none, an empty field in the CSV).
    """
    where = {} if server is None else {"server": server}
    found = select(rows, suite="bytes", op=f"{what}:{kind}", **where)
    return found[-1] if found else None


def _bytes_kinds(rows: list[Row]) -> list[str]:
    """Return the column kinds the ``bytes`` suite measured, in the order it measured them."""
    kinds = [str(r["op"]).split(":", 1)[1] for r in select(rows, suite="bytes")]
    return list(dict.fromkeys(kinds))


def _bytes_ratio(rows: list[Row], what: str, kind: str, server: str) -> float | None:
    """Return bytes ``what`` (``stored``, ``sent``...) by ``server`` / the rows' Arrow size."""
    arrow = _bytes_row(rows, "arrow", kind)
    got = _bytes_row(rows, what, kind, server)
    if arrow is None or got is None or not arrow["bytes"]:
        return None
    return float(got["bytes"]) / float(arrow["bytes"])  # type: ignore[arg-type]


def bytes_goals(rows: list[Row]) -> list[Goal]:
    """Return the ``bytes`` suite's goals: quiver's bytes stored and sent / Arrow size, worst
    kind, at most ``BYTES_VS_ARROW``. A kind not measured leaves the goal unmet only if a
    measured one already misses it (else n/a).
    """  # noqa: D205
    kinds = _bytes_kinds(rows)
    if not kinds:
        return []
    found = []
    for what in ("stored", "sent"):
        ratios = {k: _bytes_ratio(rows, what, k, QUIVER) for k in kinds}
        measured = {k: r for k, r in ratios.items() if r is not None}
        missing = [k for k, r in ratios.items() if r is None]
        text = f"quiver: bytes {what} / Arrow size, worst kind"
        target = f"≤ {BYTES_VS_ARROW:g}×"
        if not measured:
            found.append(Goal(text, target, None, None, "—"))
            continue
        worst = max(measured, key=lambda k: measured[k])
        value = measured[worst]
        shown = f"{value:.2f}× ({worst})"
        passed: bool | None = value <= BYTES_VS_ARROW
        if missing:
            shown += f"; not measured: {', '.join(missing)}"
            passed = None if passed else False
        found.append(Goal(text, target, value, passed, shown))
    return found


def _bytes_cell(rows: list[Row], what: str, kind: str, server: str) -> str:
    """``size (ratio×)`` of a stored or sent row, ``—`` when not measured."""
    row = _bytes_row(rows, what, kind, server)
    if row is None:
        return "—"
    cell = f"{_size(float(row['bytes']))} ({_times(_bytes_ratio(rows, what, kind, server))})"  # type: ignore[arg-type]
    return f"{cell}, {row['note']}" if row.get("note") else cell


def _bytes_section(rows: list[Row]) -> list[str]:
    kinds = _bytes_kinds(rows)
    if not kinds:
        return []
    first = _bytes_row(rows, "arrow", kinds[0])
    count = int(first["rows_per_stream"]) if first else 0  # type: ignore[call-overload]
    lines = [
        "## Bytes stored and sent",
        "",
        f"One column `c` of {count:,} rows of each kind, put by pyarrow's DoPut with its "
        "batches as they are into quiver and into the Arrow C++ server, in the same run "
        "(bench/data.py: `string`, 20-byte utf8 values in one tight array; `string_view`, "
        "the same values as `string_view`; `sliced string` and `sliced int64`; and "
        "`dictionary`, `dictionary<int32, utf8>` of 100 distinct 20-byte values; all but "
        "`string` as a table of batches that are slices of one array, as pyarrow hands out "
        "when it cuts a table: each slice references every buffer of the array, a "
        "`string_view` slice all of its data buffers, which Arrow IPC sends whole). "
        '**Arrow size**: the tight size of the rows, `pa.table({"c": array}).nbytes` of '
        "a fresh array of their values. **Stored**: the server's FlightInfo `total_bytes` "
        "(the Arrow C++ server's is pyarrow's `Table.nbytes` of the batches it holds). "
        "**Sent**: a pyarrow DoGet of the whole table, `get_total_buffer_size()` of each "
        "batch received, summed: every buffer a batch references, whole. **LIMIT 3**: the "
        "same for `SELECT c FROM t LIMIT 3` through quiver's Flight SQL, against the tight "
        "size of those 3 rows. Ratios are to the Arrow size.",
        "",
        "| goal | target | measured | result |",
        "| --- | --- | --- | --- |",
        *_goal_rows(bytes_goals(rows)),
        "",
        "| kind | Arrow size | quiver stored | quiver sent | Arrow C++ stored | "
        "Arrow C++ sent | quiver LIMIT 3 sent |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in kinds:
        arrow = _bytes_row(rows, "arrow", kind)
        limit = _bytes_row(rows, "limit3", kind, QUIVER)
        tight = _bytes_row(rows, "arrow_limit3", kind)
        limit_cell = "—"
        if limit is not None:
            limit_cell = _size(float(limit["bytes"]))  # type: ignore[arg-type]
            if tight is not None:
                limit_cell += f" (3 rows: {_size(float(tight['bytes']))})"  # type: ignore[arg-type]
            if limit.get("note"):
                limit_cell += f", {limit['note']}"
        lines.append(
            f"| {kind} | {'—' if arrow is None else _size(float(arrow['bytes']))} | "  # type: ignore[arg-type]
            f"{_bytes_cell(rows, 'stored', kind, QUIVER)} | "
            f"{_bytes_cell(rows, 'sent', kind, QUIVER)} | "
            f"{_bytes_cell(rows, 'stored', kind, ARROW_CPP)} | "
            f"{_bytes_cell(rows, 'sent', kind, ARROW_CPP)} | {limit_cell} |"
        )
    lines += ["", *_bytes_dictionary_lines(rows), ""]
    return lines


def _bytes_dictionary_lines(rows: list[Row]) -> list[str]:
    """Say how the dictionary kind's sent bytes count the dictionary, with its numbers."""
    text = (
        "How a dictionary counts: once in the Arrow size, and in bytes sent once per batch "
        "received, for every batch references it (`get_total_buffer_size()`), though an IPC "
        "stream need carry it once. The dictionary's sent ratio is that of a reader that "
        "counts the batches apart."
    )
    once = []
    for server, label in ((QUIVER, "quiver"), (ARROW_CPP, "the Arrow C++ server")):
        row = _bytes_row(rows, "sent_once", "dictionary", server)
        if row is None:
            continue
        ratio = _bytes_ratio(rows, "sent_once", "dictionary", server)
        once.append(
            f"{label} {_size(float(row['bytes']))} ({_times(ratio)}) in "  # type: ignore[arg-type]
            f"{row['ops']} batches"
        )
    if once:
        text += (
            " Counting each buffer received once, however many batches share it (what the "
            "reader holds), the dictionary column's DoGet brought " + "; ".join(once) + "."
        )
    return [text]


def _goals_link(rows: list[Row]) -> list[str]:
    if not select(rows, suite="bytes"):
        return []
    return [
        "",
        "The goals of bytes stored and sent are in [their section](#bytes-stored-and-sent).",
    ]


SUITE = Suite(
    "bytes",
    run_bytes,
    goals=lambda rows, plan: bytes_goals(rows),
    goals_rank=50,
    goals_link=_goals_link,
    sections=(Section(lambda rows, run, plots, at: _bytes_section(rows), rank=70),),
)
