"""Private selection of one candidate by score: the permute-and-flip mechanism.

R. McKenna and D. Sheldon, "Permute-and-Flip: A new mechanism for differentially private
selection", NeurIPS 2020 ("PF"). Given scores u_1, ..., u_n and u* = max_i u_i, visit the
candidates in a uniformly random order and accept candidate i with probability

    exp(-eps * (u* - u_i) / (2 * Delta));

return the first accepted one. A best candidate is accepted with probability 1, so at most
n candidates are visited.

Privacy map (OpenDP style). ``permute_and_flip(scores, epsilon=eps, sensitivity=Delta)`` is
eps-DP (pure) whenever every score u_i, as a function of the database, changes by at most
Delta between neighbouring databases (the scores need not move together). This is
McKenna & Sheldon's Theorem 1; its proof needs only |u_i(D) - u_i(D')| <= Delta for each i
(the maximum u* then moves by at most Delta as well). PF is never worse than the
exponential mechanism in expected score (their Theorem 2), and its output distribution
differs from the exponential mechanism's.

Exactness. Every acceptance is an exact Bernoulli(exp(-x)) trial (CKS20,
:func:`udfs.discrete_laplace.bernoulli_exp`) on the exact rational x = eps*(u* - u_i)/(2*Delta):
``Fraction(epsilon)`` is the exact value of the float, scores are exact integers or
fractions, and the order is an exact Fisher-Yates shuffle from ``rng.randbelow``. No
floating-point number, ``exp`` or ``log`` is involved, so nothing can overflow, underflow
or be NaN, and the implemented output distribution is exactly the ideal one given a
uniform :class:`~udfs.random.RandomSource`.

Running time depends on the scores (the number of candidates visited before acceptance,
at most n); the output does not leak anything beyond the eps-DP guarantee, but a caller
that exposes timing should keep that in mind.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from fractions import Fraction
from numbers import Rational

from udfs.discrete_laplace import _check_epsilon, bernoulli_exp, positive_real
from udfs.random import RandomSource
from udfs.weakening import noise_epsilon

__all__ = ["permute_and_flip", "permute_and_flip_scaled"]


def _as_fraction(value: Rational) -> Fraction:
    """An exact Fraction with Python-int parts (numpy integers would overflow later)."""
    return Fraction(int(value.numerator), int(value.denominator))


def _exact_rational(value: object, name: str) -> Fraction:
    """``value`` as an exact :class:`Fraction`; ints (incl. numpy ints) and Rationals only.

    Floats are refused: a score computed in floating point is not exact, and its
    sensitivity would not be the one the caller states.
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int or Fraction, not a bool")
    if isinstance(value, Rational):
        return _as_fraction(value)
    try:
        return Fraction(operator.index(value))
    except TypeError:
        raise TypeError(
            f"{name} must be an exact int or Fraction, got {type(value).__name__}"
        ) from None


def _permute_and_flip_integers(scores: Sequence[int], num: int, den: int, rng: RandomSource) -> int:
    """PF on integer scores S_i, accepting i with probability exp(-num*(S* - S_i)/den)."""
    top = max(scores)
    return _permute_and_flip_gaps(len(scores), lambda i: top - scores[i], num, den, rng)


def _permute_and_flip_gaps(
    n: int, gap: Callable[[int], int], num: int, den: int, rng: RandomSource
) -> int:
    """PF over n candidates given each one's integer gap S* - S_i >= 0 (some gap is 0).

    ``num >= 1`` and ``den >= 1`` are integers. The shuffle is an incremental Fisher-Yates:
    position j receives a uniform pick among the not yet visited candidates, so the visiting
    order is a uniform permutation, and it stops at the first acceptance. Gaps are asked
    for only as candidates are visited, so a caller may compute them lazily.
    """
    order = list(range(n))
    randbelow = rng.randbelow
    for j in range(n):
        k = j + randbelow(n - j)
        i = order[k]
        order[k] = order[j]
        order[j] = i
        g = gap(i)
        if g == 0 or bernoulli_exp(num * g, den, rng):
            return i
    raise AssertionError("unreachable: a best candidate is always accepted")


def permute_and_flip(
    scores: Sequence[Fraction | int],
    epsilon: float,
    sensitivity: Fraction | int,
    rng: RandomSource,
) -> int:
    """Return the index of one candidate, chosen by permute-and-flip (McKenna-Sheldon 2020).

    Candidate i is accepted, when visited in a uniformly random order, with probability
    exactly exp(-epsilon * (max(scores) - scores[i]) / (2 * sensitivity)).

    Privacy map: epsilon-DP when each score changes by at most ``sensitivity`` between
    neighbouring databases. Higher scores are better. ``scores`` are exact ints or
    Fractions (floats are refused); ``epsilon`` must be finite and > 0; ``sensitivity``
    (Delta) a finite number > 0 (a float is taken at its exact value). Ties among the best
    candidates are broken uniformly at random.

    Returns an index in ``range(len(scores))``; raises ``ValueError`` for no candidates.
    """
    eps = _check_epsilon(epsilon)
    delta = positive_real(sensitivity, "sensitivity")
    integer_scores = list(scores)
    if not integer_scores:
        raise ValueError("permute_and_flip needs at least one candidate")
    common = 1
    if not all(type(s) is int for s in integer_scores):
        # Put the scores on a common integer scale: S_i = u_i * L. Then
        # eps * (u* - u_i) / (2 Delta) = (S* - S_i) * eps / (2 Delta L), one fixed rational.
        values = [_exact_rational(s, "score") for s in integer_scores]
        common = math.lcm(*(v.denominator for v in values))
        integer_scores = [v.numerator * (common // v.denominator) for v in values]
    return _permute_and_flip_scaled(integer_scores, common, eps, delta, rng)


def permute_and_flip_scaled(
    numerators: Sequence[int],
    common: int,
    epsilon: float | Fraction,
    sensitivity: Fraction | int,
    rng: RandomSource,
) -> int:
    """``permute_and_flip`` on the scores ``numerators[i] / common``, given on one integer
    scale by a caller that can build them without a Fraction per score (the rank rule's 115
    candidates: ``udfs.threshold.rank_threshold``).

    ``numerators`` are Python ints and ``common`` an int >= 1. The scale is first reduced
    to the least common denominator L of the scores in lowest terms (L = common / g, g the
    gcd of ``common`` and every numerator), so the integer scores S_i = L * u_i and the
    acceptance fraction eps / (2 Delta L) are exactly those ``permute_and_flip`` computes
    from the same scores as Fractions: same arithmetic, same draws from ``rng``.
    """
    eps = _check_epsilon(epsilon)
    delta = positive_real(sensitivity, "sensitivity")
    if not numerators:
        raise ValueError("permute_and_flip needs at least one candidate")
    if type(common) is not int or common < 1:
        raise ValueError(f"the scores' common denominator must be an int >= 1, got {common!r}")
    if not all(type(n) is int for n in numerators):
        raise TypeError("the scores' numerators must be Python ints")
    return _permute_and_flip_scaled(list(numerators), common, eps, delta, rng)


def _permute_and_flip_scaled(
    numerators: list[int], common: int, eps: Fraction, delta: Fraction, rng: RandomSource
) -> int:
    """PF on the scores numerators[i] / common (checked ε and Δ), on the least scale."""
    shared = math.gcd(common, *numerators)
    if shared > 1:
        numerators = [n // shared for n in numerators]
        common //= shared
    scale = noise_epsilon(eps) / (2 * delta * common)
    return _permute_and_flip_integers(numerators, scale.numerator, scale.denominator, rng)
