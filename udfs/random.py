"""Sources of uniform random integers for the noise samplers.

Every sampler in ``udfs`` consumes randomness only through :class:`RandomSource`:
``randbits(k)`` (a uniform integer in ``[0, 2**k)``) and ``randbelow(n)`` (a uniform
integer in ``[0, n)``). Nothing else -- no floats, no ``log(uniform)``. Given a perfect
uniform source the samplers built on top are exact (see ``docs/privacy.md`` (Appendix A)), so the
whole distance-from-ideal budget of the release path is the quality of this source.

* :class:`SystemRandom` -- the operating system's CSPRNG (``os.urandom``), read in bulk
  into a buffer because a system call per draw would dominate the sampler's cost. This is
  the only source suitable for real releases.
* :class:`SeededRandom` -- a reproducible Mersenne-Twister stream for tests. It is *not*
  cryptographically secure: anyone who learns the seed (or enough outputs) can subtract the
  noise. Constructing it therefore raises unless the caller passes ``insecure=True``.
"""

from __future__ import annotations

import os
import random as _stdlib_random
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

__all__ = ["RandomSource", "SeededRandom", "SystemRandom"]


class RandomSource(ABC):
    """Uniform random integers; the only interface the noise samplers use.

    Subclasses implement :meth:`randbits`; :meth:`randbelow` is derived from it by
    rejection sampling, which is exactly uniform (no modulo bias).
    """

    #: ``True`` only for sources fit for real releases (an OS CSPRNG).
    secure: ClassVar[bool] = False

    @abstractmethod
    def randbits(self, k: int) -> int:
        """Return a uniform integer in ``[0, 2**k)`` (``0`` when ``k == 0``)."""

    def independent(self, stream: str) -> RandomSource:
        """A source independent of this one, named ``stream``: drawing from it leaves this
        source's sequence as it was (a seeded source's other releases stay reproducible).
        By default a fresh OS CSPRNG source."""
        return SystemRandom()

    def randbelow(self, n: int) -> int:
        """Return a uniform integer in ``[0, n)``; ``n`` must be >= 1.

        Draws ``k = bit_length(n - 1)`` bits and rejects values ``>= n``; each attempt
        succeeds with probability > 1/2, and exactly 1 when ``n`` is a power of two.
        """
        if n <= 1:
            if n == 1:
                return 0
            raise ValueError(f"randbelow needs n >= 1, got {n}")
        k = (n - 1).bit_length()
        r = self.randbits(k)
        while r >= n:
            r = self.randbits(k)
        return r


# Instances whose buffered bytes must be discarded in a forked child, so that parent and
# child never reuse the same random bits (the classic fork-after-seeding failure).
_BUFFERED: weakref.WeakSet[SystemRandom] = weakref.WeakSet()


def _discard_buffers_after_fork() -> None:
    for source in list(_BUFFERED):
        source._discard()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_discard_buffers_after_fork)


class SystemRandom(RandomSource):
    """The OS CSPRNG (``os.urandom``), buffered; the default source for releases.

    Bytes are fetched ``buffer_bytes`` at a time and handed out as 64-bit words through a
    C-level iterator, so each word is consumed at most once even when DuckDB calls a UDF
    from several threads (``next()`` on the iterator is atomic under the GIL). Requests for
    more than 64 bits concatenate whole words. Buffers are dropped in a forked child.
    """

    secure: ClassVar[bool] = True

    def __init__(self, buffer_bytes: int = 4096) -> None:
        if buffer_bytes < 8 or buffer_bytes % 8:
            raise ValueError("buffer_bytes must be a positive multiple of 8")
        self._buffer_bytes = buffer_bytes
        self._next_word: Callable[[], int] = self._refill
        _BUFFERED.add(self)

    def _refill(self) -> int:
        """Load a fresh buffer of words, install its iterator and return its first word."""
        words = memoryview(os.urandom(self._buffer_bytes)).cast("Q")
        next_word = iter(words).__next__
        self._next_word = next_word
        return next_word()

    def _discard(self) -> None:
        self._next_word = self._refill

    def _word(self) -> int:
        try:
            return self._next_word()
        except StopIteration:
            return self._refill()

    def randbits(self, k: int) -> int:
        """Return a uniform integer in ``[0, 2**k)`` from the OS CSPRNG."""
        if k <= 0:
            if k == 0:
                return 0
            raise ValueError(f"randbits needs k >= 0, got {k}")
        if k <= 64:
            return self._word() >> (64 - k)
        n_words = (k + 63) // 64
        r = 0
        for _ in range(n_words):
            r = (r << 64) | self._word()
        return r >> (64 * n_words - k)

    def randbelow(self, n: int) -> int:
        """Return a uniform integer in ``[0, n)`` (rejection sampling, as the base class)."""
        if n <= 1:
            if n == 1:
                return 0
            raise ValueError(f"randbelow needs n >= 1, got {n}")
        k = (n - 1).bit_length()
        if k > 64:
            return super().randbelow(n)
        # Inlined fast path for the common case: one buffered word per attempt.
        shift = 64 - k
        word = self._word
        r = word() >> shift
        while r >= n:
            r = word() >> shift
        return r


class SeededRandom(RandomSource):
    """A deterministic source for tests only; refused unless ``insecure=True``.

    Backed by :class:`random.Random` (Mersenne Twister), whose outputs are predictable:
    noise drawn from it protects nothing. It exists so that statistical tests are
    reproducible, and it reports ``secure = False`` so callers can refuse it in production.
    """

    secure: ClassVar[bool] = False

    def __init__(self, seed: int, *, insecure: bool = False, stream: str = "") -> None:
        if insecure is not True:
            raise ValueError(
                "SeededRandom is predictable and must not be used for real releases; "
                "pass insecure=True to acknowledge that (tests only)"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError("seed must be an int")
        self._seed = seed
        self._random = _stdlib_random.Random(f"{seed}/{stream}" if stream else seed)

    def independent(self, stream: str) -> SeededRandom:
        """The seeded stream named ``stream`` of this seed (a different Mersenne Twister)."""
        return SeededRandom(self._seed, insecure=True, stream=stream)

    def randbits(self, k: int) -> int:
        """Return a uniform integer in ``[0, 2**k)`` from the seeded stream."""
        if k < 0:
            raise ValueError(f"randbits needs k >= 0, got {k}")
        return self._random.getrandbits(k)
