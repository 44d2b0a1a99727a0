"""quiver tables as Ray Datasets: a Ray Data ``Datasource`` and ``Datasink``.

>>> import quiver.ray
>>> ds = quiver.ray.read_table("grpc://127.0.0.1:8815", "trips")  # doctest: +SKIP
>>> ds.filter(expr="fare_amount > 10").count()  # doctest: +SKIP
>>> quiver.ray.write_table(ds, "grpc://127.0.0.1:8815", "trips_copy")  # doctest: +SKIP

One read task per endpoint, each reading its endpoint from the first location
that answers (through shared memory when the server is on the task's host).
Columns chosen with ``select_columns`` right after the read are pushed to the
server (Ray's projection pushdown), and so are the ``filters`` of
:func:`read_table`. Writing stages each block as a table of its own and
publishes them in one atomic step when the write completes; a failed write
leaves the target as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import ray.data
from ray.data.block import Block, BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask
from ray.data.datasource.datasink import WriteResult

from . import splits
from .results import PutResult
from .splits import Connection, ReadPlan, Split, TaskWrite, WriteJob

__all__ = ["QuiverDatasink", "QuiverDatasource", "read_sql", "read_table", "write_table"]


class QuiverDatasource(Datasource):
    """Reads a quiver table (or a SQL query's result), one read task per endpoint.

    Parameters
    ----------
    connection : quiver.splits.Connection or str
        The server.
    table : str, optional
        The table; or give ``query``.
    query : str, optional
        A SQL query.
    columns, filters
        As for :func:`quiver.splits.plan_read`.
    """

    def __init__(
        self,
        connection: Connection | str,
        table: str | None = None,
        *,
        query: str | None = None,
        columns: Sequence[str] | None = None,
        filters: splits.Filters | None = None,
    ) -> None:
        super().__init__()
        self._connection = splits.as_connection(connection)
        self._table = table
        self._query = query
        self._columns = None if columns is None else list(columns)
        self._filters = filters
        self._projection_map: dict[str, str] | None = None
        # A table is planned once, now (its splits can be read again and again); a
        # query when each execution asks for its read tasks (its result is read once).
        self._plan = self._planned() if query is None else None

    def _planned(self) -> ReadPlan:
        columns = self._columns
        pushed = self._get_data_columns()
        if pushed is not None:
            columns = [c for c in (columns or pushed) if c in pushed]
        return splits.plan_read(
            self._connection, self._table, query=self._query, columns=columns, filters=self._filters
        )

    def get_name(self) -> str:  # noqa: D102
        return "Quiver"

    def supports_projection_pushdown(self) -> bool:  # noqa: D102
        return self._query is None

    def apply_projection(self, projection_map: dict[str, str] | None) -> QuiverDatasource:  # noqa: D102
        clone = super().apply_projection(projection_map)
        assert isinstance(clone, QuiverDatasource)
        clone._plan = clone._planned() if clone._query is None else None
        return clone

    def estimate_inmemory_data_size(self) -> int | None:  # noqa: D102
        if self._plan is None:
            return None
        sizes = [s.bytes for s in self._plan.splits]
        return None if any(b is None for b in sizes) else sum(b for b in sizes if b is not None)

    def get_read_tasks(  # noqa: D102
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: Any = None,
    ) -> list[ReadTask]:
        plan = self._plan or self._planned()
        tasks = []
        for split in plan.splits:
            metadata = BlockMetadata(
                num_rows=split.rows if plan.filter is None else None,
                size_bytes=split.bytes,
                input_files=None,
                exec_stats=None,
            )
            tasks.append(
                ReadTask(
                    _reader(plan, split),
                    metadata,
                    schema=plan.schema,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks


def _reader(plan: ReadPlan, split: Split) -> Any:
    def read() -> Iterable[Block]:
        batches = list(splits.read_split(plan, split))
        yield pa.Table.from_batches(batches, schema=plan.schema)

    return read


class QuiverDatasink(Datasink[TaskWrite | None]):
    """Writes a Dataset into a quiver table, published atomically when the write completes.

    Parameters
    ----------
    connection : quiver.splits.Connection or str
        The server.
    table : str
        The target table.
    mode : {"replace", "append"}, default "replace"
        Replace the table (creating it) or append to it.
    partitions : int, optional
        Endpoints of the written table.
    """

    def __init__(
        self,
        connection: Connection | str,
        table: str,
        *,
        mode: splits.WriteMode = "replace",
        partitions: int | None = None,
    ) -> None:
        self._job = WriteJob.begin(
            splits.as_connection(connection), table, mode, partitions=partitions
        )
        self._schema: pa.Schema | None = None
        self.result: PutResult | None = None

    def on_write_start(self, schema: pa.Schema | None = None) -> None:  # noqa: D102
        self._schema = schema

    def write(self, blocks: Iterable[Block], ctx: Any) -> TaskWrite | None:  # noqa: D102
        tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
        tables = [t for t in tables if t.num_columns]
        if not tables:
            return None
        data = pa.concat_tables(tables, promote_options="default")
        return self._job.write(ctx.task_idx, data)

    def on_write_complete(self, write_result: WriteResult[TaskWrite | None]) -> None:  # noqa: D102
        self.result = self._job.commit(write_result.write_returns, self._schema)

    def on_write_failed(self, error: Exception) -> None:  # noqa: D102
        self._job.abort()


def read_table(
    uri: str | Connection,
    table: str,
    *,
    columns: Sequence[str] | None = None,
    filters: splits.Filters | None = None,
    **connect_kwargs: Any,
) -> ray.data.Dataset:
    """Read table ``table`` as a Ray Dataset, one read task per endpoint.

    ``columns`` and ``filters`` are evaluated by the server, as for
    :func:`quiver.splits.plan_read`; ``connect_kwargs`` are
    :class:`~quiver.splits.Connection`'s settings.
    """
    source = QuiverDatasource(
        splits.as_connection(uri, **connect_kwargs), table, columns=columns, filters=filters
    )
    return _read(source)


def read_sql(uri: str | Connection, query: str, **connect_kwargs: Any) -> ray.data.Dataset:
    """Run SQL ``query`` and read its result as a Ray Dataset, one read task per endpoint."""
    source = QuiverDatasource(splits.as_connection(uri, **connect_kwargs), query=query)
    return _read(source)


def _read(source: QuiverDatasource) -> ray.data.Dataset:
    # One block per split: left to itself, Ray cuts each split's table into blocks of
    # its target size (dozens per split), and every operator after the read pays for
    # each block.
    blocks = None if source._plan is None else max(1, len(source._plan.splits))
    return ray.data.read_datasource(source, override_num_blocks=blocks)


def write_table(
    ds: ray.data.Dataset,
    uri: str | Connection,
    table: str,
    *,
    mode: splits.WriteMode = "replace",
    partitions: int | None = None,
    **connect_kwargs: Any,
) -> PutResult:
    """Write ``ds`` to table ``table``, its blocks in parallel, published atomically.

    Returns
    -------
    PutResult
        The table's new version and size.
    """
    sink = QuiverDatasink(
        splits.as_connection(uri, **connect_kwargs), table, mode=mode, partitions=partitions
    )
    ds.write_datasink(sink)
    assert sink.result is not None
    return sink.result
