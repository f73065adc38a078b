"""The SQL of every statement a private query runs, in order, for ``explain``.

A query that leaves something to AUTO runs more than one statement: per-unit extremes from
which missing bounds are estimated, the number of groups each unit touches (MAX_GROUPS
AUTO), a per-unit summary from which the row cap is chosen, then the release. What those
choices decide is not known before the query runs, so the SQL shows it as named
placeholders: ``$max_groups``, ``$cap``, ``$sensitivity_*`` (which follow from them) and
``$bounds<i>`` (every number that follows from the i-th estimated bounds).

The placeholders are found by generating the SQL with values no query writes
(``PLACEHOLDER_CAP``, ``PLACEHOLDER_GROUPS``) and, for bounds, by generating it under two
probe bounds and marking the numbers that differ: the generator itself says which numbers
depend on what, so this module needs to know nothing of how it writes them.
"""

from __future__ import annotations

import re

from rewriter.analyze import Analysis
from rewriter.dialect import to_sql, written
from rewriter.generate import Functions, bounds_sql, generate, groups_sql, threshold_sql
from rewriter.plan import MAGNITUDES, WEIGHT_BITS, Plan, bounds_search, plan

PLACEHOLDER_CAP = 1_000_003
PLACEHOLDER_GROUPS = 1_000_033
"""A cap and a MAX_GROUPS no query writes: generated with them, the SQL gets ``$cap`` and
``$max_groups`` where they stand."""
PROBE_BOUNDS = ((-3.0, 5.0), (-7.0, 13.0))
"""Two bounds of the same signs and of different widths and grids: each number of the SQL
that differs between them follows from the bounds."""
NUMBER = re.compile(r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)")
LEGEND = {
    "$max_groups": "$max_groups is the MAX_GROUPS chosen privately",
    "$cap": "$cap is the row cap chosen privately",
    "$sensitivity_": "$sensitivity_* follow from them",
}

Stage = tuple[str, str]
"""What a statement is for, and its SQL."""

GROUPS_STAGE = "the number of groups each unit touches, from which MAX_GROUPS is chosen privately"


def stage_sql(analysis: Analysis, *, epsilon: float, delta: float, functions: Functions) -> str:
    """Every statement the query runs, numbered and labelled when there are several; one
    statement (nothing left to AUTO) as it is."""
    estimating = bounds_search(analysis, epsilon=epsilon)
    if estimating is None:
        found = _stages(analysis, 0.0, epsilon, delta, functions)
        return _numbered(found, [])

    def bounded(keys: dict[str, tuple[float, float]]) -> list[Stage]:
        return _stages(analysis.with_bounds(keys), estimating.epsilon, epsilon, delta, functions)

    keys = [to_sql(a.node) for a in estimating.aggregates]
    probe = dict.fromkeys(keys, PROBE_BOUNDS[0])
    found = bounded(probe)
    marks: list[dict[int, str]] = [{} for _ in found]
    notes = []
    for i, (key, aggregate) in enumerate(zip(keys, estimating.aggregates, strict=True)):
        other = bounded({**probe, key: PROBE_BOUNDS[1]})
        differing = [_differing(a, b) for (_, a), (_, b) in zip(found, other, strict=True)]
        if any(d is None for d in differing):  # the bounds change more than numbers
            low, high = PROBE_BOUNDS[0]
            notes.append(
                f"shown for bounds {low:g} and {high:g} of {written(aggregate.node)}, "
                "which are estimated when the query runs"
            )
            continue
        for stage_marks, positions in zip(marks, differing, strict=True):
            for position in positions or ():
                stage_marks.setdefault(position, f"$bounds{i}")
        notes.append(f"$bounds{i} follow from the bounds estimated for {written(aggregate.node)}")
    arguments = [a.argument for a in estimating.aggregates]
    extremes = (
        "per-unit extremes, and rows weighted per unit, from which missing bounds are estimated",
        bounds_sql(analysis, arguments, MAGNITUDES),
    )
    marked = [(label, _mark(sql, m)) for (label, sql), m in zip(found, marks, strict=True)]
    first = 1 if marked[0][0] == GROUPS_STAGE else 0  # MAX_GROUPS AUTO runs before the bounds
    return _numbered([*marked[:first], extremes, *marked[first:]], notes)


