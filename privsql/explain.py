"""``explain`` and the ε planner: what a query would release, how exact, and at what cost.

Everything here reads no data and spends nothing. The expected ± of each noisy cell is
:func:`privsql.accuracy.half_widths` — the very function that gives a released answer its
intervals — applied to a *hypothetical* released row built from public parameters only
(an AVG's value at an end of its clamp range, its count the ``rows`` the analyst states,
else 1,000). So an explanation's ± and a result's ``accuracy()`` cannot disagree for
COUNT and SUM, and an AVG's explained ± is the worst case of its released one at that count.

Warnings come from the query and from public facts the analyst states (``rows``:
rows expected per group, ``units``: an upper bound on the number of privacy units); never
from the data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa

import udfs
from privsql.accuracy import SINGLE, half_widths
from privsql.stage_sql import stage_sql
from rewriter.analyze import AggregateKind, Analysis
from rewriter.dialect import output_name, to_sql, written
from rewriter.errors import InvalidOption
from rewriter.generate import Functions, support_name
from rewriter.plan import (
    BUCKETS,
    Measurement,
    Plan,
    Statistic,
    bounds_search,
    plan,
)

ALPHA = 0.05
"""Explanations state 95% half-widths, as the REPL, CLI and notebook do."""
ROWS = 1000
"""The count an AVG's ± is stated for when the analyst states none: "per 1,000 rows"."""
ROLES = ("n", "s1", "s2", "lower", "upper")
"""Every support column a released row may carry (privsql.accuracy reads them by role)."""


@dataclass(frozen=True)
class Public:
    """Public facts the analyst states about the data, for ± and warnings; none is checked
    against the data (explain reads none).

    ``rows``: about how many rows each group holds (an AVG's count; bias warnings).
    ``units``: an upper bound on the number of privacy units (e.g. planes registered).
    """

    rows: int | None = None
    units: int | None = None


