"""Tests for udfs.quantile: private (weighted) quantiles over bucket counts, selected by PF.

Fixed ``SeededRandom(..., insecure=True)`` seeds throughout. Goodness-of-fit tests compare
the selected bucket with PF's exact output distribution (enumerated over all visiting
orders) at a p-value cutoff of 1e-6; the privacy test compares neighbouring count vectors
with a 5.5-standard-error margin per comparison (two-sided normal tail ~3.8e-8), and shows
that a 1.5x too large epsilon is detected.
"""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_udfs_selection import P_CUTOFF, chi2_pvalue, pf_probabilities
from udfs.quantile import (
    INTERVAL_ALPHA,
    RUNGS_PER_DOUBLING,
    _private_reach,
    _Ranks,
    _reach_gaps,
    private_quantile,
    private_quantile_interval,
    private_weighted_quantile,
    quantile_scores,
    quantile_sensitivity,
    rank_error_bound,
    reach_ladder,
)
from udfs.random import SeededRandom

Z_CUTOFF = 5.5


def _bucket_of(x: float, low: float, high: float, buckets: int) -> int:
    """The bucket holding x, computed exactly (x is a float, so Fraction(x) is exact)."""
    b = math.floor((Fraction(x) - Fraction(low)) * buckets / (Fraction(high) - Fraction(low)))
    return min(b, buckets - 1)


def _bucket_draws(counts, p, epsilon, rows, n: int, seed: int) -> np.ndarray:
    """Selected buckets of n runs over [0, G): bucket b is [b, b + 1)."""
    rng = SeededRandom(seed, insecure=True)
    g = len(counts)
    out = np.empty(n, dtype=np.int64)
    for k in range(n):
        x = private_quantile(counts, p, 0.0, float(g), epsilon, rows, rng)
        assert 0.0 <= x <= g
        out[k] = min(int(x), g - 1)  # exact: b <= x < b + 1 for integer bucket bounds
    return np.bincount(out, minlength=g)


# --- scores and sensitivity ---------------------------------------------------------------


def test_quantile_scores_are_exact() -> None:
    # total 23, target 11.5; u_b = -dist(11.5, [below_b, below_b + counts_b])
    assert quantile_scores([3, 10, 4, 0, 6], 0.5) == [
        Fraction(-17, 2),  # ranks [0, 3]
        Fraction(0),  # [3, 13] holds the target
        Fraction(-3, 2),  # [13, 17]
        Fraction(-11, 2),  # [17, 17]: an empty bucket is a single rank
        Fraction(-11, 2),  # [17, 23]
    ]
    p = Fraction(0.3)  # the float's exact value is used: target 6p, about 1.8
    assert quantile_scores([1, 2, 3], 0.3) == [-(6 * p - 1), Fraction(0), -(3 - 6 * p)]
    assert quantile_scores([Fraction(1, 3), 2], 0.5) == [Fraction(-5, 6), Fraction(0)]
    assert quantile_scores([0, 0, 0], 0.25) == [0, 0, 0]
    assert quantile_sensitivity(0.5, 1) == Fraction(1, 2)
    assert quantile_sensitivity(0.25, 3) == Fraction(9, 4)
    assert quantile_sensitivity(0.0, Fraction(2, 3)) == Fraction(2, 3)
    assert quantile_sensitivity(1.0, 4) == 4


@settings(max_examples=150, deadline=None, database=None)

def _neighbour(counts: list[int], rows: int, data) -> list[int]:
    """``counts`` with up to ``rows`` values added, or removed where there are any."""
    changes = data.draw(st.lists(st.integers(0, len(counts) - 1), min_size=1, max_size=rows))
    neighbour = list(counts)
    remove = data.draw(st.booleans())
    for b in changes:
        if remove and neighbour[b] == 0:
            continue
        neighbour[b] += -1 if remove else 1
    return neighbour

@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=12),
    p=st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.7, 0.99, 1.0]),
    rows=st.integers(1, 5),
    data=st.data(),
)
def test_scores_move_by_at_most_the_sensitivity(counts, p, rows, data) -> None:
    """Adding or removing up to ``rows`` values anywhere moves every score <= Delta."""
    neighbour = _neighbour(counts, rows, data)
    delta = quantile_sensitivity(p, rows)
    for u, v in zip(quantile_scores(counts, p), quantile_scores(neighbour, p), strict=True):
        assert abs(u - v) <= delta


