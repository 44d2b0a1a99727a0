"""Python functions that a quiver server serves over Arrow Flight's DoExchange.

A module of functions is ordinary Python: each function is registered with the
:func:`function` decorator, which returns it unchanged, so the module stays
importable and testable without a server. ``quiver serve --functions MODULE``
starts worker processes that import it (docs/functions.md) and runs every batch a
client streams through the function it names.

>>> import pyarrow as pa, pyarrow.compute as pc
>>> import quiver.functions as qf
>>> @qf.function(output_schema=pa.schema([("total", pa.float64())]))
... def total(batch: pa.RecordBatch) -> pa.Array:
...     '''The sum of a trip's fare and tip.'''
...     return pc.add(batch["fare"], batch["tip"])
>>> qf.registry()["total"].run(pa.record_batch({"fare": [7.5], "tip": [1.0]}))[0].to_pydict()
{'total': [8.5]}

What a function may return
--------------------------
A function takes one :class:`pyarrow.RecordBatch` (or, with ``pandas=True``, a
pandas DataFrame) and returns one of:

- a :class:`pyarrow.RecordBatch`;
- a :class:`pyarrow.Table`, sent as its batches (several are allowed);
- a pandas DataFrame, converted with
  ``pa.RecordBatch.from_pandas(df, schema=output_schema, preserve_index=False)``
  (which casts to the declared types);
- an array-like as long as the input (a pyarrow or numpy array, a pandas Series, a
  list) when the declared output schema has one field, which it becomes; without a
  declared output schema it becomes a column named after the function.

Arrow results must match a declared output schema by field names and types, in
order (nullability and metadata are not compared). An empty result is sent as one
batch of 0 rows. A result that does not fit raises :class:`FunctionOutputError`.
"""

from __future__ import annotations

import inspect
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import pyarrow as pa

__all__ = [
    "NAME_PATTERN",
    "Function",
    "FunctionOutputError",
    "function",
    "registry",
]

#: What a function's name must match: an identifier, so that SQL can call it unquoted.
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

F = TypeVar("F", bound=Callable[..., Any])


class FunctionOutputError(Exception):
    """A function's result does not fit its declared output schema, or cannot be converted.

    The worker reports it with kind ``FUNCTION_OUTPUT`` (docs/functions.md); any other
    exception a function raises is kind ``FUNCTION_ERROR``.
    """