@dataclass(frozen=True)
class Explanation:
    """What a query would do and cost; producing it reads no data and spends nothing.

    ``half_widths`` maps each output that is a bare DP aggregate to the 95% half-width of
    its cells, in the query's units (the same for every group), or None where it is known
    only once released (quantiles: see their rank error; VARIANCE, STDDEV) or depends on a
    privately chosen cap (then ``per_cap`` holds the ± per row of cap).
    """

    sql: str
    epsilon: float
    delta: float
    bounding: dict
    aggregates: tuple[dict, ...]
    partition_selection: dict | None
    half_widths: dict[str, float | None] = field(default_factory=dict)
    per_cap: dict[str, float] = field(default_factory=dict)
    avg_rows: int = ROWS
    """The count behind the AVG half-widths: ``Public.rows`` if stated, else 1,000."""
    warnings: tuple[str, ...] = ()

    def __str__(self) -> str:
        b = self.bounding
        lines = [f"ε = {self.epsilon:g}, δ = {self.delta:g}"]
        if b:
            cap = b["cap"] if b["cap"] is not None else "AUTO"
            groups = b["groups"] if b["groups"] is not None else "AUTO"
            lines.append(
                f"  bounding: {b['strategy']} {cap} per unit and group, "
                f"at most {groups} groups per unit (groups capped first, then rows)"
            )
            if b.get("group_search"):
                lines.append(
                    f"  MAX_GROUPS: chosen privately ({b['group_search']}), "
                    f"ε = {b['group_epsilon']:g}"
                )
            if b.get("bounds_estimated"):
                lines.append(
                    f"  bounds: estimated privately for {', '.join(b['bounds_estimated'])}, "
                    f"ε = {b['bounds_epsilon']:g} (NULL, flagged, where the data cannot set them)"
                )
            if b.get("search"):
                lines.append(
                    f"  threshold: chosen privately ({b['search']}), ε = {b['search_epsilon']:g}"
                )
        for a in self.aggregates:
            known = a["scale"] is not None
            if a["mechanism"] == "Laplace":
                detail = f"scale {a['scale']:g}" if known else "scale set by the threshold"
            else:
                detail = (
                    f"95% rank error ≤ {a['scale']:g} rows" if known else "set by the threshold"
                )
                detail += f", {BUCKETS} buckets, 95% interval ε = {a['interval_epsilon']:g}"
            lines.append(
                f"  {a['aggregate']}: {a['mechanism']} on {a['measurement']}, "
                f"ε = {a['epsilon']:g}, {detail}"
            )
        if b.get("cut_epsilon"):
            lines.append(
                f"  bounding check: Laplace on the cells cut per group, ε = {b['cut_epsilon']:g}"
            )
        if b.get("excess_epsilon"):
            lines.append(
                "  bounding check: Laplace on the rows cut over all groups (in caps, at most 1 "
                f"per unit), ε = {b['excess_epsilon']:g}"
            )
        lines += [f"  expected {line}" for line in self._widths()]
        if self.partition_selection:
            p = self.partition_selection
            lines.append(
                f"  keys: partition selection, ε = {p['epsilon']:g}, δ = {p['delta']:g}, "
                f"threshold {p['threshold']:,} distinct units: a group needs about "
                f"{p['threshold']:,} units to appear, {p['reliable']:,} to appear 95% of the time"
            )
        lines += [f"  warning: {w}" for w in self.warnings]
        if self.sql:
            lines += ["", self.sql]
        return "\n".join(lines)

    def _widths(self) -> list[str]:
        """One line per noisy output: its 95% ± in the query's units, or why not yet."""
        kinds = {a["output"]: a["kind"] for a in self.aggregates if "output" in a}
        lines = []
        for name, width in self.half_widths.items():
            per = f" (AVG over {self.avg_rows:,} rows)" if kinds.get(name) == "avg" else ""
            if width is not None:
                lines.append(f"± (95%) {name}: ±{_number(width)}{per}")
            elif name in self.per_cap:
                lines.append(
                    f"± (95%) {name}: about ±{_number(self.per_cap[name])} per row of the "
                    f"privately chosen cap{per}"
                )
            else:
                lines.append(f"± (95%) {name}: known once released (accuracy())")
        return lines


@dataclass(frozen=True)
class Suggestion:
    """The ε a query needs for a wanted ± (``Session.plan``); finding it spent nothing.

    ``epsilon`` (rounded up to 3 significant digits) is the smallest such ε to within 1%;
    write it as the query's ``EPSILON``. ``half_widths`` are the 95% ± it gives.
    """

    epsilon: float
    target: dict[str, float]
    half_widths: dict[str, float | None]
    explanation: Explanation

    def __str__(self) -> str:
        wanted = ", ".join(f"{n} ±{_number(w)}" for n, w in self.target.items())
        got = ", ".join(f"{n} ±{_number(w)}" for n, w in self.half_widths.items() if w is not None)
        return f"EPSILON {self.epsilon:g} for {wanted} (95%): gives {got}"


