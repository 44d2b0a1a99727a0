"""quiver tables in Apache Spark: a Python Data Source (PySpark 4.1 or newer).

>>> import quiver.spark
>>> quiver.spark.register(spark)  # doctest: +SKIP
>>> trips = spark.read.format("quiver").option("uri", "grpc://127.0.0.1:8815").load("trips")
>>> trips.where("fare_amount > 10").groupBy("VendorID").count()  # doctest: +SKIP
>>> trips.write.format("quiver").option("uri", uri).mode("append").save("trips")  # doctest: +SKIP

**Reading** gives one Spark partition per endpoint of the table, as Arrow record
batches. Each task reads its endpoint from the endpoint's first location that
answers (then the next), through shared memory when the server is on the
task's host. Filters Spark can push (comparisons, ``IN``, null tests, string
prefix/suffix/contains, on top-level columns) run on the server, and so does
the column selection of ``.schema(...)`` or the ``columns`` option.
``.option("query", "SELECT ...")`` reads a SQL query instead of a table.

**Writing** stages each task's partition as a table of its own and publishes
them all into the target in one step when the job commits; a failed or aborted
job leaves the target as it was and deletes what it staged. ``mode("overwrite")``
replaces the table (creating it if missing), ``mode("append")`` appends (the
table must exist; rows are cast to its schema).

Options (all strings, as Spark passes them):

==============================  ==========================================================
``uri``                         the server (required), e.g. ``grpc+tcp://host:8815``
``username``/``password``       log in (the Flight Handshake)
``token``                       a bearer token instead
``tls_root_certs``              path of the PEM file of the CA of a ``grpc+tls://`` server
``cert_chain``/``private_key``  paths of PEM files for mutual TLS
``override_hostname``           the name the server's certificate is checked against
``transport``                   ``auto`` (default), ``grpc`` or ``shm``
``timeout``                     seconds per call
``query``                       read this SQL query instead of a table
``columns``                     comma-separated columns to read
``partitions``                  writing: endpoints of the written table
==============================  ==========================================================

Filter pushdown needs ``spark.sql.python.filterPushdown.enabled``, which
:func:`register` sets for the session.

With the JVM connector's jar on the session's classpath (``java/spark``; docs/engines.md,
"Spark on the JVM"), Spark has a ``quiver`` source of its own, which hands Spark columnar
batches without a Python worker: :func:`register` then leaves it in place.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from . import splits
from .splits import Connection, ReadPlan, Split, TaskWrite, WriteJob

__all__ = ["JVM_SOURCE", "QuiverDataSource", "jvm_source_loaded", "register", "spark_schema"]

#: The session setting without which Spark refuses a reader that pushes filters.
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

# Arrow types Spark cannot take, and the type each is read as (wide enough for every value).
_WIDER = {
    pa.uint8(): pa.int16(),
    pa.uint16(): pa.int32(),
    pa.uint32(): pa.int64(),
    pa.uint64(): pa.decimal128(20, 0),
    pa.float16(): pa.float32(),
    pa.string_view(): pa.large_string(),
    pa.binary_view(): pa.large_binary(),
}


#: The JVM connector's data source class (``java/spark``, docs/engines.md).
JVM_SOURCE = "quiver.spark.QuiverDataSource"


def jvm_source_loaded(spark: SparkSession) -> bool:
    """Whether the JVM connector's jar is on ``spark``'s classpath (``spark.jars``).

    Always ``False`` for Spark Connect, whose server's classpath is not seen from here.
    """
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(JVM_SOURCE, False, loader)
    except Exception:  # py4j raises its own error for a missing class
        return False
    return True


def register(spark: SparkSession, *, pushdown: bool = True) -> None:
    """Register the ``quiver`` data source with ``spark``.

    When the JVM connector's jar is on the session's classpath, Spark already has a
    ``quiver`` source, which reads columnar batches without a Python worker: it is
    kept, and this registers nothing.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The session.
    pushdown : bool, default True
        Push filters to the server; sets ``spark.sql.python.filterPushdown.enabled``
        for the session. With ``False``, Spark filters every row itself.
    """
    if jvm_source_loaded(spark):
        return
    if pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
        spark.dataSource.register(QuiverDataSource)
    else:
        spark.dataSource.register(_QuiverDataSourceNoPushdown)


def spark_schema(schema: pa.Schema) -> StructType:
    """Return the Spark schema a quiver table of Arrow ``schema`` is read as.

    Dictionary columns are read as their values; unsigned integers as the next
    wider signed type (``uint64`` as ``decimal(20, 0)``), half floats as floats.
    """
    return from_arrow_schema(_readable(schema))


def _readable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(_readable_type(f.type)) for f in schema])


def _readable_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return _readable_type(t.value_type)
    if t in _WIDER:
        return _WIDER[t]
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        return pa.struct([f.with_type(_readable_type(f.type)) for f in fields])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field.with_type(_readable_type(t.value_type))
        return pa.list_(item) if pa.types.is_list(t) else pa.large_list(item)
    if pa.types.is_map(t):
        return pa.map_(
            _readable_type(t.key_type), t.item_field.with_type(_readable_type(t.item_type))
        )
    return t


def _connection(options: Any) -> Connection:
    uri = options.get("uri")
    if not uri:
        raise ValueError('the quiver data source needs option("uri", "grpc+tcp://host:port")')

    def pem(key: str) -> bytes | None:
        path = options.get(key)
        return None if path is None else Path(path).read_bytes()

    timeout = options.get("timeout")
    return Connection(
        uri,
        username=options.get("username"),
        password=options.get("password"),
        token=options.get("token"),
        tls_root_certs=pem("tls_root_certs"),
        cert_chain=pem("cert_chain"),
        private_key=pem("private_key"),
        override_hostname=options.get("override_hostname"),
        disable_server_verification=options.get("disable_server_verification", "false").lower()
        == "true",
        timeout=None if timeout is None else float(timeout),
        transport=options.get("transport", "auto"),
    )


class QuiverDataSource(DataSource):
    """The ``quiver`` format: reads and writes quiver tables (see the module's docs)."""

    @classmethod
    def name(cls) -> str:  # noqa: D102
        return "quiver"

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.connection = _connection(options)
        self.table: str | None = options.get("path") or options.get("table")
        self.query: str | None = options.get("query")
        if (self.table is None) == (self.query is None):
            raise ValueError('give a table (.load("trips")) or option("query", ...), not both')
        columns = options.get("columns")
        self.columns = None if columns is None else [c.strip() for c in columns.split(",")]
        partitions = options.get("partitions")
        self.partitions = None if partitions is None else int(partitions)

    def schema(self) -> StructType:  # noqa: D102
        return spark_schema(
            splits.read_schema(self.connection, self.table, query=self.query, columns=self.columns)
        )

    def reader(self, schema: StructType) -> QuiverReader:  # noqa: D102
        return QuiverReader(self, schema)

    def writer(self, schema: StructType, overwrite: bool) -> QuiverWriter:  # noqa: D102
        if self.table is None:
            raise ValueError("a query cannot be written to: .save() a table name")
        job = WriteJob.begin(
            self.connection,
            self.table,
            "replace" if overwrite else "append",
            partitions=self.partitions,
        )
        return QuiverWriter(job, to_arrow_schema(schema, timezone="UTC"))

    def _plan(self, columns: Sequence[str] | None, filters: splits.Filters | None) -> ReadPlan:
        return splits.plan_read(
            self.connection, self.table, query=self.query, columns=columns, filters=filters
        )


class _QuiverDataSourceNoPushdown(QuiverDataSource):
    def reader(self, schema: StructType) -> QuiverReader:
        return _QuiverReaderNoPushdown(self, schema)


@dataclass(frozen=True)
class _Partition(InputPartition):
    plan: ReadPlan
    split: Split


class QuiverReader(DataSourceReader):
    """Reads one Spark partition per endpoint; pushes filters and the columns of ``schema``."""

    def __init__(self, source: QuiverDataSource, schema: StructType) -> None:
        self.source = source
        self.columns = [f.name for f in schema.fields]
        # Exactly what Spark checks each batch against (timestamps in UTC).
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.filters: list[splits.Filter] = []

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            condition = _condition(f)
            if condition is None:
                yield f
            else:
                self.filters.append(condition)

    def partitions(self) -> Sequence[InputPartition]:
        plan = self.source._plan(self.columns, self.filters or None)
        return [_Partition(plan, split) for split in plan.splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Partition)
        for batch in splits.read_split(partition.plan, partition.split):
            if not batch.schema.equals(self.arrow_schema):
                batch = batch.cast(self.arrow_schema)
            yield batch


class _QuiverReaderNoPushdown(QuiverReader):
    # Spark refuses a reader that defines pushFilters while pushdown is off.
    pushFilters = DataSourceReader.pushFilters  # type: ignore[assignment]


def _condition(f: Filter) -> splits.Filter | None:
    """Return Spark's filter ``f`` as a quiver filter, or ``None`` if it cannot be pushed."""
    path: tuple[str, ...] = getattr(f, "attribute", ())
    if isinstance(f, Not) or len(path) != 1:
        return None  # nested columns, and negations of arbitrary filters, stay with Spark
    column = path[0]
    value = getattr(f, "value", None)
    simple: dict[type, str] = {
        EqualTo: "=",
        GreaterThan: ">",
        GreaterThanOrEqual: ">=",
        LessThan: "<",
        LessThanOrEqual: "<=",
        EqualNullSafe: "<=>",
        StringStartsWith: "starts_with",
        StringEndsWith: "ends_with",
        StringContains: "contains",
    }
    try:
        if type(f) in simple:
            condition: splits.Filter = (column, simple[type(f)], value)
        elif isinstance(f, In):
            condition = (column, "in", list(value or ()))
        elif isinstance(f, IsNull):
            condition = (column, "is", None)
        elif isinstance(f, IsNotNull):
            condition = (column, "is not", None)
        else:
            return None
        splits.filters_to_sql([condition])  # a value with no SQL literal stays with Spark
    except ValueError:
        return None
    return condition


@dataclass(frozen=True)
class _Staged(WriterCommitMessage):
    write: TaskWrite | None


class QuiverWriter(DataSourceArrowWriter):
    """Stages each task's partition, and publishes them all when the job commits."""

    def __init__(self, job: WriteJob, schema: pa.Schema) -> None:
        self.job = job
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else "task"
        first = next(iterator, None)
        if first is None:
            return _Staged(None)
        batches = _chain(first, iterator)
        return _Staged(self.job.write(task, batches, first.schema))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        writes = [m.write for m in messages if isinstance(m, _Staged)]
        self.job.commit(writes, self.schema)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.job.abort()


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
