"""Medians and spreads of the repetitions, the numbers the plots and BENCHMARKS.md show."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

Row = dict[str, object]


@dataclass(frozen=True)
class Spread:
    """The repetitions of one measurement, summarized.

    Attributes
    ----------
    median, low, high, q1, q3 : float
        Median, minimum, maximum and quartiles.
    n : int
        Repetitions.
    """

    median: float
    low: float
    high: float
    q1: float
    q3: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread | None:
        """Summarize ``values``; ``None`` when there are none."""
        values = sorted(values)
        if not values:
            return None
        if len(values) >= 2:
            q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        else:
            q1 = q3 = values[0]
        return cls(statistics.median(values), values[0], values[-1], q1, q3, len(values))


def percentile(values: Iterable[float], q: float) -> float:
    """Return the ``q``-th percentile (0-100) of ``values``, by linear interpolation."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = (len(ordered) - 1) * q / 100
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def select(rows: Iterable[Row], **where: object) -> list[Row]:
    """Return the rows whose columns equal ``where`` (a tuple or set value: any of them)."""
    out = []
    for row in rows:
        for key, want in where.items():
            if isinstance(want, (tuple, set, frozenset)):
                if row.get(key) not in want:
                    break
            elif row.get(key) != want:
                break
        else:
            out.append(row)
    return out


def spread(rows: Iterable[Row], value: Callable[[Row], float] | str = "gbps") -> Spread | None:
    """Summarize one column (or a function of the row) over ``rows``."""
    get = (lambda r: float(r[value])) if isinstance(value, str) else value
    return Spread.of(get(r) for r in rows)


def comparable(rows: Iterable[Row]) -> list[Row]:
    """Leave out rows with a note (e.g. a get that was not split into its streams)."""
    return [r for r in rows if not r.get("note")]


def ceiling(rows: Iterable[Row], op: str) -> Spread | None:
    """Return the spread of a ceiling (``tcp``, ``iperf3``, ``memcpy_warm``, ``memcpy_fresh``)."""
    return spread(select(rows, suite="ceilings", op=op))


def shapes(rows: Iterable[Row]) -> list[tuple[int, int, int]]:
    """Return the distinct ``(streams, rows_per_stream, batch_rows)`` of ``rows``, sorted."""
    return sorted({(r["streams"], r["rows_per_stream"], r["batch_rows"]) for r in rows})  # type: ignore[misc]
