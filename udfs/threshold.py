"""Private choice of a contribution threshold (BOUND ROWS/WEIGHTS/CLIP AUTO) and of
missing bounds (BOUND AUTO without CLAMPED BETWEEN).

The threshold rules read one small summary computed in the engine: the number of units
and, for each candidate threshold ``c``, how many units keep a cell (their rows in one
group) of more than ``c`` rows. The bounds rule reads, per candidate magnitude, how many
units have a value above it (below its negative). Adding or removing a unit moves every
one of these counts by at most one, and the histogram of largest cell sizes (extremes)
they define by one in L1: those are the sensitivities the rules use.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

from udfs.laplace import laplace_release
from udfs.quantile import INTERVAL_ALPHA, rank_error_bound, reach_ladder
from udfs.random import RandomSource
from udfs.selection import permute_and_flip_scaled
from udfs.unit_means import ClampedSums, MeanHistogram, noisy_mean_sums

PRIOR_SPAN = 16
"""Steps of ×1.5 (1.5^16 ≈ 650×) over which the rank rule's prior may spend at most a
quarter of the evidence the data give against the smallest candidate."""

UNITS_SHARE = Fraction(1, 10)
"""The part of the rank rule's ε spent on the noisy unit count that sets its prior."""

GAP = 5
"""v(h): empty size buckets (a factor 1.5^5 ≈ 7.6) above which a passing bucket is noise."""

RISE_PART = 3
"""Up to ``PRIOR_KNEE``, the rank rule's prior spends over PRIOR_SPAN steps of ×1.5 at most
1/RISE_PART of the evidence the data give against the smallest candidate (4, a quarter,
before docs/utility.md §16)."""

PRIOR_KNEE = Fraction(3, 2)
"""The prior (γ, nats per ×1.5) the rank rule's fast rise reaches (1 before
docs/utility.md §16); past it γ rises at a twelfth of the evidence per PRIOR_SPAN."""

PRIOR_CEILING = Fraction(5, 2)
"""The most the rank rule's prior may cost per ×1.5 of cap (γ, in nats), reached where the
data give ample evidence: there a strong prior keeps the rule off the run of candidates
above every unit, which all score alike (see ``rank_threshold``)."""

PRIOR_RATIO = 1.5
"""The factor of cap the rank rule's prior γ is counted per (the grid's step when the rule
was tuned); a grid of ratio ρ pays γ·ln ρ/ln 1.5 per step."""

TWO_SIDED_FROM = 2
"""ε_s·r/m (nats) from which the rank rule scores −|C − r|/m at sensitivity 1 instead of
the one-sided −max(C − r, 0)/m at 1/2 (see ``rank_threshold``): 11 or more released
groups for one statistic, never one group at ε ≤ 10."""

MARGIN = 1
"""Grid steps the rank rule's answer sits above the candidate it selects, for a row cap
(×2^¼ on the row caps' grid; MAX_GROUPS AUTO takes none: see ``rank_threshold``)."""

BULK_FAILURE = 0.2
"""Chance that noise alone lets an empty bin pass ``bulk_top``'s threshold (see there)."""

BOUNDS_FAILURE = 1e-3
"""Chance that noise alone lets an empty magnitude bin pass the bounds rule's threshold."""

EVIDENCE = 5
"""Standard deviations of its noise by which a run of bins of a bounds histogram must
exceed zero to show units (``_units_shown_up_to``): an empty side of 51 bins shows
some by noise alone in about 3% of runs."""
WINDOW = 8
"""The widest run of bins (a factor 2⁸ of magnitude) tested for units."""
RUNS_FAILURE = 0.05
"""Bound on the chance that noise alone, on a side of a bounds histogram with no units,
shows a run of bins beyond what ``_run_beyond_noise`` reads as noise (the answer is then
shown, flagged, rather than withheld). AVG(air_time) over nycflights13 at ε = 0.1, whose
answers are within 10% of the truth, was withheld in 6, 4 and 1 of 12 sessions at 10⁻³,
10⁻² and 0.05 (the bound is loose: a Chernoff bound and a union over 380 runs)."""


class RankChoice(NamedTuple):
    """The rank rule's cap, and whether the data were too few at this ε to locate it."""

    cap: int
    blind: bool


