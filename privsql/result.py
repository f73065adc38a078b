"""Answers: a released table that reads like a DuckDB result, with its cost and accuracy."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HalfWidth = Callable[[float], pa.Array | None]
"""Per output column: alpha -> the (1 - alpha) interval half-width of each cell, or None."""
Range = tuple[float, float]
"""Where an output's exact value must lie, known before release (``-inf``/``inf``: open)."""
ALPHA = 0.05
"""Intervals are 95% unless asked otherwise, as the REPL, CLI and notebook show them."""
INTERVAL_SUFFIX = "_pm"
"""``df(intervals=True)`` names the half-width column of output ``x`` ``x_pm`` (plus-minus)."""

FLAG_RATIO = 0.5
"""A count's interval is flagged when bounding surely cut at least this part of its width."""


@dataclass(frozen=True)
class BoundingCheck:
    """What bounding cut from one output, per row: the released (noisy) count of the row's
    group's cells (unit, group) that the output's row cap or the group cap trimmed or
    dropped — each such cell lost at least one row — and the noise half-width of that count
    (docs/privacy.md, 3.3b).

    ``counts_rows``: the output counts rows (COUNT(*), COUNT(col)), so its bias in its own
    units is at least the number of cut cells. ``rows_cut(alpha)`` is a (1 - alpha) lower
    bound on the rows its cap cut over all groups (0 when unsure; 3.3c).
    """

    cut: np.ndarray
    cut_width: Callable[[float], float]
    counts_rows: bool = False
    rows_cut: Callable[[float], float] = lambda alpha: 0.0


