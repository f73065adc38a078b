"""``Result.plot()``: noisy values with their noise intervals, drawn with matplotlib.

Each noisy column gets its own panel (their scales differ); each row is a bar (a point
when there are many rows) labelled by the row's other columns (its group keys), with an
error bar spanning the (1 - alpha) interval. Needs ``pip install "privsql[plot]"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from privsql.result import Result

MANY_ROWS = 25
"""Above this many rows, points with error bars replace bars."""


def width_of(axis: Any) -> float:
    """The width of an Axes in inches."""
    return axis.get_position().width * axis.figure.get_figwidth()


def noisy_columns(result: Result, alpha: float) -> list[str]:
    """The result's columns with intervals (``Result.noisy_columns``)."""
    return result.noisy_columns(alpha)


def plot(
    result: Result,
    columns: str | Sequence[str] | None = None,
    *,
    by: str | Sequence[str] | None = None,
    alpha: float = 0.05,
    ax: Any = None,
) -> Any:
    """Draw ``columns`` (default: every column with an interval) against the labels ``by``.

    ``by`` defaults to the result's other columns, joined per row ("EWR · 1"). Returns the
    matplotlib Axes (a list of them for several columns). Cells without an interval are
    drawn without an error bar.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError('Result.plot() needs matplotlib: pip install "privsql[plot]"') from error
    if not 0 < alpha < 1:
        raise ValueError("alpha must be between 0 and 1")
    names = result.columns
    selected = [columns] if isinstance(columns, str) else list(columns or [])
    selected = selected or noisy_columns(result, alpha)
    if not selected:
        raise ValueError("the result has no noisy column to plot; name one with columns=")
    for name in selected:
        if name not in names:
            raise ValueError(f"{name} is not a column of the result")
    labels_from = [by] if isinstance(by, str) else list(by or [])
    labels_from = labels_from or [n for n in names if n not in selected]
    table = result.arrow()
    widths = result.accuracy(alpha)
    rows = table.num_rows
    label_values = [table.column(n).to_pylist() for n in labels_from]
    labels = [" · ".join(str(v[i]) for v in label_values) or "all" for i in range(rows)]
    if not labels_from:
        labels = ["all"] if rows == 1 else [str(i + 1) for i in range(rows)]

    if ax is None:
        width = min(max(4.0, 0.45 * rows + 2.0), 14.0)
        figure, axes = plt.subplots(
            1, len(selected), figsize=(width * len(selected), 3.8), squeeze=False
        )
        axes = list(axes[0])
    else:
        axes = list(ax) if isinstance(ax, list | tuple) or getattr(ax, "ndim", 0) else [ax]
        if len(axes) != len(selected):
            raise ValueError(f"give one Axes per plotted column ({len(selected)})")
        figure = axes[0].figure
    positions = list(range(rows))
    level = f"{1 - alpha:.0%}"
    for axis, name in zip(axes, selected, strict=True):
        values = [float("nan") if v is None else float(v) for v in table.column(name).to_pylist()]
        half = [0.0 if w is None else float(w) for w in widths.column(name).to_pylist()]
        has_interval = any(half)
        if rows > MANY_ROWS:
            axis.errorbar(
                positions,
                values,
                yerr=half if has_interval else None,
                fmt="o",
                markersize=3,
                capsize=2,
                color="C0",
                ecolor="0.35",
                elinewidth=1,
            )
        else:
            axis.bar(positions, values, color="C0", alpha=0.75, width=0.7)
            if has_interval:
                axis.errorbar(
                    positions,
                    values,
                    yerr=half,
                    fmt="none",
                    capsize=4,
                    ecolor="0.2",
                    elinewidth=1.2,
                )
        crowded = sum(len(label) + 2 for label in labels) > 10 * width_of(axis)
        axis.set_xticks(
            positions, labels, rotation=45 if crowded else 0, ha="right" if crowded else "center"
        )
        if rows > 2 * MANY_ROWS:
            step = max(1, rows // MANY_ROWS)
            for i, tick in enumerate(axis.get_xticklabels()):
                tick.set_visible(i % step == 0)
        axis.set_title(f"{name}" + (f"  (± {level} noise interval)" if has_interval else ""))
        axis.axhline(0, color="0.6", linewidth=0.8)
        axis.grid(axis="y", alpha=0.3)
        if labels_from:
            axis.set_xlabel(" · ".join(labels_from))
    cost = "stored answer, no cost" if result.cached else f"ε = {result.epsilon:g}"
    figure.suptitle(f"privsql result ({cost})", fontsize=10, color="0.3")
    figure.tight_layout()
    return axes[0] if len(axes) == 1 else axes
