"""The discrete Laplace mechanism on integer (grid-unit) aggregates, and its accuracy.

Privacy map (OpenDP style). ``laplace_release(values, sensitivity=Delta, epsilon=eps)``
releases ``value + Z`` for each value, with independent Z ~ DLap(t), t = Delta/eps exactly
(:func:`udfs.discrete_laplace.scale_of`). If the *vector* of values has L1 sensitivity at
most Delta (an integer, in grid units) under the neighbouring relation, the release is
eps-DP (pure): for neighbouring inputs a, b with ||a - b||_1 <= Delta, every outcome's
probability ratio is prod_i exp(|a_i - b_i| / t) <= exp(Delta / t) = exp(eps). The sampler
is exact, so this holds for the implemented distribution, not only for the ideal one.

Values are exact integers and ``value + Z`` is computed exactly; turning the result into a
float (dividing by the grid scale) happens afterwards and is post-processing, so the
floating-point attack on textbook Laplace (Mironov, CCS 2012) does not apply.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from fractions import Fraction
from numbers import Real

from udfs.discrete_laplace import (
    _check_epsilon,
    _check_sensitivity,
    sample_discrete_laplace,
    scale_of,
)
from udfs.random import RandomSource

__all__ = ["laplace_halfwidth", "laplace_release"]


def laplace_release(
    values: Sequence[int | None],
    sensitivity: int,
    epsilon: float,
    rng: RandomSource,
) -> list[int | None]:
    """Return ``[v + DLap(sensitivity/epsilon) for v in values]``; ``None`` stays ``None``.

    Privacy map: eps-DP when ``values`` has L1 sensitivity <= ``sensitivity`` (an integer
    >= 1, grid units). Each value gets fresh, independent noise. ``None`` (SQL NULL) passes
    through un-noised, so the caller must make sure NULL-ness itself does not depend on
    private data (e.g. ``COALESCE(SUM(x), 0)`` over public groups).
    """
    num, den = scale_of(sensitivity, epsilon)
    out: list[int | None] = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        if isinstance(value, float):
            raise TypeError("laplace_release takes exact integers (grid units), not floats")
        out.append(operator.index(value) + sample_discrete_laplace(num, den, rng))
    return out


def _log_two_sided_tail(w: int, inv_t: float, log1p_q: float) -> float:
    """log P(|Z| > w) = log 2 - (w + 1)/t - log(1 + q) for Z ~ DLap(t), w >= 0."""
    return math.log(2.0) - (w + 1) * inv_t - log1p_q


def laplace_halfwidth(sensitivity: int, epsilon: float, alpha: float) -> float:
    """Smallest integer w >= 0 with P(|Z| > w) <= alpha, Z ~ DLap(sensitivity/epsilon).

    In grid units, returned as a float holding an integer. The released value is within
    +-w of the exact aggregate with probability >= 1 - alpha, so ``[released - w,
    released + w]`` is a (1 - alpha) confidence interval (pure post-processing: it uses
    only public parameters).

    Closed form: P(Z >= z) = q**z / (1 + q) for z >= 1, q = exp(-1/t), so
    P(|Z| > w) = 2 q**(w+1) / (1 + q) and w = max(0, ceil(t * log(2 / (alpha (1 + q)))) - 1).
    Computed in log space (q**z underflows for large z/t) and then checked against the
    tail formula, moving w by a step or two if float rounding put it off the boundary.
    """
    delta = _check_sensitivity(sensitivity)
    eps = _check_epsilon(epsilon)
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    inv_t = float(eps / Fraction(delta))
    t = 1.0 / inv_t
    log1p_q = math.log1p(math.exp(-inv_t))
    log_alpha = math.log(alpha)
    w = max(0, math.ceil(t * (math.log(2.0) - log_alpha - log1p_q)) - 1)
    # Bounded correction: for huge t neighbouring w are indistinguishable in float, and the
    # closed form is already accurate to float precision there.
    for _ in range(4):
        if _log_two_sided_tail(w, inv_t, log1p_q) <= log_alpha:
            break
        w += 1
    for _ in range(4):
        if w == 0 or _log_two_sided_tail(w - 1, inv_t, log1p_q) > log_alpha:
            break
        w -= 1
    return float(w)
