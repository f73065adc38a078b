"""A privsql session: one engine's data, its owner's declarations, its ledger.

``Session.sql`` runs the whole flow of SPEC section 5: parse and analyse (refusals,
no data read) → plan → generate → execute on the engine (``privsql.engines``: DuckDB,
or Spark for the aggregation) → release in DuckDB (noise and partition selection by the
functions ``udfs`` registers) → charge the ledger → result.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

import udfs
from privsql.accuracy import bounding_checks, guessed_outputs, half_widths, ranges
from privsql.catalog_cache import CatalogCache
from privsql.engines import DuckDBEngine, Engine, SparkEngine, builtin_functions, post_process
from privsql.explain import Explanation, Public, Suggestion, explain, suggest
from privsql.interrupt import PublicStatement
from privsql.ledger import (
    LOCK_TIMEOUT,
    MAX_QUERY_DELTA,
    Ledger,
    LedgerState,
    StoredAnswer,
    database_path,
    has_ledger,
    ledger_elsewhere,
    mark_ledger,
    open_database,
)
from privsql.progress import AFTER, watch
from privsql.result import Result
from privsql.schema import describe, schema_statement, tables
from rewriter.analyze import Analysis, PublicQuery, analyze, analyze_source, public_sources
from rewriter.catalog import FILE, Bounds, Catalog, Protection, public_type
from rewriter.compiler import (
    Compiled,
    Decided,
    Search,
    compile_all,
    compile_query,
    threshold_search,
)
from rewriter.dialect import to_sql
from rewriter.errors import ChargedFailure, InvalidOption, PrivacyError
from rewriter.files import Schema, reader_schema
from rewriter.fingerprint import answer_spelling, fingerprint_sql
from rewriter.functions import refuse_defined
from rewriter.generate import (
    RELEASED,
    SUPPORT_PREFIX,
    Functions,
)
from rewriter.plan import (
    BUCKETS,
    CANDIDATES,
    GROUP_COUNTS,
    MAGNITUDES,
    MEAN_BINS,
    ROW_CANDIDATES,
    ROW_RATIO,
    ROW_WEIGHT_BITS,
    BoundsSearch,
    Plan,
    charged_delta,
    group_counts,
    mean_bin_width,
)
from rewriter.temporal import restore_sql

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
class _Released:
    """A query's released values: ``data`` is the fingerprint of the data they were
    released on; ``compiled`` the compilation they were released under; ``fresh`` whether
    they were released now (else they are a stored answer)."""

    data: str
    table: pa.Table
    compiled: Compiled
    fresh: bool


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
        progress: bool | float = True,
        analyst: str | None = None,
        share_answers: bool = False,
    ) -> None:
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise PrivacyError("the default ε must be a finite number greater than 0")
        if delta is not None and not (0 < delta < 1):
            raise PrivacyError("the default δ must be between 0 and 1")
        self._con = connection
        self._progress_after = _progress_after(progress)
        self._busy = threading.RLock()  # one statement at a time on this session's connection
        self.public_statement = PublicStatement()
        """The statement over public data only running, which another thread may interrupt
        (a server's time limit, a client's cancel request); never a private one."""
        self._engine = engine or DuckDBEngine(connection, owned=owns_connection)
        self._owns_connection = owns_connection
        self._ledger_connection = ledger
        self._ledger = Ledger(
            (ledger or connection).cursor(),
            budget,
            delta_budget,
            max_query_delta,
            analyst=analyst,
            share_answers=share_answers,
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
        aggregates = frozenset(
            name
            for (name,) in self._con.execute(
                "SELECT DISTINCT function_name FROM duckdb_functions() "
                "WHERE function_type = 'aggregate'"
            ).fetchall()
        )
        self._catalogs = CatalogCache(
            self._engine,
            self._ledger,
            self._con,
            aggregates=aggregates,
            database=self._database,
            declared_files_only=declared_files_only,
        )
        self._max_query_delta = cap  # fixed when the ledger was created

    # -- the data owner's side -----------------------------------------------------------

    @_one_at_a_time
    def protect(
        self,
        table: str,
        privacy_unit: str,
        *,
        bounds: Mapping[str, Bounds] | None = None,
        keys: Keys | None = None,
        columns: Mapping[str, str] | None = None,
    ) -> None:
        """Declare ``table`` private with its unit, optional column bounds and public key lists.

        ``table`` is a table, or a Parquet reader (``read_parquet('dir/*.parquet')``):
        a query reading any of its files, however spelt, is then held to this declaration,
        and reads every file with the declaration's columns and types — ``columns`` (name:
        DuckDB type), else those the files share now (``rewriter.files``). A reader that
        shares a file (as the files are now) with another declared reader is refused:
        declarations only tighten, and another spelling of a declared file with another
        unit replaced the owner's unit for the files it named (red team 34).
        """
        source = self._source_identity(table)
        catalog = self._catalog()
        if source.startswith(FILE) and set(catalog.sharing(source)) - {source}:
            raise PrivacyError(
                f"{table} shares files with another reader the data owner declared: each "
                "file is governed by one declaration, with the unit first declared for it"
            )
        if source in catalog.views:
            raise PrivacyError(
                f"{table} is a view: a query reads it as the query it is (compiled and "
                "guarded like the analyst's SQL), so declare the tables it reads instead"
            )
        if columns is not None and not source.startswith(FILE):
            raise PrivacyError("columns= declares a file's schema; a table's is its own")
        schema = self._file_schema(table, columns) if source.startswith(FILE) else ()
        listed = [name for name, _ in schema] if schema else self._columns(table)
        names = {name.lower() for name in listed}
        for name in [privacy_unit, *(bounds or {}), *(keys or {})]:
            if name.lower() not in names:
                raise PrivacyError(f"{name} is not a column of {table}")
        for column, (low, high) in (bounds or {}).items():
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise PrivacyError(f"bounds of {column} must be finite with low <= high")
        protection = Protection(privacy_unit, dict(bounds or {}), dict(keys or {}), schema)
        self._ledger.declare(source, protection)

    def _file_schema(self, reader: str, columns: Mapping[str, str] | None) -> Schema:
        """A file source's declared columns: ``columns`` with each type as DuckDB names it,
        else the one schema its files share."""
        if columns is None:
            return reader_schema((), self._engine.file_groups(analyze_source(reader)))
        schema = []
        for name, kind in columns.items():
            try:
                spelt = exp.DataType.build(kind, dialect="duckdb").sql(dialect="duckdb")
                (named,) = self._con.execute(f"SELECT typeof(CAST(NULL AS {spelt}))").fetchone()
            except (sqlglot.errors.ParseError, ValueError, duckdb.Error):
                raise PrivacyError(f"{kind!r} is not a DuckDB type") from None
            schema.append((name, public_type(named)))  # an ENUM is read as VARCHAR
        return tuple(schema)

    @_one_at_a_time
    def public(self, table: str) -> None:
        """Declare ``table`` public: anyone may read it exactly, and its values can be keys.

        A view only if everything it reads is public (``rewriter.analyze.public_sources``,
        and the tables DuckDB binds it to: ``Engine.check_public``). One replaced later by a
        view over private data is not public either (``CatalogCache.current``)."""
        name = self._source_identity(table)
        if name.startswith(FILE):
            raise PrivacyError("only tables and views can be declared public, not files")
        self._columns(table)
        if name in self._catalog().views and not self._over_public(table, name):
            raise PrivacyError(
                f"{table} is a view that reads private data, or data privsql cannot tell "
                "is public: only a view over public sources can be declared public"
            )
        self._ledger.declare(name, None)

    def _over_public(self, view: str, name: str) -> bool:
        """Whether ``view`` (identity ``name``) reads public sources alone, were it declared
        public: as the analyser reads its definition, and as the engine binds it."""
        catalog = self._catalog()
        public = public_sources(replace(catalog, public=catalog.public | {name}))
        if name not in public:
            return False
        try:
            self._engine.check_public(exp.select("*").from_(analyze_source(view)), public)
        except PrivacyError:
            return False
        return True

    # -- the analyst's side -----------------------------------------------------------------

    @_one_at_a_time
    def sql(self, query: str, *, keys: Keys | None = None) -> Result:
        """Run a privsql query; a private answer is charged to the ledger before it is returned.
        ``DESCRIBE t`` and ``SHOW [ALL] TABLES`` are answered from the schema, free.

        Safe to call from several threads: they take turns on the session's connection.
        """
        schema = schema_statement(query, self)
        if schema is not None:
            return schema
        state = self._ledger.read()  # the budget row this query checks against and replaces
        catalog = self._catalogs.current(state.declared)
        analysis = analyze(query, catalog, keys)
        if isinstance(analysis, PublicQuery):
            # read again: a macro made since the catalogue was would run as written
            refuse_defined(analysis.select, self._engine.defined_functions(), builtin_functions())
            self._engine.check_public(analysis.select, catalog.public)
            with self.public_statement.running(self._engine.interrupt):
                table = self._engine.public(analysis.select)
            return Result(table)
        self._engine.check(analysis)
        key = _answer_key(analysis, self.epsilon, self.delta)
        delta = self._checked_delta(analysis)
        try:
            released = self._watched(lambda: self._execute(analysis, catalog, key, delta, state))
        except ChargedFailure as failure:
            self._ledger.charge(analysis.written, failure.epsilon, failure.delta, known=state)
            raise
        query_plan, parts = released.compiled.plan, released.compiled.stages
        assert query_plan is not None and parts is not None
        if released.fresh:
            self._ledger.charge(
                analysis.written + _choices(query_plan),
                query_plan.epsilon,
                query_plan.delta,
                StoredAnswer(key, released.data, released.table),
                known=state,
            )
        table = post_process(parts.final, released.table, parts.selected).replace_schema_metadata(
            released.table.schema.metadata
        )
        decided = released.compiled.decided
        return self._result(
            table,
            query_plan,
            cached=not released.fresh,
            guessed=decided.guessed,
            blind=decided.blind,
        )

    def _watched(self, work: Callable[[], T]) -> T:
        """``work()``, with a progress bar if it runs long (``connect(progress=...)``); only
        in the main thread: a query run from another (the REPL's, a server's) is shown by
        whoever runs that thread, or not at all."""
        if (
            self._progress_after is None
            or threading.current_thread() is not threading.main_thread()
        ):
            return work()
        return watch(self._con, work, after=self._progress_after)

    def _checked_delta(self, analysis: Analysis) -> float:
        """The δ the query will be charged, after refusing a δ above the per-query cap.

        A DELTA option above the cap is refused even when the query releases only public
        keys (and so would spend no δ): it asks for something the owner does not allow.
        δ ≥ 1 was already refused when the options were read (rewriter/options.py).
        """
        cap = self._max_query_delta
        asked = analysis.options.delta
        if asked is not None and asked > cap:
            raise InvalidOption(
                f"DELTA {asked:g} is above this database's per-query cap of δ = {cap:g}; "
                "nothing was charged"
            )
        return charged_delta(analysis, self.delta)

    @_one_at_a_time
    def explain(
        self,
        query: str,
        *,
        keys: Keys | None = None,
        rows: int | None = None,
        units: int | None = None,
    ) -> Explanation:
        """Rewritten SQL, bounds, noise scales, ε and each noisy cell's expected 95% ± in the
        query's units; reads no data, costs nothing.

        ``rows`` (rows expected per group: an AVG's ± is stated for it, else per 1,000 rows)
        and ``units`` (an upper bound on the number of privacy units) are public facts the
        analyst states; with them explain warns of answers likely empty or mostly bias.
        """
        # each source shown as the query names it: how a glob's files are read to its
        # schema (their names, grouped by footer) is the files' business, not the analyst's
        catalog = replace(self._catalog(), read=lambda source: source.copy())
        analysis = analyze(query, catalog, keys)
        if isinstance(analysis, PublicQuery):
            sql = analysis.select.sql(dialect="duckdb")
            return Explanation(sql, 0.0, 0.0, {}, (), None)
        return explain(
            analysis,
            epsilon=self.epsilon,
            delta=self.delta,
            functions=FUNCTIONS,
            public=Public(rows, units),
        )

    @_one_at_a_time
    def plan(
        self,
        query: str,
        target: float | Mapping[str, float],
        *,
        keys: Keys | None = None,
        rows: int | None = None,
        units: int | None = None,
    ) -> Suggestion:
        """The ε to write as the query's EPSILON for a wanted 95% ± (``target``, in the query's
        units: one number for its first noisy output, or a ± per output name); reads no data,
        costs nothing. Needs fixed bounds (BOUND ROWS k / WEIGHTS h, CLAMPED BETWEEN)."""
        analysis = analyze(query, self._catalog(), keys)
        if isinstance(analysis, PublicQuery):
            raise InvalidOption("the query reads only public data: it needs no ε")
        return suggest(
            analysis,
            target,
            epsilon=self.epsilon,
            delta=self.delta,
            functions=FUNCTIONS,
            public=Public(rows, units),
        )

    @_one_at_a_time
    def describe(self, source: str) -> pa.Table:
        """The columns of a table, a view or a Parquet reader: name, DuckDB type and what the
        owner declared (``privacy``). Schemas are not private: free, reads no rows."""
        return describe(self._catalog(), source)

    @_one_at_a_time
    def tables(self) -> pa.Table:
        """Every table, view and declared Parquet reader, with its access (public or
        private), declared privacy unit and columns. Free, reads no rows."""
        return tables(self._catalog(), self._engine)

    def is_own_file(self, path: str | Path) -> bool:
        """Whether ``path`` (however spelt: relative, with ``./`` or ``..``, a symbolic or
        hard link) is one of this session's own files: its database and write-ahead log, its
        ledger's and the ledger's key. No query reads them (``Catalog.check_readable``); the
        REPL neither writes them (``.output``, which would truncate them and leave the
        database unusable) nor runs them as commands (``.read``, whose errors would quote
        them)."""
        return self._catalogs.is_own_file(str(path))

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
        catalog = self._catalog()
        name = catalog.identity(parsed)  # the source queries reading this name read
        tables = catalog.tables
        if not name.startswith(FILE) and tables is not None and name not in tables:
            # e.g. ``dbfile.flights``, the database named as a schema: DuckDB reads the table,
            # but the name is another identity, whose declaration would govern nothing
            raise PrivacyError(
                f"{source} is not a name queries can read a table or view by: name it as "
                "they do (e.g. without the database's name)"
            )
        return name

    def _catalog(self) -> Catalog:
        return self._catalogs.current()

    def _execute(
        self, analysis: Analysis, catalog: Catalog, key: str, delta: float, state: LedgerState
    ) -> _Released:
        """The query's released values, in one snapshot of the data: the stored answer when
        this query was answered on these data before (looked up before anything else runs),
        else — if the budget allows — a fresh release and the compilation it was made under.

        The compiler (``rewriter.compiler``) says which search to run next — missing bounds
        (BOUND AUTO), then MAX_GROUPS AUTO, then the AUTO caps — each a per-unit summary
        this session decides from with noise; then the release. DuckDB's messages from the
        private part are not passed on, nor kept in the exception's context: they could
        quote private values.
        """
        engine, secret = self._engine, self._ledger.secret
        # Before the transaction: listing a glob can fail on a file's name (``footers``),
        # which would abort it.
        files = {
            i: found
            for i, source in enumerate(analysis.sources)
            if (found := self._catalogs.file_fingerprint(catalog, source)) is not None
        }

        read = engine_failed = False  # a search read private data; the engine raised

        def searched(search: Search, decided: Decided) -> Decided:
            nonlocal read, engine_failed
            try:
                rows = engine.rows(search.statement, secret)
            except Exception:
                engine_failed = True  # withheld by ``Engine.private``, as it always was
                raise
            read = True
            return self._decide(search, search.summary(rows), decided)

        def run() -> _Released:
            data = repr(
                engine.row(
                    fingerprint_sql(
                        analysis.select, analysis.sources, catalog, analysis.unit, files
                    ),
                    secret,
                )
            )
            stored = self._ledger.answer(key, data, known=state)
            if stored is not None:
                decided = Decided.from_json(stored.schema.metadata[DECIDED_KEY])
                decided = _respelt(analysis, decided, stored=False)
                step = compile_query(
                    analysis,
                    epsilon=self.epsilon,
                    delta=self.delta,
                    functions=FUNCTIONS,
                    decided=decided,
                )
                return _Released(data, stored, step, fresh=False)
            epsilon = analysis.options.epsilon or self.epsilon
            self._ledger.check_affordable(epsilon, delta, known=state)
            try:
                step, _ = compile_all(
                    analysis,
                    epsilon=self.epsilon,
                    delta=self.delta,
                    functions=FUNCTIONS,
                    decide=searched,
                )
            except Exception as error:
                if not read or engine_failed or isinstance(error, PrivacyError):
                    raise  # before any data was read, the engine's error, or a refusal
                # Once a search has read private data, a failure of the decisions made from
                # its noisy summary (or of the compilation they steer) may depend on the
                # data: it is charged like an answer and says nothing more (red team 42).
                raise ChargedFailure(epsilon, delta) from None
            assert step.stages is not None
            table = engine.release(step.stages, secret)
            spelt = _respelt(analysis, step.decided, stored=True)
            metadata = {DECIDED_KEY: spelt.as_json()}
            return _Released(data, table.replace_schema_metadata(metadata), step, fresh=True)

        return engine.private(run)

    def _decide(self, search: Search, summary: Sequence[int], decided: Decided) -> Decided:
        """The decisions after ``search``'s, made with noise from its ``summary``."""
        if search.estimating is not None:
            bounds, guessed, blind = self._bounds(search.estimating, summary)
            spent = search.estimating.epsilon
            return replace(decided, bounds=bounds, guessed=guessed, blind=blind, spent=spent)
        assert search.plan is not None
        if search.step == "groups":
            counts = group_counts(search.plan)
            return replace(decided, groups=self._group_cap(search.plan, counts, summary))
        caps, blind = self._thresholds(search.plan, summary)
        guessed = decided.guessed | _blind_aggregates(search.plan, blind)
        return replace(decided, caps=caps, guessed=guessed)

    def _group_cap(self, query_plan: Plan, counts: Sequence[int], summary: Sequence[int]) -> int:
        """MAX_GROUPS AUTO: AKMV19's rank rule (``udfs.rank_threshold``) on how many units
        touch more than each candidate number of groups, with the group search's ε. When
        the keys are not listed, the number of groups is not public: half that ε goes to
        ``udfs.bulk_top``, a private estimate of the most groups a unit touches, which
        bounds the choice (docs/privacy.md, 3.3a)."""
        search = query_plan.group_search
        assert search is not None
        units = int(summary[0])
        over = dict(zip(counts, (int(v) for v in summary[1:]), strict=True))
        listed = len(counts) == len(search.candidates)
        epsilon = search.epsilon if listed else search.epsilon / 2
        chosen = udfs.rank_threshold(
            search.candidates,
            units,
            [over[c] for c in search.candidates],
            search.rank,
            epsilon,
            self._rng,
            margin=0,
        ).cap
        if listed:
            return chosen
        fine = [over[c] for c in GROUP_COUNTS]
        top = udfs.bulk_top(GROUP_COUNTS, units, fine, epsilon, self._rng)
        return chosen if top is None else min(chosen, top)

    def _bounds(
        self, search: BoundsSearch, summary: Sequence[int]
    ) -> tuple[dict[str, Bounds], frozenset[str], frozenset[str]]:
        """Each aggregate's (low, high) by ``udfs.magnitude_bounds`` on its argument's
        per-unit extremes, tightened for a sum, mean or spread from its rows' weighted
        values (``udfs.noisy_row_weights``, released once per argument, then
        ``udfs.balanced_bounds`` or ``udfs.spread_bounds``), the aggregates whose bounds
        were guessed, and those no bin of the extremes supported (``blind``: withheld).
        Aggregates of the same argument share one estimate, made with the ε
        parts they would have spent apart (one unit moves each count by at most 1, the
        weights by 2**ROW_WEIGHT_BITS)."""
        width = len(MAGNITUDES)
        shares: dict[str, list[int]] = {}
        for i, aggregate in enumerate(search.aggregates):
            shares.setdefault(to_sql(aggregate.argument), []).append(i)
        tightened = [search.tightened(a) for a in search.aggregates]
        found, guessed, blind = {}, set(), set()
        for positions in shares.values():
            i = positions[0]
            weights = 2 * len(search.aggregates)  # the counts of every argument come first
            above, below, weight_above, weight_below = (
                [int(v) for v in summary[block * width : (block + 1) * width]]
                for block in (2 * i, 2 * i + 1, weights + 2 * i, weights + 2 * i + 1)
            )
            epsilon = search.extremes_epsilon * len(positions) / len(search.aggregates)
            extremes = udfs.magnitude_bounds(MAGNITUDES, above, below, epsilon, self._rng)
            noisy: list[int] = []
            if tightening := sum(tightened[j] for j in positions):
                epsilon = search.weights_epsilon * tightening / sum(tightened)
                unit = 2**ROW_WEIGHT_BITS
                noisy = udfs.noisy_row_weights(
                    weight_above, weight_below, unit, Fraction(epsilon), self._rng
                )
            for j in positions:
                aggregate = search.aggregates[j]
                chosen = extremes
                if tightened[j]:
                    rule, factor = udfs.balanced_bounds, search.noise_factor
                    if search.spread(aggregate):
                        rule, factor = udfs.spread_bounds, search.spread_factor
                    chosen = rule(
                        MAGNITUDES,
                        extremes,
                        noisy,
                        unit,
                        epsilon,
                        search.release_epsilon,
                        factor,
                    )
                key = to_sql(aggregate.node)
                found[key] = (chosen.low, chosen.high)
                if chosen.guessed:
                    guessed.add(key)
                if chosen.blind:
                    blind.add(key)
        return found, frozenset(guessed), frozenset(blind)

    def _threshold_summary(self, query_plan: Plan) -> tuple[int, ...]:
        """The per-unit summary an AUTO threshold search is made from (``threshold_sql``)."""
        search = threshold_search(query_plan)
        return search.summary(self._engine.rows(search.statement, self._ledger.secret))

    def _thresholds(
        self, query_plan: Plan, summary: Sequence[int]
    ) -> tuple[dict[str, int], frozenset[str]]:
        """The AUTO caps, one per rule, each from the per-unit summary with its ε part, and
        the rules whose search was blind (``udfs.RankChoice``)."""
        search = query_plan.search
        assert search is not None
        width = len(CANDIDATES)
        units, exceedances = int(summary[0]), [int(v) for v in summary[1 : width + 1]]
        epsilon = search.epsilon / len(search.rules)
        groups = query_plan.bounding.groups
        end = width + 1 + len(ROW_CANDIDATES)  # the rank rule's counts, then the means'
        cells = [int(v) for v in summary[width + 1 : end]]
        caps, blind = {}, set()
        for rule in search.rules:
            if rule in ("rank", "quantile"):
                rank = search.rank if rule == "rank" else _quantile_rank(query_plan)
                choice = udfs.rank_threshold(
                    ROW_CANDIDATES, units, cells, rank, epsilon, self._rng, groups, ratio=ROW_RATIO
                )
                caps[rule] = choice.cap
                if choice.blind:
                    blind.add(rule)
                continue
            centred = min(m.epsilon for m in query_plan.measurements if m.kind == "centred")
            block = (width + 1) * MEAN_BINS
            means = [
                udfs.MeanHistogram(
                    summary[start : start + block],
                    summary[start + block : start + 2 * block],
                    total.bound,
                    mean_bin_width(total.bound),
                    MEAN_BINS,
                )
                for start, (total, _) in zip(
                    range(end, len(summary), 2 * block), query_plan.mean_sums, strict=True
                )
            ]
            caps[rule] = udfs.variance_threshold(
                CANDIDATES,
                units,
                exceedances,
                means,
                centred,
                epsilon,
                self._rng,
                search.noise_factor,
            )
        return caps, frozenset(blind)

    def _result(
        self,
        table: pa.Table,
        query_plan: Plan,
        *,
        cached: bool,
        guessed: frozenset[str],
        blind: frozenset[str],
    ) -> Result:
        support = [c for c in table.column_names if c.startswith(SUPPORT_PREFIX)]
        visible = table.drop_columns(support)
        restore = restore_sql(query_plan.analysis.temporal, visible.column_names, RELEASED)
        if restore is not None:  # dates and timestamps measured as numbers (post-processing)
            visible = post_process(restore, visible)
        widths = half_widths(query_plan, table)
        return Result(
            visible,
            epsilon=0.0 if cached else query_plan.epsilon,
            delta=0.0 if cached else query_plan.delta,
            half_widths=widths,
            cached=cached,
            checks=bounding_checks(query_plan, table),
            ranges=ranges(query_plan),
            guessed=guessed_outputs(query_plan, guessed),
            withheld=guessed_outputs(query_plan, blind),
            threshold=None
            if (p := query_plan.partition) is None
            else udfs.partition_threshold(p.max_groups, p.epsilon, p.delta),
        )


