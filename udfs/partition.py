"""Differentially private partition selection: which non-public GROUP BY keys to release.

Input per key: c = the exact number of distinct privacy units in the key after contribution
bounding, where bounding guarantees every unit touches at most ``max_groups`` = m keys.
Mechanism: release the key iff ``c + Z >= T`` with fresh Z ~ DLap(m/eps) per key, and never
release a key with c = 0. T is the integer threshold from :func:`partition_threshold`.

Privacy map: (eps, delta)-DP under add/remove of one unit. Per key, the decision is a
function of c alone, and one unit moves c by at most 1 in at most m keys.

* c >= 1 vs c + 1: both decisions are the DLap mechanism (scale m/eps) followed by a
  threshold, so their probabilities differ by a factor <= exp(eps/m) (pure DP).
* c = 0 vs c = 1 (the unit creates the key): with c = 0 the key is never released; with
  c = 1 it is released with probability p = P(Z >= T - 1) <= delta/m by the choice of T.
  So P[release | 1] <= e^(eps/m) * 0 + delta/m, and P[no release | 0] = 1 <=
  e^(eps/m) * (1 - p) + delta/m; the other two inequalities hold trivially.

Each affected key's decision is thus (eps/m, delta/m)-DP, the keys' noises are
independent, and at most m keys are affected, so by basic composition the set of released
keys is (eps, delta)-DP (as in Google's DP SQL and OpenDP; Desfontaines et al., PoPETs 2022,
"Differentially private partition selection"). A key held by a single unit appears with
probability <= delta/m <= delta.

Threshold: for Z ~ DLap(t), t = m/eps, q = exp(-1/t) and z >= 1, P(Z >= z) = q**z / (1+q).
T = 1 + z*, z* the smallest z >= 1 with q**z / (1 + q) <= delta/m, computed in log space
with 60-digit decimal arithmetic and a safety margin so float error can only raise T.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from decimal import ROUND_CEILING, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache
from numbers import Real

from udfs.discrete_laplace import (
    _check_epsilon,
    _check_sensitivity,
    sample_discrete_laplace,
    scale_of,
)
from udfs.random import RandomSource

__all__ = ["keep_partitions", "partition_threshold"]

# Margin (in log-probability) by which the chosen z must beat the target; far above the
# ~1e-55 rounding error of 60-digit arithmetic, far below anything that matters for utility.
_LOG_MARGIN = Decimal("1e-30")


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, Real):
        raise TypeError(f"delta must be a float, got {delta!r}")
    if not (math.isfinite(delta) and 0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return float(delta)


@lru_cache(maxsize=256)
def _threshold(max_groups: int, eps: Fraction, delta: float) -> int:
    with localcontext() as ctx:
        ctx.prec = 60
        inv_t = Decimal(eps.numerator) / Decimal(eps.denominator) / Decimal(max_groups)
        q = (-inv_t).exp()
        log1p_q = (Decimal(1) + q).ln()
        log_target = (Decimal(delta) / Decimal(max_groups)).ln()  # Decimal(float) is exact

        def log_tail(z: int) -> Decimal:  # log P(Z >= z), z >= 1
            return -z * inv_t - log1p_q

        bound = (-log_target - log1p_q) / inv_t
        z = max(1, int(bound.to_integral_value(rounding=ROUND_CEILING)))
        while log_tail(z) > log_target - _LOG_MARGIN:
            z += 1
        return z + 1


def partition_threshold(max_groups: int, epsilon: float, delta: float) -> int:
    """Integer threshold T: release a key iff units + DLap(max_groups/epsilon) >= T.

    T = 1 + min{z >= 1 : q**z / (1 + q) <= delta/max_groups}, q = exp(-epsilon/max_groups),
    so a key held by exactly one unit is released with probability <= delta/max_groups and,
    with at most ``max_groups`` keys per unit, the selection is (epsilon, delta)-DP (see
    the module docstring). ``max_groups`` >= 1, ``epsilon`` finite > 0, 0 < delta < 1.
    """
    m = _check_sensitivity(max_groups, "max_groups")
    eps = _check_epsilon(epsilon)
    return _threshold(m, eps, _check_delta(delta))


def keep_partitions(
    unit_counts: Sequence[int | None],
    max_groups: int,
    epsilon: float,
    delta: float,
    rng: RandomSource,
) -> list[bool]:
    """Decide per key whether to release it: ``count + DLap(max_groups/epsilon) >= T``.

    ``unit_counts[i]`` is the number of distinct privacy units in key i after bounding (so
    the count vector has L1 sensitivity ``max_groups``). Counts <= 0 and ``None`` are never
    kept, without drawing noise: such a key has no unit to protect or reveal. The decisions
    are (epsilon, delta)-DP with T = :func:`partition_threshold`; fresh noise per key.
    """
    threshold = partition_threshold(max_groups, epsilon, delta)
    num, den = scale_of(max_groups, epsilon)
    keep: list[bool] = []
    for count in unit_counts:
        if count is None:
            keep.append(False)
            continue
        if isinstance(count, float):
            raise TypeError("unit counts must be integers, not floats")
        c = operator.index(count)
        if c <= 0:
            keep.append(False)
            continue
        keep.append(c + sample_discrete_laplace(num, den, rng) >= threshold)
    return keep
