"""A privsql session: one engine's data, its owner's declarations, its ledger.

``Session.sql`` runs the whole flow of SPEC section 5: parse and analyse (refusals,
no data read) → plan → generate → execute on the engine (``privsql.engines``: DuckDB,
or Spark for the aggregation) → release in DuckDB (noise and partition selection by the
functions ``udfs`` registers) → charge the ledger → result.
"""

from __future__ import annotations

import glob
import json
import math
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, wraps
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
from sqlglot import exp

import udfs
from privsql.accuracy import bounding_check, half_widths
from privsql.engines import DuckDBEngine, Engine, SparkEngine, post_process
from privsql.ledger import (
    LOCK_TIMEOUT,
    MAX_QUERY_DELTA,
    BudgetExceeded,
    Ledger,
    StoredAnswer,
    database_path,
    open_database,
)
from privsql.result import Result
from rewriter.analyze import Analysis, PublicQuery, analyze, analyze_source
from rewriter.catalog import FILE, Bounds, Catalog, Protection, identity
from rewriter.dialect import to_sql, written
from rewriter.errors import InvalidOption, PrivacyError
from rewriter.fingerprint import fingerprint_sql
from rewriter.generate import (
    SUPPORT_PREFIX,
    Functions,
    bounds_sql,
    generate,
    groups_sql,
    stages,
    threshold_sql,
)
from rewriter.plan import (
    BUCKETS,
    CANDIDATES,
    MAGNITUDES,
    BoundsSearch,
    Measurement,
    Plan,
    bounds_search,
    charged_delta,
    plan,
)

FUNCTIONS = Functions(
    noise="privsql_laplace",
    keep="privsql_keep",
    quantile="privsql_quantile",
    check="privsql_laplace_check",
)
DECIDED_KEY = b"privsql.decided"
"""Arrow metadata of a stored answer: the bounds and caps privately chosen for it."""
Keys = Mapping[str, Sequence[object]]
T = TypeVar("T")


@dataclass(frozen=True)
class Explanation:
    """What a query would do and cost; producing it reads no data and spends nothing."""

    sql: str
    epsilon: float
    delta: float
    bounding: dict
    aggregates: tuple[dict, ...]
    partition_selection: dict | None

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
                    f"ε = {b['bounds_epsilon']:g}"
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
        if self.partition_selection:
            p = self.partition_selection
            lines.append(
                f"  keys: partition selection, ε = {p['epsilon']:g}, δ = {p['delta']:g}, "
                f"threshold {p['threshold']} distinct units"
            )
        if self.sql:
            lines += ["", self.sql]
        return "\n".join(lines)


@dataclass(frozen=True)
class _Released:
    """A query's released values: ``data`` is the fingerprint of the data they were
    released on; ``plan`` is the plan of a fresh release, None for a stored answer."""

    data: str
    table: pa.Table
    plan: Plan | None
    final: str
    """The post-processing statement of a fresh release (``Stages.final``)."""