def _progress_after(progress: bool | float) -> float | None:
    """Seconds before a query's progress shows: ``True`` the default, ``False`` never."""
    if progress is True:
        return AFTER
    if progress is False:
        return None
    if not (math.isfinite(progress) and progress >= 0):
        raise ValueError("progress= takes True, False or a number of seconds, at least 0")
    return float(progress)


def _blind_aggregates(query_plan: Plan, rules: frozenset[str]) -> frozenset[str]:
    """The aggregates (by SQL) bounded by a cap whose search was blind: flagged in every
    cell, as guessed bounds are, since their intervals cannot show what the cap cut."""
    capped = {m.name for m in query_plan.measurements if m.rule in rules and m.kind != "units"}
    return frozenset(
        to_sql(s.aggregate.node) for s in query_plan.statistics if capped & set(s.measurements)
    )


def _quantile_rank(query_plan: Plan) -> int:
    """The rank rule's target for the quantiles' cap: their interval's widest reach per row
    of cap (``udfs.quantile_reach``), for every released group and kept cell of a unit."""
    search = query_plan.search
    assert search is not None
    cells = search.noise_factor // query_plan.bounding.groups  # G released groups · m
    reach = max(
        udfs.quantile_reach(m.quantile[0], BUCKETS, m.epsilon, m.interval_epsilon)
        for m in query_plan.measurements
        if m.quantile is not None and m.rule == "quantile"
    )
    return math.ceil(cells * reach)


