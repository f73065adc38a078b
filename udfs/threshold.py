"""Private choice of a contribution threshold, for BOUND ROWS/WEIGHTS/CLIP AUTO.

Both rules read one small summary computed in the engine: the number of units and, for
each candidate threshold ``c``, how many units keep a cell (their rows in one group) of
more than ``c`` rows. Adding or removing a unit moves every one of these counts by at
most one, and the histogram of largest cell sizes they define by one in L1: that is the
sensitivity both rules use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from udfs.laplace import laplace_release
from udfs.random import RandomSource
from udfs.selection import permute_and_flip


def rank_threshold(
    candidates: Sequence[int],
    exceedances: Sequence[int],
    rank: int,
    epsilon: float,
    rng: RandomSource,
) -> int:
    """The candidate above which about ``rank`` cells lie (AKMV19 sec. 3, eq. 5-6).

    For a sum under a cap, the error-optimal cap is near the ⌈1/ε⌉-th largest
    contribution; RT24 takes the ⌈2/ε⌉-th for its T. Score of the i-th candidate ``c``:
    −|#{units with a cell of more than c rows} − rank| − 2i/ε. The first term has
    sensitivity 1; the second is a data-independent prior that multiplies a candidate's
    acceptance by e^(−1) per step up the geometric grid, so the many large candidates
    that no unit exceeds (score −rank, nearly as good as the best when rank is small)
    are not chosen in bulk.

    Privacy map: ε-DP (permute-and-flip over scores of sensitivity 1; a data-independent
    term changes no sensitivity).
    """
    step = 2 / Fraction(epsilon)
    scores = [-abs(over - rank) - i * step for i, over in enumerate(exceedances)]
    return candidates[permute_and_flip(scores, epsilon, 1, rng)]


def size_histogram(units: int, exceedances: Sequence[int]) -> list[int]:
    """Units per largest-cell size bucket: (0, c0], (c0, c1], ..., above the last candidate."""
    upper = [units, *exceedances]
    return [a - b for a, b in zip(upper, [*exceedances, 0], strict=True)]


def variance_threshold(
    candidates: Sequence[int],
    units: int,
    exceedances: Sequence[int],
    half_range: float,
    measure_epsilon: float,
    epsilon: float,
    rng: RandomSource,
    noise_factor: int = 1,
) -> int:
    """The weight threshold h minimising EMMMR20's v(h) (Claim 1) on a noisy histogram.

    v(h) = (σ² Σ_q min(h, s_q)²/s_q + 2 (h·B/ε)²) / (Σ_q min(h, s_q))² is the variance of
    the weighted average with per-unit weight min(h, s_q): sampling spread plus Laplace
    noise of scale h·B/ε on the weighted sum. The sizes s_q are private, so v is
    evaluated on a Laplace-noised histogram of the units' largest cell sizes (each bucket
    at its upper end, counts below the noise's reach taken as 0); σ² is taken as B²/3, the
    variance of a uniform value on [−B, B]. ``noise_factor`` = G·m² carries the query's
    shape over to one group's mean: G released groups share the units, and one unit's
    weight reaches m of them, so each group's noise is m·h·B/ε on a count of about n_h/G.

    Privacy map: ε-DP (Laplace on a histogram of L1 sensitivity 1); the minimisation is
    post-processing.
    """
    counts = laplace_release(size_histogram(units, exceedances), 1, epsilon, rng)
    sizes = [*candidates, candidates[-1] * 2]
    # Noise alone exceeds this in any of the buckets with probability about 5%: below it a
    # count is taken as empty, so noise in the many empty buckets of large sizes does not
    # invent heavy units.
    floor = math.log(len(sizes) / 0.05) / epsilon
    buckets = [(s, n if n > floor else 0) for s, n in zip(sizes, counts, strict=True)]
    spread = half_range**2 / 3

    def variance(h: int) -> float:
        kept = sum(n * min(h, s) for s, n in buckets)
        if kept <= 0:
            return float("inf")
        sampling = sum(n * min(h, s) ** 2 / s for s, n in buckets)
        noise = 2 * noise_factor * (h * half_range / measure_epsilon) ** 2
        return (spread * sampling + noise) / kept**2

    return min(candidates, key=variance)