@settings(max_examples=100, deadline=None, database=None)
@given(
    weights=st.lists(st.fractions(0, 20, max_denominator=12), min_size=1, max_size=8),
    extra=st.lists(st.fractions(0, 1, max_denominator=12), min_size=1, max_size=4),
    p=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
    data=st.data(),
)
def test_weighted_scores_move_by_at_most_h_max_p(weights, extra, p, data) -> None:
    """A unit of total weight h = sum(extra) moves every weighted score <= h max(p, 1-p)."""
    h = sum(extra)
    neighbour = list(weights)
    for w in extra:
        neighbour[data.draw(st.integers(0, len(weights) - 1))] += w
    if h == 0:
        assert quantile_scores(neighbour, p) == quantile_scores(weights, p)
        return
    delta = quantile_sensitivity(p, h)
    for u, v in zip(quantile_scores(weights, p), quantile_scores(neighbour, p), strict=True):
        assert abs(u - v) <= delta


# --- the bucket choice is exactly PF on the scores ----------------------------------------


@pytest.mark.parametrize(
    ("counts", "p", "rows", "n"),
    [
        ([3, 10, 4, 0, 6], 0.5, 1, 50_000),
        ([3, 10, 4, 0, 6], 0.25, 1, 50_000),
        ([3, 10, 4, 0, 6], 0.9, 2, 50_000),
        ([2, 1, 3, 0, 2], 0.5, 1, 50_000),
        # Edge cases: empty group, one value, everything in one bucket, p = 0 and p = 1.
        ([0, 0, 0, 0, 0], 0.5, 1, 20_000),
        ([0, 0, 1, 0, 0], 0.5, 1, 20_000),
        ([0, 0, 0, 40, 0], 0.5, 1, 20_000),
        ([0, 2, 1, 0, 3], 0.0, 1, 20_000),
        ([0, 2, 1, 0, 3], 1.0, 1, 20_000),
    ],
)
def test_bucket_choice_matches_pf(counts, p, rows, n) -> None:
    seed = 1000 + sum(counts) * 7 + int(p * 100) + rows
    observed = _bucket_draws(counts, p, 1.0, rows, n, seed)
    expected = pf_probabilities(quantile_scores(counts, p), 1.0, quantile_sensitivity(p, rows))
    assert chi2_pvalue(observed, expected) > P_CUTOFF


def test_empty_group_is_uniform() -> None:
    """All scores equal: every bucket has probability exactly 1/G (no data, no signal)."""
    counts = [0] * 5
    expected = pf_probabilities(quantile_scores(counts, 0.5), 1.0, Fraction(1, 2))
    assert all(math.isclose(x, 0.2) for x in expected)


def test_p0_and_p1_prefer_the_ends() -> None:
    # p = 0: score -below_b, best for every bucket up to the lowest non-empty one.
    assert quantile_scores([0, 2, 1, 0, 3], 0.0) == [0, 0, -2, -3, -3]
    # p = 1: score -above_b, best for every bucket from the highest non-empty one.
    assert quantile_scores([0, 2, 1, 0, 3], 1.0) == [-6, -4, -3, -3, 0]


def test_weighted_matches_pf() -> None:
    weights = [Fraction(1, 2), Fraction(7, 3), 2, Fraction(5, 6)]
    h, p = Fraction(3, 2), 0.4
    rng = SeededRandom(77, insecure=True)
    draws = [
        _bucket_of(private_weighted_quantile(weights, p, -2.0, 2.0, 0.8, h, rng), -2.0, 2.0, 4)
        for _ in range(20_000)
    ]
    expected = pf_probabilities(quantile_scores(weights, p), 0.8, quantile_sensitivity(p, h))
    assert chi2_pvalue(np.bincount(draws, minlength=4), expected) > P_CUTOFF


