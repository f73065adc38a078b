"""Tests for udfs.selection: the exact permute-and-flip mechanism (McKenna & Sheldon 2020).

Every sampler run uses ``SeededRandom(..., insecure=True)`` with a fixed seed. Each
goodness-of-fit test uses a p-value cutoff of 1e-6 (a correct sampler fails with
probability < 1e-6) and is paired with a sampler of the wrong epsilon that must be rejected.
PF's output distribution is *not* the exponential mechanism's: the reference probabilities
are computed exactly by enumerating all visiting orders.
"""

from __future__ import annotations

import inspect
import itertools
import math
import re
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2

import udfs.discrete_laplace
import udfs.selection
from udfs.random import SeededRandom
from udfs.selection import permute_and_flip

P_CUTOFF = 1e-6


# --- exact reference distributions (test-side floats are fine) ---------------------------


def _acceptance(scores: Sequence[Fraction | int], epsilon: float, sensitivity) -> list[float]:
    top = max(scores)
    return [
        math.exp(-float(Fraction(epsilon) * (top - s) / (2 * Fraction(sensitivity))))
        for s in scores
    ]


def pf_probabilities(
    scores: Sequence[Fraction | int], epsilon: float, sensitivity: Fraction | int
) -> list[float]:
    """Exact PF output distribution: average over all n! visiting orders of
    P(every earlier candidate rejected and i accepted)."""
    q = _acceptance(scores, epsilon, sensitivity)
    n = len(q)
    out = [0.0] * n
    for order in itertools.permutations(range(n)):
        reach = 1.0
        for i in order:
            out[i] += reach * q[i]
            reach *= 1.0 - q[i]
    return [x / math.factorial(n) for x in out]


def pf_probabilities_by_subsets(
    scores: Sequence[Fraction | int], epsilon: float, sensitivity: Fraction | int
) -> list[float]:
    """The same distribution by McKenna-Sheldon's subset form: i is accepted after exactly
    the set S of others was visited (and rejected) first, with probability |S|!(n-1-|S|)!/n!."""
    q = _acceptance(scores, epsilon, sensitivity)
    n = len(q)
    out = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        total = 0.0
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - 1 - size) / math.factorial(n)
            for subset in itertools.combinations(others, size):
                total += weight * math.prod(1.0 - q[j] for j in subset)
        out.append(q[i] * total)
    return out


def exponential_mechanism_probabilities(
    scores: Sequence[Fraction | int], epsilon: float, sensitivity: Fraction | int
) -> list[float]:
    """P(i) proportional to exp(eps * u_i / (2 Delta)) (McSherry-Talwar)."""
    w = _acceptance(scores, epsilon, sensitivity)
    total = sum(w)
    return [x / total for x in w]


def chi2_pvalue(observed: np.ndarray, probabilities: Sequence[float]) -> float:
    """Chi-square goodness-of-fit p-value; bins expecting < 5 draws are pooled."""
    n = int(observed.sum())
    expected = np.asarray(probabilities, dtype=float) * n
    assert abs(expected.sum() - n) < 1e-6 * n
    big = expected >= 5
    obs = list(observed[big])
    exp = list(expected[big])
    rest_obs, rest_exp = int(observed[~big].sum()), float(expected[~big].sum())
    if rest_exp >= 5:
        obs.append(rest_obs)
        exp.append(rest_exp)
    elif rest_exp > 0 or rest_obs:
        k = int(np.argmin(exp))
        obs[k] += rest_obs
        exp[k] += rest_exp
    if len(exp) < 2:
        return 1.0
    o, e = np.asarray(obs, dtype=float), np.asarray(exp)
    return float(chi2.sf(np.sum((o - e) ** 2 / e), len(e) - 1))


def _draw_counts(scores, epsilon, sensitivity, n: int, seed: int) -> np.ndarray:
    rng = SeededRandom(seed, insecure=True)
    draws = [permute_and_flip(scores, epsilon, sensitivity, rng) for _ in range(n)]
    return np.bincount(draws, minlength=len(scores))


# --- the reference distribution itself --------------------------------------------------


SCORES = [0, -1, -2, -3, -5, -8]


def test_reference_enumeration_matches_subset_formula() -> None:
    for scores, eps, delta in [
        (SCORES, 1.0, 1),
        ([Fraction(1, 3), Fraction(1, 3), 0, Fraction(-2, 3), -2], 0.7, Fraction(2, 3)),
        ([4, 4, 4], 2.0, 1),
    ]:
        a = pf_probabilities(scores, eps, delta)
        b = pf_probabilities_by_subsets(scores, eps, delta)
        assert math.isclose(sum(a), 1.0, rel_tol=1e-12)
        assert all(math.isclose(x, y, rel_tol=1e-9) for x, y in zip(a, b, strict=True))


