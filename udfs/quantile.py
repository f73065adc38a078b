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

The interval released with the point (:func:`private_quantile_interval`) reaches from
the point's bucket by a number of buckets chosen by one more PF over a public geometric
ladder, scored by how far the ranks the interval keeps beyond p*n on either side are from a
margin K that PF's union bound guarantees: (eps + interval_eps)-DP, covering the exact
quantile with probability >= 1 - INTERVAL_ALPHA (docs/privacy.md, B.3).

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
from udfs.random import RandomSource
from udfs.selection import _as_fraction, _exact_rational, _permute_and_flip_gaps
from udfs.weakening import noise_epsilon

__all__ = [
    "INTERVAL_ALPHA",
    "RUNGS_PER_DOUBLING",
    "interval_margin",
    "private_quantile",
    "private_quantile_interval",
    "private_weighted_quantile",
    "quantile_scores",
    "quantile_sensitivity",
    "rank_error_bound",
    "reach_ladder",
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

    def gaps(self, p: Fraction) -> Callable[[int], int]:
        """d * (dist(p*n, bucket b) - min over buckets), p = a/d.

        With a*n = q*d + r (0 <= r < d): ranks above p*n start at below_b >= q + 1, where
        d * dist = d*(below_b - q) - r; ranks below p*n end at upper_b <= q, where
        d * dist = d*(q - upper_b) + r. The buckets tile [0, n] and p*n lies in it, so the
        smallest distance is 0.
        """
        a, d = p.numerator, p.denominator
        q, r = divmod(a * self.total, d)
        below, upper = self.below, self.upper

        def gap(b: int) -> int:
            above = int(below[b]) - q
            if above >= 1:
                return d * above - r
            under = q - int(upper[b])
            return d * under + r if under >= 0 else 0

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


def _pf_scale(prob: Fraction, unit_mass: int, eps: Fraction) -> tuple[int, int]:
    """PF's exponent per unit of scaled gap, as (numerator, denominator).

    Gaps are scaled by p's denominator d (and the masses' common scale L): with p = a/d
    the true gap is g / (d L) and Delta = unit_mass * m / (d L), m = max(a, d - a), so PF's
    exponent eps * gap / (2 Delta) is g * eps / (2 * unit_mass * m): the scales cancel.
    """
    a, d = prob.numerator, prob.denominator
    scale = noise_epsilon(eps) / (2 * unit_mass * max(a, d - a))
    return scale.numerator, scale.denominator


def _private_bucket(
    ranks: _Ranks, unit_mass: int, prob: Fraction, eps: Fraction, rng: RandomSource
) -> int:
    """PF's bucket for the target rank p*n (masses and unit_mass on one scale L)."""
    gap = ranks.gaps(prob)
    return _permute_and_flip_gaps(len(ranks), gap, *_pf_scale(prob, unit_mass, eps), rng)


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

RUNGS_PER_DOUBLING = 4
"""The interval's candidate reaches grow by a factor 2 ** (1 / RUNGS_PER_DOUBLING) per rung."""


def reach_ladder(buckets: int) -> tuple[int, ...]:
    """The candidate reaches, in buckets on each side of the point's bucket: 0, the
    distinct floor(2 ** (k / RUNGS_PER_DOUBLING)) below G - 1 (exact integer roots), and
    G - 1 (which reaches both ends from any bucket). Public: it depends on G only. A
    geometric ladder keeps the candidates few (44 for G = 4096, so the union bound pays
    ln 44, not ln 4096) while the chosen reach is at most 2 ** (1 / RUNGS_PER_DOUBLING)
    times (plus one bucket) the smallest one that would do."""
    g = _check_sensitivity(buckets, "buckets")
    rungs = {0, g - 1}
    k = 0
    while (rung := _integer_root(2**k, RUNGS_PER_DOUBLING)) < g - 1:
        rungs.add(rung)
        k += 1
    return tuple(sorted(rungs))


def _integer_root(value: int, degree: int) -> int:
    """floor(value ** (1 / degree)) exactly, for value >= 1."""
    root = round(value ** (1 / degree))
    while root**degree > value:
        root -= 1
    while (root + 1) ** degree <= value:
        root += 1
    return root


def interval_margin(buckets: int, p: float, interval_epsilon: float, rows: int) -> int:
    """K: the rank margin (numbers of values, or weight) the interval asks of each side.

    K = ceil(t) + rows + 1, t = :func:`rank_error_bound` over the reach ladder at
    INTERVAL_ALPHA with sensitivity rows * max(p, 1 - p). Public parameters only.
    """
    unit = _check_sensitivity(rows, "rows")
    sensitivity = quantile_sensitivity(p, unit)
    reach = rank_error_bound(
        len(reach_ladder(buckets)), interval_epsilon, sensitivity, INTERVAL_ALPHA
    )
    return math.ceil(reach) + unit + 1


def _rungs(bucket: int, buckets: int) -> list[int]:
    """The ladder's reaches from ``bucket``, cut at the first that reaches both ends of
    the range (at most ``len(reach_ladder(buckets))`` of them; public once b is)."""
    widest = max(bucket, buckets - 1 - bucket)
    return [r for r in reach_ladder(buckets) if r < widest] + [widest]


def _reach_gaps(ranks: _Ranks, bucket: int, prob: Fraction, margin: int) -> list[int]:
    """d * (distance of the margin K to rung i's rank interval), for each of ``_rungs``.

    With p = a/d, the lower side of reach r holds the ranks below edge bucket - r, the
    upper side those below edge bucket + 1 + r; their margins, scaled by d, are
    a*n - d*below and d*below - a*n, and a side that reaches the range's end has margin
    +inf (no rank lies beyond it). s_r is the smaller margin, nondecreasing in r, and the
    last rung's is +inf, so the intervals [s_{i-1}, s_i] (s_{-1} = -inf) tile the line and
    some rung's distance to K is 0.
    """
    a, d = prob.numerator, prob.denominator
    total, buckets = ranks.total, len(ranks)
    target = d * margin

    def side(edge: int, sign: int) -> int | None:
        if not 0 < edge < buckets:
            return None
        return sign * (d * int(ranks.below[edge]) - a * total)

    gaps = []
    previous: int | None = None
    for r in _rungs(bucket, buckets):
        sides = [s for s in (side(bucket - r, -1), side(bucket + 1 + r, 1)) if s is not None]
        current = min(sides) if sides else None
        above = previous - target if previous is not None else 0
        short = target - current if current is not None else 0
        gaps.append(max(0, above, short))
        previous = current
    return gaps


def _private_reach(
    ranks: _Ranks,
    bucket: int,
    unit: int,
    prob: Fraction,
    eps: Fraction,
    margin: int,
    rng: RandomSource,
) -> int:
    """PF's reach (in buckets) around ``bucket`` for the margin K = ``margin`` ranks."""
    gaps = _reach_gaps(ranks, bucket, prob, margin)
    chosen = _permute_and_flip_gaps(len(gaps), gaps.__getitem__, *_pf_scale(prob, unit, eps), rng)
    return _rungs(bucket, len(ranks))[chosen]


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

    Returns (point, lower, upper), lower <= point <= upper. With probability at least
    1 - INTERVAL_ALPHA the interval holds every value within ``rows`` ranks of the exact
    p-quantile of the counted values (so the exact quantile however it interpolates).

    Mechanism. The point is PF's bucket b (``epsilon``). The interval is
    [edge(b - r), edge(b + 1 + r)] (lo resp. hi where it passes an end) for one reach r
    chosen by PF (``interval_epsilon``) from the public ladder :func:`reach_ladder`: it is
    a quantile of the margin s_r, the fewer ranks either side keeps beyond p*n, taken at
    the target K = :func:`interval_margin` (scores -dist(K, [s_{r-1}, s_r]), as the point's
    are -dist(p*n, [below_b, below_b + c_b])).

    Privacy map: epsilon + interval_epsilon (sequential composition; b is released). Given
    b, a side's margin moves by at most rows * max(p, 1 - p) when a unit adds or removes
    its values, as a quantile score does (B.2), so do their minimum and its distance to K,
    and PF on them is interval_epsilon-DP. Which sides reach an end depends on b and the
    ladder only. Edges and points are post-processing.

    Why it covers. The best score is 0, so with probability >= 1 - INTERVAL_ALPHA the
    chosen rung's distance is below t (the union bound of :func:`rank_error_bound` over
    the ladder) and its margin s_r > K - t > rows: fewer than p*n - rows ranks lie below
    the lower edge and fewer than (1 - p)*n - rows above the upper one. docs/privacy.md, B.3.
    """
    prob = _check_p(p)
    lo, hi = _check_range(low, high)
    eps = _check_epsilon(epsilon)
    reach_epsilon = _check_epsilon(interval_epsilon)
    unit = _check_sensitivity(rows, "rows")
    masses = _exact_counts(counts)
    if lo == hi:
        return float(lo), float(lo), float(hi)
    buckets = len(masses)
    ranks = _Ranks(masses)
    bucket = _private_bucket(ranks, unit, prob, eps, rng)
    point = _point(bucket, buckets, lo, hi, rng)
    margin = interval_margin(buckets, p, interval_epsilon, unit)
    reach = _private_reach(ranks, bucket, unit, prob, reach_epsilon, margin, rng)
    lower = _edge(max(bucket - reach, 0), buckets, lo, hi, down=True)
    upper = _edge(min(bucket + 1 + reach, buckets), buckets, lo, hi, down=False)
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