def explain(
    analysis: Analysis,
    *,
    epsilon: float,
    delta: float,
    functions: Functions,
    public: Public = Public(),
) -> Explanation:
    """The explanation of an analysed private query under the session's defaults."""
    estimating = bounds_search(analysis, epsilon=epsilon)
    if estimating is not None:  # unknown until estimated: plan with placeholder bounds
        unknown = {to_sql(a.node): (0.0, 1.0) for a in estimating.aggregates}
        query_plan = plan(
            analysis.with_bounds(unknown), epsilon=epsilon, delta=delta, spent=estimating.epsilon
        )
    else:
        query_plan = plan(analysis, epsilon=epsilon, delta=delta)
    groups = query_plan.group_search
    resolved = query_plan.search is None and estimating is None and groups is None
    measurements = {m.name: m for m in query_plan.measurements}
    names = _output_names(query_plan)
    aggregates = tuple(
        _mechanism(query_plan, s, m, resolved or (m.kind == "units" and not groups), names)
        for s in query_plan.statistics
        for m in (measurements[name] for name in s.measurements)
    )
    rows = public.rows or ROWS
    if resolved:
        widths = cell_half_widths(query_plan, rows)
        per_cap: dict[str, float] = {}
    else:
        widths = dict.fromkeys(names.values())
        per_cap = {} if estimating else _drop_none(cell_half_widths(query_plan.with_cap(1), rows))
    search = query_plan.search
    bounding = {
        "strategy": query_plan.bounding.strategy,
        "cap": query_plan.bounding.cap,
        "groups": None if groups else query_plan.bounding.groups,
        "group_search": f"about {groups.rank} units touching more groups than the cap"
        if groups
        else None,
        "group_epsilon": groups.epsilon if groups else 0.0,
        "cut_epsilon": query_plan.cut_epsilon,
        "excess_epsilon": query_plan.excess_epsilon,
        "search": None
        if search is None
        else " and ".join(
            {
                "rank": f"about {search.rank} cells (unit, group) above the cap",
                "quantile": "the cap balancing a quantile interval's reach and its bias",
                "variance": "EMMMR20's v(h) minimiser for AVG",
            }[rule]
            for rule in search.rules
        ),
        "search_epsilon": 0.0 if search is None else search.epsilon,
        "bounds_estimated": [written(a.node) for a in estimating.aggregates] if estimating else [],
        "bounds_epsilon": estimating.epsilon if estimating else 0.0,
    }
    partition = query_plan.partition
    selection = None
    if partition is not None:
        threshold = udfs.partition_threshold(
            partition.max_groups, partition.epsilon, partition.delta
        )
        # released when units + DLap(max_groups/ε) ≥ T: the one-sided 95% point of the noise
        noise = udfs.laplace_halfwidth(partition.max_groups, partition.epsilon, 2 * ALPHA)
        selection = {
            "epsilon": partition.epsilon,
            "delta": partition.delta,
            "threshold": threshold,
            "reliable": threshold + int(noise),
        }
    return Explanation(
        sql=stage_sql(analysis, epsilon=epsilon, delta=delta, functions=functions),
        epsilon=query_plan.epsilon,
        delta=query_plan.delta,
        bounding=bounding,
        aggregates=aggregates,
        partition_selection=selection,
        half_widths=widths,
        per_cap=per_cap,
        avg_rows=rows,
        warnings=_warnings(query_plan, widths, selection, public, resolved),
    )


def suggest(
    analysis: Analysis,
    target: float | Mapping[str, float],
    *,
    epsilon: float,
    delta: float,
    functions: Functions,
    public: Public = Public(),
) -> Suggestion:
    """The smallest ε (to 1%) whose 95% ± meets ``target``: one number for the first noisy
    output whose ± is known before release, or a ± per output name.

    The ± at a given ε is :func:`cell_half_widths`, which only shrinks as ε grows (each
    Laplace tail does), so a bisection on log ε finds the boundary.
    """
    if bounds_search(analysis, epsilon=epsilon) is not None:
        raise InvalidOption(
            "the ± depends on bounds estimated privately: write CLAMPED BETWEEN to plan ε"
        )
    rows = public.rows or ROWS

    def widths(e: float) -> dict[str, float | None]:
        options = replace(analysis.options, epsilon=e)
        query_plan = plan(replace(analysis, options=options), epsilon=epsilon, delta=delta)
        if query_plan.search is not None:
            raise InvalidOption(
                "the ± depends on a cap chosen privately (AUTO): write BOUND ROWS k or "
                "BOUND WEIGHTS h to plan ε"
            )
        return cell_half_widths(query_plan, rows)

    known = _drop_none(widths(epsilon))
    if isinstance(target, Mapping):
        wanted = {str(k): float(v) for k, v in target.items()}
        missing = sorted(set(wanted) - set(known))
        if missing:
            raise InvalidOption(f"no ± known before release for {', '.join(missing)}")
    else:
        if not known:
            raise InvalidOption("the query has no output whose ± is known before release")
        wanted = {next(iter(known)): float(target)}
    if not all(w > 0 and math.isfinite(w) for w in wanted.values()):
        raise InvalidOption("a target ± must be a finite number greater than 0")

    def meets(e: float) -> bool:
        got = widths(e)
        return all((got[n] or 0.0) <= w for n, w in wanted.items())

    low, high = 1e-6, 1.0
    while not meets(high):
        low, high = high, high * 4
        if high > 1e9:
            raise InvalidOption("no ε up to 1e9 gives that ±")
    if meets(low):
        raise InvalidOption("ε = 1e-6 already gives that ±")
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if meets(middle) else (middle, high)
    chosen = _round_up(high)
    if not meets(chosen):  # float rounding took it under the boundary
        chosen = high
    options = replace(analysis.options, epsilon=chosen)
    explanation = explain(
        replace(analysis, options=options),
        epsilon=epsilon,
        delta=delta,
        functions=functions,
        public=public,
    )
    return Suggestion(chosen, wanted, explanation.half_widths, explanation)