def test_pf_beats_exponential_mechanism_in_expected_score() -> None:
    """McKenna-Sheldon Theorem 2 on the exact distributions (and they do differ)."""
    for eps in (0.1, 0.5, 1.0, 3.0):
        pf = pf_probabilities(SCORES, eps, 1)
        em = exponential_mechanism_probabilities(SCORES, eps, 1)
        assert np.dot(pf, SCORES) >= np.dot(em, SCORES) - 1e-12
        assert max(abs(x - y) for x, y in zip(pf, em, strict=True)) > 1e-3


# --- goodness of fit, and power against a wrong epsilon ---------------------------------


def test_pf_matches_exact_distribution() -> None:
    observed = _draw_counts(SCORES, 1.0, 1, 100_000, seed=101)
    assert chi2_pvalue(observed, pf_probabilities(SCORES, 1.0, 1)) > P_CUTOFF


@pytest.mark.parametrize("factor", [1.3, 1 / 1.3])
def test_pf_test_rejects_wrong_epsilon(factor: float) -> None:
    """Draw with factor * eps, compare with the probabilities for eps: must be rejected."""
    observed = _draw_counts(SCORES, factor * 1.0, 1, 100_000, seed=102)
    assert chi2_pvalue(observed, pf_probabilities(SCORES, 1.0, 1)) < P_CUTOFF


def test_pf_fraction_scores_and_ties() -> None:
    scores = [Fraction(1, 3), Fraction(1, 3), 0, Fraction(-2, 3), -2]
    observed = _draw_counts(scores, 0.7, Fraction(2, 3), 30_000, seed=103)
    assert chi2_pvalue(observed, pf_probabilities(scores, 0.7, Fraction(2, 3))) > P_CUTOFF
    # Ties among the best are broken uniformly.
    observed = _draw_counts([7, 7, 7], 1.0, 1, 30_000, seed=104)
    assert chi2_pvalue(observed, [1 / 3] * 3) > P_CUTOFF


def test_pf_float_sensitivity_is_exact() -> None:
    """A float Delta is taken at its exact value: Delta = 0.5 equals Fraction(1, 2)."""
    ra, rb = SeededRandom(7, insecure=True), SeededRandom(7, insecure=True)
    a = [permute_and_flip(SCORES, 0.3, 0.5, ra) for _ in range(200)]
    b = [permute_and_flip(SCORES, 0.3, Fraction(1, 2), rb) for _ in range(200)]
    assert a == b


# --- extreme parameters: nothing overflows, nothing is NaN -------------------------------


def test_pf_single_candidate() -> None:
    rng = SeededRandom(1, insecure=True)
    assert all(permute_and_flip([Fraction(-(10**40), 3)], 1.0, 1, rng) == 0 for _ in range(50))


def test_pf_huge_gaps_and_huge_epsilon() -> None:
    rng = SeededRandom(2, insecure=True)
    scores = [0, -(10**30), 10**30 + Fraction(1, 3), Fraction(-(2**300), 7)]
    assert {permute_and_flip(scores, 1.0, 1, rng) for _ in range(500)} == {2}
    assert {permute_and_flip([0, -1, 0], 1e300, 1, rng) for _ in range(200)} <= {0, 2}
    # Sensitivity far above the gaps: almost uniform, still exact.
    observed = _draw_counts([0, -1, -2], 1.0, 10**40, 20_000, seed=3)
    assert chi2_pvalue(observed, [1 / 3] * 3) > P_CUTOFF


def test_pf_tiny_epsilon_is_nearly_uniform() -> None:
    observed = _draw_counts([0, -1, -2, -(10**6)], 5e-324, 1, 20_000, seed=4)
    assert chi2_pvalue(observed, [1 / 4] * 4) > P_CUTOFF


def test_pf_accepts_numpy_integers() -> None:
    scores = np.array([3, 1, 3, -4], dtype=np.int64)
    rng = SeededRandom(5, insecure=True)
    assert permute_and_flip(list(scores), np.float64(1.0), np.int64(2), rng) in range(4)