class Result:
    """A privsql answer: only noisy aggregates, keys and their post-processing.

    ``epsilon`` is what this answer cost (0 when it was a stored answer or read only
    public data). ``accuracy(alpha)`` gives, per noisy cell, the half-width w such
    that the noise moved the cell by more than w with probability at most alpha.
    ``withheld`` outputs are NULL in every row, flagged, with no interval: the data could
    not set their bounds at this ε (a blind bounds search), so a value would be noise
    clamped to a range the data never showed (docs/query-language.md, "No answer").
    """

    def __init__(
        self,
        table: pa.Table,
        *,
        epsilon: float = 0.0,
        delta: float = 0.0,
        half_widths: Mapping[str, HalfWidth] | None = None,
        cached: bool = False,
        checks: Mapping[str, BoundingCheck] | None = None,
        threshold: int | None = None,
        ranges: Mapping[str, Range] | None = None,
        clamped: bool = False,
        guessed: frozenset[str] = frozenset(),
        withheld: frozenset[str] = frozenset(),
    ) -> None:
        for name in withheld:
            position = table.schema.get_field_index(name)
            field = table.field(name)
            table = table.set_column(position, field, pa.nulls(table.num_rows, field.type))
        self._table = table
        self.epsilon = epsilon
        self.delta = delta
        self.cached = cached
        self._half_widths = dict(half_widths or {})
        self._checks = dict(checks or {})
        """What bounding cut, per output computed from DP aggregates."""
        self._threshold = threshold
        """Distinct units a group needed to be released, when its keys were not public."""
        self._ranges = dict(ranges or {})
        self.clamped = clamped
        """Whether the released values were moved into their known ranges (``clamp``)."""
        self._guessed = guessed
        """Outputs whose bounds BOUND AUTO guessed, or whose AUTO cap's search was blind:
        flagged in every cell."""
        self._withheld = withheld
        """Outputs NULL in every row, flagged, with no interval (a blind bounds search)."""

    @property
    def columns(self) -> list[str]:
        return list(self._table.column_names)

    def arrow(
        self, *, intervals: bool = False, clamp: bool = False, alpha: float = ALPHA
    ) -> pa.Table:
        """The answer as an Arrow table. ``intervals`` adds, after each noisy column ``x``,
        a column ``x_pm`` holding the half-width of its (1 - alpha) noise interval;
        ``clamp`` first moves the released values into their known ranges (``clamp()``)."""
        result = self.clamp() if clamp else self
        if not intervals:
            return result._table
        return result._with_intervals(alpha)

    def df(self, *, intervals: bool = False, clamp: bool = False, alpha: float = ALPHA) -> Any:
        """The answer as a pandas DataFrame; ``intervals`` and ``clamp`` as for ``arrow``."""
        table = self.arrow(intervals=intervals, clamp=clamp, alpha=alpha)
        _require("pandas", "df")
        return table.to_pandas()

    def pl(self, *, intervals: bool = False, clamp: bool = False, alpha: float = ALPHA) -> Any:
        """The answer as a polars DataFrame; ``intervals`` and ``clamp`` as for ``arrow``."""
        table = self.arrow(intervals=intervals, clamp=clamp, alpha=alpha)
        polars = _require("polars", "pl")
        return polars.from_arrow(table)

    def clamp(self) -> Result:
        """This answer with each released value moved into the range its exact value is known
        to lie in, from the query alone: counts at least 0, a SUM's sign when its bounds
        have one, an AVG, quantile, VARIANCE or STDDEV within its bounds.

        Post-processing: it reads nothing but released values and public bounds, so it
        costs no ε (docs/privacy.md). The exact value lies in the range, so clamping only
        brings the released value nearer to it; each interval is then cut to the range and
        its half-width to the farthest in-range point it reaches: the clamped value ± that
        half-width, within the range, still holds the exact value whenever the released
        interval did.
        """
        if self.clamped:
            return self
        table = self._table
        widths = dict(self._half_widths)
        for name, (low, high) in self._ranges.items():
            position = table.schema.get_field_index(name)
            if not _is_number(table.field(name).type):  # e.g. a date: left as released
                continue
            column = _clip(table.column(name), low, high)
            table = table.set_column(position, table.field(name), column)
            if name in widths:
                widths[name] = _cut_half_width(widths[name], column, low, high)
        return Result(
            table,
            epsilon=self.epsilon,
            delta=self.delta,
            half_widths=widths,
            cached=self.cached,
            checks=self._checks,
            threshold=self._threshold,
            ranges=self._ranges,
            clamped=True,
            guessed=self._guessed,
            withheld=self._withheld,
        )

    def noisy_columns(self, alpha: float = ALPHA) -> list[str]:
        """The columns whose cells have a (1 - alpha) interval: the bare DP aggregates
        (decided by the query, so the same whether or not the answer has rows)."""
        return [
            name
            for name in self.columns
            if (width := self._half_widths.get(name)) is not None and width(alpha) is not None
        ]

    def _with_intervals(self, alpha: float) -> pa.Table:
        widths = self.accuracy(alpha)
        table = self._table
        for name in self.noisy_columns(alpha):
            interval = name + INTERVAL_SUFFIX
            if interval in table.column_names:
                raise ValueError(f"the result already has a column {interval}")
            position = table.schema.get_field_index(name) + 1
            table = table.add_column(position, interval, widths.column(name))
        return table

    def fetchall(self) -> list[tuple]:
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns, strict=True)) if columns else []

    def accuracy(self, alpha: float = ALPHA) -> pa.Table:
        """Half-widths of the (1 - alpha) noise intervals, one per noisy cell (null elsewhere)."""
        if not 0 < alpha < 1:
            raise ValueError("alpha must be between 0 and 1")
        rows = self._table.num_rows
        columns = {}
        for name in self.columns:
            width = None if name in self._withheld else self._half_widths.get(name)
            values = width(alpha) if width else None
            columns[name] = values if values is not None else pa.nulls(rows, pa.float64())
        return pa.table(columns)

    def bounding(self) -> pa.Table:
        """Per noisy cell, how many (unit, group) cells bounding cut in its group (a noisy
        count, at least 0; each cut cell lost at least one row; null elsewhere)."""
        widths = self.accuracy()
        columns = {}
        for name in self.columns:
            cut = self._cut(name)
            cuts = [None] * len(self) if cut is None else cut.tolist()
            columns[name] = pa.array(
                [
                    c if w is not None else None
                    for w, c in zip(widths.column(name).to_pylist(), cuts, strict=True)
                ],
                pa.float64(),
            )
        return pa.table(columns)

    def flags(self, alpha: float = 0.05) -> pa.Table:
        """Per noisy cell: True where its (1 - alpha) interval is not to be trusted, because
        bounding surely cut something (the cut count is above its own noise half-width) and,
        for a count of rows, at least FLAG_RATIO of the interval's width; the interval
        covers the noise, not that bias. False for other noisy cells, null elsewhere."""
        widths = self.accuracy(alpha)
        columns = {}
        for name in self.columns:
            check, cut = self._checks.get(name), self._cut(name)
            width = widths.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
            if name in self._withheld:
                columns[name] = pa.array([True] * len(width), pa.bool_())
                continue
            if name in self._guessed:
                columns[name] = pa.array([None if np.isnan(w) else True for w in width])
                continue
            if check is None or cut is None:
                columns[name] = pa.array([None if np.isnan(w) else False for w in width])
                continue
            sure = cut > check.cut_width(alpha)
            large = cut >= FLAG_RATIO * width if check.counts_rows else np.ones_like(sure)
            rows_cut = check.rows_cut(alpha)
            enough = rows_cut >= FLAG_RATIO * width if check.counts_rows else np.ones_like(sure)
            flagged = (sure & large) | (rows_cut > 0) & enough
            columns[name] = pa.array(
                [None if np.isnan(w) else bool(f) for w, f in zip(width, flagged, strict=True)],
                pa.bool_(),
            )
        return pa.table(columns)

    def warning(self, alpha: float = 0.05) -> str | None:
        """One line naming the flagged cells (see ``flags``), or saying why an answer whose
        groups went through partition selection is empty; None when there is nothing to say."""
        if self._threshold is not None and not len(self):
            return (
                f"⚠ no group reached the partition-selection threshold (about "
                f"{self._threshold:,} distinct units at this ε): list the keys with keys=, "
                "or raise ε"
            )
        flags = self.flags(alpha)
        flagged = noisy = 0
        kept = lost = 0.0
        for name in self.columns:
            if name in self._withheld or name in self._guessed:
                continue  # named by their own warnings below
            marks = flags.column(name).to_pylist()
            noisy += sum(m is not None for m in marks)
            flagged += sum(bool(m) for m in marks)
            check, cut = self._checks.get(name), self._cut(name)
            if check is not None and cut is not None and check.counts_rows:
                values = self._table.column(name).to_pylist()
                cells_lost = 0.0
                for mark, value, c in zip(marks, values, cut, strict=True):
                    if mark and value is not None:
                        kept, cells_lost = kept + max(float(value), 0.0), cells_lost + float(c)
                # Every cell flagged: the rows cut over all groups were cut from them.
                lost += max(cells_lost, check.rows_cut(alpha)) if all(marks) else cells_lost
        warnings = []
        withheld = [name for name in self.columns if name in self._withheld]
        if withheld:
            warnings.append(
                f"⚠ no answer for {', '.join(withheld)} at this ε (NULL): the data could not "
                "set the bounds, so a value would be noise clamped to a range the data never "
                "showed: raise ε or add CLAMPED BETWEEN"
            )
        guessed = [n for n in self.columns if n in self._guessed and n not in self._withheld]
        if guessed:
            warnings.append(
                f"⚠ at this ε the data could not set the bounds or the AUTO cap of "
                f"{', '.join(guessed)}, so values may be clamped or cut far from the truth: "
                "add CLAMPED BETWEEN or a fixed BOUND, or raise ε"
            )
        if flagged:
            share = f" (≥ ~{100 * lost / (kept + lost):.0f}% of their rows)" if lost else ""
            warnings.append(
                f"⚠ bounding cut rows in {flagged} of {noisy} cells{share}; "
                "their intervals cover noise only"
            )
        return "\n".join(warnings) or None

    def _cut(self, name: str) -> np.ndarray | None:
        check = self._checks.get(name)
        return None if check is None else np.maximum(check.cut, 0.0)

    def plot(
        self, columns: Any = None, *, by: Any = None, alpha: float = 0.05, ax: Any = None
    ) -> Any:
        """Draw the noisy values with their (1 - alpha) intervals (matplotlib); see privsql.plot."""
        from privsql.plot import plot

        return plot(self, columns, by=by, alpha=alpha, ax=ax)

    def __len__(self) -> int:
        return self._table.num_rows

    def _footer(self, alpha: float = ALPHA) -> str:
        """Rows, cost, interval level and any bounding warning, as the REPL shows them."""
        from privsql.cli import describe_cost

        footer = describe_cost(self, alpha=alpha)
        if not self.clamped:
            return footer
        first, *rest = footer.split("\n")
        return "\n".join([f"{first} · clamped to known ranges", *rest])

    def __repr__(self) -> str:
        """A boxed table like a DuckDB relation's, noisy cells as ``value ± half-width``."""
        from privsql.cli import format_table

        return f"{format_table(self)}\n{self._footer()}"

    def _repr_html_(self) -> str:
        """The same table in HTML, for Jupyter."""
        from privsql.magic import html_table

        return html_table(self, ALPHA, self._footer())