def test_weighted_shares_the_unweighted_mechanism() -> None:
    """Integer weights with h = rows give the very same draws; so does rescaling w and h."""
    counts = [4, 0, 9, 3, 1, 7]
    for p in (0.5, 0.1, 1.0):
        a = SeededRandom(5, insecure=True)
        b = SeededRandom(5, insecure=True)
        c = SeededRandom(5, insecure=True)
        scaled = [Fraction(k, 7) for k in counts]
        for _ in range(200):
            x = private_quantile(counts, p, -1.0, 5.0, 0.7, 2, a)
            assert x == private_weighted_quantile(counts, p, -1.0, 5.0, 0.7, 2, b)
            assert x == private_weighted_quantile(scaled, p, -1.0, 5.0, 0.7, Fraction(2, 7), c)


# --- differential privacy on neighbouring histograms --------------------------------------


NEIGHBOURS = [
    # (D, D' = D plus `rows` values in an extreme bucket, rows, p)
    # (the tightest small instances found by enumerating 4- and 5-bucket histograms)
    ([0, 0, 1, 0], [1, 0, 1, 0], 1, 0.5),
    ([1, 1, 0, 0, 0], [1, 1, 0, 0, 2], 2, 0.5),
]


def _log_ratio_bands(d, d2, rows, p, epsilon, n, seed) -> list[tuple[float, float]]:
    """Per bucket: (|log P_D(b) / P_D'(b)| - margin, + margin), margin = 5.5 s.e."""
    a = _bucket_draws(d, p, epsilon, rows, n, seed)
    b = _bucket_draws(d2, p, epsilon, rows, n, seed + 1)
    bands = []
    for ka, kb in zip(a, b, strict=True):
        if min(ka, kb) < 200:  # too rare to estimate; the exact check covers them
            continue
        pa, pb = ka / n, kb / n
        log_ratio = abs(math.log(pa / pb))
        se = math.sqrt((1 - pa) / (n * pa) + (1 - pb) / (n * pb))
        bands.append((log_ratio - Z_CUTOFF * se, log_ratio + Z_CUTOFF * se))
    return bands


@pytest.mark.parametrize(("d", "d2", "rows", "p"), NEIGHBOURS)
def test_neighbouring_histograms_are_eps_close(d, d2, rows, p) -> None:
    eps = 1.0
    delta = quantile_sensitivity(p, rows)
    exact_d = pf_probabilities(quantile_scores(d, p), eps, delta)
    exact_d2 = pf_probabilities(quantile_scores(d2, p), eps, delta)
    worst = max(abs(math.log(x / y)) for x, y in zip(exact_d, exact_d2, strict=True))
    assert 0.75 * eps < worst <= eps + 1e-9  # the instance is within 25% of the bound
    bands = _log_ratio_bands(d, d2, rows, p, eps, 30_000, seed=300 + rows)
    assert bands
    assert all(low <= eps for low, _ in bands)


def test_neighbour_check_detects_too_large_epsilon() -> None:
    """Sampling with 1.5 eps (i.e. Delta 1.5x too small) violates the e^eps bound."""
    d, d2, rows, p = NEIGHBOURS[1]  # worst log-ratio 0.83 eps, so 1.24 at 1.5 eps
    bands = _log_ratio_bands(d, d2, rows, p, 1.5, 60_000, seed=400)
    assert any(low > 1.0 for low, _ in bands)


# --- accuracy -----------------------------------------------------------------------------


def _uniform_histogram(n: int, low: float, high: float, buckets: int, seed: int):
    """Counts of n uniform values on [low, high] in equal-width buckets (numpy, test data)."""
    values = np.random.default_rng(seed).uniform(low, high, n)
    index = np.clip(((values - low) * (buckets / (high - low))).astype(np.int64), 0, buckets - 1)
    return np.bincount(index, minlength=buckets), float(np.median(values))


def test_median_accuracy_on_a_million_uniform_values() -> None:
    """eps = 1, rows = 1, G = 4096: within 0.5% of the range of the true median in >= 95%."""
    g, low, high = 4096, 0.0, 1000.0
    counts, true_median = _uniform_histogram(10**6, low, high, g, seed=20260)
    counts = counts.tolist()
    rng = SeededRandom(500, insecure=True)
    runs = 200
    errors = np.array(
        [
            abs(private_quantile(counts, 0.5, low, high, 1.0, 1, rng) - true_median)
            for _ in range(runs)
        ]
    )
    within = float(np.mean(errors <= 0.005 * (high - low)))
    print(f"median within 5.0 of truth: {within:.3f}; max error {errors.max():.3f}")
    assert within >= 0.95


