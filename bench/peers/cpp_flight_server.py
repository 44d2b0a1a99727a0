r"""A minimal in-memory Flight table store on the Arrow C++ Flight server that pyarrow ships.

It is the peer quiver is measured against: the same clients talk to both, so it follows
quiver's conventions (``docs/protocol.md``) as far as the benchmarks use them:

- a table is named by its descriptor: path segments joined with ``/``, or the command bytes;
- DoPut options are JSON in the ``app_metadata`` of the first message that carries any
  (``{"mode": "replace" | "append", "partitions": N}``);
- GetFlightInfo splits the rows evenly over ``partitions`` endpoints, whose tickets are
  ``name\0i\0n``; a plain table name is also a ticket (the whole table);
- the ``delete`` and ``stats`` actions;
- of Flight SQL, what the clients suite's ADBC client sends (``bench/clients/py_client.py``):
  GetFlightInfo of a ``CommandStatementQuery`` that is ``SELECT * FROM name`` (the table's
  endpoints), and DoPut of a ``CommandStatementIngest`` (the stream replaces table
  ``table``; the answer is a ``DoPutUpdateResult`` with the rows stored). Any other Flight
  SQL command is refused as not implemented.

Run it as ``python -m bench.peers.cpp_flight_server --port 0``: it prints
``listening on grpc+tcp://127.0.0.1:PORT`` once bound and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import json
import re
import sys
import threading

import pyarrow as pa
import pyarrow.flight as flight

from bench.peers import arguments, serve

#: What the first line on stdout starts with once the server listens.
LISTENING = "listening on "


#: The ``Any.type_url`` prefix of Flight SQL's commands.
FLIGHT_SQL_TYPE = "type.googleapis.com/arrow.flight.protocol.sql."
#: The one query the peer answers: every column of one table.
SELECT_ALL = re.compile(
    r'\s*SELECT\s+\*\s+FROM\s+(?:"((?:[^"]|"")+)"|([A-Za-z_][\w./-]*))\s*;?\s*', re.IGNORECASE
)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(10):  # a varint is at most 10 bytes
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at
    raise ValueError("bad varint")


def protobuf_fields(data: bytes) -> dict[int, bytes | int]:
    """Return the fields of a serialized protobuf message (the last of each number)."""
    fields: dict[int, bytes | int] = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields[number], at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            fields[number], at = data[at : at + size], at + size
        elif wire == 1:
            fields[number], at = data[at : at + 8], at + 8
        elif wire == 5:
            fields[number], at = data[at : at + 4], at + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    return fields


def flight_sql_command(descriptor: flight.FlightDescriptor) -> tuple[str, dict] | None:
    """Return a Flight SQL command's name and fields, or ``None`` for anything else."""
    if descriptor.descriptor_type != flight.DescriptorType.CMD:
        return None
    try:
        wrapper = protobuf_fields(descriptor.command)
    except (ValueError, IndexError):
        return None
    type_url = wrapper.get(1)
    if not isinstance(type_url, bytes) or not type_url.startswith(FLIGHT_SQL_TYPE.encode()):
        return None
    value = wrapper.get(2, b"")
    assert isinstance(value, bytes)
    return type_url[len(FLIGHT_SQL_TYPE) :].decode(), protobuf_fields(value)


def table_name(descriptor: flight.FlightDescriptor) -> str:
    """Return the table a descriptor names, as quiver reads it.

    A Flight SQL ``SELECT * FROM name`` names ``name``, an ingest its ``table``.
    """
    if descriptor.descriptor_type == flight.DescriptorType.PATH:
        return "/".join(p.decode() if isinstance(p, bytes) else p for p in descriptor.path)
    command = flight_sql_command(descriptor)
    if command is None:
        return descriptor.command.decode()
    kind, fields = command
    if kind == "CommandStatementQuery":
        match = SELECT_ALL.fullmatch(bytes(fields.get(1, b"")).decode())
        if match is None:
            raise NotImplementedError("only SELECT * FROM <table> is answered")
        return match.group(2) or match.group(1).replace('""', '"')
    if kind == "CommandStatementIngest":
        return bytes(fields.get(2, b"")).decode()
    raise NotImplementedError(f"Flight SQL {kind} is not implemented")


def partition_bounds(rows: int, index: int, count: int) -> tuple[int, int]:
    """Return the row range ``[start, end)`` of partition ``index`` of ``count``."""
    return index * rows // count, (index + 1) * rows // count


