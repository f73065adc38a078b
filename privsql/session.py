"""A privsql session: one DuckDB database, its owner's declarations, its ledger.

``Session.sql`` runs the whole flow of SPEC section 5: parse and analyse (refusals,
no data read) → plan → generate → execute in DuckDB → release (noise and partition
selection by the functions ``udfs`` registers) → charge the ledger → result.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

import udfs
from privsql.ledger import BudgetExceeded, Ledger, StoredAnswer
from privsql.result import HalfWidth, Result
from rewriter.analyze import Analysis, PublicQuery, analyze
from rewriter.catalog import Bounds, Catalog, Protection
from rewriter.dialect import to_sql
from rewriter.errors import PrivacyError
from rewriter.fingerprint import fingerprint_sql
from rewriter.generate import SECRET, SUPPORT_PREFIX, Functions, generate, output_name
from rewriter.plan import Plan, Statistic, plan

FUNCTIONS = Functions(noise="privsql_laplace", keep="privsql_keep")
Keys = Mapping[str, Sequence[object]]


@dataclass(frozen=True)
class Explanation:
    """What a query would do and cost; producing it reads no data and spends nothing."""

    sql: str
    epsilon: float
    delta: float
    rows_cap: int
    groups_cap: int
    aggregates: tuple[dict, ...]
    partition_selection: dict | None

    def __str__(self) -> str:
        lines = [
            f"ε = {self.epsilon:g}, δ = {self.delta:g}; each unit keeps at most "
            f"{self.rows_cap} rows in each of at most {self.groups_cap} groups",
        ]
        for a in self.aggregates:
            lines.append(
                f"  {a['aggregate']}: Laplace on {a['measurement']}, sensitivity "
                f"{a['sensitivity']:g}, ε = {a['epsilon']:g}, scale {a['scale']:g}"
            )
        if self.partition_selection:
            p = self.partition_selection
            lines.append(
                f"  keys: partition selection, ε = {p['epsilon']:g}, δ = {p['delta']:g}, "
                f"threshold {p['threshold']} distinct units"
            )
        return "\n".join([*lines, "", self.sql])


class Budget:
    """The ledger as the analyst sees it: total, spent, remaining and history."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    total = property(lambda self: self._ledger.total)
    spent = property(lambda self: self._ledger.spent)
    remaining = property(lambda self: self._ledger.remaining)
    delta_spent = property(lambda self: self._ledger.delta_spent)
    history = property(lambda self: self._ledger.history)

    def __repr__(self) -> str:
        return f"Budget(total={self.total:g}, spent={self.spent:g}, remaining={self.remaining:g})"


