"""Answers: a released table that reads like a DuckDB result, with its cost and accuracy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

HalfWidth = Callable[[float], pa.Array | None]
"""Per output column: alpha -> the (1 - alpha) interval half-width of each cell, or None."""

FLAG_RATIO = 0.5
"""A count's interval is flagged when bounding surely cut at least this part of its width."""


@dataclass(frozen=True)
class BoundingCheck:
    """What bounding cut, per row: the released (noisy) count of the row's group's cells
    (unit, group) that the row or group cap trimmed or dropped — each such cell lost at
    least one row — and the noise half-width of that count (docs/privacy.md, 3.3b).

    ``counts`` are the output columns counting rows (COUNT(*), COUNT(col)), whose bias in
    their own units is at least the number of cut cells.
    """

    cut: np.ndarray
    cut_width: Callable[[float], float]
    counts: frozenset[str]


class Result:
    """A privsql answer: only noisy aggregates, keys and their post-processing.

    ``epsilon`` is what this answer cost (0 when it was a stored answer or read only
    public data). ``accuracy(alpha)`` gives, per noisy cell, the half-width w such
    that the noise moved the cell by more than w with probability at most alpha.
    """

    def __init__(
        self,
        table: pa.Table,
        *,
        epsilon: float = 0.0,
        delta: float = 0.0,
        half_widths: Mapping[str, HalfWidth] | None = None,
        cached: bool = False,
        check: BoundingCheck | None = None,
        threshold: int | None = None,
    ) -> None:
        self._table = table
        self.epsilon = epsilon
        self.delta = delta
        self.cached = cached
        self._half_widths = dict(half_widths or {})
        self._check = check
        self._threshold = threshold
        """Distinct units a group needed to be released, when its keys were not public."""

    @property
    def columns(self) -> list[str]:
        return list(self._table.column_names)

    def arrow(self) -> pa.Table:
        return self._table

    def df(self) -> Any:
        return self._table.to_pandas()

    def pl(self) -> Any:
        import polars

        return polars.from_arrow(self._table)

    def fetchall(self) -> list[tuple]:
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns, strict=True)) if columns else []

    def accuracy(self, alpha: float = 0.05) -> pa.Table:
        """Half-widths of the (1 - alpha) noise intervals, one per noisy cell (null elsewhere)."""
        if not 0 < alpha < 1:
            raise ValueError("alpha must be between 0 and 1")
        rows = self._table.num_rows
        columns = {}
        for name in self.columns:
            width = self._half_widths.get(name)
            values = width(alpha) if width else None
            columns[name] = values if values is not None else pa.nulls(rows, pa.float64())
        return pa.table(columns)

    def bounding(self) -> pa.Table:
        """Per noisy cell, how many (unit, group) cells bounding cut in its group (a noisy
        count, at least 0; each cut cell lost at least one row; null elsewhere)."""
        widths = self.accuracy()
        cut = self._cut()
        cuts = [None] * len(self) if cut is None else cut.tolist()
        return pa.table(
            {
                name: pa.array(
                    [
                        c if w is not None else None
                        for w, c in zip(widths.column(name).to_pylist(), cuts, strict=True)
                    ],
                    pa.float64(),
                )
                for name in self.columns
            }
        )

    def flags(self, alpha: float = 0.05) -> pa.Table:
        """Per noisy cell: True where its (1 - alpha) interval is not to be trusted, because
        bounding surely cut something (the cut count is above its own noise half-width) and,
        for a count of rows, at least FLAG_RATIO of the interval's width; the interval
        covers the noise, not that bias. False for other noisy cells, null elsewhere."""
        widths = self.accuracy(alpha)
        check = self._check
        cut = self._cut()
        columns = {}
        for name in self.columns:
            width = widths.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
            if check is None or cut is None:
                columns[name] = pa.array([None if np.isnan(w) else False for w in width])
                continue
            sure = cut > check.cut_width(alpha)
            large = cut >= FLAG_RATIO * width if name in check.counts else np.ones_like(sure)
            flagged = sure & large
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
        cut = self._cut()
        flagged = noisy = 0
        kept = lost = 0.0
        for name in self.columns:
            marks = flags.column(name).to_pylist()
            noisy += sum(m is not None for m in marks)
            flagged += sum(bool(m) for m in marks)
            if self._check is not None and cut is not None and name in self._check.counts:
                values = self._table.column(name).to_pylist()
                for mark, value, c in zip(marks, values, cut, strict=True):
                    if mark and value is not None:
                        kept, lost = kept + max(float(value), 0.0), lost + float(c)
        if not flagged:
            return None
        share = f" (≥ ~{100 * lost / (kept + lost):.0f}% of their rows)" if lost else ""
        return (
            f"⚠ bounding cut rows in {flagged} of {noisy} cells{share}; "
            "their intervals cover noise only"
        )

    def _cut(self) -> np.ndarray | None:
        if self._check is None:
            return None
        return np.maximum(self._check.cut, 0.0)

    def plot(
        self, columns: Any = None, *, by: Any = None, alpha: float = 0.05, ax: Any = None
    ) -> Any:
        """Draw the noisy values with their (1 - alpha) intervals (matplotlib); see privsql.plot."""
        from privsql.plot import plot

        return plot(self, columns, by=by, alpha=alpha, ax=ax)

    def __len__(self) -> int:
        return self._table.num_rows

    def __repr__(self) -> str:
        cost = "stored answer, no cost" if self.cached else f"ε = {self.epsilon:g}"
        warning = self.warning()
        note = f"\n{warning}" if warning else ""
        return f"{self._table.to_string(preview_cols=20)}\n({cost}){note}"