def test_rank_error_bound_holds_empirically() -> None:
    """At alpha = 1e-9 no run's chosen score may fall below u* - bound."""
    g, low, high = 4096, 0.0, 1000.0
    counts, _ = _uniform_histogram(10**5, low, high, g, seed=20261)
    scores = quantile_scores(counts, 0.3)
    top = max(scores)
    bound = rank_error_bound(g, 0.5, quantile_sensitivity(0.3, 1), 1e-9)
    rng = SeededRandom(501, insecure=True)
    for _ in range(100):
        b = _bucket_of(private_quantile(counts, 0.3, low, high, 0.5, 1, rng), low, high, g)
        assert scores[b] >= top - Fraction(bound)


def test_rank_error_bound_formula() -> None:
    assert math.isclose(
        rank_error_bound(4096, 1.0, Fraction(1, 2), 0.05), math.log(4096) + math.log(20)
    )
    assert math.isclose(rank_error_bound(1, 2.0, 3, 0.5), 3 * math.log(2))
    assert rank_error_bound(4096, 0.5, 1, 0.05) > rank_error_bound(4096, 1.0, 1, 0.05)
    for bad in (0.0, 1.0, -0.1, math.nan, True):
        with pytest.raises((ValueError, TypeError)):
            rank_error_bound(16, 1.0, 1, bad)
    for bad_g in (0, -3, 2.5):
        with pytest.raises((ValueError, TypeError)):
            rank_error_bound(bad_g, 1.0, 1, 0.1)
    with pytest.raises(ValueError):
        rank_error_bound(16, 0.0, 1, 0.1)
    with pytest.raises(ValueError):
        rank_error_bound(16, 1.0, 0, 0.1)


# --- intervals ------------------------------------------------------------------------------


def _exact_quantile_bucket(counts: list[int], p: float) -> int:
    """The bucket holding the exact p-quantile (QUANTILE_CONT's order statistics)."""
    n = sum(counts)
    rank = math.floor(p * (n - 1))
    below = 0
    for b, c in enumerate(counts):
        if below + c > rank:
            return b
        below += c
    return len(counts) - 1


INTERVAL_CASES = [
    # (name, counts over G = 64 buckets on [0, 64), p, rows, epsilon)
    ("uniform", [200] * 64, 0.5, 1, 1.0),
    ("skewed low", [2000] + [20] * 63, 0.9, 2, 0.5),
    ("atom at the target", [50] * 30 + [5000] + [50] * 33, 0.3, 1, 1.0),
    ("tiny group", [0] * 10 + [3, 1, 2] + [0] * 51, 0.5, 1, 1.0),
    ("near the bottom", [5] + [0] * 20 + [3000] + [0] * 43, 0.01, 1, 1.0),
]


@pytest.mark.parametrize(("name", "counts", "p", "rows", "eps"), INTERVAL_CASES)
def test_interval_covers_point_and_exact_quantile(name, counts, p, rows, eps) -> None:
    """[lower, upper] holds both the point and the exact quantile's bucket in >= 95% of runs.

    The bound is a union bound, so coverage is far above 95%: the test asks for the
    Clopper-Pearson-free margin of 4 standard errors below 0.95 never to be crossed
    (binomial tail < 1e-4 even at exactly 95%; the observed rate is close to 1).
    """
    g = len(counts)
    exact = _exact_quantile_bucket(counts, p)
    rng = SeededRandom(7000 + len(name), insecure=True)
    runs, covered = 1000, 0
    for _ in range(runs):
        point, lower, upper = private_quantile_interval(counts, p, 0.0, g, eps, eps / 3, rows, rng)
        assert 0.0 <= lower <= point <= upper <= g
        covered += lower <= exact and exact + 1 <= upper
    se = math.sqrt(INTERVAL_ALPHA * (1 - INTERVAL_ALPHA) / runs)
    assert covered / runs >= 1 - INTERVAL_ALPHA - 4 * se, name