def _stages(
    analysis: Analysis, spent: float, epsilon: float, delta: float, functions: Functions
) -> list[Stage]:
    """The statements after any bounds estimate, with placeholders for what AUTO decides."""
    query_plan = plan(analysis, epsilon=epsilon, delta=delta, spent=spent)
    found = []
    if query_plan.group_search is not None:
        found.append((GROUPS_STAGE, groups_sql(query_plan)))
        query_plan = plan(
            analysis,
            epsilon=epsilon,
            delta=delta,
            spent=spent,
            decided_groups=PLACEHOLDER_GROUPS,
        )
    if query_plan.search is not None:
        found.append(
            (
                "per-unit summary from which the cap is chosen privately",
                threshold_sql(query_plan),
            )
        )
        query_plan = query_plan.with_cap(PLACEHOLDER_CAP)
    found.append(("the release", generate(query_plan, functions)))
    if not (found[:-1] or spent):  # nothing decided at run time: the SQL as it runs
        return found
    return [(label, _placeholders(sql, query_plan)) for label, sql in found]


def _placeholders(sql: str, query_plan: Plan) -> str:
    """``sql`` with the placeholder cap, MAX_GROUPS and the sensitivities they give named."""
    sensitivities = {"cut": query_plan.cut_sensitivity} | {
        m.name.lstrip("_"): query_plan.sensitivity(m) for m in query_plan.measurements
    }
    for name, value in sensitivities.items():
        sql = sql.replace(f"CAST({value} AS HUGEINT)", f"CAST($sensitivity_{name} AS HUGEINT)")
    named = {
        PLACEHOLDER_CAP << WEIGHT_BITS: f"($cap * {1 << WEIGHT_BITS})",  # h on BOUND WEIGHTS' grid
        PLACEHOLDER_CAP: "$cap",
        PLACEHOLDER_GROUPS: "$max_groups",
        PLACEHOLDER_GROUPS + 1: "($max_groups + 1)",
        2 * PLACEHOLDER_GROUPS: "(2 * $max_groups)",
    }
    for value, name in named.items():
        sql = re.sub(rf"\b{value}\b", name, sql)
    return sql


def _differing(sql: str, other: str) -> set[int] | None:
    """The positions (in ``NUMBER.split``) of the numbers that differ between two
    generations of one statement; None when the statements differ in more than numbers."""
    mine, theirs = NUMBER.split(sql), NUMBER.split(other)
    if len(mine) != len(theirs) or mine[::2] != theirs[::2]:
        return None
    return {i for i in range(1, len(mine), 2) if mine[i] != theirs[i]}


def _mark(sql: str, marks: dict[int, str]) -> str:
    """``sql`` with the numbers at the positions ``marks`` names replaced by their names."""
    parts = NUMBER.split(sql)
    for position, name in marks.items():
        parts[position] = name
    return _unquote("".join(parts))


def _unquote(sql: str) -> str:
    """A placeholder that replaced a quoted number (``CAST('0.5' AS DOUBLE)``) unquoted."""
    return re.sub(r"'(-?)(\$bounds\d+)'", r"\1\2", sql)


def _numbered(found: list[Stage], notes: list[str]) -> str:
    """One statement as it is; several numbered, labelled, with what each placeholder is."""
    if len(found) == 1:
        return found[0][1]
    text = "\n".join(f"-- {i}. {label}:\n{sql}" for i, (label, sql) in enumerate(found, 1))
    legend = [line for name, line in LEGEND.items() if name in text] + notes
    return "\n".join(f"-- {line}" for line in legend) + "\n" + text
