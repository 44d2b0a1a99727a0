"""Helpers for tests that speak plain ``pyarrow.flight`` to the server."""

from __future__ import annotations

import datetime
import decimal
import json

import pyarrow as pa
import pyarrow.flight as flight


def put(
    client: flight.FlightClient,
    name: str,
    table: pa.Table,
    options: bytes | None = None,
    *,
    max_chunksize: int | None = None,
) -> dict[str, object]:
    """DoPut ``table`` as ``name`` (options sent before the first batch); return PutResult JSON."""
    writer, results = client.do_put(flight.FlightDescriptor.for_path(name), table.schema)
    if options is not None:
        writer.write_metadata(options)
    writer.write_table(table, max_chunksize=max_chunksize)
    writer.done_writing()
    answer = results.read()
    writer.close()
    assert answer is not None, "the server sent no PutResult"
    return json.loads(answer.to_pybytes())


def get(client: flight.FlightClient, name: str) -> pa.Table:
    """DoGet the plain-name ticket of ``name``."""
    return client.do_get(flight.Ticket(name.encode())).read_all()


def get_endpoints(client: flight.FlightClient, name: str) -> pa.Table:
    """GetFlightInfo, then DoGet every endpoint at its location, concatenated in order."""
    info = client.get_flight_info(flight.FlightDescriptor.for_path(name))
    parts = []
    for endpoint in info.endpoints:
        assert len(endpoint.locations) == 1
        with flight.FlightClient(endpoint.locations[0]) as located:
            parts.append(located.do_get(endpoint.ticket).read_all())
    return pa.concat_tables(parts) if parts else info.schema.empty_table()


def action(client: flight.FlightClient, kind: str, body: bytes = b"") -> dict[str, object]:
    """Run an action; return its one JSON result."""
    results = [r.body.to_pybytes() for r in client.do_action(flight.Action(kind, body))]
    assert len(results) == 1, results
    return json.loads(results[0])


def table_names(client: flight.FlightClient, prefix: bytes = b"") -> list[str]:
    """Return the names ListFlights reports, in its order."""
    return [
        "/".join(p.decode() for p in info.descriptor.path) for info in client.list_flights(prefix)
    ]


def typed_batch(index: int, rows: int) -> pa.RecordBatch:
    """A batch with one column of each kind of type, a null in every column.

    Its dictionary column's dictionary differs from batch to batch.
    """
    base = index * rows
    valid = [(base + i) % 7 != 3 for i in range(rows)]

    def values(make):
        return [make(base + i) if valid[i] else None for i in range(rows)]

    words = ["red", "green", "blue", "cyan", "magenta"]
    dictionary = pa.array(words[index % 5 :] + words[: index % 5])
    indices = pa.array(values(lambda v: v % 5), pa.int32())
    epoch = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    columns = {
        "i8": pa.array(values(lambda v: v % 127 - 60), pa.int8()),
        "i32": pa.array(values(lambda v: v * 3 - 1000), pa.int32()),
        "i64": pa.array(values(lambda v: v * 1_000_003 - 2**40), pa.int64()),
        "u16": pa.array(values(lambda v: v % 65_000), pa.uint16()),
        "u64": pa.array(values(lambda v: 2**63 + v), pa.uint64()),
        "f32": pa.array(values(lambda v: v / 4), pa.float32()),
        "f64": pa.array(values(lambda v: v / 3), pa.float64()),
        "flag": pa.array(values(lambda v: v % 2 == 0), pa.bool_()),
        "text": pa.array(values(lambda v: f"row {v} ü"), pa.string()),
        "large_text": pa.array(values(lambda v: "x" * (v % 13)), pa.large_string()),
        "blob": pa.array(values(lambda v: bytes([v % 256]) * (v % 5)), pa.binary()),
        "ints": pa.array(values(lambda v: list(range(v % 4))), pa.list_(pa.int32())),
        "point": pa.array(
            values(lambda v: {"x": v, "label": f"p{v}"}),
            pa.struct([("x", pa.int32()), ("label", pa.string())]),
        ),
        "at": pa.array(
            values(lambda v: epoch + datetime.timedelta(microseconds=v * 1_001)),
            pa.timestamp("us", tz="UTC"),
        ),
        "day": pa.array(
            values(lambda v: datetime.date(2000, 1, 1) + datetime.timedelta(days=v)),
            pa.date32(),
        ),
        "price": pa.array(values(lambda v: decimal.Decimal(v) / 10_000), pa.decimal128(20, 4)),
        "colour": pa.DictionaryArray.from_arrays(indices, dictionary),
    }
    return pa.RecordBatch.from_pydict(columns)


def typed_table(batches: int = 50, rows: int = 200) -> pa.Table:
    """A table of ``batches`` :func:`typed_batch` batches."""
    return pa.Table.from_batches([typed_batch(i, rows) for i in range(batches)])