def test_interval_is_narrow_on_a_large_group() -> None:
    """A million uniform values, eps = 1 (+ 0.25 for the interval): width < 0.5% of range."""
    g, low, high = 4096, 0.0, 1000.0
    counts, median = _uniform_histogram(10**6, low, high, g, seed=20262)
    rng = SeededRandom(502, insecure=True)
    for _ in range(20):
        _, lower, upper = private_quantile_interval(
            counts.tolist(), 0.5, low, high, 1.0, 0.25, 1, rng
        )
        assert lower <= median <= upper
        assert upper - lower < 0.005 * (high - low)


def test_reach_ladder_is_geometric_and_reaches_both_ends() -> None:
    for g in (1, 2, 8, 64, 4096):
        ladder = reach_ladder(g)
        assert ladder[0] == 0 and ladder[-1] == g - 1
        assert list(ladder) == sorted(set(ladder))
        for r, nxt in itertools.pairwise(ladder[1:-1]):
            assert nxt < (r + 1) * 2 ** (1 / RUNGS_PER_DOUBLING)
    assert len(reach_ladder(4096)) == 44


def _reach_scores(counts: list[int], bucket: int, p: float, margin: int) -> list[Fraction]:
    """The reach scores -dist(K, [s_{i-1}, s_i]), recomputed from their definition."""
    g, target = len(counts), Fraction(p) * sum(counts)
    below = [sum(counts[:j]) for j in range(g + 1)]
    widest = max(bucket, g - 1 - bucket)
    margins = []
    for r in [r for r in reach_ladder(g) if r < widest] + [widest]:
        sides = []
        if bucket - r > 0:
            sides.append(target - below[bucket - r])
        if bucket + 1 + r < g:
            sides.append(below[bucket + 1 + r] - target)
        margins.append(min(sides) if sides else math.inf)
    lows = [-math.inf, *margins[:-1]]
    return [-max(0, low - margin, margin - high) for low, high in zip(lows, margins, strict=True)]


@settings(max_examples=150, deadline=None, database=None)
@given(
    counts=st.lists(st.integers(0, 30), min_size=1, max_size=20),
    p=st.sampled_from([0.0, 0.1, 0.5, 0.7, 1.0]),
    rows=st.integers(1, 4),
    margin=st.integers(0, 40),
    data=st.data(),
)
def test_reach_scores_move_by_at_most_the_sensitivity(counts, p, rows, margin, data) -> None:
    """The interval's reach scores are the definition's, best 0, and adding or removing up
    to ``rows`` values anywhere moves each by at most Delta = rows * max(p, 1 - p)."""
    g = len(counts)
    bucket = data.draw(st.integers(0, g - 1))
    neighbour = _neighbour(counts, rows, data)
    prob = Fraction(p)
    scores = []
    for histogram in (counts, neighbour):
        gaps = _reach_gaps(_Ranks(histogram), bucket, prob, margin)
        exact = [Fraction(-gap, prob.denominator) for gap in gaps]
        assert exact == _reach_scores(histogram, bucket, p, margin)
        assert max(exact) == 0
        scores.append(exact)
    delta = quantile_sensitivity(p, rows)
    assert all(abs(u - v) <= delta for u, v in zip(*scores, strict=True))


def test_reach_follows_pf_on_its_scores() -> None:
    """The reach is PF on the reach scores: chi-squared against the exact law, and a
    1.3x epsilon rejected."""
    counts, p, rows, eps, bucket, margin = [3, 0, 7, 2, 5, 1, 0, 4], 0.5, 2, 0.8, 2, 6
    scores = _reach_scores(counts, bucket, p, margin)
    rungs = [r for r in reach_ladder(len(counts)) if r < 5] + [5]
    assert len(rungs) == len(scores) == 6
    rng = SeededRandom(504, insecure=True)
    draws = [
        rungs.index(
            _private_reach(_Ranks(counts), bucket, rows, Fraction(p), Fraction(eps), margin, rng)
        )
        for _ in range(100_000)
    ]
    observed = np.bincount(draws, minlength=len(scores))
    expected = pf_probabilities(scores, eps, quantile_sensitivity(p, rows))
    assert chi2_pvalue(observed, expected) > P_CUTOFF
    wrong = pf_probabilities(scores, 1.3 * eps, quantile_sensitivity(p, rows))
    assert chi2_pvalue(observed, wrong) < P_CUTOFF