@functools.cache
def _prior_per_step(ratio: float) -> Fraction:
    """λ = ln(ratio)/ln 1.5 to three digits: the prior's steps per ×1.5 of cap on a grid
    of ratio ``ratio`` (public, data-independent: computed once per grid)."""
    return Fraction(math.log(ratio) / math.log(PRIOR_RATIO)).limit_denominator(1000)


def rank_threshold(
    candidates: Sequence[int],
    units: int,
    exceedances: Sequence[int],
    rank: int,
    epsilon: float,
    rng: RandomSource,
    cells_per_unit: int = 1,
    margin: int = MARGIN,
    ratio: float = PRIOR_RATIO,
) -> RankChoice:
    """The candidate ``margin`` grid steps above the one where about ``rank`` cells lie
    above it (AKMV19 sec. 3, eq. 5-6), and whether the data could locate it at all
    (``blind``). ``candidates`` is a geometric grid of ratio ``ratio``.

    For a count or sum under a cap, the error-optimal cap is near the ⌈1/ε⌉-th largest
    contribution: raising the cap by one removes one row of bias per cell above it and
    adds 1/ε of noise. ``exceedances[i]`` counts the cells (unit, group) of more than
    ``candidates[i]`` rows; a unit has at most ``cells_per_unit`` cells (MAX_GROUPS m), so
    it moves each count by at most m. The rule draws a noisy unit count n̂ = n + DLap(1/ε_n)
    with ε_n = ε/10, then runs permute-and-flip with ε_s = ε − ε_n over the candidates, the
    i-th scoring −max(C_i − r, 0)/m − i·γ·λ/ε_s, where C_i is the count of cells above it,
    λ = ln(ratio)/ln 1.5 (to three digits: small exact fractions are fast) and
    r = min(rank, m·⌊n̂/2⌋) (at least 1): the target rank is
    AKMV19's, counted in cells as the bias is, but never beyond m cells of the median unit.
    Dividing by m keeps the scores' sensitivity at 1.

    The first term is one-sided: a candidate with r cells or fewer above scores as well as
    one with exactly r. Where ε_s·r/m is small that costs nothing the rule could use —
    permute-and-flip resolves a count only to about ln(#candidates)/ε_s cells, far more
    than r — and it makes the scores *monotone*: adding a unit raises every C_i or leaves
    it, so every score falls or stays, and removing one does the opposite. For monotone
    scores of sensitivity Δ, permute-and-flip accepting with exp(−ε·gap/Δ)
    (``sensitivity`` Δ/2) is ε-DP: permute-and-flip is report-noisy-max with exponential
    noise of scale 2Δ/ε (Ding et al. 2021, "The permute-and-flip mechanism is identical to
    report-noisy-max with exponential noise"), and for monotone scores the argument of
    Dwork and Roth's Claim 3.9 (report-noisy-max on counting queries) bounds the shift of
    the winning threshold by Δ instead of 2Δ, where the exponential tail loses at most
    e^ε. So the count term resolves cells twice as finely as the two-sided score
    −|C_i − r|/m at sensitivity 1. Where ε_s·r/m reaches TWO_SIDED_FROM = 2 nats (many
    released groups, or a quantile's large target) the two-sided score is kept (prior step
    2γλ/ε_s, the same e^−γλ): there its penalty of ε_s·r/(2m) nats on the candidates
    above every unit is worth more than the resolution (ratings per month at ε = 1, 12
    groups: mean relative error 0.17 one-sided, 0.14 two-sided, 0.14 under the former
    rule). Which score is used is a function of n̂ and public values.

    The second term is a data-independent prior that multiplies acceptance by e^−γ per
    ×1.5 of cap (e^−γλ per step of this grid). Some prior is needed: no unit exceeds the
    many large candidates, so their first term is 0, the best, and a cap c costs noise ∝ c;
    with γ > ln 1.5 their expected cost stays bounded. An early rule fixed γ = 1, which at
    small ε·n outweighed the data and chose the smallest candidate (one row per unit).
    Here γ = ε_s·(n̂ − r/m)/(4·PRIOR_SPAN), clamped to [1/2, 1] (now a third, to 3/2:
    below): the prior spent over
    PRIOR_SPAN steps of ×1.5 is at most a quarter of ε_s·(n̂ − r/m), the evidence the data
    give against the smallest candidate, unless that would leave γ ≤ 1/2 (ε·n too small
    for any rule to find the cap; then the prior only keeps the expected noise finite).
    Past γ = 1 it rises more slowly, γ = ε_s·(n̂ − r/m)/(12·PRIOR_SPAN), up to
    PRIOR_CEILING = 5/2: once the draw reaches the top of the data, the prior alone sets
    how far above it the cap lands. The slow rise keeps γ at 1 where the search barely
    sees the heavy units (ratings at ε ≤ 1, 943 users: 24 above 438 ratings, 11 above 657).
    Since docs/utility.md §16 the first rise is faster and goes further: γ =
    ε_s·(n̂ − r/m)/(RISE_PART·PRIOR_SPAN) with RISE_PART = 3, up to PRIOR_KNEE = 3/2 (a
    quarter, up to 1, before), then the slow rise. At ε ≤ 0.5 the mean error was set by
    the few draws that land 3–30× above the top of the data, where every candidate scores
    alike and only the prior's decay per step bounds them; γ = 1/2 there let them carry
    most of the error (flights at ε = 0.1: 2.6× the best fixed cap's, now 1.8×). The
    blind flag keeps its quarter (below).

    The row caps' grid has ratio 2^¼ (``rewriter.plan.ROW_CANDIDATES``) and their answer is
    the candidate ``margin`` = MARGIN = 1 step (×1.19) above the selected one; with the
    monotone score this is within 2× of the hindsight-best fixed cap's expected error in
    more cells than the former ×1.5 grid with its ×1.5 step, and worse by more than 10% in
    none that was within 2× (``benchmarks/utility/cap_rules.py``, docs/utility.md §13).
    The step up remains because the two errors are not alike: a cap one step too high costs
    1.19× the noise, which the interval reports; one step too low costs bias, which it does
    not. A group cap (MAX_GROUPS AUTO, the ×1.5 grid) takes no step (``margin=0``): there a
    step up multiplies the noise of every released group, and the row cap's search
    resolves cells only to ~m·ln(#candidates)/ε_s, so a larger m makes the row cap land
    lower and cut more (nycflights13 per carrier at ε = 0.1: m of 2–16 and 56% of the
    intervals covering the truth or flagged, against 75–80% without the step).

    The choice is ``blind`` when γ is at its floor of 1/2: the evidence the data give
    against the smallest candidate, ε_s·(n̂ − r/m) nats, is below 2·PRIOR_SPAN, so the
    prior and the draw, not the data, set the cap. The answers it bounds may then have
    lost most of their rows (MovieLens-like COUNT(*) at ε ≤ 0.1), which the interval does
    not show and the bounding check, at 5% of ε, mostly cannot see; the session flags them
    as it flags guessed bounds.

    Privacy map: ε-DP. n̂ is the discrete Laplace mechanism on a count of sensitivity 1
    (ε_n-DP); given n̂, r, γ, λ and the choice of score are public, and the scores have
    sensitivity 1 (C_i moves by at most m when a unit is added or removed) and are
    monotone when one-sided (C_i moves in one direction), so permute-and-flip at
    ``sensitivity`` 1/2 (one-sided) or 1 (two-sided) is ε_s-DP; sequential composition gives
    ε_n + ε_s = ε; the step up and ``blind`` (a function of n̂) are post-processing.
    """
    total = Fraction(epsilon)
    count_epsilon = total * UNITS_SHARE
    select_epsilon = total - count_epsilon
    [noisy_units] = laplace_release([units], 1, count_epsilon, rng)
    target = max(1, min(rank, cells_per_unit * (noisy_units // 2)))
    evidence = select_epsilon * (noisy_units - Fraction(target, cells_per_unit))
    blind = evidence / (4 * PRIOR_SPAN) < Fraction(1, 2)
    weak = min(PRIOR_KNEE, evidence / (RISE_PART * PRIOR_SPAN))
    decay = min(PRIOR_CEILING, max(Fraction(1, 2), weak, evidence / (12 * PRIOR_SPAN)))
    one_sided = select_epsilon * Fraction(target, cells_per_unit) < TWO_SIDED_FROM
    sensitivity = Fraction(1, 2) if one_sided else Fraction(1)
    step = 2 * sensitivity * decay * _prior_per_step(ratio) / select_epsilon
    # The scores -term_i/m - i*p/q on the one scale m*q: integers, not a Fraction each.
    m, p, q = operator.index(cells_per_unit), step.numerator, step.denominator
    numerators = [
        -((max(over - target, 0) if one_sided else abs(over - target)) * q + i * p * m)
        for i, over in enumerate(map(operator.index, exceedances))
    ]
    chosen = permute_and_flip_scaled(numerators, m * q, select_epsilon, sensitivity, rng)
    return RankChoice(candidates[min(chosen + margin, len(candidates) - 1)], blind)


def quantile_reach(p: float, buckets: int, epsilon: float, interval_epsilon: float) -> float:
    """How far, in rows (ranks), a private quantile's interval reaches per row of cap: the
    rank rule's target for a quantile's cap is this many cells above it per released group.

    AKMV19's balance for a sum sets the cap where raising it by one row adds as much noise
    (1/ε rows) as it removes bias (one row per cell above). A quantile's answer is a rank:
    its point lies within t_point of p·n (:func:`udfs.rank_error_bound` over the G buckets
    at ``epsilon``), and :func:`udfs.private_quantile_interval` keeps K = t + cap + 1 ranks
    beyond p·n on either side (:func:`udfs.quantile.interval_margin`; t the same bound over
    its reach ladder at ``interval_epsilon``), both at INTERVAL_ALPHA with sensitivity
    cap·max(p, 1 − p): about 11/ε_point + 7/ε_interval ranks per row of cap for a median,
    against 1/ε for a sum. Raising the cap by one row widens the answer's reach by this
    much, and removes at most one row of the rank's bias per cell above (bounding moves a
    kept row's weight, never more than the rows it cuts), so the balance puts the cap this
    many times as many cells lower than a sum's. Public parameters only.
    """
    share = max(p, 1 - p)
    point = rank_error_bound(buckets, epsilon, share, INTERVAL_ALPHA)
    interval = rank_error_bound(len(reach_ladder(buckets)), interval_epsilon, share, INTERVAL_ALPHA)
    return point + interval + 1


def bulk_top(
    candidates: Sequence[int],
    units: int,
    exceedances: Sequence[int],
    epsilon: float,
    rng: RandomSource,
) -> int | None:
    """The top of the bulk of units' counts: the largest candidate c_j whose bin
    (c_{j−1}, c_j] holds a noisy number of units above T = ln(bins/β)/ε, β = BULK_FAILURE;
    None when no bin passes or the bin above the last candidate does.

    ``exceedances[j]`` is how many units have a count above ``candidates[j]``; the bins
    are those of the candidates, the first (0, c_0]. MAX_GROUPS AUTO uses it to bound its
    choice by the number of groups when the keys are not listed: no unit touches more
    groups than exist, and above the most groups a unit touches every candidate looks
    alike to the rank rule (no unit above it), so its prior alone would choose among them
    (17 groups for 12 months). In the spirit of ApproxBounds (``magnitude_bounds``, one
    side), with a larger β: the bound only ever lowers the rank rule's choice, so an empty
    bin that passes by noise (probability at most β) costs nothing but the bound's use,
    while a real top bin that fails to pass makes the bound too low; a larger β keeps T,
    and so the units a bin needs, smaller.

    Privacy map: ε-DP: a unit's count lies in one bin, so the histogram has L1
    sensitivity 1 and its discrete Laplace release is ε-DP; the choice is post-processing.
    """
    histogram = size_histogram(units, exceedances)
    noisy = laplace_release(histogram, 1, Fraction(epsilon), rng)
    threshold = math.log(len(histogram) / BULK_FAILURE) / Fraction(epsilon)
    top = max((j for j, n in enumerate(noisy) if n > threshold), default=len(candidates))
    return candidates[top] if top < len(candidates) else None


class EstimatedBounds(NamedTuple):
    """Bounds estimated by ``magnitude_bounds``; ``guessed`` when they are not the data's
    alone (a later rule may add its own doubt), ``blind`` when no bin of either side cleared
    its threshold and no run of bins showed units beyond what noise reaches with
    probability RUNS_FAILURE: every bound may then be noise's (2³⁴ for nycflights13's
    delays at ε = 0.05, where a run of noise passed for units), so the answer is withheld
    (docs/query-language.md, "No answer at this ε")."""

    low: float
    high: float
    guessed: bool
    blind: bool = False


def magnitude_bounds(
    magnitudes: Sequence[float],
    above: Sequence[int],
    below: Sequence[int],
    epsilon: float,
    rng: RandomSource,
) -> EstimatedBounds:
    """Bounds (−lo, hi) on one argument: the top of the bulk of units' extremes, per side.

    In the spirit of ApproxBounds (the Google and OpenDP libraries): for each side, a
    histogram of the units' largest value above 0 (resp. most negative value below 0) over
    the bins (m_{j−1}, m_j] of ``magnitudes`` (whose first entry is 0; the last bin is open
    above and stands for the last magnitude) is released with discrete Laplace noise at
    ε/2. The side's magnitude is the upper edge of the highest bin whose noisy count
    exceeds T = ln(2·bins/β)/(ε/2), β = BOUNDS_FAILURE: an empty bin passes with
    probability at most β over both sides, so a bound is never set far above the data by
    noise alone, and no data-independent prior can pull it to zero. A side with no bin that
    passes but whose runs of bins still show units (``_units_shown_up_to``) is placed at
    their top, and the bounds say they were ``guessed``. If neither side has a
    bin that passes (ε·n too small to tell), the bin with the largest noisy count on
    either side sets that side's magnitude, the other side staying at 0, and the bounds
    say they were ``guessed``. When no bin of either side passes and no run of bins clears
    what noise reaches with probability RUNS_FAILURE (``_run_beyond_noise``), they are
    also ``blind`` and the answer is withheld (NULL, flagged) rather than shown: a run of
    noise can pass for units (a few % of draws on an empty side) and place a side at 2³⁴.
    Every candidate is above 0, so the bounds are never [0, 0].
    ``above[j]`` (``below[j]``) is how many units have a value above ``magnitudes[j]``
    (below −``magnitudes[j]``).

    Privacy map: ε-DP. A unit's largest value lies in at most one bin, so each side's
    histogram has L1 sensitivity 1 and its release is (ε/2)-DP; the two compose to ε and
    the choice of bins is post-processing.
    """
    side_epsilon = Fraction(epsilon) / 2
    bins = len(magnitudes) - 1
    threshold = math.log(2 * bins / BOUNDS_FAILURE) / side_epsilon
    sides = []
    for exceedances in (below, above):
        sides.append(laplace_release(magnitude_histogram(exceedances), 1, side_epsilon, rng))
    found = [
        max((j + 1 for j, n in enumerate(noisy) if n > threshold), default=0) for noisy in sides
    ]
    blind = not any(found) and not any(_run_beyond_noise(noisy, side_epsilon) for noisy in sides)
    guessed = False
    for side, noisy in enumerate(sides):
        if not found[side] and (top := _units_shown_up_to(noisy, side_epsilon)):
            found[side], guessed = top, True
    if not any(found):
        side, j = max((n, s, j) for s, noisy in enumerate(sides) for j, n in enumerate(noisy))[1:]
        found[side], guessed = j + 1, True
    low, high = (magnitudes[j] for j in found)
    return EstimatedBounds(0.0 - low, high, guessed, blind)


def magnitude_histogram(exceedances: Sequence[int]) -> list[int]:
    """Per bin (m_j, m_{j+1}] of the magnitudes, what lies in it, from what lies above each
    m_j (``exceedances[j]``); the last bin is open above."""
    return [a - b for a, b in zip(exceedances[:-1], [*exceedances[1:-1], 0], strict=True)]


def _units_shown_up_to(noisy: Sequence[int], side_epsilon: Fraction) -> int:
    """The upper edge (an index into the magnitudes) of the highest of the narrowest runs
    of consecutive bins of a released bounds histogram whose noisy total exceeds EVIDENCE
    standard deviations of its noise — where the histogram shows units; 0 if none does
    (runs of up to WINDOW bins).

    A side whose units spread over several bins passes no single bin's threshold
    (nycflights13's largest departure delay per aircraft at ε = 0.1: about 800 aircraft
    in each of five bins against a threshold of 2 260) and was read as empty — its bound
    0, every delay clamped to it, a mean of −2 ± 4 minutes for a true 13, unflagged. Such
    a side is placed here, and flagged (``guessed``); the narrowest runs are taken so that
    empty bins above the units do not ride along. Post-processing of the released
    histogram: no privacy cost.
    """
    for width in range(1, WINDOW + 1):
        deviation = math.sqrt(2 * width) / side_epsilon
        tops = [
            start + width
            for start in range(len(noisy) - width + 1)
            if sum(noisy[start : start + width]) > EVIDENCE * deviation
        ]
        if tops:
            return max(tops)
    return 0


def _run_beyond_noise(noisy: Sequence[int], side_epsilon: Fraction) -> bool:
    """Whether some run of up to WINDOW consecutive bins of a released bounds histogram has a
    noisy total that noise alone reaches with probability at most RUNS_FAILURE/2 over all
    runs of the side (a Chernoff bound on a sum of discrete Laplace draws, union over the
    runs): units are shown, not merely suggested. ``_units_shown_up_to``'s five standard
    deviations are met by noise on an empty side in a few % of draws, placing a bound at
    2³⁴ (issue 12); this test decides only whether the answer is withheld
    (``EstimatedBounds.blind``). Post-processing of the released histogram."""
    runs = sum(len(noisy) - width + 1 for width in range(1, WINDOW + 1))
    target = RUNS_FAILURE / 2 / runs
    for width in range(1, WINDOW + 1):
        threshold = _chernoff_total(width, float(side_epsilon), target)
        if any(sum(noisy[s : s + width]) > threshold for s in range(len(noisy) - width + 1)):
            return True
    return False


def _chernoff_total(width: int, epsilon: float, target: float) -> float:
    """A total that the sum of ``width`` independent discrete Laplace draws of parameter
    ``epsilon`` exceeds with probability at most ``target``: P(S ≥ t) ≤ e^(−λt)·M(λ)^width
    for every λ in (0, ε), M the draw's moment generating function
    (1 − q)²/((1 − q·e^λ)(1 − q·e^(−λ))), q = e^(−ε); the least t over a grid of λ."""
    q = math.exp(-epsilon)
    best = math.inf
    for k in range(1, 200):
        lam = epsilon * k / 200
        lift, drop = math.log1p(-q * math.exp(lam)), math.log1p(-q * math.exp(-lam))
        log_m = 2 * math.log1p(-q) - lift - drop
        best = min(best, (width * log_m - math.log(target)) / lam)
    return best


def size_histogram(units: int, exceedances: Sequence[int]) -> list[int]:
    """Units per largest-cell size bucket: (0, c0], (c0, c1], ..., above the last candidate."""
    upper = [units, *exceedances]
    return [a - b for a, b in zip(upper, [*exceedances, 0], strict=True)]


def noisy_histograms(
    units: int,
    exceedances: Sequence[int],
    means: Sequence[MeanHistogram],
    epsilon: float,
    rng: RandomSource,
) -> tuple[list[int], list[ClampedSums]]:
    """The private part of :func:`variance_threshold`: the units per largest-cell size
    bucket and, for each AVG, the sums of its units' mean values per bucket, clamped to a
    window the data choose (``udfs.noisy_mean_sums``), with discrete Laplace noise.

    Privacy map: ε-DP. The size histogram has L1 sensitivity 1 (a unit is in one bucket)
    and gets ε/2, or all of ε when ``means`` is empty; each AVG's ``noisy_mean_sums`` is
    ε-DP at an equal part of the other ε/2. Sequential composition.
    """
    total = Fraction(epsilon)
    size_epsilon = total / 2 if means else total
    counts = laplace_release(size_histogram(units, exceedances), 1, size_epsilon, rng)
    sums = [noisy_mean_sums(m, (total - size_epsilon) / len(means), rng) for m in means]
    return counts, sums


BIAS_DEVIATIONS = 2.0
"""The variance rule's bias bound: the estimate plus this many standard deviations."""


def variance_threshold(
    candidates: Sequence[int],
    units: int,
    exceedances: Sequence[int],
    means: Sequence[MeanHistogram],
    measure_epsilon: float,
    epsilon: float,
    rng: RandomSource,
    noise_factor: int = 1,
) -> int:
    """The weight threshold h minimising an estimate of the weighted average's mean squared
    error, bias² + EMMMR20's v(h) (Claim 1), from noisy histograms.

    v(h) = (σ² Σ_q min(h, s_q)²/s_q + 2 (h·B/ε)²) / (Σ_q min(h, s_q))² is the variance of
    the weighted average with per-unit weight min(h, s_q): sampling spread plus Laplace
    noise of scale h·B/ε on the weighted sum. It falls as h falls, but the weighted mean
    then drifts from the mean of all rows when heavy units' values differ from light
    ones' (EMMMR20 sec. 4: weighting trades bias for variance), so the bias enters too:
    bias(h) = Σ_q min(h, s_q)·m_q / Σ_q min(h, s_q) − Σ_q s_q·m_q / Σ_q s_q, m_q a unit's
    mean value. The sizes and means are private: v and the bias are evaluated on a
    Laplace-noised histogram of the units' largest cell sizes (each bucket at its upper
    end, counts below the noise's reach taken as 0, with their sums) and, for each AVG,
    Laplace-noised sums of its units' mean values over the same buckets, clamped to the
    window where the means lie (``udfs.noisy_mean_sums``; the bias is unchanged by taking
    the means less a constant, as the shifts below sum to 0, so they are taken less the
    window's centre). σ² is taken as B²/3, the variance of a uniform value on [−B, B].
    ``noise_factor`` = G·m² carries the query's shape over to one group's mean: G released
    groups share the units, and one unit's weight reaches m of them, so each group's noise
    is m·h·B/ε on a count of about n_h/G. ``means`` holds, per AVG, its units and the
    totals of their means per size bucket and bin (``MeanHistogram``); the AVGs' biases
    are added in units of the widest range. Every term scales with B², so the minimiser is
    found with B = 1: a range of 10¹⁵⁰ would overflow a double's square (red team 43).

    The bias enters as an upper confidence bound, |bias estimate| + 2 sd (the estimate is
    linear in the noisy mean sums, whose noise scales are public): where the data cannot
    show the bias, the rule errs towards larger h, i.e. towards the unweighted mean.
    Empty-looking buckets are dropped as in v(h) alone (see the comments).

    Privacy map: ε-DP: :func:`noisy_histograms` is ε-DP and everything after it is
    post-processing of its output and public parameters.
    """
    counts, noisy_sums = noisy_histograms(units, exceedances, means, epsilon, rng)
    size_epsilon = Fraction(epsilon) / 2 if means else Fraction(epsilon)
    sizes = [*candidates, candidates[-1] * 2]
    # Noise alone exceeds this in any of the buckets with probability about 5%: below it a
    # count is taken as empty, so noise in the many empty buckets of large sizes does not
    # invent heavy units; and a bucket that passes above GAP empty ones is taken as such
    # noise too (one phantom unit of a huge size would outweigh all real rows) unless it
    # passes twice the floor, which noise alone does with probability about 0.05²/len
    # (10% of the units holding half the rows were dropped so: docs/utility.md §20).
    floor = math.log(len(sizes) / 0.05) / size_epsilon
    kept, last = [], 0
    for j, n in enumerate(counts):
        if n > floor and (j - last <= GAP or not any(kept) or n > 2 * floor):
            last = j
        kept.append(n > floor and last == j)
    buckets = [(s, n if k else 0) for s, n, k in zip(sizes, counts, kept, strict=True)]
    spread = 1 / 3  # σ² of a uniform value on [−B, B], in units of B²
    sums = [
        ([m if k else 0 for m, k in zip(noisy.sums, kept, strict=True)], noisy, histogram.bound)
        for noisy, histogram in zip(noisy_sums, means, strict=True)
    ]

    def bias_bound(h: int, mean_sums: Sequence[int], noisy: ClampedSums, bound: int) -> float:
        """|bias(h)| + 2 sd, relative to the mean's bound: the bias estimate is a linear
        combination Σ a_q·M_q/2 of the noisy doubled clamped mean sums, each with variance
        2(reach/ε)² (``ClampedSums``); 0 when the bound is (bounds low = high: every mean
        is that value, so no weighting moves it)."""
        if bound == 0:
            return 0.0
        weight = sum(n * min(h, s) for s, n in buckets)
        whole = sum(n * s for s, n in buckets)
        shifts = [(min(h, s) / weight - s / whole) * (n > 0) for s, n in buckets]
        bias = sum(a * m for a, m in zip(shifts, mean_sums, strict=True)) / 2
        deviation = math.sqrt(2 * sum(a * a for a in shifts)) * noisy.reach / 2
        return (abs(bias) + BIAS_DEVIATIONS * deviation / float(noisy.epsilon)) / bound

    def error(h: int) -> float:
        kept_weight = sum(n * min(h, s) for s, n in buckets)
        if kept_weight <= 0:
            return float("inf")
        sampling = sum(n * min(h, s) ** 2 / s for s, n in buckets)
        noise = 2 * noise_factor * (h / measure_epsilon) ** 2
        bias = sum(bias_bound(h, *parts) ** 2 for parts in sums)
        return (spread * sampling + noise) / kept_weight**2 + bias

    return min(candidates, key=error)