class Budget:
    """The ledger as the analyst sees it: ε and δ total, spent and remaining, the per-query
    δ cap, and the history."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    total = property(lambda self: self._ledger.total)
    spent = property(lambda self: self._ledger.spent)
    remaining = property(lambda self: self._ledger.remaining)
    delta_total = property(lambda self: self._ledger.delta_total)
    delta_spent = property(lambda self: self._ledger.delta_spent)
    delta_remaining = property(lambda self: self._ledger.delta_remaining)
    max_query_delta = property(lambda self: self._ledger.max_query_delta)
    history = property(lambda self: self._ledger.history)

    def __repr__(self) -> str:
        return (
            f"Budget(total={self.total:g}, spent={self.spent:g}, remaining={self.remaining:g}, "
            f"delta_total={self.delta_total:g}, delta_spent={self.delta_spent:g}, "
            f"delta_remaining={self.delta_remaining:g})"
        )


def _one_at_a_time(method: Callable[..., T]) -> Callable[..., T]:
    """A session method that other threads wait for: a DuckDB connection runs one
    statement (and one transaction) at a time."""

    @wraps(method)
    def serialised(self: Session, *args: object, **kwargs: object) -> T:
        with self._busy:
            return method(self, *args, **kwargs)

    return serialised


class Session:
    """A connection to one engine's data through privsql; use ``privsql.connect`` to make one.

    ``connection`` is the DuckDB database where released values are computed and, unless
    ``ledger`` names another one, where the ledger and declarations live; with the default
    engine it also holds the data.
    """

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        *,
        budget: float | None,
        epsilon: float,
        delta: float | None,
        rng: udfs.RandomSource,
        owns_connection: bool = True,
        engine: Engine | None = None,
        ledger: duckdb.DuckDBPyConnection | None = None,
        delta_budget: float | None = None,
        max_query_delta: float | None = None,
        declared_files_only: bool = False,
    ) -> None:
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise PrivacyError("the default ε must be a finite number greater than 0")
        if delta is not None and not (0 < delta < 1):
            raise PrivacyError("the default δ must be between 0 and 1")
        self._con = connection
        self._declared_files_only = declared_files_only
        self._busy = threading.RLock()  # one statement at a time on this session's connection
        self._engine = engine or DuckDBEngine(connection)
        self._owns_connection = owns_connection
        self._ledger_connection = ledger
        self._ledger = Ledger(
            (ledger or connection).cursor(), budget, delta_budget, max_query_delta
        )
        cap = self._ledger.max_query_delta
        if delta is None:
            delta = min(MAX_QUERY_DELTA, cap)
        elif delta > cap:
            self._ledger.close()
            if ledger is not None:
                ledger.close()
            if owns_connection:
                connection.close()
            raise PrivacyError(
                f"the default δ = {delta:g} is above this database's per-query cap of δ = {cap:g}"
            )
        self.epsilon = epsilon
        self.delta = delta
        self.budget = Budget(self._ledger)
        self._rng = rng
        self._functions = self._register(rng)
        self._database = self._con.execute("SELECT current_database()").fetchall()[0][0]
        self._aggregates = frozenset(
            name
            for (name,) in self._con.execute(
                "SELECT DISTINCT function_name FROM duckdb_functions() "
                "WHERE function_type = 'aggregate'"
            ).fetchall()
        )

    # -- the data owner's side -----------------------------------------------------------

    @_one_at_a_time
    def protect(
        self,
        table: str,
        privacy_unit: str,
        *,
        bounds: Mapping[str, Bounds] | None = None,
        keys: Keys | None = None,
    ) -> None:
        """Declare ``table`` private with its unit, optional column bounds and public key lists.

        ``table`` is a table or view, or a Parquet reader (``read_parquet('dir/*.parquet')``):
        a query reading any of its files, however spelt, is then held to this declaration.
        """
        source = self._source_identity(table)
        columns = {c.lower() for c in self._columns(table)}
        for name in [privacy_unit, *(bounds or {}), *(keys or {})]:
            if name.lower() not in columns:
                raise PrivacyError(f"{name} is not a column of {table}")
        for column, (low, high) in (bounds or {}).items():
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise PrivacyError(f"bounds of {column} must be finite with low <= high")
        self._ledger.declare(source, Protection(privacy_unit, dict(bounds or {}), dict(keys or {})))

    @_one_at_a_time
    def public(self, table: str) -> None:
        """Declare ``table`` public: anyone may read it exactly, and its values can be keys."""
        name = self._source_identity(table)
        if name.startswith(FILE):
            raise PrivacyError("only tables and views can be declared public, not files")
        self._columns(table)
        self._ledger.declare(name, None)

    # -- the analyst's side -----------------------------------------------------------------

    @_one_at_a_time
    def sql(self, query: str, *, keys: Keys | None = None) -> Result:
        """Run a privsql query; a private answer is charged to the ledger before it is returned.

        Safe to call from several threads: they take turns on the session's connection.
        """
        analysis = analyze(query, self._catalog(), keys)
        if isinstance(analysis, PublicQuery):
            return Result(self._engine.public(analysis.select))
        self._engine.check(analysis)
        key = _answer_key(analysis, self.epsilon, self.delta)
        delta = self._checked_delta(analysis)
        released = self._execute(analysis, key, delta)
        if released.plan is None:
            query_plan = self._replan(analysis, released.table)
            final = stages(query_plan, FUNCTIONS).final
        else:
            final = released.final
            query_plan = released.plan
            self._ledger.charge(
                analysis.written + _choices(query_plan),
                query_plan.epsilon,
                query_plan.delta,
                StoredAnswer(key, released.data, released.table),
            )
        table = post_process(self._con, final, released.table)
        # The answer carries what was decided privately for it (bounds, caps, MAX_GROUPS).
        table = table.replace_schema_metadata(released.table.schema.metadata)
        return self._result(table, query_plan, cached=released.plan is None)

    def _checked_delta(self, analysis: Analysis) -> float:
        """The δ the query will be charged, after refusing a δ above the per-query cap.

        A DELTA option above the cap is refused even when the query releases only public
        keys (and so would spend no δ): it asks for something the owner does not allow.
        δ ≥ 1 was already refused when the options were read (rewriter/options.py).
        """
        cap = self._ledger.max_query_delta
        asked = analysis.options.delta
        if asked is not None and asked > cap:
            raise InvalidOption(
                f"DELTA {asked:g} is above this database's per-query cap of δ = {cap:g}; "
                "nothing was charged"
            )
        return charged_delta(analysis, self.delta)

    @_one_at_a_time
    def explain(self, query: str, *, keys: Keys | None = None) -> Explanation:
        """Rewritten SQL, bounds, noise scales and ε of a query; reads no data, costs nothing."""
        analysis = analyze(query, self._catalog(), keys)
        if isinstance(analysis, PublicQuery):
            sql = analysis.select.sql(dialect="duckdb")
            return Explanation(sql, 0.0, 0.0, {}, (), None)
        estimating = bounds_search(analysis, epsilon=self.epsilon)
        if estimating is not None:  # unknown until estimated: plan with placeholder bounds
            unknown = {to_sql(a.node): (0.0, 1.0) for a in estimating.aggregates}
            analysis = analysis.with_bounds(unknown)
        query_plan = plan(
            analysis,
            epsilon=self.epsilon,
            delta=self.delta,
            spent=estimating.epsilon if estimating else 0.0,
        )
        groups = query_plan.group_search
        resolved = query_plan.search is None and estimating is None and groups is None
        measurements = {m.name: m for m in query_plan.measurements}
        aggregates = tuple(
            _mechanism(
                query_plan, s.aggregate.node, m, resolved or (m.kind == "units" and not groups)
            )
            for s in query_plan.statistics
            for m in (measurements[name] for name in s.measurements)
        )
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
            "search": None
            if search is None
            else " and ".join(
                f"about {search.rank} units above the cap"
                if rule == "rank"
                else "EMMMR20's v(h) minimiser for AVG"
                for rule in search.rules
            ),
            "search_epsilon": 0.0 if search is None else search.epsilon,
            "bounds_estimated": [written(a.node) for a in estimating.aggregates]
            if estimating
            else [],
            "bounds_epsilon": estimating.epsilon if estimating else 0.0,
        }
        partition = query_plan.partition
        return Explanation(
            sql=generate(query_plan, FUNCTIONS) if resolved else "",
            epsilon=query_plan.epsilon,
            delta=query_plan.delta,
            bounding=bounding,
            aggregates=aggregates,
            partition_selection=None
            if partition is None
            else {
                "epsilon": partition.epsilon,
                "delta": partition.delta,
                "threshold": udfs.partition_threshold(
                    partition.max_groups, partition.epsilon, partition.delta
                ),
            },
        )

    def close(self) -> None:
        """End the session; a connection passed to ``connect`` stays open for its owner."""
        udfs.unregister(self._con, self._functions)
        self._ledger.close()
        if self._ledger_connection is not None:
            self._ledger_connection.close()
        if self._owns_connection:
            self._con.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _register(self, rng: udfs.RandomSource) -> udfs.UdfNames:
        """This session's noise functions, reachable under the names generated SQL uses.

        DuckDB shares Python functions between all connections to one database, so each
        session registers its own under a unique suffix and points connection-local
        (TEMP) macros with the stable names at them: generated SQL, and so the key of a
        stored answer, is the same in every session.
        """
        # The bounding check draws from its own stream: under a test seed, adding it leaves
        # every other release's noise as it was.
        names = udfs.register(
            self._con, rng, suffix=f"_{secrets.token_hex(6)}", check=rng.independent("check")
        )
        self._con.execute(
            f"CREATE OR REPLACE TEMP MACRO {FUNCTIONS.noise}(v, s, e) AS {names.laplace}(v, s, e)"
        )
        self._con.execute(
            f"CREATE OR REPLACE TEMP MACRO {FUNCTIONS.check}(v, s, e) AS {names.check}(v, s, e)"
        )
        self._con.execute(
            f"CREATE OR REPLACE TEMP MACRO {FUNCTIONS.keep}(u, g, e, d) AS {names.keep}(u, g, e, d)"
        )
        self._con.execute(
            f"CREATE OR REPLACE TEMP MACRO {FUNCTIONS.quantile}(b, w, p, lo, hi, n, e, ie, u) AS "
            f"{names.quantile}(b, w, p, lo, hi, n, e, ie, u)"
        )
        return names

    def _columns(self, source: str) -> list[str]:
        return self._engine.columns(source)

    def _source_identity(self, source: str) -> str:
        """The catalogue identity of a source named in the owner's SQL (``protect``)."""
        try:
            parsed = analyze_source(source)
        except PrivacyError:
            raise PrivacyError(f"{source} is not a table, a view or a Parquet reader") from None
        return self._catalog().identity(parsed)

    def _catalog(self) -> Catalog:
        declared = self._ledger.declarations()
        return Catalog(
            protected={n: p for n, (p, public) in declared.items() if p is not None},
            public=frozenset(n for n, (_, public) in declared.items() if public),
            columns=lru_cache(maxsize=None)(self._columns),
            aggregates=self._aggregates,
            database=self._database,
            files=lru_cache(maxsize=None)(_files),
            types=self._engine.types,
            evaluate=self._evaluate,
            forbidden=self._ledger.files | _files_of(self._con),
            declared_files_only=self._declared_files_only,
            tables=frozenset(identity(t, self._database) for t in self._engine.tables()),
        )

    def _evaluate(self, statement: str) -> list[tuple]:
        """A statement over constants only (it names no source): a key list's casts."""
        try:
            return self._con.execute(statement).fetchall()
        except duckdb.Error:
            raise InvalidOption("the key list does not cast to its key's type") from None

    def _execute(self, analysis: Analysis, key: str, delta: float) -> _Released:
        """The query's released values, in one snapshot of the data: the stored answer when
        this query was answered on these data before (looked up before anything else runs),
        else — if the budget allows — a fresh release and the plan it was made under.

        Missing bounds (BOUND AUTO) are estimated first, then AUTO thresholds are chosen,
        each from per-unit aggregates only. DuckDB's messages from the private part are not
        passed on, nor kept in the exception's context: they could quote private values.
        """
        engine, secret = self._engine, self._ledger.secret
        epsilon = analysis.options.epsilon or self.epsilon

        def run() -> _Released:
            data = repr(
                engine.row(
                    fingerprint_sql(
                        analysis.select, analysis.sources, self._columns, analysis.unit
                    ),
                    secret,
                )
            )
            stored = self._ledger.answer(key, data)
            if stored is not None:
                return _Released(data, stored, None, "")
            if not self._ledger.affordable(epsilon):
                raise BudgetExceeded(
                    f"this query needs ε = {epsilon:g} but only "
                    f"ε = {self._ledger.remaining:g} remains; nothing was charged"
                )
            if not self._ledger.affordable(0.0, delta):
                raise BudgetExceeded(
                    f"this query needs δ = {delta:g} (partition selection) but only "
                    f"δ = {self._ledger.delta_remaining:g} remains; nothing was charged"
                )
            search = bounds_search(analysis, epsilon=self.epsilon)
            spent, estimated, bounded = 0.0, {}, analysis
            if search is not None:
                arguments = [a.argument for a in search.aggregates]
                summary = engine.row(bounds_sql(analysis, arguments, MAGNITUDES), secret)
                estimated = self._bounds(search, summary)
                bounded = analysis.with_bounds(estimated)
                spent = search.epsilon
            query_plan = plan(bounded, epsilon=self.epsilon, delta=self.delta, spent=spent)
            if query_plan.group_search is not None:  # groups first: rows are capped per cell
                candidates = query_plan.group_search.candidates
                summary = engine.row(groups_sql(query_plan, candidates), secret)
                query_plan = plan(
                    bounded,
                    epsilon=self.epsilon,
                    delta=self.delta,
                    spent=spent,
                    decided_groups=self._group_cap(query_plan, summary),
                )
            if query_plan.search is not None:
                summary = engine.row(threshold_sql(query_plan, CANDIDATES), secret)
                query_plan = query_plan.with_caps(self._thresholds(query_plan, summary))
            parts = stages(query_plan, FUNCTIONS)
            table = engine.release(parts, secret)
            decided = {
                "caps": query_plan.caps,
                "groups": query_plan.bounding.groups,
                "bounds": estimated,
                "spent": spent,
            }
            table = table.replace_schema_metadata({DECIDED_KEY: json.dumps(decided)})
            return _Released(data, table, query_plan, parts.final)

        return engine.private(run)

    def _replan(self, analysis: Analysis, stored: pa.Table) -> Plan:
        """The plan a stored answer was released under: its estimated bounds and caps."""
        decided = json.loads(stored.schema.metadata[DECIDED_KEY])
        analysis = analysis.with_bounds({k: tuple(v) for k, v in decided["bounds"].items()})
        query_plan = plan(
            analysis,
            epsilon=self.epsilon,
            delta=self.delta,
            spent=decided["spent"],
            decided_groups=decided.get("groups"),
        )
        return query_plan.with_caps(decided["caps"])

    def _group_cap(self, query_plan: Plan, summary: Sequence[int]) -> int:
        """MAX_GROUPS AUTO: AKMV19's rank rule (``udfs.rank_threshold``) on how many units
        touch more than each candidate number of groups, with the group search's ε."""
        search = query_plan.group_search
        assert search is not None
        units, exceedances = int(summary[0]), [int(v) for v in summary[1:]]
        return udfs.rank_threshold(
            search.candidates, units, exceedances, search.rank, search.epsilon, self._rng
        )

    def _bounds(self, search: BoundsSearch, summary: Sequence[int]) -> dict[str, Bounds]:
        """Each aggregate's (low, high) by ``udfs.magnitude_bounds`` on its argument's
        per-unit extremes; aggregates of the same argument share one estimate, made with
        the ε parts they would have spent apart (one unit moves each count by at most 1)."""
        width = len(MAGNITUDES)
        shares: dict[str, list[int]] = {}
        for i, aggregate in enumerate(search.aggregates):
            shares.setdefault(to_sql(aggregate.argument), []).append(i)
        found = {}
        for positions in shares.values():
            i = positions[0]
            above = [int(v) for v in summary[2 * i * width : (2 * i + 1) * width]]
            below = [int(v) for v in summary[(2 * i + 1) * width : (2 * i + 2) * width]]
            epsilon = search.epsilon * len(positions) / len(search.aggregates)
            bounds = udfs.magnitude_bounds(MAGNITUDES, above, below, epsilon, self._rng)
            for j in positions:
                found[to_sql(search.aggregates[j].node)] = bounds
        return found

    def _thresholds(self, query_plan: Plan, summary: Sequence[int]) -> dict[str, int]:
        """The AUTO caps, one per rule, each from the per-unit summary with its ε part."""
        search = query_plan.search
        assert search is not None
        width = len(CANDIDATES)
        units, exceedances = int(summary[0]), [int(v) for v in summary[1 : width + 1]]
        epsilon = search.epsilon / len(search.rules)
        caps = {}
        for rule in search.rules:
            if rule == "rank":
                caps[rule] = udfs.rank_threshold(
                    CANDIDATES, units, exceedances, search.rank, epsilon, self._rng
                )
                continue
            centred = min(m.epsilon for m in query_plan.measurements if m.kind == "centred")
            means = [
                ([int(v) for v in summary[start : start + width + 1]], total.bound)
                for start, (total, _) in zip(
                    range(width + 1, len(summary), width + 1), query_plan.mean_sums, strict=True
                )
            ]
            caps[rule] = udfs.variance_threshold(
                CANDIDATES,
                units,
                exceedances,
                means,
                search.half_range,
                centred,
                epsilon,
                self._rng,
                search.noise_factor,
            )
        return caps

    def _result(self, table: pa.Table, query_plan: Plan, *, cached: bool) -> Result:
        support = [c for c in table.column_names if c.startswith(SUPPORT_PREFIX)]
        visible = table.drop_columns(support)
        widths = half_widths(query_plan, table)
        return Result(
            visible,
            epsilon=0.0 if cached else query_plan.epsilon,
            delta=0.0 if cached else query_plan.delta,
            half_widths=widths,
            cached=cached,
            check=bounding_check(query_plan, table),
        )