@dataclass(frozen=True)
class Function:
    """A registered function and what it declares.

    Attributes
    ----------
    name : str
        The name clients call it by: an identifier, unique on a server.
    fn : callable
        The function itself, as decorated.
    module : str
        The module that defines it (``fn.__module__``).
    description : str
        What it does: given, or the first paragraph of its docstring.
    input_schema : pyarrow.Schema or None
        The schema every input must have (names and types in order), if declared.
    output_schema : pyarrow.Schema or None
        The schema every result has, if declared.
    pandas : bool
        Whether it takes a pandas DataFrame instead of a RecordBatch.
    sql : bool
        Whether SQL may call it (as a UDF, when its schemas allow).
    """

    name: str
    fn: Callable[..., Any]
    module: str
    description: str
    input_schema: pa.Schema | None
    output_schema: pa.Schema | None
    pandas: bool
    sql: bool

    def run(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """Call the function on ``batch`` and return its result as record batches.

        With ``pandas=True`` the function gets ``batch.to_pandas()``. The result is
        normalized as :meth:`normalize` does.

        Parameters
        ----------
        batch : pyarrow.RecordBatch
            The input.

        Returns
        -------
        list of pyarrow.RecordBatch
            One or more batches sharing one schema (one of 0 rows for an empty result).

        Raises
        ------
        FunctionOutputError
            The result does not fit the declared output schema or cannot be converted.
        Exception
            Whatever the function raised.
        """
        argument: object = batch.to_pandas() if self.pandas else batch
        return self.normalize(self.fn(argument), batch.num_rows)

    def normalize(self, result: object, num_rows: int) -> list[pa.RecordBatch]:
        """Return ``result`` as a list of record batches sharing one schema.

        Parameters
        ----------
        result : object
            What the function returned for an input of ``num_rows`` rows.
        num_rows : int
            The input's rows: an array-like result must have as many.

        Returns
        -------
        list of pyarrow.RecordBatch
            At least one batch; an empty result is one batch of 0 rows.

        Raises
        ------
        FunctionOutputError
            The result is of an unknown type, does not match the declared output
            schema, or cannot be converted to it.
        """
        if isinstance(result, pa.RecordBatch):
            self._check(result.schema)
            return [result]
        if isinstance(result, pa.Table):
            self._check(result.schema)
            batches = [b for b in result.to_batches() if b.num_rows > 0]
            return batches or [_empty_batch(result.schema)]
        pandas = sys.modules.get("pandas")
        if pandas is not None and isinstance(result, pandas.DataFrame):
            return [self._from_pandas(result)]
        if result is None or isinstance(result, (str, bytes, dict)):
            raise FunctionOutputError(
                f"function {self.name} returned {type(result).__name__}; expected a "
                "RecordBatch, a Table, a pandas DataFrame or an array-like"
            )
        return [self._from_array(result, num_rows)]

    def _check(self, schema: pa.Schema) -> None:
        """Raise :class:`FunctionOutputError` unless ``schema`` fits the declared output."""
        declared = self.output_schema
        if declared is not None and not same_shape(schema, declared):
            raise FunctionOutputError(
                f"function {self.name} returned ({describe_fields(schema)}), but declares "
                f"output ({describe_fields(declared)})"
            )

    def _from_pandas(self, frame: Any) -> pa.RecordBatch:
        try:
            batch = pa.RecordBatch.from_pandas(
                frame, schema=self.output_schema, preserve_index=False
            )
        except (pa.ArrowException, TypeError, ValueError, KeyError) as error:
            raise FunctionOutputError(
                f"function {self.name}'s DataFrame does not convert to "
                f"{_declared_text(self.output_schema)}: {error}"
            ) from error
        self._check(batch.schema)
        return batch

    def _from_array(self, value: object, num_rows: int) -> pa.RecordBatch:
        declared = self.output_schema
        if declared is not None and len(declared) != 1:
            raise FunctionOutputError(
                f"function {self.name} returned {type(value).__name__}, which is one column, "
                f"but declares output ({describe_fields(declared)})"
            )
        array = self._as_array(value, None if declared is None else declared.field(0).type)
        if len(array) != num_rows:
            raise FunctionOutputError(
                f"function {self.name} returned {len(array)} values for {num_rows} rows"
            )
        if declared is not None:
            return pa.RecordBatch.from_arrays([array], schema=declared)
        return pa.RecordBatch.from_arrays([array], names=[self.name])

    def _as_array(self, value: object, type_: pa.DataType | None) -> pa.Array:
        if isinstance(value, pa.ChunkedArray):
            value = value.combine_chunks()
        if isinstance(value, pa.Array):
            if type_ is not None and value.type != type_:
                raise FunctionOutputError(
                    f"function {self.name} returned an array of {value.type}, but declares {type_}"
                )
            return value
        try:
            return pa.array(value, type=type_)
        except (pa.ArrowException, TypeError, ValueError) as error:
            target = f"an array of {type_}" if type_ is not None else "an Arrow array"
            raise FunctionOutputError(
                f"function {self.name} returned {type(value).__name__}, which does not "
                f"convert to {target}: {error}"
            ) from error


_registry: dict[str, Function] = {}
_lock = threading.Lock()


@overload
def function(fn: F) -> F: ...


@overload
def function(
    fn: None = None,
    *,
    name: str | None = None,
    input_schema: pa.Schema | None = None,
    output_schema: pa.Schema | None = None,
    pandas: bool = False,
    sql: bool = True,
    description: str | None = None,
) -> Callable[[F], F]: ...


def function(
    fn: F | None = None,
    *,
    name: str | None = None,
    input_schema: pa.Schema | None = None,
    output_schema: pa.Schema | None = None,
    pandas: bool = False,
    sql: bool = True,
    description: str | None = None,
) -> F | Callable[[F], F]:
    """Register a function for a quiver server to serve; return it unchanged.

    Used bare (``@function``) or with options (``@function(output_schema=...)``).

    Parameters
    ----------
    fn : callable
        The function: one RecordBatch (or DataFrame) in, a result out (see
        :mod:`quiver.functions` for what it may return).
    name : str, optional
        The name clients call it by; ``fn.__name__`` by default. An identifier
        (``[A-Za-z_][A-Za-z0-9_]*``), unique on the server.
    input_schema : pyarrow.Schema, optional
        The schema every input must have: field names and types, in order.
    output_schema : pyarrow.Schema, optional
        The schema of every result. Without it, the first result of a call fixes
        that call's schema.
    pandas : bool, default False
        Call the function with a pandas DataFrame instead of a RecordBatch.
    sql : bool, default True
        Let SQL call it.
    description : str, optional
        What it does; the first paragraph of its docstring by default.

    Returns
    -------
    callable
        ``fn`` itself, or a decorator that registers and returns its argument.

    Raises
    ------
    ValueError
        The name is not an identifier, or another function has it.
    TypeError
        ``fn`` is not callable, or a schema is not a schema.
    """

    def register(target: F) -> F:
        if not callable(target):
            raise TypeError(f"@function decorates a callable, not {type(target).__name__}")
        registered = Function(
            name=_checked_name(name if name is not None else target.__name__),
            fn=target,
            module=str(getattr(target, "__module__", None) or ""),
            description=description if description is not None else _first_paragraph(target),
            input_schema=_schema(input_schema, "input_schema"),
            output_schema=_schema(output_schema, "output_schema"),
            pandas=bool(pandas),
            sql=bool(sql),
        )
        with _lock:
            existing = _registry.get(registered.name)
            if existing is not None and _origin(existing.fn) != _origin(target):
                raise ValueError(
                    f"two functions are named {registered.name}: "
                    f"{'.'.join(_origin(existing.fn))} and {'.'.join(_origin(target))}"
                )
            # The same definition again (a module imported twice) replaces itself.
            _registry[registered.name] = registered
        return target

    if fn is not None:
        return register(fn)
    return register


def registry() -> dict[str, Function]:
    """Return the registered functions by name, in the order they were registered.

    Returns
    -------
    dict of str to Function
        A copy: changing it registers nothing.
    """
    with _lock:
        return dict(_registry)


def same_shape(a: pa.Schema, b: pa.Schema) -> bool:
    """Return whether two schemas have the same field names and types, in order."""
    return len(a) == len(b) and all(
        x.name == y.name and x.type == y.type for x, y in zip(a, b, strict=True)
    )


def describe_fields(schema: pa.Schema) -> str:
    """Return a schema's fields as ``"name: type, ..."``."""
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _declared_text(schema: pa.Schema | None) -> str:
    return f"({describe_fields(schema)})" if schema is not None else "Arrow"


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


def _checked_name(name: object) -> str:
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise ValueError(
            f"a function's name must be an identifier ([A-Za-z_][A-Za-z0-9_]*), not {name!r}"
        )
    return name


def _schema(value: object, what: str) -> pa.Schema | None:
    if value is None or isinstance(value, pa.Schema):
        return value
    try:
        return pa.schema(value)
    except (TypeError, ValueError, pa.ArrowException) as error:
        raise TypeError(f"{what} must be a pyarrow.Schema, not {type(value).__name__}") from error


def _first_paragraph(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn)
    if not doc:
        return ""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _origin(fn: Callable[..., Any]) -> tuple[str, str]:
    return (
        str(getattr(fn, "__module__", "")),
        str(getattr(fn, "__qualname__", getattr(fn, "__name__", ""))),
    )
