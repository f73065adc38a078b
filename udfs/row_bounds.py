"""Missing SUM/AVG bounds from the rows' values, not only the units' extremes.

``udfs.magnitude_bounds`` places each side of a missing bound at the top of the bulk of the
units' *extremes*: honest (few units have a value beyond it) but wide, since one aircraft's
longest delay of a year is far above where its flights' delays lie. A sum or mean clamped
to [lo, hi] pays noise in proportion to the range, and bias only for the rows beyond it;
the bound that balances the two lies where the rows' values thin out (AKMV19 sec. 3's
balance for a cap, applied to a value instead of a row count).

This rule releases, after the extremes' histogram, a histogram of the rows' values over
the same magnitude bins, each unit's rows weighing 1 in all (a unit of k values gives each
1/k), and moves each side down from the extremes' bound to the magnitude that minimises
the estimated bias (the weight beyond it times its distance, read from the noisy
histogram, plus its noise's standard deviation) and the noise the release's range costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from udfs.laplace import laplace_release
from udfs.random import RandomSource
from udfs.threshold import EstimatedBounds, magnitude_histogram


def tightened_bounds(
    magnitudes: Sequence[float],
    extremes: EstimatedBounds,
    weight_above: Sequence[int],
    weight_below: Sequence[int],
    unit_weight: int,
    epsilon: float,
    release_epsilon: float,
    noise_factor: float,
    rng: RandomSource,
) -> EstimatedBounds:
    """A sum's or mean's bounds within ``extremes`` (:func:`udfs.magnitude_bounds`' (−L, U))
    from its rows' weighted values.

    ``weight_above[j]`` (``weight_below[j]``) is the total weight of the rows above
    ``magnitudes[j]`` (below its negative), a unit's rows weighing ``unit_weight``
    together. Their histogram over both sides' bins is released once with the discrete
    Laplace mechanism (sensitivity ``unit_weight``) at ε. Per side, with ŵ_b the noisy
    weight of bin (m_b, m_{b+1}] in units (negative counts taken as 0), the side's bound is
    the m_j ≤ U minimising B_j + sd(B_j) + F·m_j/ε_r, where B_j = Σ_{j ≤ b, m_{b+1} ≤ U}
    ŵ_b·(m_{b+1} − m_j) bounds the bias of clamping at m_j per row of a mean unit (each
    bin's rows at its top), sd(B_j) = √2/ε·√(Σ (m_{b+1} − m_j)²) is its noise's standard
    deviation, and F·m_j/ε_r is the Laplace scale that range adds to a release at
    ``release_epsilon`` (ε_r), F = ``noise_factor`` times a mean unit's rows (the cap,
    groups released and groups per unit multiply the noise of a range, not its bias).
    Adding one sd makes a tail the noise may hide count as there: where the histogram
    cannot show that the rows beyond m_j are few, the side stays wide (a clamp too tight
    biases the answer beyond its interval; one too wide only widens it). The bounds are
    ``guessed`` when the extremes' are.

    Privacy map: ε-DP (:func:`noisy_row_weights`); the choice is post-processing of its
    output, the extremes' bounds and public parameters.
    """
    total = Fraction(epsilon)
    noisy = noisy_row_weights(weight_above, weight_below, unit_weight, total, rng)
    return balanced_bounds(
        magnitudes, extremes, noisy, unit_weight, epsilon, release_epsilon, noise_factor
    )


def balanced_bounds(
    magnitudes: Sequence[float],
    extremes: EstimatedBounds,
    noisy: Sequence[int],
    unit_weight: int,
    epsilon: float,
    release_epsilon: float,
    noise_factor: float,
) -> EstimatedBounds:
    """The choice of :func:`tightened_bounds` from the released ``noisy`` row weights
    (:func:`noisy_row_weights` at ``epsilon``): post-processing."""
    total = Fraction(epsilon)
    bins = len(magnitudes) - 1
    deviation = math.sqrt(2) / total  # of one bin's noisy weight, in units
    low, high = (
        _balanced(
            magnitudes,
            outer,
            [max(0, n) / unit_weight for n in weights],
            deviation,
            Fraction(release_epsilon) / Fraction(noise_factor),
        )
        for outer, weights in ((-extremes.low, noisy[:bins]), (extremes.high, noisy[bins:]))
    )
    guessed = extremes.guessed or clamps_rows(magnitudes, noisy, unit_weight, total, low, high)
    return EstimatedBounds(0.0 - low, high, guessed, extremes.blind)


CLAMPED_SHARE = 0.02
"""Bounds are flagged when, beyond them, lie surely more than this share of the rows' weight."""

CLAMPED_DEVIATIONS = 1.5
"""The clamped weight counts as sure beyond this many standard deviations of its noise."""

CLAMPED_REACH = 2
"""How many magnitude bins beyond each bound (a factor 2²) the clamped weight is read over."""


def clamps_rows(
    magnitudes: Sequence[float],
    noisy: Sequence[int],
    unit_weight: int,
    epsilon: Fraction,
    low: float,
    high: float,
) -> bool:
    """Whether the bounds (−``low``, ``high``) surely clamp more than CLAMPED_SHARE of the
    rows' weight, read from the released ``noisy`` row weights (at ``epsilon``, the negative
    side's bins then the positive side's): the noisy weight of the CLAMPED_REACH bins beyond
    each bound, less CLAMPED_DEVIATIONS standard deviations of its noise, against that
    share of the noisy total (a side whose bound is 0 is not read). The bounds search
    places a bound at the top of the bulk of the units' extremes and may tighten it, never
    widen it: a minority of units whose values all lie beyond it (10% of the units holding
    half the rows) is clamped, and an interval that covers noise only would not say so.
    Post-processing of the released weights."""
    bins = len(magnitudes) - 1
    beyond = [
        noisy[side * bins + b]
        for side, bound in ((0, low), (1, high))
        if bound > 0  # a side at 0: its bins beyond are the magnitudes next to 0, not a reach
        for b in range(magnitudes.index(bound), min(bins, magnitudes.index(bound) + CLAMPED_REACH))
    ]
    spread = math.sqrt(2 * len(beyond)) / float(epsilon)
    clamped = sum(beyond) / unit_weight - CLAMPED_DEVIATIONS * spread
    return clamped > CLAMPED_SHARE * sum(noisy) / unit_weight


def noisy_row_weights(
    weight_above: Sequence[int],
    weight_below: Sequence[int],
    unit_weight: int,
    epsilon: Fraction,
    rng: RandomSource,
) -> list[int]:
    """The private part of :func:`tightened_bounds`: the weight of the rows per bin,
    the negative side's bins then the positive side's, with discrete Laplace noise.

    Privacy map: ε-DP when a unit's rows weigh at most ``unit_weight`` together (each row
    lies in one bin, so the histogram's L1 sensitivity is ``unit_weight``).
    """
    histogram = [*magnitude_histogram(weight_below), *magnitude_histogram(weight_above)]
    return laplace_release(histogram, unit_weight, epsilon, rng)


def _balanced(
    magnitudes: Sequence[float],
    outer: float,
    weights: Sequence[float],
    deviation: float,
    per_noise: Fraction,
) -> float:
    """The magnitude up to ``outer`` minimising the estimated bias, one standard deviation
    of its estimate and the noise (see :func:`tightened_bounds`); ``outer`` itself when it
    is 0. ``weights`` are the side's noisy bin weights in units, negative ones taken as 0;
    ``deviation`` one weight's noise's standard deviation; ``per_noise`` is ε_r/F, so a
    range's noise per row of a mean unit is its magnitude over it."""
    if outer <= 0:
        return outer
    limit = magnitudes.index(outer)
    tops = magnitudes[1 : limit + 1]

    def cost(j: int) -> float:
        clip = magnitudes[j]
        reaches = [top - clip for top in tops[j:]]
        bias = sum(w * r for w, r in zip(weights[j:limit], reaches, strict=True))
        spread = deviation * math.sqrt(sum(r * r for r in reaches))
        return bias + spread + clip / float(per_noise)

    return magnitudes[min(range(1, limit + 1), key=cost)]


SPREAD_PARTS = 3
"""A spread is released from three noisy sums (of x, of x² and the count), a third of its ε
each (``rewriter.plan``)."""

BIAS_FLAG = 1.0
"""A spread's bounds are flagged when the bound on the bias of clamping to them exceeds this
many standard deviations of the release's noise (about half its 95% half-width)."""


def spread_bounds(
    magnitudes: Sequence[float],
    extremes: EstimatedBounds,
    noisy: Sequence[int],
    unit_weight: int,
    epsilon: float,
    release_epsilon: float,
    noise_factor: float,
) -> EstimatedBounds:
    """A variance's or standard deviation's bounds within ``extremes`` from the released
    ``noisy`` row weights (:func:`noisy_row_weights` at ``epsilon``, the negative side's
    bins then the positive side's, a unit's rows weighing ``unit_weight``).

    A spread is computed from noisy sums of x and x² (and a count), so the noise of a range
    R grows as R², where a mean's grows as R: the bounds good for a mean are far too wide
    for it. Each bin's rows are placed at its top (negative noisy weights read as 0; only
    the bins within ``extremes``), giving a weighted distribution of W units. For every
    pair (−L, U) of magnitudes within ``extremes`` (both sides at once: the centre
    (U − L)/2 matters) the rule estimates

    * the bias ``B = V − V_c``, V the distribution's variance and V_c that of its values
      clamped to [−L, U] (clamping is 1-Lipschitz, so V_c ≤ V: the bias is always
      downwards), and ``sd(B)``, its noise's standard deviation (linear in the bins'
      noise: ∂B/∂w_b = ((t_b − μ)² − (g_b − μ_c)² − B)/W, each bin's noise of standard
      deviation √2/ε units);
    * the standard deviation of the release's noise, linearised around the clamped
      distribution: with y = g − (U − L)/2, ȳ its mean, s₂ = mean(y²) − R²/8 and the three
      sums' Laplace scales k·m·R/2, k·m·R²/8 and k·m at ``release_epsilon``/3 over N rows,
      ``√2·3F/(ε_r·W)·√((R²/8)² + (ȳ·R)² + (2ȳ² − s₂)²)``, with k·m/N ≈ F/W
      (F = ``noise_factor``: the cap, groups released and groups per unit per row of a
      mean unit, as for :func:`tightened_bounds`),

    and takes the pair minimising ``B + sd(B) + sd(noise)``: like a mean's rule, a tail
    the noise of the histogram may hide counts as there. The bounds are ``guessed`` (so
    every output computed from them is flagged) when the extremes' are, or when the bias
    bound ``B + sd(B)`` at the chosen pair exceeds BIAS_FLAG standard deviations of the
    release's noise: the interval covers the noise, not that bias. They are ``blind`` (the
    answer withheld) when the extremes' are, or when that bias bound reaches (R/2)², the
    largest variance of any values within the pair: the answer would say nothing of the
    rows' spread.

    Privacy map: post-processing of the released ``noisy`` weights, the extremes' bounds
    and public parameters (no ε of its own).
    """
    bins = len(magnitudes) - 1
    tops = np.asarray(magnitudes[1:], dtype=np.float64)
    limits = [magnitudes.index(-extremes.low), magnitudes.index(extremes.high)]
    weights = np.asarray([max(0, n) for n in noisy], dtype=np.float64) / unit_weight
    values = np.concatenate([-tops[: limits[0]], tops[: limits[1]]])
    mass = np.concatenate([weights[: limits[0]], weights[bins : bins + limits[1]]])
    units = float(mass.sum())
    if units <= 0:
        return extremes
    lows = [0.0] if not limits[0] else [magnitudes[i] for i in range(1, limits[0] + 1)]
    highs = [0.0] if not limits[1] else [magnitudes[j] for j in range(1, limits[1] + 1)]
    pairs = np.asarray([(low, high) for low in lows for high in highs if low + high > 0])
    if not len(pairs):
        return extremes
    low, high = pairs[:, :1], pairs[:, 1:]
    share = mass / units

    mean = float(values @ share)
    variance = float(((values - mean) ** 2) @ share)
    clamped = np.clip(values[None, :], -low, high)
    mean_c = clamped @ share
    deviations = (clamped - mean_c[:, None]) ** 2
    variance_c = deviations @ share
    bias = variance - variance_c
    slopes = ((values - mean) ** 2 - deviations - bias[:, None]) / units
    bias_sd = math.sqrt(2) / float(epsilon) * np.sqrt((slopes**2).sum(axis=1))
    width = (low + high)[:, 0]
    centre = (high - low)[:, 0] / 2
    offset = mean_c - centre
    squares = ((clamped - centre[:, None]) ** 2) @ share - width**2 / 8
    scale = math.sqrt(2) * SPREAD_PARTS * noise_factor / (float(release_epsilon) * units)
    noise = scale * np.sqrt(
        (width**2 / 8) ** 2 + (offset * width) ** 2 + (2 * offset**2 - squares) ** 2
    )
    bound = bias + bias_sd
    best = int(np.argmin(bound + noise))
    guessed = extremes.guessed or bool(bound[best] > BIAS_FLAG * noise[best])
    # The bias bound reaches the most any variance within the bounds can be: the value says
    # nothing of the rows' spread (a (−0.001, 0) pair at ε = 0.1 gave 0.00000087 for 1 600).
    blind = extremes.blind or bool(bound[best] >= width[best] ** 2 / 4)
    return EstimatedBounds(0.0 - float(low[best, 0]), float(high[best, 0]), guessed, blind)
