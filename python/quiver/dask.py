"""quiver tables as Dask DataFrames, read and written in parallel.

>>> import quiver.dask
>>> trips = quiver.dask.read_table("grpc://127.0.0.1:8815", "trips",
...                                columns=["VendorID", "fare_amount"],
...                                filters=[("fare_amount", ">", 10)])  # doctest: +SKIP
>>> trips.groupby("VendorID").fare_amount.mean().compute()  # doctest: +SKIP
>>> quiver.dask.to_quiver(trips, "grpc://127.0.0.1:8815", "big_fares")  # doctest: +SKIP

One Dask partition per endpoint: each partition is read by the worker that
computes it, from the endpoint's first location that answers, through shared
memory when the server is on the worker's host. Columns and filters are
evaluated by the server. :func:`to_quiver` stages each partition as a table of
its own and publishes them in one atomic step: if any partition fails, the
target is left as it was.

A DataFrame from :func:`read_table` can be computed again and again (its
partitions are pinned to the table's version; a changed table raises
:class:`~quiver.errors.VersionConflictError`). One from :func:`read_sql` reads
the query's result, which the server keeps until it is read once: ``persist()`` it
to compute from it more than once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
from dask.base import compute
from dask.delayed import delayed

from . import splits
from .results import PutResult
from .splits import Connection, ReadPlan, Split, TaskWrite, WriteJob

__all__ = ["read_sql", "read_table", "to_quiver"]


def read_table(
    uri: str | Connection,
    table: str,
    *,
    columns: Sequence[str] | None = None,
    filters: splits.Filters | None = None,
    **connect_kwargs: Any,
) -> dd.DataFrame:
    """Read table ``table`` as a Dask DataFrame, one partition per endpoint.

    Parameters
    ----------
    uri : str or quiver.splits.Connection
        The server.
    table : str
        The table.
    columns : sequence of str, optional
        The columns to read (all by default).
    filters : quiver.splits.Filters, optional
        Rows to keep: ``[("fare", ">", 10)]``, or lists of such lists ORed, as
        :func:`dask.dataframe.read_parquet` takes them; evaluated by the server.
    **connect_kwargs
        :class:`~quiver.splits.Connection`'s settings (``token``, ``tls_root_certs``, ...).
    """
    plan = splits.plan_read(
        splits.as_connection(uri, **connect_kwargs), table, columns=columns, filters=filters
    )
    return _frame(plan)


def read_sql(uri: str | Connection, query: str, **connect_kwargs: Any) -> dd.DataFrame:
    """Run SQL ``query`` and read its result as a Dask DataFrame, one partition per endpoint.

    The server runs the query once, partition by partition as the workers read
    them; ``persist()`` the result to use it more than once.
    """
    plan = splits.plan_read(splits.as_connection(uri, **connect_kwargs), query=query)
    return _frame(plan)


def _frame(plan: ReadPlan) -> dd.DataFrame:
    meta = _to_pandas(plan.schema.empty_table())
    if not plan.splits:
        return dd.from_pandas(meta, npartitions=1)
    return dd.from_map(
        _read_partition,
        plan.splits,
        plan=plan,
        meta=meta,
        label="read-quiver",
        enforce_metadata=False,
    )


def _read_partition(split: Split, plan: ReadPlan) -> pd.DataFrame:
    batches = list(splits.read_split(plan, split))
    return _to_pandas(pa.Table.from_batches(batches, schema=plan.schema))


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas(split_blocks=True, self_destruct=False)


def to_quiver(
    ddf: dd.DataFrame,
    uri: str | Connection,
    table: str,
    *,
    mode: splits.WriteMode = "replace",
    partitions: int | None = None,
    **connect_kwargs: Any,
) -> PutResult:
    """Write ``ddf`` to table ``table``, its partitions in parallel, published atomically.

    Each partition is converted to Arrow (its index dropped) and staged by the
    worker that computes it; when all are staged, they are published into
    ``table`` in one step, in partition order. If computing or writing any
    partition fails, nothing is published and the staged partitions are
    deleted.

    Parameters
    ----------
    ddf : dask.dataframe.DataFrame
        The rows.
    uri : str or quiver.splits.Connection
        The server.
    table : str
        The target table.
    mode : {"replace", "append"}, default "replace"
        Replace the table (creating it) or append to it (rows are cast to its schema).
    partitions : int, optional
        Endpoints of the written table.
    **connect_kwargs
        :class:`~quiver.splits.Connection`'s settings.

    Returns
    -------
    PutResult
        The table's new version and size.
    """
    job = WriteJob.begin(
        splits.as_connection(uri, **connect_kwargs), table, mode, partitions=partitions
    )
    schema = job.schema or pa.Schema.from_pandas(ddf._meta, preserve_index=False)
    try:
        parts = ddf.to_delayed()
        write = delayed(_write_partition)
        staged = _compute_all([write(part, job, i, schema) for i, part in enumerate(parts)])
    except BaseException:
        job.abort()
        raise
    return job.commit(staged, schema)


def _compute_all(writes: list[Any]) -> list[TaskWrite]:
    """Compute every write; if one fails, wait for the others to end, then raise its error.

    On a distributed cluster the other partitions go on after one fails; waiting
    for them means the job is over, nothing of it still running, when this returns.
    """
    try:
        from distributed import get_client, wait
    except ImportError:  # the local schedulers only
        return list(compute(*writes))
    try:
        client = get_client()
    except ValueError:  # no cluster: the local scheduler
        return list(compute(*writes))
    futures = client.compute(writes)
    wait(futures)
    for future in futures:
        if future.status == "error":
            future.result()  # raises the partition's error
    return list(client.gather(futures))


def _write_partition(
    frame: pd.DataFrame, job: WriteJob, index: int, schema: pa.Schema
) -> TaskWrite:
    data = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    return job.write(index, data)
