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
    return EstimatedBounds(0.0 - low, high, extremes.guessed)


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
