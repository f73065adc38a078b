"""v(h)'s bias term from the units' means clamped to a window (``udfs/unit_means.py``): the
window the noisy bins place, and the clamped sums' exact values before noise."""

from __future__ import annotations

from fractions import Fraction

import pytest

import udfs
from rewriter.plan import MEAN_BINS, mean_bin_width

EXACT = Fraction(10**9)
"""An ε at which the discrete Laplace noise is 0 with overwhelming probability."""


def histogram(means_by_bucket: list[list[int]], bound: int) -> udfs.MeanHistogram:
    """The histogram ``rewriter.generate.mean_histogram`` folds from per-unit means (grid
    units), given per size bucket."""
    width = mean_bin_width(bound)
    units = [0] * (len(means_by_bucket) * MEAN_BINS)
    totals = list(units)
    for bucket, means in enumerate(means_by_bucket):
        for mean in means:
            cell = bucket * MEAN_BINS + min((mean + bound) // width, MEAN_BINS - 1)
            units[cell] += 1
            totals[cell] += mean
    return udfs.MeanHistogram(units, totals, bound, width, MEAN_BINS)


def test_the_window_holds_the_bulk_and_widens_with_its_spread():
    narrow = [0] * MEAN_BINS
    narrow[5] = 4000
    assert udfs.mean_window(narrow, Fraction(1, 50)) == (4, 7)  # the median's bin, ±1
    spread = [0] * MEAN_BINS
    for k in range(4, 12):
        spread[k] = 500  # quartiles 2 bins from the median: ±(1 + 2·2) bins
    assert udfs.mean_window(spread, Fraction(1, 50)) == (2, 13)


def test_the_window_is_the_whole_range_where_the_noise_could_place_it():
    few = [0] * MEAN_BINS
    few[5] = 200  # under 4 × √16 × √2/ε = 1131 units at ε = 1/50
    assert udfs.mean_window(few, Fraction(1, 50)) == (0, MEAN_BINS)


@pytest.mark.parametrize("window", [(0, MEAN_BINS), (3, 6), (7, 8)])
def test_clamped_sums_are_each_units_clamped_mean_less_the_centre_doubled(window):
    bound = 1000
    means = [[-1000, -400, -130, 7, 999], [-260, 250, 1000], [], [13, 14, -700]]
    found = udfs.clamped_mean_sums(histogram(means, bound), window, EXACT, udfs.SystemRandom())
    width = mean_bin_width(bound)
    low, high = -bound + window[0] * width, -bound + window[1] * width
    assert found.reach == high - low
    expected = [sum(2 * min(max(m, low), high) - (low + high) for m in bucket) for bucket in means]
    assert found.sums == expected
    assert all(abs(s) <= found.reach * len(b) for s, b in zip(found.sums, means, strict=True))
