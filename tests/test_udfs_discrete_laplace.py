"""Statistical and exactness tests for the CKS20 discrete Laplace sampler.

Every test draws from ``SeededRandom(..., insecure=True)`` with a fixed seed, so runs are
reproducible. Thresholds are chosen so that a *correct* sampler fails each test with
probability below 1e-6, and each goodness-of-fit test is paired with a run on a sampler of
the wrong scale (0.67x) that must be rejected, to show the test has power.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.discrete_laplace import bernoulli_exp, sample_discrete_laplace, scale_of
from udfs.random import SeededRandom

P_CUTOFF = 1e-6
Z_CUTOFF = 5.5  # two-sided normal tail 2 * Phi(-5.5) ~ 3.8e-8


# --- statistics helpers (no scipy needed) ------------------------------------------------


def _upper_regularized_gamma(a: float, x: float) -> float:
    """Q(a, x) = Gamma(a, x) / Gamma(a): series for x < a + 1, Lentz continued fraction else."""
    if x <= 0:
        return 1.0
    log_prefactor = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = 0
        while abs(term) > abs(total) * 1e-16:
            n += 1
            term *= x / (a + n)
            total += term
        return max(0.0, 1.0 - total * math.exp(log_prefactor))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-16:
            break
    return math.exp(log_prefactor) * h


def chi2_sf(stat: float, df: int) -> float:
    """P(chi2_df >= stat)."""
    return _upper_regularized_gamma(df / 2.0, stat / 2.0)


def dlap_pmf(z: np.ndarray, t: float) -> np.ndarray:
    """P(Z = z) = (1 - q)/(1 + q) q^|z|, q = exp(-1/t)."""
    q = math.exp(-1.0 / t)
    return (1.0 - q) / (1.0 + q) * np.exp(-np.abs(z) / t)


def dlap_cdf(z: np.ndarray, t: float) -> np.ndarray:
    """P(Z <= z): q^-z/(1+q) for z < 0 and 1 - q^(z+1)/(1+q) for z >= 0."""
    q = math.exp(-1.0 / t)
    z = np.asarray(z, dtype=np.float64)
    return np.where(z < 0, np.exp(z / t) / (1 + q), 1.0 - np.exp(-(z + 1) / t) / (1 + q))


def chi2_gof_pvalue(samples: np.ndarray, t: float) -> float:
    """Chi-square p-value of integer samples against DLap(t).

    Bins: each integer in [-L, L], plus the pooled tails (-inf, -L-1] and [L+1, inf), with
    L the largest value for which every bin (tails included) expects >= 5 samples.
    """
    n = len(samples)
    q = math.exp(-1.0 / t)
    L = int(t * math.log(n * (1 - q) / (1 + q) / 5.0)) + 1
    while L > 0 and (
        n * dlap_pmf(np.array([L]), t)[0] < 5 or n * math.exp(-(L + 1) / t) / (1 + q) < 5
    ):
        L -= 1
    centre = np.arange(-L, L + 1)
    expected = np.concatenate(
        [
            [math.exp(-(L + 1) / t) / (1 + q)],
            dlap_pmf(centre, t),
            [math.exp(-(L + 1) / t) / (1 + q)],
        ]
    )
    expected *= n
    observed = np.concatenate(
        [
            [np.sum(samples < -L)],
            np.bincount(samples[np.abs(samples) <= L] + L, minlength=2 * L + 1),
            [np.sum(samples > L)],
        ]
    )
    assert observed.sum() == n and abs(expected.sum() - n) < 1e-6 * n
    stat = float(np.sum((observed - expected) ** 2 / expected))
    return chi2_sf(stat, len(expected) - 1)


def dkw_distance(samples: np.ndarray, t: float) -> float:
    """sup_x |F_n(x) - F(x)| for integer samples against the DLap(t) CDF (exact sup)."""
    values, counts = np.unique(samples, return_counts=True)
    n = len(samples)
    ecdf_at = np.cumsum(counts) / n  # F_n(x) at each observed x
    ecdf_before = ecdf_at - counts / n  # F_n(x - 1) (integers: nothing strictly between)
    return float(
        max(
            np.max(np.abs(ecdf_at - dlap_cdf(values, t))),
            np.max(np.abs(ecdf_before - dlap_cdf(values - 1, t))),
        )
    )


def dkw_critical(n: int, p: float = P_CUTOFF) -> float:
    """Dvoretzky-Kiefer-Wolfowitz (Massart): P(sup|F_n - F| > c) <= 2 exp(-2 n c^2) = p.

    Valid for any distribution, discrete ones included.
    """
    return math.sqrt(math.log(2.0 / p) / (2.0 * n))


def draw(num: int, den: int, n: int, seed: int) -> np.ndarray:
    rng = SeededRandom(seed, insecure=True)
    return np.array([sample_discrete_laplace(num, den, rng) for _ in range(n)], dtype=np.int64)


# --- helpers are right -------------------------------------------------------------------


def test_chi2_sf_helper_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 7, 20, 150, 600):
        for x in (0.5 * df, df, df + 5 * math.sqrt(2 * df), df + 12 * math.sqrt(2 * df)):
            ours, ref = chi2_sf(x, df), float(stats.chi2.sf(x, df))
            assert ours == pytest.approx(ref, rel=1e-6, abs=1e-300)


def test_pmf_and_cdf_helpers_are_consistent() -> None:
    t = 2.5
    z = np.arange(-400, 401)
    assert dlap_pmf(z, t).sum() == pytest.approx(1.0, abs=1e-12)
    assert np.allclose(np.cumsum(dlap_pmf(z, t)), dlap_cdf(z, t), atol=1e-12)


# --- bernoulli_exp ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num", "den", "seed"),
    [(1, 3, 1), (1, 1, 2), (3, 2, 3), (7, 3, 4), (5, 1, 5), (2**80, 3 * 2**79, 6)],
)
def test_bernoulli_exp_mean_is_exp_minus_x(num: int, den: int, seed: int) -> None:
    rng = SeededRandom(seed, insecure=True)
    n = 100_000
    hits = sum(bernoulli_exp(num, den, rng) for _ in range(n))
    x = num / den
    p = math.exp(-x)
    z = (hits - n * p) / math.sqrt(n * p * (1 - p))
    assert abs(z) < Z_CUTOFF, (x, hits / n, p)
    # Power: a 10% error in the exponent would be far outside the band for x >= 1.
    if x >= 1:
        wrong = math.exp(-1.1 * x)
        z_wrong = (hits - n * wrong) / math.sqrt(n * wrong * (1 - wrong))
        assert abs(z_wrong) > Z_CUTOFF


def test_bernoulli_exp_edge_cases() -> None:
    rng = SeededRandom(0, insecure=True)
    assert all(bernoulli_exp(0, 7, rng) for _ in range(100))
    # exp(-10**6) is 0 to every practical purpose; the early exit keeps this O(1).
    assert not any(bernoulli_exp(10**6, 1, rng) for _ in range(100))
    for bad in [(-1, 1), (1, 0), (1, -3)]:
        with pytest.raises(ValueError):
            bernoulli_exp(*bad, rng)


# --- discrete Laplace goodness of fit --------------------------------------------------


@pytest.mark.parametrize(
    ("t", "seed"), [(Fraction(1), 11), (Fraction(7, 2), 12), (Fraction(50), 13)]
)
def test_discrete_laplace_chi_square(t: Fraction, seed: int) -> None:
    n = 100_000
    good = draw(t.numerator, t.denominator, n, seed)
    p_good = chi2_gof_pvalue(good, float(t))
    assert p_good > P_CUTOFF, f"correct sampler rejected at t={t}: p={p_good}"
    # The same test on a sampler with 0.67x the scale must reject.
    bad_t = t * Fraction(67, 100)
    bad = draw(bad_t.numerator, bad_t.denominator, n, seed + 100)
    p_bad = chi2_gof_pvalue(bad, float(t))
    assert p_bad < P_CUTOFF, f"0.67x scale not detected at t={t}: p={p_bad}"


@pytest.mark.parametrize(("t", "n", "seed"), [(10**6, 20_000, 21), (2**50, 5_000, 22)])
def test_discrete_laplace_dkw_large_scale(t: int, n: int, seed: int) -> None:
    good = draw(t, 1, n, seed)
    assert dkw_distance(good, float(t)) < dkw_critical(n)
    bad_t = Fraction(t) * Fraction(67, 100)
    bad = draw(bad_t.numerator, bad_t.denominator, n, seed + 100)
    assert dkw_distance(bad, float(t)) > dkw_critical(n)


def test_discrete_laplace_small_scale_and_symmetry() -> None:
    # t = 1/100: P(Z != 0) = 2q/(1+q) with q = e^-100, i.e. never in practice.
    assert not draw(1, 100, 2_000, 31).any()
    # Symmetry at t = 1: #positive ~ #negative.
    s = draw(1, 1, 50_000, 32)
    pos, neg = int((s > 0).sum()), int((s < 0).sum())
    assert abs(pos - neg) < Z_CUTOFF * math.sqrt(pos + neg)


def test_discrete_laplace_rejects_bad_scale() -> None:
    rng = SeededRandom(0, insecure=True)
    for num, den in [(0, 1), (1, 0), (-1, 2)]:
        with pytest.raises(ValueError):
            sample_discrete_laplace(num, den, rng)
    # Unreduced fractions are fine and give the same distribution family.
    assert isinstance(sample_discrete_laplace(6, 4, rng), int)


# --- scale_of ----------------------------------------------------------------------------


def test_scale_of_is_exact() -> None:
    assert scale_of(1, 1.0) == (1, 1)
    assert scale_of(3, 0.5) == (6, 1)
    assert (
        scale_of(1, 0.1) == (Fraction(1) / Fraction(0.1)).as_integer_ratio()
    )  # exact value of the float 0.1, not 1/10
    assert scale_of(1, 0.1) != (10, 1)
    assert scale_of(2**70, 3.0) == (2**70, 3)


@pytest.mark.parametrize(
    ("sensitivity", "epsilon", "error"),
    [
        (0, 1.0, ValueError),
        (-2, 1.0, ValueError),
        (1, 0.0, ValueError),
        (1, -1.0, ValueError),
        (1, math.inf, ValueError),
        (1, math.nan, ValueError),
        (1.5, 1.0, TypeError),
        (True, 1.0, TypeError),
        (1, "1", TypeError),
    ],
)
def test_scale_of_rejects(sensitivity: object, epsilon: object, error: type) -> None:
    with pytest.raises(error):
        scale_of(sensitivity, epsilon)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None, database=None)
@given(
    sensitivity=st.integers(min_value=1, max_value=2**100),
    epsilon=st.floats(min_value=1e-12, max_value=1e6, allow_nan=False, allow_infinity=False),
)
def test_scale_of_property(sensitivity: int, epsilon: float) -> None:
    num, den = scale_of(sensitivity, epsilon)
    assert math.gcd(num, den) == 1 and den >= 1
    assert Fraction(num, den) == Fraction(sensitivity) / Fraction(epsilon)


@settings(max_examples=200, deadline=None, database=None)
@given(
    num=st.integers(min_value=1, max_value=2**90),
    den=st.integers(min_value=1, max_value=2**90),
    seed=st.integers(0, 2**32),
)
def test_sampler_returns_ints_for_any_scale(num: int, den: int, seed: int) -> None:
    rng = SeededRandom(seed, insecure=True)
    z = sample_discrete_laplace(num, den, rng)
    assert isinstance(z, int)
    assert isinstance(bernoulli_exp(num, den, rng), bool)