def cell_half_widths(query_plan: Plan, rows: int = ROWS) -> dict[str, float | None]:
    """Each bare DP output's 95% half-width by :func:`privsql.accuracy.half_widths`, on a
    hypothetical released row: AVGs at an end of their clamp range (where the noise of the
    count weighs most) over ``rows`` rows. COUNT, SUM and AVG only: the other widths follow
    from released values that explain does not have (None)."""
    names = _output_names(query_plan)
    kinds = {to_sql(s.aggregate.node): s for s in query_plan.statistics}
    columns: dict[str, list[float]] = {}
    for item in query_plan.analysis.select.expressions:
        statistic = kinds.get(to_sql(item.unalias()))
        if statistic is None:
            continue
        name = output_name(item)
        grid = statistic.grid
        columns[name] = [grid.high * grid.step if grid is not None else 0.0]
        for role in ROLES:
            columns[support_name(role, name)] = [float(rows)]
    table = pa.table(columns)
    known = (*SINGLE, AggregateKind.AVG)
    widths: dict[str, float | None] = dict.fromkeys(names.values())
    for name, width in half_widths(query_plan, table).items():
        statistic = next(s for key, s in kinds.items() if names.get(key) == name)
        if statistic.aggregate.kind in known:
            values = width(ALPHA)
            widths[name] = None if values is None else float(values[0].as_py())
    return widths


def _output_names(query_plan: Plan) -> dict[str, str]:
    """Aggregate text -> the output column that shows it bare (as accuracy() names it)."""
    statistics = {to_sql(s.aggregate.node) for s in query_plan.statistics}
    return {
        key: output_name(item)
        for item in query_plan.analysis.select.expressions
        if (key := to_sql(item.unalias())) in statistics
    }


def _mechanism(
    query_plan: Plan, statistic: Statistic, m: Measurement, known: bool, names: dict[str, str]
) -> dict:
    """One measurement as ``explain`` shows it: its mechanism, ε and noise scale.

    For a quantile the scale is the mechanism's rank error bound at 95%, in rows.
    """
    aggregate = statistic.aggregate
    if m.kind == "histogram":
        assert m.quantile is not None
        scale = (
            udfs.rank_error_bound(
                BUCKETS,
                m.epsilon,
                udfs.quantile_sensitivity(m.quantile[0], query_plan.sensitivity(m)),
                ALPHA,
            )
            * m.unit
            if known
            else None
        )
        mechanism = "permute-and-flip"
    else:
        scale = query_plan.sensitivity(m) * m.unit / m.epsilon if known else None
        mechanism = "Laplace"
    shown = {
        "aggregate": written(aggregate.node),
        "measurement": m.name,
        "mechanism": mechanism,
        "epsilon": m.epsilon,
        "interval_epsilon": m.interval_epsilon,
        "scale": scale,
        "kind": aggregate.kind,
    }
    name = names.get(to_sql(aggregate.node))
    if name is not None:
        shown["output"] = name
    return shown