def _files_of(connection: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """The data's own database file, and its write-ahead log."""
    path = database_path(connection)
    if path is None:
        return frozenset()
    return frozenset(os.path.abspath(p) for p in (path, path.with_name(path.name + ".wal")))


def _files(name: str) -> frozenset[str]:
    """The files a file identity names: each path, its glob expanded (recursively for **)."""
    paths = name.removeprefix(FILE).split("\n")
    return frozenset(f for path in paths for f in (glob.glob(path, recursive=True) or [path]))


def _mechanism(query_plan: Plan, aggregate: exp.Expr, m: Measurement, known: bool) -> dict:
    """One measurement as ``explain`` shows it: its mechanism, ε and noise scale.

    For a quantile the scale is the mechanism's rank error bound at 95%, in rows.
    """
    if m.kind == "histogram":
        assert m.quantile is not None
        scale = (
            udfs.rank_error_bound(
                BUCKETS,
                m.epsilon,
                udfs.quantile_sensitivity(m.quantile[0], query_plan.sensitivity(m)),
                0.05,
            )
            * m.unit
            if known
            else None
        )
        mechanism = "permute-and-flip"
    else:
        scale = query_plan.sensitivity(m) * m.unit / m.epsilon if known else None
        mechanism = "Laplace"
    return {
        "aggregate": written(aggregate),
        "measurement": m.name,
        "mechanism": mechanism,
        "epsilon": m.epsilon,
        "interval_epsilon": m.interval_epsilon,
        "scale": scale,
    }


def _choices(query_plan: Plan) -> str:
    """What the ledger's history adds to a query's text: MAX_GROUPS AUTO's choice and ε."""
    if not query_plan.group_epsilon:
        return ""
    return (
        f"  -- MAX_GROUPS AUTO chose {query_plan.bounding.groups} "
        f"(ε = {query_plan.group_epsilon:g} of the query's ε)"
    )


def _answer_key(analysis: Analysis, epsilon: float, delta: float) -> str:
    """What identifies a query for stored answers: the analysed query, its options and
    bounds, its keys' domains and the session's defaults — everything its plan follows
    from, but the privately chosen bounds and caps, which are part of the stored answer."""
    options = analysis.options
    return Ledger.query_key(
        to_sql(analysis.select),
        to_sql(analysis.unit),
        [options.strategy, options.threshold, options.max_groups, options.epsilon, options.delta],
        [(to_sql(a.node), a.bounds) for a in analysis.aggregates],
        [(to_sql(k.expression), k.domain and to_sql(k.domain)) for k in analysis.keys],
        epsilon,
        delta,
    )


def connect(
    database: str | Path | duckdb.DuckDBPyConnection = ":memory:",
    *,
    budget: float | None = None,
    epsilon: float = 1.0,
    delta: float | None = None,
    delta_budget: float | None = None,
    max_query_delta: float | None = None,
    engine: str = "duckdb",
    spark: Any = None,
    ledger: str | Path | None = None,
    seed: int | None = None,
    insecure: bool = False,
    lock_timeout: float = LOCK_TIMEOUT,
    declared_files_only: bool = False,
) -> Session:
    """Open a privsql session on a DuckDB database (a path, ``":memory:"`` or a connection),
    or with ``engine="spark"`` on the tables, views and Parquet paths of a SparkSession.

    ``budget`` is the database's total ε (fixed when its ledger is created; 1.0 if never
    given); ``delta_budget`` its total δ (default 1e-5) and ``max_query_delta`` the largest
    δ one query may spend (default 1e-6, or the δ total if smaller), both also fixed at
    creation (a different value later is refused). ``epsilon`` and ``delta`` are the
    defaults of a query that names none; ``delta`` defaults to 1e-6 or the cap if smaller,
    and one above the cap is refused. δ is spent only by queries that release group keys
    that are not public (partition selection).
    The ledger and the owner's declarations live in the DuckDB file ``ledger`` names, else
    in ``database`` (DuckDB) or in memory (Spark, where they then last only as long as the
    session: name a file for a durable budget).
    ``seed`` makes the noise reproducible and is refused unless ``insecure=True``: it
    is for tests only, never for releasing data. DuckDB lets one process at a time open
    a file; ``lock_timeout`` is how many seconds ``connect`` waits for another process
    to close it. With ``declared_files_only`` queries read only the files the owner
    declared with ``protect`` (for analysts who are not the owner); the database's own
    files and its ledger's key are never readable by a query.
    """
    rng: udfs.RandomSource = (
        udfs.SystemRandom() if seed is None else udfs.SeededRandom(seed, insecure=insecure)
    )
    settings = {
        "budget": budget,
        "epsilon": epsilon,
        "delta": delta,
        "rng": rng,
        "delta_budget": delta_budget,
        "max_query_delta": max_query_delta,
        "declared_files_only": declared_files_only,
    }
    if engine == "spark":
        if spark is None:
            raise PrivacyError("engine='spark' needs spark=<SparkSession>")
        if not (isinstance(database, str) and database == ":memory:"):
            raise PrivacyError(
                "engine='spark' reads Spark's tables: name the ledger's file with ledger="
            )
        connection = open_database(ledger or ":memory:", lock_timeout)
        return Session(connection, **settings, engine=SparkEngine(spark, connection))
    if engine != "duckdb":
        raise PrivacyError(f"engine {engine!r} is not available; use 'duckdb' or 'spark'")
    if spark is not None:
        raise PrivacyError("spark= belongs to engine='spark'")
    given = isinstance(database, duckdb.DuckDBPyConnection)
    connection = database if given else open_database(database, lock_timeout)
    ledger_connection = open_database(ledger, lock_timeout) if ledger is not None else None
    return Session(connection, **settings, owns_connection=not given, ledger=ledger_connection)