def _ends_coverage(monkeypatch, factor: float) -> float:
    """How often the interval holds both ends of a group split between two atoms, one in
    the lowest and one in the highest bucket, with the margin's rank bound computed for
    ``factor`` times the interval's epsilon (factor 1: as shipped).

    Every reach short of the whole range keeps a margin of 0 ranks on some side, so its
    distance to K is the most any failing reach can have: the union bound is nearly tight
    (failure about INTERVAL_ALPHA / 2 as shipped, PF's random order halving it).
    """
    bound = rank_error_bound
    monkeypatch.setattr(
        "udfs.quantile.rank_error_bound", lambda g, e, s, a: bound(g, factor * e, s, a)
    )
    counts = [5000] + [0] * 4094 + [5000]
    rng = SeededRandom(505 + int(10 * factor), insecure=True)
    runs, covered = 3000, 0
    for _ in range(runs):
        _, lower, upper = private_quantile_interval(counts, 0.5, 0.0, 1.0, 1.0, 0.1, 10, rng)
        covered += lower == 0.0 and upper == 1.0
    return covered / runs


def test_interval_coverage_is_nominal_where_the_bound_is_tight(monkeypatch) -> None:
    """At least 1 - INTERVAL_ALPHA of the intervals cover, up to 5.3 standard errors of a
    binomial at exactly 95% (a mechanism at the nominal level fails it with p < 1e-7);
    with the margin computed for 1.5x too little noise the same test fails."""
    cutoff = 1 - INTERVAL_ALPHA - 5.3 * math.sqrt(INTERVAL_ALPHA * (1 - INTERVAL_ALPHA) / 3000)
    shipped = _ends_coverage(monkeypatch, 1.0)
    weakened = _ends_coverage(monkeypatch, 1.5)
    print(f"coverage: shipped {shipped:.4f}, margin for 1.5x less noise {weakened:.4f}")
    assert shipped >= cutoff
    assert weakened < cutoff


def test_interval_without_data_is_mostly_the_whole_range() -> None:
    """No data: every reach short of both ends misses K by K ranks, so at least
    1 - INTERVAL_ALPHA of the intervals are the whole range (same cutoff as above)."""
    rng = SeededRandom(503, insecure=True)
    runs = 1000
    whole = 0
    for _ in range(runs):
        _, lower, upper = private_quantile_interval([0] * 32, 0.5, -1.0, 3.0, 1.0, 0.3, 1, rng)
        assert -1.0 <= lower <= upper <= 3.0
        whole += (lower, upper) == (-1.0, 3.0)
    se = math.sqrt(INTERVAL_ALPHA * (1 - INTERVAL_ALPHA) / runs)
    assert whole / runs >= 1 - INTERVAL_ALPHA - 5.3 * se


# --- edge cases that must not crash --------------------------------------------------------


def test_low_equals_high_returns_low_without_drawing() -> None:
    rng = SeededRandom(9, insecure=True)
    state = rng._random.getstate()
    assert private_quantile([5, 0, 2], 0.5, 3.25, 3.25, 1.0, 1, rng) == 3.25
    assert private_weighted_quantile([Fraction(1, 3)], 0.1, -2, -2, 1.0, 1, rng) == -2.0
    assert rng._random.getstate() == state


def test_output_stays_in_range_at_extreme_bounds() -> None:
    rng = SeededRandom(10, insecure=True)
    for low, high in [
        (-1.7e308, 1.7e308),
        (1.0, math.nextafter(1.0, 2.0)),
        (-5e-324, 5e-324),
        (0, 10**300),
    ]:
        for counts in ([0] * 7, [0, 0, 0, 0, 0, 0, 9], [9, 0, 0, 0, 0, 0, 0]):
            for p in (0.0, 0.5, 1.0):
                x = private_quantile(counts, p, low, high, 1.0, 1, rng)
                assert math.isfinite(x) and low <= x <= high


