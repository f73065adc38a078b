"""Private quantiles from a bucketed summary, selected with permute-and-flip.

Input (computed by DuckDB per group, from public parameters only): the column clamped to
the public range [low, high] and cut into G equal-width buckets, bucket b covering
[low + b*w, low + (b+1)*w), w = (high - low)/G (the top bucket also holds ``high``), giving
the exact number of values ``counts[b]`` in each bucket -- or, for the weighted variant,
the exact total weight per bucket.

Mechanism. For the quantile p in [0, 1] and n the total, bucket b gets the score

    u_b = -dist(p * n, [below_b, below_b + counts_b]),   below_b = sum_{i < b} counts_i,

the distance from the target rank to the nearest rank the bucket holds (exact rationals;
``Fraction(p)`` is the float's exact value). It is the exponential mechanism's quantile
utility -|rank - p*n| of Smith (STOC 2011) and Chaudhuri & Hsu (ICML 2012, sec. 5.2;
"CH12") taken over equal-width buckets, with EMMMR20's weighted rank (Appendix B,
Algorithm 4) when counts are weights. The buckets tile the ranks [0, n], so the best score
is 0 and a score >= -s means the bucket holds a rank within s of p*n. A bucket is selected
by :func:`udfs.selection.permute_and_flip`, and the released value is a uniform point of
that bucket, low + (b + U) * w with U from 53 random bits.

Privacy map (OpenDP style). If one privacy unit adds or removes at most ``rows`` values in
this group (or, weighted, values of total weight at most ``unit_weight`` = h), each value
moves below_b - p*n and p*n - below_b - counts_b by 1 - p or p, so, dist being
1-Lipschitz in both, every score moves by at most
Delta = rows * max(p, 1 - p) (resp. h * max(p, 1 - p)), and the selection is eps-DP by
PF's privacy map. Drawing the point inside the bucket uses only public parameters and
fresh randomness: post-processing. So ``private_quantile`` is eps-DP (pure) for one group.

Everything up to the choice of the bucket is exact integer arithmetic (no float, exp or
log); only the final point is rounded to a float, after the private choice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from numbers import Rational, Real

import numpy as np

from udfs.discrete_laplace import _check_epsilon, _check_sensitivity, exact_real, positive_real
from udfs.laplace import laplace_halfwidth, laplace_release
from udfs.random import RandomSource
from udfs.selection import _as_fraction, _exact_rational, _permute_and_flip_gaps
from udfs.weakening import noise_epsilon

__all__ = [
    "INTERVAL_ALPHA",
    "private_quantile",
    "private_quantile_interval",
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
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu" and values.ndim == 1:
        if values.size and values.min() < 0:
            raise ValueError("counts must be >= 0")
        if not values.size:
            raise ValueError("need at least one bucket")
        return values.tolist()
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


class _Ranks:
    """A histogram's rank intervals: bucket b holds the ranks [below_b, below_b + counts_b].

    Prefix sums are exact (int64 while the total is far from overflowing, Python ints
    beyond). Distances are computed per bucket on demand, as exact integers scaled by p's
    denominator, so PF pays only for the candidates it visits.
    """

    def __init__(self, masses: Sequence[int]) -> None:
        self.total = sum(masses)
        counts = np.asarray(masses, dtype=np.int64 if self.total < 2**62 else object)
        self.upper = np.cumsum(counts)
        self.below = self.upper - counts

    def __len__(self) -> int:
        return len(self.upper)

    def gaps(self, p: Fraction, shift: int = 0) -> Callable[[int], int]:
        """d * (dist(t, bucket b) - min over buckets) for t = p*n + shift, p = a/d.

        With d*t = q*d + r (0 <= r < d): ranks above t start at below_b >= q + 1, where
        d * dist = d*(below_b - q) - r; ranks below t end at upper_b <= q, where
        d * dist = d*(q - upper_b) + r. The buckets tile [0, n], so the smallest distance
        is t's distance to [0, n].
        """
        a, d = p.numerator, p.denominator
        target = a * self.total + d * shift
        q, r = divmod(target, d)
        nearest = max(0, -target, target - d * self.total)
        below, upper = self.below, self.upper

        def gap(b: int) -> int:
            above = int(below[b]) - q
            if above >= 1:
                return d * above - r - nearest
            under = q - int(upper[b])
            return (d * under + r if under >= 0 else 0) - nearest

        return gap


def quantile_scores(counts: Sequence[Fraction | int], p: float) -> list[Fraction]:
    """The exact scores u_b = -dist(p*n, [below_b, below_b + counts_b]) of every bucket b.

    ``counts`` are exact non-negative ints (or Fractions, for weights); ``p`` in [0, 1].
    """
    prob = _check_p(p)
    masses, common = _common_scale(_exact_masses(counts, "count"))
    gap = _Ranks(masses).gaps(prob)
    scale = prob.denominator * common
    return [Fraction(-gap(b), scale) for b in range(len(masses))]


def quantile_sensitivity(p: float, unit_weight: Fraction | int) -> Fraction:
    """Delta = unit_weight * max(p, 1 - p): the bound on how far any score can move.

    ``unit_weight`` is ``rows`` (values one unit adds to or removes from the group) for
    :func:`private_quantile`, or h (one unit's total weight) for the weighted variant.
    """
    prob = _check_p(p)
    return positive_real(unit_weight, "unit_weight") * max(prob, 1 - prob)


def _private_bucket(
    ranks: _Ranks, unit_mass: int, prob: Fraction, eps: Fraction, rng: RandomSource, shift: int = 0
) -> int:
    """PF's bucket for the target rank p*n + shift (masses, unit_mass, shift on one scale L).

    With p = a/d the true score gap is g_b / (d L) and Delta = unit_mass * m / (d L),
    m = max(a, d - a), so PF's exponent eps * gap / (2 Delta) is
    g_b * eps / (2 * unit_mass * m): the scale factors cancel. A constant shift
    leaves every score's sensitivity as it is.
    """
    a, d = prob.numerator, prob.denominator
    scale = noise_epsilon(eps) / (2 * unit_mass * max(a, d - a))
    gap = ranks.gaps(prob, shift)
    return _permute_and_flip_gaps(len(ranks), gap, scale.numerator, scale.denominator, rng)


def _point(bucket: int, buckets: int, lo: Fraction, hi: Fraction, rng: RandomSource) -> float:
    """Post-processing: a uniform point of the chosen bucket, computed exactly and rounded
    once, so it lies in [lo, hi] (rounding is monotone and lo, hi are floats)."""
    offset = Fraction(bucket * 2**_UNIFORM_BITS + rng.randbits(_UNIFORM_BITS), 2**_UNIFORM_BITS)
    return float(lo + offset * (hi - lo) / buckets)


def _edge(index: int, buckets: int, lo: Fraction, hi: Fraction, *, down: bool) -> float:
    """lo + index * (hi - lo) / G as a float rounded outwards (``down`` for a lower end)."""
    exact = lo + index * (hi - lo) / buckets
    rounded = float(exact)
    if down and Fraction(rounded) > exact:
        rounded = math.nextafter(rounded, -math.inf)
    elif not down and Fraction(rounded) < exact:
        rounded = math.nextafter(rounded, math.inf)
    return min(max(rounded, float(lo)), float(hi))


def _private_bucket_point(
    masses: list[int],
    unit_mass: int,
    prob: Fraction,
    lo: Fraction,
    hi: Fraction,
    eps: Fraction,
    rng: RandomSource,
) -> float:
    """The eps-DP point: a uniform point of PF's bucket (``lo`` when the range is one value)."""
    if lo == hi:
        return float(lo)
    bucket = _private_bucket(_Ranks(masses), unit_mass, prob, eps, rng)
    return _point(bucket, len(masses), lo, hi, rng)


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


INTERVAL_ALPHA = 0.05
"""The interval released with a quantile holds with probability at least 1 - INTERVAL_ALPHA."""


def private_quantile_interval(
    counts: Sequence[int],
    p: float,
    low: float,
    high: float,
    epsilon: float,
    interval_epsilon: float,
    rows: int,
    rng: RandomSource,
) -> tuple[float, float, float]:
    """An eps-DP p-quantile, as :func:`private_quantile`, and an interval around it.

    Returns (point, lower, upper). With probability at least 1 - INTERVAL_ALPHA both the
    point and the exact p-quantile of the counted values lie in [lower, upper].

    Mechanism. ``interval_epsilon`` is split in thirds: a noisy total n~ = n + DLap, and two
    brackets -- PF over the same buckets for the target ranks p*n -+ k, where
    k = ceil(s_point + s_bracket) + rows + 1 and each s is :func:`rank_error_bound` at
    INTERVAL_ALPHA / 4. ``lower`` is the chosen lower bracket bucket's lower edge, or ``low``
    unless n~ shows (with probability 1 - INTERVAL_ALPHA / 4) that p*n >= k; ``upper``
    likewise. A constant shift of the target leaves each score's sensitivity at
    rows * max(p, 1 - p), so the privacy map is epsilon + interval_epsilon (sequential
    composition; the rest is post-processing).

    Why it covers. When every draw is within its bound, the point's bucket b has
    below_b + counts_b >= p*n - s_point, and the lower bracket's bucket b' has
    below_b' <= p*n - k + s_bracket (its target is >= 0, so its best score is 0); b' above b
    would need below_b' >= below_b + counts_b, i.e. k <= s_point + s_bracket, and b' above
    the exact quantile's bucket would need k <= s_bracket + 1 row. The four bounds fail
    together with probability at most INTERVAL_ALPHA (union bound). docs/privacy.md, 3.6.
    """
    prob = _check_p(p)
    lo, hi = _check_range(low, high)
    eps = _check_epsilon(epsilon)
    third = _check_epsilon(interval_epsilon) / 3
    unit = _check_sensitivity(rows, "rows")
    masses = _exact_counts(counts)
    if lo == hi:
        return float(lo), float(lo), float(hi)
    buckets = len(masses)
    alpha = INTERVAL_ALPHA / 4
    sensitivity = quantile_sensitivity(prob, unit)
    reach = rank_error_bound(buckets, eps, sensitivity, alpha)
    reach += rank_error_bound(buckets, third, sensitivity, alpha)
    k = math.ceil(reach) + unit + 1
    ranks = _Ranks(masses)
    point = _point(_private_bucket(ranks, unit, prob, eps, rng), buckets, lo, hi, rng)
    below = _private_bucket(ranks, unit, prob, third, rng, shift=-k)
    above = _private_bucket(ranks, unit, prob, third, rng, shift=k)
    (total,) = laplace_release([sum(masses)], unit, third, rng)
    floor = total - laplace_halfwidth(unit, third, alpha)
    lower = _edge(below, buckets, lo, hi, down=True) if prob * floor >= k else float(lo)
    upper = _edge(above + 1, buckets, lo, hi, down=False) if (1 - prob) * floor >= k else float(hi)
    return point, min(lower, point), max(upper, point)


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