@settings(max_examples=100, deadline=None, database=None)
@given(
    scores=st.lists(
        st.fractions(min_value=-(10**12), max_value=10**12, max_denominator=10**6),
        min_size=1,
        max_size=30,
    ),
    eps=st.floats(min_value=1e-300, max_value=1e300),
    seed=st.integers(0, 2**32),
)
def test_pf_always_returns_a_valid_index(scores, eps, seed) -> None:
    i = permute_and_flip(scores, eps, Fraction(1, 3), SeededRandom(seed, insecure=True))
    assert 0 <= i < len(scores)


# --- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "eps", "delta", "error"),
    [
        ([], 1.0, 1, ValueError),
        ([0, 1], 0.0, 1, ValueError),
        ([0, 1], -1.0, 1, ValueError),
        ([0, 1], math.inf, 1, ValueError),
        ([0, 1], math.nan, 1, ValueError),
        ([0, 1], True, 1, TypeError),
        ([0, 1], "1", 1, TypeError),
        ([0, 1], 1.0, 0, ValueError),
        ([0, 1], 1.0, -1, ValueError),
        ([0, 1], 1.0, Fraction(-1, 2), ValueError),
        ([0, 1], 1.0, math.inf, ValueError),
        ([0, 1], 1.0, math.nan, ValueError),
        ([0, 1], 1.0, True, TypeError),
        ([0, 1.5], 1.0, 1, TypeError),
        ([0, math.nan], 1.0, 1, TypeError),
        ([0, True], 1.0, 1, TypeError),
        ([0, "1"], 1.0, 1, TypeError),
    ],
)
def test_pf_refuses_bad_arguments(scores, eps, delta, error) -> None:
    with pytest.raises(error):
        permute_and_flip(scores, eps, delta, SeededRandom(0, insecure=True))


# --- exactness by design ------------------------------------------------------------------


def test_selection_uses_no_floating_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """The selection path (PF loop, and CKS20's Bernoulli(exp(-x))) has no float, exp or log."""
    for fn in (
        udfs.selection._permute_and_flip_integers,
        udfs.selection.permute_and_flip,
        udfs.discrete_laplace.bernoulli_exp,
        udfs.discrete_laplace._bernoulli_exp_le1,
        udfs.discrete_laplace._bernoulli_exp_minus_one,
    ):
        body = inspect.getsource(fn).split('"""')[-1]  # code after the docstring
        pattern = r"(?<!\w)(math\.)?(float|exp|log|log1p|expm1|random|uniform)\("
        assert not re.search(pattern, body), fn.__name__

    def forbidden(*_args, **_kwargs):
        raise AssertionError("floating-point exp/log used during selection")

    for name in ("exp", "log", "log1p", "expm1"):
        monkeypatch.setattr(math, name, forbidden)
    rng = SeededRandom(6, insecure=True)
    for _ in range(200):
        permute_and_flip([Fraction(1, 3), -5, 2**70, 0], 0.1, Fraction(5, 2), rng)


@settings(max_examples=200, deadline=None)
@given(
    numerators=st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=12),
    common=st.integers(1, 10**4),
    epsilon=st.sampled_from([1e-3, 0.015, 0.1, 1.0, 7.5]),
    sensitivity=st.sampled_from([Fraction(1, 2), 1, Fraction(3, 7)]),
    seed=st.integers(0, 2**32),
)
def test_scaled_scores_select_exactly_as_fractions(
    numerators: list[int], common: int, epsilon: float, sensitivity, seed: int
) -> None:
    """``permute_and_flip_scaled`` (the scores numerators[i]/common, on one integer scale:
    ``rank_threshold``'s path) is ``permute_and_flip`` on those scores as Fractions: same
    choice and the same draws from the source, whatever common factor the scale carries."""
    scaled, fractions = (SeededRandom(seed, insecure=True) for _ in range(2))
    chosen = udfs.selection.permute_and_flip_scaled(
        numerators, common, epsilon, sensitivity, scaled
    )
    scores = [Fraction(n, common) for n in numerators]
    assert chosen == permute_and_flip(scores, epsilon, sensitivity, fractions)
    assert scaled.randbits(64) == fractions.randbits(64)


def test_scaled_scores_refuse_inexact_input() -> None:
    rng = SeededRandom(1, insecure=True)
    with pytest.raises(TypeError):
        udfs.selection.permute_and_flip_scaled([1, np.int64(2)], 1, 1.0, 1, rng)
    with pytest.raises(ValueError):
        udfs.selection.permute_and_flip_scaled([1, 2], 0, 1.0, 1, rng)
    with pytest.raises(ValueError):
        udfs.selection.permute_and_flip_scaled([], 1, 1.0, 1, rng)