def test_single_bucket_and_numpy_counts() -> None:
    rng = SeededRandom(11, insecure=True)
    assert 0.0 <= private_quantile([17], 0.5, 0.0, 1.0, 1.0, 1, rng) <= 1.0
    counts = np.array([3, 0, 8, 1], dtype=np.int64)
    a = [private_quantile(counts, 0.5, 0, 4, 1.0, 1, SeededRandom(12, insecure=True))]
    b = [private_quantile(counts.tolist(), 0.5, 0, 4, 1.0, 1, SeededRandom(12, insecure=True))]
    assert a == b
    huge = [0, 10**30, 3, 10**30 + 1]
    assert 0 <= private_quantile(huge, 0.5, 0, 4, 1e-300, 10**6, rng) <= 4


def test_numpy_integers_never_overflow() -> None:
    """numpy ints (counts, epsilon, rows, p) are turned into Python ints before arithmetic."""
    rng = SeededRandom(14, insecure=True)
    big = np.array([2**62, 0, 2**62 - 1, 2**61], dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores = quantile_scores(big, np.float64(0.3))
        assert scores == quantile_scores([int(v) for v in big], 0.3)
        for counts in (big, list(big)):
            x = private_quantile(counts, np.float64(0.3), 0, 4, np.int64(1), np.int64(3), rng)
            assert 0 <= x <= 4
        assert 0 <= private_weighted_quantile(list(big), 1, 0, 4, 1, np.int64(5), rng) <= 4


def test_one_value_lands_near_it() -> None:
    """One value in bucket 2 of 5, large eps: bucket 2 is the unique best (score 0 vs -1/2)."""
    observed = _bucket_draws([0, 0, 1, 0, 0], 0.5, 50.0, 1, 2_000, seed=13)
    assert observed[2] > 1_900


# --- refusals ------------------------------------------------------------------------------


GOOD = {"counts": [1, 2, 3], "p": 0.5, "low": 0.0, "high": 1.0, "epsilon": 1.0, "rows": 1}


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("p", -0.01, ValueError),
        ("p", 1.01, ValueError),
        ("p", math.nan, ValueError),
        ("p", math.inf, ValueError),
        ("p", True, TypeError),
        ("p", "0.5", TypeError),
        ("epsilon", 0.0, ValueError),
        ("epsilon", -1.0, ValueError),
        ("epsilon", math.inf, ValueError),
        ("epsilon", math.nan, ValueError),
        ("rows", 0, ValueError),
        ("rows", -2, ValueError),
        ("rows", 1.5, TypeError),
        ("rows", True, TypeError),
        ("counts", [], ValueError),
        ("counts", [1, -1, 3], ValueError),
        ("counts", [1, 2.0, 3], TypeError),
        ("counts", [1, Fraction(1, 2)], TypeError),
        ("counts", [1, True], TypeError),
        ("low", 2.0, ValueError),  # low > high
        ("low", -math.inf, ValueError),
        ("high", math.nan, ValueError),
        ("high", 10**400, ValueError),
    ],
)
def test_private_quantile_refuses(field, value, error) -> None:
    args = {**GOOD, field: value}
    with pytest.raises(error):
        private_quantile(**args, rng=SeededRandom(0, insecure=True))


@pytest.mark.parametrize(
    ("weights", "unit_weight", "error"),
    [
        ([0.5, 1.0], 1, TypeError),  # float weights are not exact sums
        ([Fraction(1, 2), Fraction(-1, 3)], 1, ValueError),
        ([], 1, ValueError),
        ([1, 2], 0, ValueError),
        ([1, 2], Fraction(-1, 2), ValueError),
        ([1, 2], math.inf, ValueError),
        ([1, 2], math.nan, ValueError),
        ([1, 2], True, TypeError),
    ],
)
def test_private_weighted_quantile_refuses(weights, unit_weight, error) -> None:
    with pytest.raises(error):
        private_weighted_quantile(
            weights, 0.5, 0.0, 1.0, 1.0, unit_weight, SeededRandom(0, insecure=True)
        )
    with pytest.raises(ValueError):
        quantile_scores([1, 2], 1.5)
