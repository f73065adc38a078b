"""The compiler's one entry point: an analysed query and the private decisions made so far
in, the next statement to run out.

A private query is compiled in steps, because some of its parameters are decided privately
from the data (SPEC section 5): MAX_GROUPS AUTO, then bounds that BOUND AUTO left to
estimate, then the AUTO row or weight caps. Each step is a *search*: a statement whose single
summary (per-unit aggregates, never rows) a noisy decision is made from by the caller,
who knows the noise (the rewriter does not). ``compile_query`` takes the decisions made so far
as data (``Decided``) and returns either the next search or, once nothing is left to
decide, the release (``Stages``). A stored answer's decisions (``Decided.as_json``)
compile to the very plan it was released under.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from rewriter.analyze import Analysis
from rewriter.catalog import Bounds
from rewriter.dialect import to_sql
from rewriter.generate import (
    Functions,
    Sources,
    Stages,
    bounds_sql,
    groups_sql,
    mean_histogram,
    size_summary,
    stages,
    threshold_sql,
)
from rewriter.plan import (
    CANDIDATES,
    MAGNITUDES,
    ROW_CANDIDATES,
    BoundsSearch,
    Plan,
    bounds_search,
    group_counts,
    plan,
)


@dataclass(frozen=True)
class Decided:
    """The private decisions made for a query so far.

    ``bounds``: each BOUND AUTO aggregate's estimated (low, high), by its SQL, and
    ``spent`` the ε that estimate took; ``groups``: MAX_GROUPS chosen by MAX_GROUPS AUTO;
    ``caps``: the AUTO caps, one per rule (``Plan.caps``); ``guessed``: the aggregates
    (by SQL) whose bounds no estimate supported, or whose AUTO cap the data were too few to
    locate, so that their answers are flagged; ``blind``: those of them whose bounds no
    bin of the extremes' search supported (``udfs.EstimatedBounds.blind``), whose answers are
    withheld (NULL, flagged).
    """

    bounds: Mapping[str, Bounds] = field(default_factory=dict)
    spent: float = 0.0
    groups: int | None = None
    caps: Mapping[str, int] | None = None
    guessed: frozenset[str] = frozenset()
    blind: frozenset[str] = frozenset()

    def as_json(self) -> str:
        """What a stored answer keeps, to be compiled again with ``from_json``."""
        return json.dumps(
            {
                "bounds": self.bounds,
                "spent": self.spent,
                "groups": self.groups,
                "caps": self.caps,
                "guessed": sorted(self.guessed),
                "blind": sorted(self.blind),
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Decided:
        decided = json.loads(text)
        return cls(
            bounds={k: (v[0], v[1]) for k, v in decided["bounds"].items()},
            spent=decided["spent"],
            groups=decided.get("groups"),
            caps=decided["caps"],
            guessed=frozenset(decided.get("guessed", ())),
            blind=frozenset(decided.get("blind", ())),
        )


@dataclass(frozen=True)
class Search:
    """A statement to run before the release, and how its rows read as one summary.

    ``step`` is ``bounds`` (``estimating`` says what), ``groups`` or ``threshold``
    (``plan.group_search`` or ``plan.search`` says with what ε, rank and candidates).
    """

    step: str
    statement: str
    summary: Callable[[Sequence[Sequence[object]]], tuple]
    plan: Plan | None = None
    estimating: BoundsSearch | None = None


@dataclass(frozen=True)
class Compiled:
    """A query compiled as far as its decisions allow: ``search`` is the next statement to
    run and decide from, else ``stages`` is the release (and ``plan`` what it follows)."""

    analysis: Analysis
    decided: Decided
    plan: Plan | None
    search: Search | None
    stages: Stages | None


def threshold_search(query_plan: Plan, sources: Sources | None = None) -> Search:
    """The AUTO caps' search: how many units have a kept cell above each size of
    ``CANDIDATES``, then the rank rule's counts above each size of ``ROW_CANDIDATES``: of
    kept cells when MAX_GROUPS is above 1, else of units; then, for each AVG under
    EMMMR20's rule, its units and the totals of their mean values per size bucket and bin
    (``mean_histogram``)."""
    means = len(query_plan.mean_sums)
    ranked_kind = 1 if query_plan.bounding.groups > 1 else 0

    def summary(rows: Sequence[Sequence[object]]) -> tuple[int, ...]:
        units = size_summary([r[1:3] for r in rows if r[0] == 0], CANDIDATES)
        ranked = size_summary([r[1:3] for r in rows if r[0] == ranked_kind], ROW_CANDIDATES)
        histograms = (
            mean_histogram([r[1:] for r in rows if r[0] == 2 + i], CANDIDATES) for i in range(means)
        )
        return units + ranked[1:] + tuple(v for pair in histograms for part in pair for v in part)

    return Search("threshold", threshold_sql(query_plan, sources), summary, plan=query_plan)


def groups_search(query_plan: Plan, sources: Sources | None = None) -> Search:
    """MAX_GROUPS AUTO's search: how many units touch more than each number of groups in
    ``group_counts`` (the candidates, and every number up to 64 when keys are not listed)."""
    assert query_plan.group_search is not None
    counts = group_counts(query_plan)
    return Search(
        "groups",
        groups_sql(query_plan, sources),
        lambda rows: size_summary(rows, counts),
        plan=query_plan,
    )


def compile_query(
    analysis: Analysis,
    *,
    epsilon: float,
    delta: float,
    functions: Functions,
    decided: Decided | None = None,
    sources: Sources | None = None,
) -> Compiled:
    """The next search for ``analysis`` under ``decided``, or its release once nothing is
    left to decide; ``epsilon`` and ``delta`` are the session's defaults. ``sources`` keeps
    the rendered ``__source`` stages for the compilation's next steps (``compile_all``)."""
    decided = decided or Decided()
    estimating = bounds_search(analysis, epsilon=epsilon, groups=decided.groups)
    if estimating is not None and not decided.bounds and decided.groups is None:
        # MAX_GROUPS AUTO first: the groups a unit touches do not depend on the bounds, and
        # the bounds' balance of bias against noise does depend on MAX_GROUPS.
        unknown = {to_sql(a.node): (0.0, 1.0) for a in estimating.aggregates}
        provisional = plan(
            analysis.with_bounds(unknown), epsilon=epsilon, delta=delta, spent=estimating.epsilon
        )
        if provisional.group_search is not None:
            search = groups_search(provisional, sources)
            return Compiled(analysis, decided, provisional, search, None)
    if estimating is not None and not decided.bounds:
        arguments = [a.argument for a in estimating.aggregates]
        search = Search(
            "bounds",
            bounds_sql(analysis, arguments, MAGNITUDES),
            lambda rows: tuple(rows[0]),
            estimating=estimating,
        )
        return Compiled(analysis, decided, None, search, None)
    if decided.bounds:
        analysis = analysis.with_bounds(dict(decided.bounds))
    query_plan = plan(
        analysis, epsilon=epsilon, delta=delta, spent=decided.spent, decided_groups=decided.groups
    )
    if query_plan.group_search is not None:  # groups first: rows are capped per cell
        return Compiled(analysis, decided, query_plan, groups_search(query_plan, sources), None)
    if query_plan.search is not None:
        if decided.caps is None:
            search = threshold_search(query_plan, sources)
            return Compiled(analysis, decided, query_plan, search, None)
        query_plan = query_plan.with_caps(dict(decided.caps))
    decided = replace(decided, groups=query_plan.bounding.groups, caps=query_plan.caps)
    return Compiled(analysis, decided, query_plan, None, stages(query_plan, functions, sources))


def compile_all(
    analysis: Analysis,
    *,
    epsilon: float,
    delta: float,
    functions: Functions,
    decide: Callable[[Search, Decided], Decided],
    decided: Decided | None = None,
) -> tuple[Compiled, tuple[Search, ...]]:
    """``compile_query`` until nothing is left to decide, each search's decision made by
    ``decide`` (the session: run the search and decide with noise; ``explain``: assume
    placeholders): the release, and every search on the way, in the order they run. The
    statements share their ``__source`` stage, rendered once (``Sources``)."""
    searches: list[Search] = []
    sources = Sources()
    step = compile_query(
        analysis,
        epsilon=epsilon,
        delta=delta,
        functions=functions,
        decided=decided,
        sources=sources,
    )
    while step.search is not None:
        searches.append(step.search)
        step = compile_query(
            analysis,
            epsilon=epsilon,
            delta=delta,
            functions=functions,
            decided=decide(step.search, step.decided),
            sources=sources,
        )
    return step, tuple(searches)