def _require(module: str, method: str) -> Any:
    """Import ``module`` for ``Result.<method>()``, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"Result.{method}() needs {module}: pip install {module}") from None


def _is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)


def _clip(column: pa.ChunkedArray, low: float, high: float) -> pa.ChunkedArray:
    """A column of numbers moved into [low, high] (nulls stay null); an integer column to
    the integers inside."""
    kind = column.type
    if pa.types.is_integer(kind):
        bounds = [
            None if math.isinf(b) else f(b) for b, f in ((low, math.ceil), (high, math.floor))
        ]
    elif pa.types.is_decimal(kind):
        bounds = [None if math.isinf(b) else Decimal(repr(b)) for b in (low, high)]
    else:
        bounds = [None if math.isinf(b) else b for b in (low, high)]
    lower, upper = (None if b is None else pa.scalar(b).cast(kind) for b in bounds)
    if lower is not None:
        column = pc.max_element_wise(column, lower, skip_nulls=False)
    if upper is not None:
        column = pc.min_element_wise(column, upper, skip_nulls=False)
    return column


def _cut_half_width(
    width: HalfWidth, values: pa.ChunkedArray, low: float, high: float
) -> HalfWidth:
    """``width`` cut to the farthest point of [low, high] from each (clamped) value."""
    points = values.to_numpy().astype(np.float64)
    reach = np.maximum(points - low, high - points)

    def cut(alpha: float) -> pa.Array | None:
        widths = width(alpha)
        if widths is None:
            return None
        found = widths.to_numpy(zero_copy_only=False).astype(np.float64)
        return pa.array(np.fmin(found, reach), pa.float64(), mask=np.isnan(found))

    return cut
