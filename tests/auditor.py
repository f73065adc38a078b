"""A black-box differential-privacy auditor: threshold events with exact binomial bounds.

In the spirit of Google's stochastic tester for differential privacy (Google's
differential-privacy library, "stochastic tester") and DP-Sniper (Bichsel, Steffen,
Bogunovic, Vechev, IEEE S&P 2021): the mechanism is only *sampled*, on two neighbouring
databases D and D'. ε-DP (or (ε, δ)-DP) promises, for every set S of outputs,

    P[M(D) ∈ S] ≤ e^ε · P[M(D') ∈ S] + δ,   and the same with D and D' swapped.

The auditor looks for an S that breaks this, in two independent phases:

1. **selection**: on a first sample, every *orthant event* — each output coordinate
   above a threshold, below it, or unconstrained, thresholds at quantiles of the pooled
   sample — is scored in both directions by ``lower(p_a) − e^ε·upper(p_b) − δ`` with
   normal bounds at z = 4; the few best (event, direction) pairs are kept. For scalar
   outputs these are DP-Sniper's threshold events; for a vector (an AVG's noisy sum and
   count) an orthant catches the privacy loss of all coordinates together.
2. **test**: on a fresh sample, for each kept pair, a one-sided Clopper–Pearson lower bound
   of ``P[M(D_a) ∈ S]`` and upper bound of ``P[M(D_b) ∈ S]``, each at level α/(2K) (K kept
   pairs). A violation is reported when ``lower_a > e^ε · upper_b + δ``.

The events are fixed before the test sample is drawn, so by the union bound a mechanism
that is (ε, δ)-DP is reported as violating with probability at most α (default 10⁻⁷),
whatever its output distribution. The report also gives the empirical lower bound on ε
that the test sample certifies, ``ln((lower_a − δ) / upper_b)``, at the same confidence.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 1e-7
"""Probability that an (ε, δ)-DP mechanism is reported as violating (union bound)."""

MAX_EVENTS = 2000
"""About this many orthant events are scored in the selection phase."""

Sampler = Callable[[bool, int], np.ndarray]
"""``sample(neighbour, n)``: n outputs of M(D') if ``neighbour`` else of M(D), shape (n, k)."""


@dataclass(frozen=True)
class Event:
    """An orthant: coordinate i is ≥ ``lower[i]`` and ≤ ``upper[i]`` (None: unconstrained)."""

    lower: tuple[float | None, ...]
    upper: tuple[float | None, ...]

    def holds(self, outputs: np.ndarray) -> np.ndarray:
        inside = np.ones(len(outputs), dtype=bool)
        for i, (low, high) in enumerate(zip(self.lower, self.upper, strict=True)):
            if low is not None:
                inside &= outputs[:, i] >= low
            if high is not None:
                inside &= outputs[:, i] <= high
        return inside

    def __str__(self) -> str:
        parts = [
            f"x{i} ≥ {low:g}" if low is not None else f"x{i} ≤ {high:g}"
            for i, (low, high) in enumerate(zip(self.lower, self.upper, strict=True))
            if low is not None or high is not None
        ]
        return " and ".join(parts) or "always"


@dataclass(frozen=True)
class Finding:
    """One kept event on the test sample: is P[M(D_a) ∈ S] > e^ε·P[M(D_b) ∈ S] + δ?"""

    event: Event
    neighbour_first: bool
    """True when D_a is D' (the database with the unit) and D_b is D."""
    hits: tuple[int, int]
    bounds: tuple[float, float]
    """Clopper–Pearson lower bound of P_a and upper bound of P_b."""
    epsilon: float
    delta: float

    @property
    def violated(self) -> bool:
        low_a, high_b = self.bounds
        return low_a > math.exp(self.epsilon) * high_b + self.delta

    @property
    def epsilon_lower_bound(self) -> float:
        """The ε this event certifies at the auditor's confidence (−inf if none)."""
        low_a, high_b = self.bounds
        if low_a <= self.delta:
            return -math.inf
        return math.log((low_a - self.delta) / high_b) if high_b > 0 else math.inf


@dataclass(frozen=True)
class Report:
    """The audit of one mechanism on one pair of neighbours."""

    epsilon: float
    delta: float
    samples: int
    findings: tuple[Finding, ...]

    @property
    def violated(self) -> bool:
        return any(f.violated for f in self.findings)

    @property
    def epsilon_lower_bound(self) -> float:
        return max(f.epsilon_lower_bound for f in self.findings)

    def __str__(self) -> str:
        worst = max(self.findings, key=lambda f: f.epsilon_lower_bound)
        side = "D' over D" if worst.neighbour_first else "D over D'"
        return (
            f"declared ε = {self.epsilon:g}, δ = {self.delta:g}; certified ε ≥ "
            f"{self.epsilon_lower_bound:.3f} from {self.samples} samples per side "
            f"({side}, event {worst.event}, hits {worst.hits})"
        )


def audit(
    sample: Sampler,
    epsilon: float,
    delta: float = 0.0,
    *,
    samples: int,
    selection_samples: int,
    kept: int = 5,
    alpha: float = ALPHA,
) -> Report:
    """Audit ``sample`` against (``epsilon``, ``delta``)-DP; see the module docstring."""
    chosen = _select(
        _outputs(sample, False, selection_samples),
        _outputs(sample, True, selection_samples),
        epsilon,
        delta,
        kept,
    )
    on_d, on_neighbour = _outputs(sample, False, samples), _outputs(sample, True, samples)
    level = alpha / (2 * len(chosen))
    findings = []
    for event, neighbour_first in chosen:
        a, b = (on_neighbour, on_d) if neighbour_first else (on_d, on_neighbour)
        hits = int(event.holds(a).sum()), int(event.holds(b).sum())
        bounds = _lower(hits[0], samples, level), _upper(hits[1], samples, level)
        findings.append(Finding(event, neighbour_first, hits, bounds, epsilon, delta))
    return Report(epsilon, delta, samples, tuple(findings))


def _outputs(sample: Sampler, neighbour: bool, n: int) -> np.ndarray:
    outputs = np.asarray(sample(neighbour, n), dtype=float)
    return outputs.reshape(n, -1)


def _lower(hits: int, n: int, level: float) -> float:
    """One-sided Clopper–Pearson lower bound of a binomial proportion."""
    return 0.0 if hits == 0 else float(stats.beta.ppf(level, hits, n - hits + 1))


def _upper(hits: int, n: int, level: float) -> float:
    """One-sided Clopper–Pearson upper bound of a binomial proportion."""
    return 1.0 if hits == n else float(stats.beta.ppf(1 - level, hits + 1, n - hits))


def _atoms(pooled: np.ndarray, dimension: int) -> list[list[tuple[float | None, float | None]]]:
    """Per coordinate: unconstrained, or ≥ / ≤ each of a few quantiles of the pooled sample."""
    per_side = max(1, int((MAX_EVENTS ** (1 / dimension) - 1) // 2))
    levels = np.linspace(0, 1, per_side + 2)[1:-1]
    atoms = []
    for i in range(dimension):
        thresholds = np.unique(np.quantile(pooled[:, i], levels, method="nearest"))
        options: list[tuple[float | None, float | None]] = [(None, None)]
        options += [(float(t), None) for t in thresholds]
        options += [(None, float(t)) for t in thresholds]
        atoms.append(options)
    return atoms


SELECTION_Z = 4.0
"""Events are ranked by the test's inequality with normal bounds at this z: a rare event
that looks extreme by luck in the selection sample ranks low."""


def _normal_lower(p: np.ndarray, n: int) -> np.ndarray:
    return p - SELECTION_Z * np.sqrt((p * (1 - p) + 1 / n) / n)


def _normal_upper(p: np.ndarray, n: int) -> np.ndarray:
    return p + SELECTION_Z * np.sqrt((p * (1 - p) + 1 / n) / n)


def _select(
    on_d: np.ndarray, on_neighbour: np.ndarray, epsilon: float, delta: float, kept: int
) -> list[tuple[Event, bool]]:
    """The ``kept`` (event, direction) pairs most likely to show a violation."""
    n = len(on_d)
    atoms = _atoms(np.vstack([on_d, on_neighbour]), on_d.shape[1])
    events = [
        Event(tuple(a[0] for a in combo), tuple(a[1] for a in combo))
        for combo in itertools.product(*atoms)
        if any(a != (None, None) for a in combo)
    ]
    p_d = np.array([e.holds(on_d).mean() for e in events])
    p_neighbour = np.array([e.holds(on_neighbour).mean() for e in events])
    factor = math.exp(epsilon)
    scored = []
    for neighbour_first, (p_a, p_b) in ((False, (p_d, p_neighbour)), (True, (p_neighbour, p_d))):
        margin = _normal_lower(p_a, n) - factor * _normal_upper(p_b, n) - delta
        scored += [(float(margin[i]), i, neighbour_first) for i in range(len(events))]
    scored.sort(reverse=True)
    return [(events[i], neighbour_first) for _, i, neighbour_first in scored[:kept]]
