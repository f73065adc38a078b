"""Answers: a released table that reads like a DuckDB result, with its cost and accuracy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

HalfWidth = Callable[[float], pa.Array | None]
"""Per output column: alpha -> the (1 - alpha) interval half-width of each cell, or None."""


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
    ) -> None:
        self._table = table
        self.epsilon = epsilon
        self.delta = delta
        self.cached = cached
        self._half_widths = dict(half_widths or {})

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
        return f"{self._table.to_string(preview_cols=20)}\n({cost})"
