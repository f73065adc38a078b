"""A test-only switch that makes every noise draw too small, to show audits have power.

A privacy audit that never fails proves nothing; ``tests/test_audit.py`` runs each
mechanism once as shipped (the audit must pass) and once inside
:func:`weaken_noise_for_tests` (the audit must detect the violation). Inside the context,
the samplers draw noise for ``factor * epsilon`` while everything public (thresholds,
sensitivities, the ε charged) stays as declared: the noise is ``factor`` times too small.

Nothing outside Python code can reach it: no SQL function, ``connect`` option or
environment variable reads or sets it, and the factor is 1 outside the context.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction

__all__ = ["noise_epsilon", "weaken_noise_for_tests"]

_factor = Fraction(1)


def noise_epsilon(epsilon: Fraction) -> Fraction:
    """The ε the samplers draw for: ``epsilon`` itself, except inside the test context."""
    return epsilon * _factor


@contextmanager
def weaken_noise_for_tests(factor: float) -> Iterator[None]:
    """FOR TESTS ONLY: draw all noise as if ε were ``factor`` times larger.

    Not thread-local on purpose: DuckDB calls the release functions from its own threads.
    """
    global _factor
    if not factor >= 1:
        raise ValueError("the test hook only weakens noise: factor must be >= 1")
    previous, _factor = _factor, Fraction(factor)
    try:
        yield
    finally:
        _factor = previous