def _choices(query_plan: Plan) -> str:
    """What the ledger's history adds to a query's text: MAX_GROUPS AUTO's choice and ε."""
    if not query_plan.group_epsilon:
        return ""
    return (
        f"  -- MAX_GROUPS AUTO chose {query_plan.bounding.groups} "
        f"(ε = {query_plan.group_epsilon:g} of the query's ε)"
    )


def _respelt(analysis: Analysis, decided: Decided, *, stored: bool) -> Decided:
    """``decided`` with its aggregate keys (estimated bounds, guessed bounds) turned into
    the keys a stored answer keeps them under — each aggregate's position, which the
    answer's key fixes for every spelling of the question (``_answer_key`` lists the
    aggregates in order) — or (``stored=False``) back into how this query writes them."""
    written = [to_sql(a.node) for a in analysis.aggregates]
    pairs = [(w, str(i)) for i, w in enumerate(written)]
    if not stored:
        pairs = [(kept, w) for w, kept in pairs]
    return replace(
        decided,
        bounds={new: decided.bounds[old] for old, new in pairs if old in decided.bounds},
        guessed=frozenset(new for old, new in pairs if old in decided.guessed),
        blind=frozenset(new for old, new in pairs if old in decided.blind),
    )


def _answer_key(analysis: Analysis, epsilon: float, delta: float) -> str:
    """What identifies a query for stored answers: the analysed query, its options and
    bounds, its keys' domains and the session's defaults — everything its plan follows
    from, but the privately chosen bounds and caps, which are part of the stored answer."""
    options = analysis.options
    spelt = answer_spelling(analysis.select)
    return Ledger.query_key(
        spelt(analysis.select),
        spelt(analysis.unit),
        [options.strategy, options.threshold, options.max_groups, options.epsilon, options.delta],
        [(spelt(a.node), a.bounds) for a in analysis.aggregates],
        [(spelt(k.expression), k.domain and to_sql(k.domain)) for k in analysis.keys],
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
    progress: bool | float = True,
    analyst: str | None = None,
    share_answers: bool = False,
) -> Session:
    """Open a privsql session on a DuckDB database (a path, ``":memory:"`` or a connection),
    or with ``engine="spark"`` on the tables, views and Parquet paths of a SparkSession.

    ``budget`` is the database's total ε, needed to create a ledger in a file (an
    in-memory one takes 1.0), afterwards changed only by the owner (``privsql budget``);
    ``delta_budget`` its total δ (default 1e-5) and ``max_query_delta`` the largest
    δ one query may spend (default 1e-6, or the δ total if smaller), both also fixed at
    creation (a different value later is refused). ``epsilon`` and ``delta`` are the
    defaults of a query that names none; ``delta`` defaults to 1e-6 or the cap if smaller,
    and one above the cap is refused. δ is spent only by queries that release group keys
    that are not public (partition selection).
    The ledger and the owner's declarations live in the DuckDB file ``ledger`` names, else
    in ``database`` (DuckDB) or in memory (Spark, where they then last only as long as the
    session: name a file for a durable budget). A database that holds a ledger of its own
    (a ``__privsql`` schema, or a key file next to it) is refused with another ``ledger``:
    a fresh one would come with a fresh budget and none of the owner's declarations.
    ``seed`` makes the noise reproducible and is refused unless ``insecure=True``: it
    is for tests only, never for releasing data, so it is refused too on a database or a
    ledger kept in a file (noise that can be predicted gives exact answers away while the
    durable ledger records them as private releases). DuckDB lets one process at a time open
    a file; ``lock_timeout`` is how many seconds ``connect`` waits for another process
    to close it. With ``declared_files_only`` queries read only the files the owner
    declared with ``protect`` (for analysts who are not the owner); the database's own
    files and its ledger's key are never readable by a query.
    ``progress`` shows a progress bar (in a notebook, or on a terminal's standard error)
    for a query still running after a second (``True``), after that many seconds (a
    number), or never (``False``).
    With ``analyst`` (a name added by ``privsql analysts``) every charge also spends from
    that analyst's budget and is recorded under the name, and stored answers are only
    this analyst's own (everyone's with ``share_answers``): ``privsql serve`` opens one
    such session per analyst.
    """
    rng: udfs.RandomSource = (
        udfs.SystemRandom() if seed is None else udfs.SeededRandom(seed, insecure=insecure)
    )
    if not rng.secure and (_in_a_file(database) or (ledger is not None and _in_a_file(ledger))):
        raise PrivacyError(
            "a seed (insecure=True) is for tests on data in memory: its noise can be "
            "predicted, so it is refused on a database or ledger kept in a file"
        )
    settings = {
        "budget": budget,
        "epsilon": epsilon,
        "delta": delta,
        "rng": rng,
        "delta_budget": delta_budget,
        "max_query_delta": max_query_delta,
        "declared_files_only": declared_files_only,
        "progress": progress,
        "analyst": analyst,
        "share_answers": share_answers,
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
    elsewhere = ledger_elsewhere(connection)
    apart = ledger is not None and not _same_file(connection, ledger)
    refusal = None
    if apart and elsewhere != os.path.realpath(ledger) and has_ledger(connection):
        refusal = (
            "this database has a ledger of its own; it cannot be opened with another "
            "(ledger=): its budget and the owner's declarations are in its own"
        )
    elif ledger is None and elsewhere is not None:
        refusal = (
            f"this database's ledger is kept in another file: open it with ledger={elsewhere!r}"
        )
    if refusal is not None:
        if not given:
            connection.close()
        raise PrivacyError(refusal)
    ledger_connection = open_database(ledger, lock_timeout) if ledger is not None else None
    if apart:
        mark_ledger(connection, ledger)
    return Session(connection, **settings, owns_connection=not given, ledger=ledger_connection)


def _in_a_file(database: str | Path | duckdb.DuckDBPyConnection) -> bool:
    """Whether ``database`` (a path, ``":memory:"`` or a connection) is kept in a file, as
    ``duckdb.connect`` would open it (``""`` and ``":memory:[name]"`` are in memory)."""
    if isinstance(database, duckdb.DuckDBPyConnection):
        return database_path(database) is not None
    return str(database) != "" and not str(database).startswith(":memory:")


def _same_file(connection: duckdb.DuckDBPyConnection, ledger: str | Path) -> bool:
    """Whether ``ledger`` names the file of ``connection``'s database (its own ledger)."""
    path = database_path(connection)
    return path is not None and os.path.realpath(path) == os.path.realpath(ledger)