def _warnings(
    query_plan: Plan,
    widths: dict[str, float | None],
    selection: dict | None,
    public: Public,
    resolved: bool,
) -> tuple[str, ...]:
    """What may make the answer empty, mostly noise or mostly bias: from the query and the
    stated public facts only (explain reads no data)."""
    found = []
    groups, cap = query_plan.bounding.groups, query_plan.bounding.cap
    if selection is not None:
        threshold = selection["threshold"]
        if public.units is not None:
            units, reliable = public.units, selection["reliable"]
            if threshold > units:
                found.append(
                    f"likely empty: a group needs about {threshold:,} distinct units to "
                    f"appear, more than the {units:,} units there are at most (stated): "
                    "raise EPSILON, lower MAX_GROUPS, or list the keys (keys=) if public"
                )
            elif reliable > units:
                found.append(
                    f"groups may be missing: even a group holding all {units:,} units "
                    f"(stated) appears less than 95% of the time (that needs {reliable:,})"
                )
            elif units * groups // threshold < 10:
                found.append(
                    f"few groups: {units:,} units (stated) in at most {groups} groups each "
                    f"fill at most {units * groups // threshold} groups of {threshold:,}"
                )
        else:
            found.append(
                f"groups with fewer than about {threshold:,} distinct units will be missing"
                " (state units= to compare with the number of units)"
            )
    if public.units is not None and public.rows is not None and cap is not None:
        kept = public.units * cap
        if kept < public.rows / 2:
            found.append(
                f"mostly bias: BOUND {query_plan.bounding.strategy} {cap} keeps at most "
                f"{kept:,} rows per group ({public.units:,} units × {cap}) of about "
                f"{public.rows:,} (stated): raise the cap"
            )
    if query_plan.groups_may_exceed_cap:
        found.append(
            f"a unit in more than {groups} group{'s' if groups > 1 else ''} (MAX_GROUPS) "
            f"counts in only {groups} of them: its rows in the others are dropped (bias)"
        )
    for statistic in query_plan.statistics:
        grid = statistic.grid
        if statistic.aggregate.kind != AggregateKind.AVG or grid is None or not resolved:
            continue
        name = _output_names(query_plan).get(to_sql(statistic.aggregate.node))
        width = widths.get(name or "")
        spread = (grid.high - grid.low) * grid.step
        if width is not None and width >= spread / 2:
            found.append(
                f"mostly noise: {name}'s ± {_number(width)} spans half its clamp range or "
                f"more over {public.rows or ROWS:,} rows: raise EPSILON, narrow CLAMPED "
                "BETWEEN, or state rows="
            )
    if public.rows is not None:
        for name, width in widths.items():
            kind = _kind(query_plan, name)
            if (
                width is not None
                and kind
                in (
                    AggregateKind.COUNT_ROWS,
                    AggregateKind.COUNT_VALUES,
                )
                and width > public.rows / 2
            ):
                found.append(
                    f"mostly noise: {name}'s ± {_number(width)} is over half the "
                    f"{public.rows:,} rows stated"
                )
    return tuple(found)


def _kind(query_plan: Plan, name: str) -> str | None:
    names = _output_names(query_plan)
    for s in query_plan.statistics:
        if names.get(to_sql(s.aggregate.node)) == name:
            return s.aggregate.kind
    return None


def _drop_none(widths: dict[str, float | None]) -> dict[str, float]:
    return {k: v for k, v in widths.items() if v is not None}


def _round_up(value: float, digits: int = 3) -> float:
    """``value`` rounded up to ``digits`` significant digits (a readable EPSILON)."""
    scale = 10 ** (math.floor(math.log10(value)) - digits + 1)
    return math.ceil(value / scale) * scale


def _number(value: float) -> str:
    """A ± for reading: thousands separated, three significant digits below 100."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"
