"""Exact sampling of the discrete Laplace distribution on the integers.

The discrete Laplace (two-sided geometric) distribution with scale ``t > 0`` has

    P(Z = z) = (1 - q) / (1 + q) * q**|z|,   q = exp(-1/t),   z in Z.

privsql releases every aggregate as an exact integer in grid units, so this is the noise
distribution of all its Laplace releases. The sampler follows Canonne, Kamath and Steinke,
"The Discrete Gaussian for Differential Privacy" (NeurIPS 2020; "CKS20"), Algorithms 1
and 2: it uses only uniform integers and exact integer comparisons, never floating point,
so given a perfectly uniform :class:`~udfs.random.RandomSource` its output distribution is
*exactly* the one above (distance zero from the ideal). Expected running time is O(1)
random draws for every scale, including very large ones (numerators ~2**60 and beyond).
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from numbers import Rational, Real

from udfs.random import RandomSource
from udfs.weakening import noise_epsilon

__all__ = ["bernoulli_exp", "sample_discrete_laplace", "scale_of"]


def _bernoulli_exp_le1(num: int, den: int, rng: RandomSource) -> bool:
    """Bernoulli(exp(-num/den)) for ``0 <= num <= den`` (CKS20 Algorithm 1, gamma <= 1).

    Draw A_k ~ Bernoulli(gamma/k) for k = 1, 2, ... until the first failure at index K;
    P(K > k) = gamma**k / k!, hence P(K odd) = sum_j (-gamma)**j / j! = exp(-gamma).
    Each A_k is an exact rational trial: ``randbelow(den * k) < num``.
    """
    if num == 0:
        return True
    randbelow = rng.randbelow
    k = 1
    while randbelow(den * k) < num:
        k += 1
    return bool(k & 1)


def _bernoulli_exp_minus_one(rng: RandomSource) -> bool:
    """Bernoulli(exp(-1)): :func:`_bernoulli_exp_le1` specialised to num = den = 1.

    The first trial Bernoulli(1/1) always succeeds, so start at k = 2; trial k succeeds
    iff ``randbelow(k) == 0``.
    """
    randbelow = rng.randbelow
    k = 2
    while randbelow(k) == 0:
        k += 1
    return bool(k & 1)


def bernoulli_exp(num: int, den: int, rng: RandomSource) -> bool:
    """Return ``True`` with probability exactly ``exp(-num/den)`` (CKS20 Algorithm 1).

    ``num >= 0`` and ``den >= 1`` are integers. For gamma = num/den > 1 the event is split
    as exp(-gamma) = exp(-1)**floor(gamma) * exp(-(gamma - floor(gamma))): floor(gamma)
    independent Bernoulli(exp(-1)) trials (stopping at the first failure, so the expected
    work is O(1) however large gamma is) and one trial for the fractional part.
    """
    num = operator.index(num)
    den = operator.index(den)
    if num < 0 or den < 1:
        raise ValueError(f"bernoulli_exp needs num >= 0 and den >= 1, got {num}/{den}")
    whole, frac = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_minus_one(rng):
            return False
    return _bernoulli_exp_le1(frac, den, rng)


def sample_discrete_laplace(scale_num: int, scale_den: int, rng: RandomSource) -> int:
    """Draw Z with P(Z = z) proportional to exp(-|z| * scale_den / scale_num), exactly.

    The scale is the rational t = scale_num / scale_den > 0 (CKS20 Algorithm 2):

    1. U uniform in [0, scale_num); keep it with probability exp(-U/scale_num), else retry.
    2. V = number of successes of Bernoulli(exp(-1)) before the first failure.
    3. X = U + scale_num * V is geometric: P(X = x) proportional to exp(-x/scale_num).
    4. Y = floor(X / scale_den) is geometric: P(Y = y) proportional to exp(-y/t).
    5. With a fair sign bit return +Y or -Y, retrying on "-0" so zero is not counted twice.

    Step 1 accepts with probability (1 - 1/e) / (scale_num * (1 - exp(-1/scale_num))), which
    is at least 1 - 1/e > 0.63, and step 5 with probability >= 1/2, so the expected number
    of rounds is below 3.2 for every scale; all arithmetic is on Python integers (no
    ``Fraction`` in the loop).
    """
    num = operator.index(scale_num)
    den = operator.index(scale_den)
    if num < 1 or den < 1:
        raise ValueError(f"scale must be a positive fraction, got {num}/{den}")
    g = math.gcd(num, den)
    if g != 1:
        num //= g
        den //= g
    randbelow = rng.randbelow
    randbits = rng.randbits
    while True:
        u = randbelow(num)
        # Bernoulli(exp(-u/num)), u < num: inlined _bernoulli_exp_le1.
        if u:
            k = 1
            while randbelow(num * k) < u:
                k += 1
            if not k & 1:
                continue
        # Geometric V: count Bernoulli(exp(-1)) successes (inlined _bernoulli_exp_minus_one).
        v = 0
        while True:
            k = 2
            while randbelow(k) == 0:
                k += 1
            if not k & 1:
                break
            v += 1
        y = (u + num * v) // den
        if randbits(1):
            if y == 0:
                continue
            return -y
        return y


def exact_real(value: object, name: str, condition: str) -> Fraction:
    """A public real number as an exact :class:`Fraction` with Python-int parts.

    Floats (including numpy floats) convert exactly, as do ints and fractions; bools,
    non-reals and non-finite floats are refused. ``condition`` completes the error
    message ("must be ...").
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"{name} must be {condition}, got {value!r}")
    return Fraction(as_float)


def positive_real(value: object, name: str) -> Fraction:
    """A finite, positive public number (ε, a sensitivity, a unit weight) as a Fraction."""
    out = exact_real(value, name, "finite and > 0")
    if out <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return out


def _check_epsilon(epsilon: float | Rational) -> Fraction:
    """Return epsilon as an exact :class:`Fraction`; reject non-finite or non-positive."""
    return positive_real(epsilon, "epsilon")


def _check_sensitivity(sensitivity: int, name: str = "sensitivity") -> int:
    """Return ``sensitivity`` as an int >= 1; reject bools, non-integers and values < 1."""
    if isinstance(sensitivity, bool):
        raise TypeError(f"{name} must be an int, not a bool")
    try:
        value = operator.index(sensitivity)
    except TypeError as exc:
        raise TypeError(f"{name} must be an integer (grid units), got {sensitivity!r}") from exc
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def scale_of(sensitivity: int, epsilon: float) -> tuple[int, int]:
    """Return the Laplace scale t = sensitivity / epsilon as a reduced ``(num, den)``.

    ``Fraction(epsilon)`` is the exact value of the float, so the returned scale is exactly
    the one the privacy map needs: with integer sensitivity Delta, noise DLap(Delta/eps)
    changes every output probability by a factor of at most exp(Delta/t) = exp(eps).
    ``sensitivity`` must be an integer >= 1 (a zero-sensitivity release needs no noise and
    is the caller's business); ``epsilon`` must be finite and > 0.
    """
    delta = _check_sensitivity(sensitivity)
    eps = noise_epsilon(_check_epsilon(epsilon))
    t = Fraction(delta) / eps
    return t.numerator, t.denominator
