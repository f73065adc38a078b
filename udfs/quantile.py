"""Private quantiles from a bucketed summary, selected with permute-and-flip.

Input (computed by DuckDB per group, from public parameters only): the column clamped to
the public range [low, high] and cut into G equal-width buckets, bucket b covering
[low + b*w, low + (b+1)*w), w = (high - low)/G (the top bucket also holds ``high``), giving
the exact number of values ``counts[b]`` in each bucket -- or, for the weighted variant,
the exact total weight per bucket.

Mechanism. For the quantile p in [0, 1], bucket b gets the score

    u_b = -| (1 - p) * below_b - p * above_b |,
    below_b = sum_{i < b} counts_i,   above_b = sum_{i > b} counts_i,

(exact rationals; ``Fraction(p)`` is the float's exact value). It is the exponential
mechanism's quantile utility of Smith (STOC 2011) and Chaudhuri & Hsu (ICML 2012, sec. 5.2;
"CH12"), with EMMMR20's weighted rank (Appendix B, Algorithm 4) when counts are weights:
the best buckets are those where a p-fraction of the mass lies below and a (1-p)-fraction
above. A bucket is selected by :func:`udfs.selection.permute_and_flip`, and the released
value is a uniform point of that bucket, low + (b + U) * w with U from 53 random bits.

Privacy map (OpenDP style). If one privacy unit adds or removes at most ``rows`` values in
this group (or, weighted, values of total weight at most ``unit_weight`` = h), a value
added in bucket j changes below_b (j < b) or above_b (j > b) by one, and so u_b by at most
max(p, 1 - p); hence every score moves by at most Delta = rows * max(p, 1 - p) (resp.
h * max(p, 1 - p)), and the selection is eps-DP by PF's privacy map. Drawing the point
inside the bucket uses only public parameters and fresh randomness: post-processing.
So ``private_quantile`` is eps-DP (pure) for one group.

Everything up to the choice of the bucket is exact integer arithmetic (no float, exp or
log); only the final point is rounded to a float, after the private choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from numbers import Rational, Real

from udfs.discrete_laplace import _check_epsilon, _check_sensitivity, exact_real, positive_real
from udfs.random import RandomSource
from udfs.selection import (
    _as_fraction,
    _exact_rational,
    _permute_and_flip_integers,
)
from udfs.weakening import noise_epsilon

__all__ = [
    "private_quantile",
    "private_weighted_quantile",
    "quantile_scores",
    "quantile_sensitivity",
    "rank_error_bound",
]

_UNIFORM_BITS = 53


def _check_p(p: object) -> Fraction:
    """The quantile as an exact Fraction in [0, 1] (floats convert exactly)."""
    value = exact_real(p, "p", "in [0, 1]")
    if not 0 <= value <= 1:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    return value


def _check_range(low: object, high: object) -> tuple[Fraction, Fraction]:
    """The public range [low, high] as exact Fractions; finite floats/ints, low <= high."""
    out = []
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, Real):
            raise TypeError(f"{name} must be a real number, got {value!r}")
        try:
            as_float = float(value)
        except OverflowError:
            as_float = math.inf
        if not math.isfinite(as_float):
            raise ValueError(f"{name} must be a finite float, got {value!r}")
        if isinstance(value, Rational):
            out.append(_as_fraction(value))
        else:
            out.append(Fraction(as_float))
    lo, hi = out
    if lo > hi:
        raise ValueError(f"low must be <= high, got low={low!r}, high={high!r}")
    return lo, hi


def _exact_masses(values: Sequence[object], name: str) -> list[Fraction]:
    """Validate per-bucket masses: at least one bucket, exact (int/Fraction) and >= 0."""
    exact = [_exact_rational(v, name) for v in values]
    if not exact:
        raise ValueError("need at least one bucket")
    if any(v < 0 for v in exact):
        raise ValueError(f"{name}s must be >= 0")
    return exact


def _exact_counts(values: Sequence[int]) -> list[int]:
    """Validate integer bucket counts (ints, numpy ints or integral Fractions; >= 0).

    A fast path for plain ints (and numpy arrays, through ``tolist``) keeps validation of
    G = 4096 buckets well below the cost of the selection itself.
    """
    tolist = getattr(values, "tolist", None)
    seq = tolist() if callable(tolist) else values
    out = []
    for v in seq:
        if type(v) is not int:
            exact = _exact_rational(v, "count")
            if exact.denominator != 1:
                raise TypeError("counts must be integers; use private_weighted_quantile")
            v = exact.numerator
        out.append(v)
    if not out:
        raise ValueError("need at least one bucket")
    if min(out) < 0:
        raise ValueError("counts must be >= 0")
    return out


def _common_scale(values: Sequence[Fraction]) -> tuple[list[int], int]:
    """Exact rationals on a common integer scale: returns ([v * L for v], L)."""
    common = math.lcm(*(v.denominator for v in values))
    return [v.numerator * (common // v.denominator) for v in values], common


def _scaled_scores(masses: Sequence[int], p: Fraction) -> list[int]:
    """Integer scores S_b = d * u_b with p = a/d: S_b = -|(d - a)*below_b - a*above_b|."""
    a, d = p.numerator, p.denominator
    total = sum(masses)
    scores = []
    below = 0
    for mass in masses:
        above = total - below - mass
        scores.append(-abs((d - a) * below - a * above))
        below += mass
    return scores


def quantile_scores(counts: Sequence[Fraction | int], p: float) -> list[Fraction]:
    """The exact scores u_b = -|(1 - p) * below_b - p * above_b| of every bucket b.

    ``counts`` are exact non-negative ints (or Fractions, for weights); ``p`` in [0, 1].
    """
    prob = _check_p(p)
    masses, common = _common_scale(_exact_masses(counts, "count"))
    scale = prob.denominator * common
    return [Fraction(s, scale) for s in _scaled_scores(masses, prob)]


def quantile_sensitivity(p: float, unit_weight: Fraction | int) -> Fraction:
    """Delta = unit_weight * max(p, 1 - p): the bound on how far any score can move.

    ``unit_weight`` is ``rows`` (values one unit adds to or removes from the group) for
    :func:`private_quantile`, or h (one unit's total weight) for the weighted variant.
    """
    prob = _check_p(p)
    return positive_real(unit_weight, "unit_weight") * max(prob, 1 - prob)


def _private_bucket_point(
    masses: list[int],
    unit_mass: int,
    prob: Fraction,
    lo: Fraction,
    hi: Fraction,
    eps: Fraction,
    rng: RandomSource,
) -> float:
    """Shared core: masses and the unit's mass bound are on the same integer scale L.

    With p = a/d the true score is u_b = S_b / (d L) and Delta = unit_mass * m / (d L),
    m = max(a, d - a), so PF's exponent eps * (u* - u_b) / (2 Delta) is
    (S* - S_b) * eps / (2 * unit_mass * m): the scale factors cancel.
    """
    if lo == hi:
        return float(lo)
    a, d = prob.numerator, prob.denominator
    scale = noise_epsilon(eps) / (2 * unit_mass * max(a, d - a))
    bucket = _permute_and_flip_integers(
        _scaled_scores(masses, prob), scale.numerator, scale.denominator, rng
    )
    # Post-processing: a uniform point of the chosen bucket, computed exactly and rounded
    # once, so it lies in [lo, hi] (rounding is monotone and lo, hi are floats).
    offset = Fraction(bucket * 2**_UNIFORM_BITS + rng.randbits(_UNIFORM_BITS), 2**_UNIFORM_BITS)
    return float(lo + offset * (hi - lo) / len(masses))


def private_quantile(
    counts: Sequence[int],
    p: float,
    low: float,
    high: float,
    epsilon: float,
    rows: int,
    rng: RandomSource,
) -> float:
    """An eps-DP p-quantile of one group from its bucket counts over [low, high].

    ``counts[b]`` is the exact number of the group's values (clamped to [low, high]) in
    bucket b of G = len(counts) equal-width buckets. Privacy map: eps-DP when one privacy
    unit adds or removes at most ``rows`` values in this group (Delta = rows * max(p, 1-p)).
    ``low``, ``high``, G, ``p``, ``epsilon`` and ``rows`` must be public.

    Returns a float in [low, high], uniform inside the selected bucket. Edge cases, all
    data-independent: an empty group (all counts 0) gives equal scores and so a uniform
    bucket; p = 0 and p = 1 are allowed (every bucket at or below the lowest non-empty one,
    resp. at or above the highest, scores best); ``low == high`` returns ``low`` without
    drawing. Raises ``ValueError``/``TypeError`` for p outside [0, 1], epsilon not finite
    and > 0, rows < 1, no buckets, negative or non-integer counts, or a bad range.
    """
    prob = _check_p(p)
    lo, hi = _check_range(low, high)
    eps = _check_epsilon(epsilon)
    unit = _check_sensitivity(rows, "rows")
    return _private_bucket_point(_exact_counts(counts), unit, prob, lo, hi, eps, rng)


def private_weighted_quantile(
    weights: Sequence[Fraction | int],
    p: float,
    low: float,
    high: float,
    epsilon: float,
    unit_weight: Fraction | int,
    rng: RandomSource,
) -> float:
    """An eps-DP weighted p-quantile (EMMMR20 Algorithm 4) from per-bucket total weights.

    ``weights[b]`` is the exact total weight (int or Fraction, >= 0; floats are refused) of
    the group's values in bucket b. Privacy map: eps-DP when adding or removing one privacy
    unit changes the weights by at most ``unit_weight`` = h in total (L1), i.e.
    Delta = h * max(p, 1 - p). The weights of one unit's rows must depend on that unit's
    rows only (e.g. 1/min(n_u, cap) each, so h = 1) -- never on a data-dependent
    normaliser such as the group's total. Same edge cases as :func:`private_quantile`.
    """
    prob = _check_p(p)
    lo, hi = _check_range(low, high)
    eps = _check_epsilon(epsilon)
    h = positive_real(unit_weight, "unit_weight")
    # Weights and h on one integer scale L (the scores' common factor L cancels in PF).
    masses, _ = _common_scale([*_exact_masses(weights, "weight"), h])
    unit = masses.pop()
    return _private_bucket_point(masses, unit, prob, lo, hi, eps, rng)


def rank_error_bound(
    buckets: int, epsilon: float, sensitivity: Fraction | int, alpha: float
) -> float:
    """With probability >= 1 - alpha, PF's chosen score is >= u* - this bound.

    Bound: 2 * Delta * (ln G + ln(1/alpha)) / eps. Proof: PF outputs candidate i only if
    i's own coin, of probability exp(-eps * gap_i / (2 Delta)), succeeds, so
    P(output i) <= exp(-eps * gap_i / (2 Delta)); a union bound over the <= G candidates with
    gap_i >= t gives G * exp(-eps * t / (2 Delta)) = alpha at the stated t.

    For the quantile scores this is in ranks (numbers of values, or weight): a bucket whose
    score is >= -s satisfies below_b <= p*n + s and below_b + counts_b >= p*n - s, n the
    total. Public parameters only; costs no privacy.
    """
    g = _check_sensitivity(buckets, "buckets")
    eps = _check_epsilon(epsilon)
    delta = positive_real(sensitivity, "sensitivity")
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return 2.0 * float(delta) * (math.log(g) - math.log(float(alpha))) / float(eps)