class Session:
    """A connection to one database through privsql; use ``privsql.connect`` to make one."""

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        *,
        budget: float | None,
        epsilon: float,
        delta: float,
        rng: udfs.RandomSource,
    ) -> None:
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise PrivacyError("the default ε must be a finite number greater than 0")
        if not (0 < delta < 1):
            raise PrivacyError("the default δ must be between 0 and 1")
        self._con = connection
        self._ledger = Ledger(connection.cursor(), budget)
        self.epsilon = epsilon
        self.delta = delta
        self.budget = Budget(self._ledger)
        self._functions = self._register(rng)
        self._aggregates = frozenset(
            name
            for (name,) in self._con.execute(
                "SELECT DISTINCT function_name FROM duckdb_functions() "
                "WHERE function_type = 'aggregate'"
            ).fetchall()
        )

    # -- the data owner's side -----------------------------------------------------------

    def protect(
        self,
        table: str,
        privacy_unit: str,
        *,
        bounds: Mapping[str, Bounds] | None = None,
        keys: Keys | None = None,
    ) -> None:
        """Declare ``table`` private with its unit, optional column bounds and public key lists."""
        columns = {c.lower() for c in self._columns(table)}
        for name in [privacy_unit, *(bounds or {}), *(keys or {})]:
            if name.lower() not in columns:
                raise PrivacyError(f"{name} is not a column of {table}")
        for column, (low, high) in (bounds or {}).items():
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise PrivacyError(f"bounds of {column} must be finite with low <= high")
        self._ledger.declare(table, Protection(privacy_unit, dict(bounds or {}), dict(keys or {})))

    def public(self, table: str) -> None:
        """Declare ``table`` public: anyone may read it exactly, and its values can be keys."""
        self._columns(table)
        self._ledger.declare(table, None)

    # -- the analyst's side -----------------------------------------------------------------

    def sql(self, query: str, *, keys: Keys | None = None) -> Result:
        """Run a privsql query; a private answer is charged to the ledger before it is returned."""
        analysis = analyze(query, self._catalog(), keys)
        if isinstance(analysis, PublicQuery):
            return Result(self._run_public(analysis))
        query_plan = plan(analysis, epsilon=self.epsilon, delta=self.delta)
        statement = generate(query_plan, FUNCTIONS)
        key = Ledger.query_key(statement)
        if not self._ledger.affordable(query_plan.epsilon) and not self._ledger.has_answers(key):
            raise BudgetExceeded(
                f"this query needs ε = {query_plan.epsilon:g} but only "
                f"ε = {self._ledger.remaining:g} remains; nothing was charged"
            )
        data, table = self._execute(analysis, statement)
        stored = self._ledger.answer(key, data)
        if stored is not None:
            return self._result(stored, query_plan, cached=True)
        self._ledger.charge(
            to_sql(analysis.select),
            query_plan.epsilon,
            query_plan.delta,
            StoredAnswer(key, data, table),
        )
        return self._result(table, query_plan, cached=False)

    def explain(self, query: str, *, keys: Keys | None = None) -> Explanation:
        """Rewritten SQL, bounds, noise scales and ε of a query; reads no data, costs nothing."""
        analysis = analyze(query, self._catalog(), keys)
        if isinstance(analysis, PublicQuery):
            sql = analysis.select.sql(dialect="duckdb")
            return Explanation(sql, 0.0, 0.0, 0, 0, (), None)
        query_plan = plan(analysis, epsilon=self.epsilon, delta=self.delta)
        measurements = {m.name: m for m in query_plan.measurements}
        aggregates = tuple(
            {
                "aggregate": to_sql(s.aggregate.node),
                "measurement": m.name,
                "sensitivity": m.sensitivity * m.unit,
                "epsilon": m.epsilon,
                "scale": m.scale,
            }
            for s in query_plan.statistics
            for m in (measurements[name] for name in s.measurements)
        )
        partition = query_plan.partition
        return Explanation(
            sql=generate(query_plan, FUNCTIONS),
            epsilon=query_plan.epsilon,
            delta=query_plan.delta,
            rows_cap=query_plan.rows_cap,
            groups_cap=query_plan.groups_cap,
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
        udfs.unregister(self._con, self._functions)
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
        names = udfs.register(self._con, rng, suffix=f"_{secrets.token_hex(6)}")
        self._con.execute(
            f"CREATE OR REPLACE TEMP MACRO {FUNCTIONS.noise}(v, s, e) AS {names.laplace}(v, s, e)"
        )
        self._con.execute(
            f"CREATE OR REPLACE TEMP MACRO {FUNCTIONS.keep}(u, g, e, d) AS {names.keep}(u, g, e, d)"
        )
        return names

    def _columns(self, source: str) -> list[str]:
        try:
            return [
                row[0] for row in self._con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
            ]
        except duckdb.Error:
            raise PrivacyError(f"cannot read the columns of {source}") from None

    def _catalog(self) -> Catalog:
        declared = self._ledger.declarations()
        return Catalog(
            protected={n: p for n, (p, public) in declared.items() if p is not None},
            public=frozenset(n for n, (_, public) in declared.items() if public),
            columns=lru_cache(maxsize=None)(self._columns),
            aggregates=self._aggregates,
        )

    def _run_public(self, query: PublicQuery) -> pa.Table:
        return self._con.sql(query.select.sql(dialect="duckdb")).to_arrow_table()

    def _execute(self, analysis: Analysis, statement: str) -> tuple[str, pa.Table]:
        """The data fingerprint and the released table, read in one snapshot.

        DuckDB's messages from the private part are not passed on: they could quote
        private values.
        """
        con = self._con
        con.execute("BEGIN TRANSACTION")
        try:
            fingerprint = con.execute(
                fingerprint_sql(analysis.select, analysis.sources, self._columns, analysis.unit)
            ).fetchall()[0]
            secret = {SECRET[1:]: self._ledger.secret} if SECRET in statement else None
            table = con.sql(statement, params=secret).to_arrow_table()
        except (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException):
            raise  # decided from the SQL and the schema alone: safe to show
        except duckdb.Error as error:
            raise PrivacyError(
                f"the query failed while reading private data ({type(error).__name__}); "
                "the engine's message is withheld because it may quote private values"
            ) from None
        finally:
            con.execute("ROLLBACK")
        return repr(fingerprint), table

    def _result(self, table: pa.Table, query_plan: Plan, *, cached: bool) -> Result:
        support = [c for c in table.column_names if c.startswith(SUPPORT_PREFIX)]
        visible = table.drop_columns(support)
        widths = _half_widths(query_plan, table)
        return Result(
            visible,
            epsilon=0.0 if cached else query_plan.epsilon,
            delta=0.0 if cached else query_plan.delta,
            half_widths=widths,
            cached=cached,
        )


def _half_widths(query_plan: Plan, table: pa.Table) -> dict[str, HalfWidth]:
    """Interval half-widths for outputs that are a bare COUNT, SUM or AVG."""
    measurements = {m.name: m for m in query_plan.measurements}
    statistics = {to_sql(s.aggregate.node): s for s in query_plan.statistics}
    rows = table.num_rows
    widths: dict[str, HalfWidth] = {}

    def width(name: str, alpha: float) -> float:
        m = measurements[name]
        return udfs.laplace_halfwidth(m.sensitivity, m.epsilon, alpha) * m.unit

    for item in query_plan.analysis.select.expressions:
        statistic = statistics.get(to_sql(item.unalias()))
        name = output_name(item)
        if statistic is None:
            continue
        if len(statistic.measurements) == 1:
            widths[name] = lambda alpha, s=statistic: pa.array(
                [width(s.measurements[0], alpha)] * rows, pa.float64()
            )
            continue
        widths[name] = lambda alpha, s=statistic, n=name: _mean_half_width(
            table, n, s, width(s.measurements[0], alpha / 2), width(s.measurements[1], alpha / 2)
        )
    return widths


def _mean_half_width(
    table: pa.Table, name: str, statistic: Statistic, total_width: float, count_width: float
) -> pa.Array:
    """A conservative half-width for mid + S/N from the half-widths of S and N."""
    assert statistic.grid is not None
    grid = statistic.grid
    low, high = grid.low * grid.step, grid.high * grid.step
    middle = (low + high) / 2
    estimate = table.column(name)
    count = table.column(SUPPORT_PREFIX + name)
    spread = pc.add(total_width, pc.multiply(pc.abs(pc.subtract(estimate, middle)), count_width))
    floor = pc.max_element_wise(pc.subtract(pc.cast(count, pa.float64()), count_width), 1.0)
    return pc.min_element_wise(pc.divide(spread, floor), high - low)


def connect(
    database: str | Path | duckdb.DuckDBPyConnection = ":memory:",
    *,
    budget: float | None = None,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    engine: str = "duckdb",
    seed: int | None = None,
    insecure: bool = False,
) -> Session:
    """Open a privsql session on a DuckDB database (a path, ``":memory:"`` or a connection).

    ``budget`` is the database's total ε (fixed when its ledger is created; 1.0 if never
    given); ``epsilon`` and ``delta`` are the defaults of a query that names none.
    ``seed`` makes the noise reproducible and is refused unless ``insecure=True``: it
    is for tests only, never for releasing data.
    """
    if engine != "duckdb":
        raise PrivacyError(f"engine {engine!r} is not available; use engine='duckdb'")
    rng: udfs.RandomSource = (
        udfs.SystemRandom() if seed is None else udfs.SeededRandom(seed, insecure=insecure)
    )
    connection = (
        database
        if isinstance(database, duckdb.DuckDBPyConnection)
        else duckdb.connect(str(database))
    )
    return Session(connection, budget=budget, epsilon=epsilon, delta=delta, rng=rng)