class InMemoryFlightServer(flight.FlightServerBase):
    """Named Arrow tables in a dict, put and got over Flight.

    Parameters
    ----------
    location : str
        The URI to bind, e.g. ``grpc+tcp://127.0.0.1:0``.
    """

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self._tables: dict[str, tuple[pa.Table, int]] = {}
        self._lock = threading.Lock()
        self.uri = f"grpc+tcp://127.0.0.1:{self.port}"

    def _lookup(self, name: str) -> tuple[pa.Table, int]:
        with self._lock:
            found = self._tables.get(name)
        if found is None:
            raise flight.FlightServerError(f"table not found: {name!r}")
        return found

    def do_put(self, context, descriptor, reader, writer):
        """Store the stream as a table, replacing or appending as its options say."""
        name = table_name(descriptor)
        ingest = flight_sql_command(descriptor) is not None
        options: dict = {}
        batches: list[pa.RecordBatch] = []
        try:
            first = reader.read_chunk()
        except StopIteration:
            first = None
        if first is not None:
            if first.app_metadata is not None:
                options = json.loads(first.app_metadata.to_pybytes() or b"{}")
            if first.data is not None:
                batches.append(first.data)
        batches.extend(reader.read_all().to_batches())
        table = pa.Table.from_batches(batches, schema=reader.schema)
        mode = options.get("mode", "replace")
        if mode not in ("replace", "append"):
            raise flight.FlightServerError(f"unknown mode: {mode!r}")
        with self._lock:
            old = self._tables.get(name)
            partitions = options.get("partitions", old[1] if old else 1)
            if mode == "append" and old is not None:
                table = pa.concat_tables([old[0], table])
            self._tables[name] = (table, int(partitions))
        if ingest:
            # DoPutUpdateResult{record_count}: field 1, a varint.
            count, out = table.num_rows, bytearray(b"\x08")
            while count > 0x7F:
                out.append(count & 0x7F | 0x80)
                count >>= 7
            out.append(count)
            writer.write(pa.py_buffer(bytes(out)))

    def get_flight_info(self, context, descriptor):
        """Describe a table: its schema, size and one endpoint per partition."""
        name = table_name(descriptor)
        table, partitions = self._lookup(name)
        count = max(1, min(partitions, table.num_rows))
        endpoints = [
            flight.FlightEndpoint(f"{name}\0{i}\0{count}".encode(), [self.uri])
            for i in range(count)
        ]
        return flight.FlightInfo(table.schema, descriptor, endpoints, table.num_rows, table.nbytes)

    def get_schema(self, context, descriptor):
        """Return a table's schema."""
        return flight.SchemaResult(self._lookup(table_name(descriptor))[0].schema)

    def do_get(self, context, ticket):
        r"""Stream a partition (``name\0i\0n`` ticket) or a whole table (its name)."""
        parts = ticket.ticket.split(b"\0")
        table, _ = self._lookup(parts[0].decode())
        if len(parts) == 3:
            start, end = partition_bounds(table.num_rows, int(parts[1]), int(parts[2]))
            table = table.slice(start, end - start)
        return flight.RecordBatchStream(table)

    def list_flights(self, context, criteria):
        """List the tables whose name starts with the criteria's expression."""
        prefix = criteria.decode() if criteria else ""
        with self._lock:
            names = sorted(n for n in self._tables if n.startswith(prefix))
        for name in names:
            yield self.get_flight_info(context, flight.FlightDescriptor.for_path(name))

    def list_actions(self, context):
        """List the actions this server knows."""
        return [("delete", "Delete a table"), ("stats", "Tables, rows and bytes stored")]

    def do_action(self, context, action):
        """Run ``delete`` (body: the table name) or ``stats``."""
        if action.type == "delete":
            name = action.body.to_pybytes().decode()
            with self._lock:
                found = self._tables.pop(name, None)
            if found is None:
                raise flight.FlightServerError(f"table not found: {name!r}")
            table = found[0]
            result = {"deleted": name, "rows": table.num_rows, "bytes": table.nbytes}
        elif action.type == "stats":
            with self._lock:
                tables = [t for t, _ in self._tables.values()]
            result = {
                "tables": len(tables),
                "rows": sum(t.num_rows for t in tables),
                "bytes": sum(t.nbytes for t in tables),
            }
        else:
            # UNIMPLEMENTED (pyarrow maps NotImplementedError to it), which ADBC reads as
            # "not supported": its DB-API then runs a query without CreatePreparedStatement.
            raise NotImplementedError(f"unknown action: {action.type!r}")
        return [json.dumps(result).encode()]


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT."""
    args = arguments(__doc__.splitlines()[0]).parse_args(argv)
    server = InMemoryFlightServer(f"grpc+tcp://127.0.0.1:{args.port}")
    return serve(f"{LISTENING}{server.uri}", server.shutdown)


if __name__ == "__main__":
    sys.exit(main())
