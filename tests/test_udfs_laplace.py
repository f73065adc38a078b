"""Tests for udfs.laplace: the eps-DP release and its accuracy half-width."""

from __future__ import annotations

import math

import numpy as np
import pytest

from udfs.discrete_laplace import scale_of
from udfs.laplace import laplace_halfwidth, laplace_release
from udfs.random import SeededRandom

Z_CUTOFF = 5.5  # two-sided normal tail ~3.8e-8 per comparison


def _log_ratio_interval(k1: int, k2: int, n: int) -> tuple[float, float, float]:
    """log(p1/p2) for two binomial proportions k1/n, k2/n with a delta-method band."""
    p1, p2 = k1 / n, k2 / n
    log_ratio = math.log(p1 / p2)
    se = math.sqrt((1 - p1) / (n * p1) + (1 - p2) / (n * p2))
    return log_ratio - Z_CUTOFF * se, log_ratio, log_ratio + Z_CUTOFF * se


def _release_samples(value: int, sensitivity: int, epsilon: float, n: int, seed: int) -> np.ndarray:
    rng = SeededRandom(seed, insecure=True)
    return np.array(laplace_release([value] * n, sensitivity, epsilon, rng), dtype=np.int64)


def _privacy_loss_bounds(
    sensitivity: int, epsilon: float, n: int, seed: int
) -> list[tuple[float, float, float]]:
    """Estimated log P[M(D') in E] / P[M(D) in E] for neighbours D = 0, D' = sensitivity.

    Events: E = {Y >= c} with c above the sensitivity (where the true log-ratio of the
    discrete Laplace is exactly eps) and E = {Y <= c} for the reverse direction.
    """
    a = _release_samples(0, sensitivity, epsilon, n, seed)
    b = _release_samples(sensitivity, sensitivity, epsilon, n, seed + 1)
    out = []
    for c in (sensitivity + 1, sensitivity + 2, sensitivity + 3):
        out.append(_log_ratio_interval(int((b >= c).sum()), int((a >= c).sum()), n))
        out.append(
            _log_ratio_interval(
                int((a <= -c + sensitivity).sum()), int((b <= -c + sensitivity).sum()), n
            )
        )
    return out


def test_release_is_eps_dp_empirically() -> None:
    sensitivity, epsilon, n = 2, 0.7, 200_000
    for low, est, _high in _privacy_loss_bounds(sensitivity, epsilon, n, seed=101):
        # The true log-ratio of these events is exactly eps; the estimate must not exceed
        # eps by more than the confidence margin, and must be close to it.
        assert low <= epsilon, (low, est)
        assert abs(est - epsilon) < 0.1


def test_release_with_too_little_noise_is_detected() -> None:
    # A release claiming eps while adding the noise of 1.5 eps (scale / 1.5).
    sensitivity, epsilon, n = 2, 0.7, 200_000
    bounds = _privacy_loss_bounds(sensitivity, 1.5 * epsilon, n, seed=201)
    assert all(low > epsilon for low, _est, _high in bounds), bounds


def test_release_passes_none_and_keeps_ints_exact() -> None:
    rng = SeededRandom(3, insecure=True)
    big = 10**30 + 7
    out = laplace_release([None, 5, big, None, -(10**35)], 1, 1000.0, rng)
    # eps = 1000 with sensitivity 1: P(noise != 0) ~ 2 e^-1000, i.e. exactly the input.
    assert out == [None, 5, big, None, -(10**35)]
    assert all(type(v) is int for v in out if v is not None)
    noisy = laplace_release([big] * 100, 10**20, 1.0, rng)
    assert all(isinstance(v, int) and abs(v - big) < 60 * 10**20 for v in noisy)
    assert len(set(noisy)) > 90  # fresh noise per value
    assert laplace_release([], 1, 1.0, rng) == []


def test_release_rejects_floats_and_bad_parameters() -> None:
    rng = SeededRandom(4, insecure=True)
    with pytest.raises(TypeError):
        laplace_release([1.5], 1, 1.0, rng)  # type: ignore[list-item]
    with pytest.raises(ValueError):
        laplace_release([1], 0, 1.0, rng)
    with pytest.raises(ValueError):
        laplace_release([1], 1, 0.0, rng)


def _two_sided_tail(w: int, t: float) -> float:
    """P(|Z| > w) = 2 q^(w+1) / (1 + q) for Z ~ DLap(t)."""
    q = math.exp(-1.0 / t)
    return 2.0 * math.exp(-(w + 1) / t) / (1.0 + q)


@pytest.mark.parametrize(
    ("sensitivity", "epsilon", "alpha"),
    [
        (1, 1.0, 0.05),
        (1, 0.1, 0.05),
        (3, 0.5, 0.01),
        (1, 10.0, 0.05),
        (1, 100.0, 0.5),
        (7, 0.3, 0.2),
    ],
)
def test_halfwidth_is_smallest_covering_integer(
    sensitivity: int, epsilon: float, alpha: float
) -> None:
    w = laplace_halfwidth(sensitivity, epsilon, alpha)
    assert isinstance(w, float) and w == int(w) and w >= 0
    num, den = scale_of(sensitivity, epsilon)
    t = num / den
    assert _two_sided_tail(int(w), t) <= alpha
    if w > 0:
        assert _two_sided_tail(int(w) - 1, t) > alpha


def test_halfwidth_known_values_and_coverage() -> None:
    # t = 1, alpha = 0.05: 2 e^-(w+1) / (1 + e^-1) <= 0.05 first at w = 3.
    assert laplace_halfwidth(1, 1.0, 0.05) == 3.0
    # Tiny noise: no interval needed.
    assert laplace_halfwidth(1, 100.0, 0.05) == 0.0
    # Large scale: matches the continuous Laplace t * ln(1/alpha) to relative 1e-9.
    t = 2**50
    assert laplace_halfwidth(t, 1.0, 0.05) == pytest.approx(t * math.log(1 / 0.05), rel=1e-9)
    # Simulated coverage at t = 10.
    n, alpha = 50_000, 0.05
    w = laplace_halfwidth(10, 1.0, alpha)
    s = _release_samples(0, 10, 1.0, n, seed=301)
    miss = int((np.abs(s) > w).sum())
    p = _two_sided_tail(int(w), 10.0)
    assert abs(miss - n * p) < Z_CUTOFF * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5, math.nan])
def test_halfwidth_rejects_alpha(alpha: float) -> None:
    with pytest.raises(ValueError):
        laplace_halfwidth(1, 1.0, alpha)
