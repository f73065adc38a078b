"""Engines: where a query's data is read and aggregated.

``DuckDBEngine`` runs everything in the session's DuckDB database, as one statement.
``SparkEngine`` runs the aggregation part of a private query (``rewriter.generate.Stages``),
transpiled to Spark SQL (``rewriter.transpile``), over Spark tables, views and Parquet
paths; only its aggregated outputs (per group, never per row) come back, as Arrow, into
the session's local DuckDB connection, where the release part — noise, partition selection,
quantile selection and post-processing — runs with the very functions it runs with on
DuckDB. Either way the ledger and the owner's declarations live in that DuckDB database.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, Protocol, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp
from sqlglot.errors import SqlglotError

from privsql.bound_reads import check_public_reads
from privsql.footers import codecs, footer_groups, written_by_spark
from rewriter.analyze import Analysis
from rewriter.errors import PostProcessingError, PrivacyError, UnsupportedQuery
from rewriter.files import FileGroup, Schema, try_cast
from rewriter.functions import DISABLED_OPTIMIZERS
from rewriter.generate import RELEASED, Selection, Stages
from rewriter.sqlbuild import SECRET
from rewriter.transpile import check_for_spark, spark_conversion, to_spark

T = TypeVar("T")
WITHHELD = (
    "the query failed while reading private data; the engine's message and the kind of "
    "failure are withheld because they may depend on private values"
)


UNBOUND = (
    "the engine could not bind the rewritten query ({}): a type that does not fit its "
    "use? Its message is withheld: no engine message from a private statement is shown"
)


class Engine(Protocol):
    """What a session needs from the system holding the data."""

    def columns(self, source: str) -> list[str]:
        """The column names of a source (DuckDB SQL: a table or a file reader call)."""
        ...

    def types(self, statement: str) -> list[str]:
        """The DuckDB type names of a statement's outputs, by binding it (no rows read)."""
        ...

    def file_groups(self, reader: exp.Table) -> tuple[FileGroup, ...]:
        """The files a ``read_parquet`` table reads, grouped by the schema each is read
        with alone (``rewriter.files``; no rows read)."""
        ...

    def convert(self, column: exp.Expr, found: str, kind: str) -> exp.Expr | None:
        """A group's ``column`` of type ``found`` as the declared type ``kind``, as DuckDB's
        ``TRY_CAST`` converts it, never an error; None where the engine cannot (NULL then:
        ``rewriter.files.Conversion``)."""
        ...

    def tables(self) -> list[tuple[exp.Table, str | None]]:
        """Every table and view a query may name, fully qualified, with a view's definition
        (``CREATE VIEW ...``) where the engine has one. An engine that can tell its catalogue
        is unchanged returns the very same list as last time (callers may keep what they
        derived from it while it is)."""
        ...

    def search_path(self) -> tuple[tuple[str, str], ...]:
        """Where an unqualified name is looked up as of the last ``tables()``, in order
        (``Catalog.search_path``); empty where names are taken as written."""
        ...

    def defined_functions(self) -> frozenset[str]:
        """The functions a query may call that the engine does not bring itself (macros,
        user functions): analyst SQL calls none of them (``rewriter.functions``)."""
        ...

    def check(self, analysis: Analysis) -> None:
        """Refuse, before any data is read, what this engine cannot compute exactly."""
        ...

    def private(self, work: Callable[[], T]) -> T:
        """``work()``, whose statements read private data, on one state of the data where the
        engine allows; an engine error is reported without its message (which could quote a
        private value) and without the engine's exception in the error's context."""
        ...

    def row(self, statement: str, secret: int) -> tuple:
        """The single row of a generated statement (fingerprint, bounds summary)."""
        ...

    def rows(self, statement: str, secret: int) -> list[tuple]:
        """Every row of a generated statement whose rows are few (a size histogram)."""
        ...

    def release(self, stages: Stages, secret: int) -> pa.Table:
        """The released values of a private query, before post-processing (``__released``)."""
        ...

    def check_public(self, query: exp.Query, public: frozenset[str]) -> None:
        """Refuse a query the analyser found to read only the ``public`` sources (their
        identities) where the engine binds it to read more (``privsql.bound_reads``)."""
        ...

    def public(self, query: exp.Query) -> pa.Table:
        """A query over public data only, exactly as written."""
        ...

    def interrupt(self) -> None:
        """Stop the statement running (from another thread), if the engine can; only a
        public one is ever stopped (``privsql.interrupt``)."""
        ...


class _TryKeptWhole:
    """Turn off the DuckDB optimisers that move an expression out of the ``TRY`` around it,
    or add a scan filter no ``TRY`` holds (``rewriter.functions.DISABLED_OPTIMIZERS``),
    while private statements run.

    Common-subexpression elimination moves a subexpression that occurs twice out of the
    ``TRY``: ``TRY(CAST(s AS INT) + CAST(s AS INT))`` fails on one malformed ``s`` (DuckDB
    2.0); statistics propagation folds a comparison the column's min/max decide into a
    constant, whose error escapes. Either way whether a query succeeds would depend on a
    private value.

    The setting is global to a DuckDB database, which may be a user's own connection
    (``privsql.connect(con)``): it is turned off while any private statement of this
    process runs and given back as found once none runs, so the user's setting is theirs
    again between queries. Counting across every session of the process keeps one
    session's restoring from turning it back on under another's statement on the same
    database; the setting is given back through a cursor taken when it was changed, since
    by then the session's own connection may be running another statement.

    A database privsql opened itself (``give_back=False``) keeps the optimiser off once it
    was turned off: each private part then costs no statement of its own when the setting
    was ``seen`` as the query's catalogue was listed (``DuckDBEngine.tables``) and no
    session of this process has given a setting back since (``generation``), else one
    statement that reads it — instead of three and a cursor. Either way a change by
    anyone else before the query started is undone before a private statement runs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._found: list[tuple[duckdb.DuckDBPyConnection, str]] = []
        self.generation = 0
        """How many times a setting was given back: a setting seen before is stale after."""

    @contextmanager
    def around(
        self,
        connection: duckdb.DuckDBPyConnection,
        *,
        give_back: bool = True,
        seen: tuple[str, int] | None = None,
    ) -> Iterator[None]:
        """``seen``: the setting as read at ``generation`` (``(setting, generation)``)."""
        with self._lock:
            self._running += 1
            if seen is not None and seen[1] == self.generation:
                setting = seen[0]
            else:
                setting = _disabled_optimizers(connection)
            disabled = {name.strip() for name in setting.split(",") if name.strip()}
            if not disabled >= set(DISABLED_OPTIMIZERS):
                wanted = ",".join(sorted(disabled | set(DISABLED_OPTIMIZERS)))
                _set_disabled_optimizers(connection, wanted)
                if give_back:  # through a connection of its own: this one may be busy by then
                    self._found.append((connection.cursor(), setting))
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    found, self._found = self._found, []
                    for restorer, setting in reversed(found):
                        # a database a fatal error invalidated refuses this too, and its
                        # error must not replace the withheld outcome of the statement
                        with contextlib.suppress(duckdb.Error):
                            _set_disabled_optimizers(restorer, setting)
                            restorer.close()
                    # only once given back: a listing made after the count changes sees it
                    self.generation += bool(found)


_try_kept_whole = _TryKeptWhole()


def _disabled_optimizers(connection: duckdb.DuckDBPyConnection) -> str:
    return connection.execute("SELECT current_setting('disabled_optimizers')").fetchall()[0][0]


def _set_disabled_optimizers(connection: duckdb.DuckDBPyConnection, names: str) -> None:
    connection.execute(f"SET disabled_optimizers = {exp.Literal.string(names).sql()}")


def _parameters(statement: str, secret: int) -> Mapping[str, int] | None:
    """The secret as the statement's named parameter, when it names one: DuckDB refuses a
    parameter the statement does not name, and the text ``$privsql_secret`` may be inside
    a string or a quoted name the analyst wrote (red team 41), so the parameter is found
    as DuckDB's tokenizer reads the statement: a ``$`` operator followed by the name."""
    marker = f"${SECRET}"
    found = statement.find(marker)
    if found < 0:
        return None
    operators = {
        offset for offset, kind in duckdb.tokenize(statement) if kind == duckdb.token_type.operator
    }
    while found >= 0:
        end = found + len(marker)
        following = statement[end : end + 1]
        if found in operators and not (following.isalnum() or following == "_"):
            return {SECRET: secret}
        found = statement.find(marker, end)
    return None


_LOOKUP = (
    "current_setting('search_path'), current_database(), current_schema(), "
    "current_setting('disabled_optimizers')"
)
LISTING = (
    "SELECT database_name, schema_name, table_name, sql, NULL::BIGINT, "
    f"{_LOOKUP}, NULL FROM duckdb_tables() "
    "UNION ALL SELECT database_name, schema_name, view_name, NULL, view_oid, "
    f"{_LOOKUP}, {{definition}} FROM duckdb_views() WHERE NOT internal"
)
"""Every table with its definition and every view with its oid (and ``{definition}``),
each with where the connection looks unqualified names up (``search_path``) and the
optimisers it has turned off (``_TryKeptWhole``)."""


def search_path(setting: str, database: str, schema: str) -> tuple[tuple[str, str], ...]:
    """The (catalogue, schema) pairs DuckDB may find an unqualified name in, temporary
    objects first: the ``search_path`` setting's entries (one naming a schema or a
    catalogue alone is taken as both), then the current schema and ``main``. Wider than
    DuckDB's lookup where unsure: a name more than one pair answers to is refused
    (``Catalog.bound``)."""
    pairs = [("temp", "main")]
    for entry in (e.strip() for e in setting.split(",") if e.strip()):
        parts = [p.strip('"') for p in entry.split(".")]
        if len(parts) == 2:
            pairs.append((parts[0], parts[1]))
        else:
            pairs += [(database, parts[0]), (parts[0], "main")]
    pairs += [(database, schema), (database, "main")]
    return tuple(dict.fromkeys(pairs))


class DuckDBEngine:
    """The data is in the session's DuckDB database; everything runs there."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, *, owned: bool = False) -> None:
        """``owned``: privsql opened the database itself, so no user's setting is at stake
        there (``_TryKeptWhole``)."""
        self._con = connection
        self._owned = owned
        ((self._database,),) = connection.execute("SELECT current_database()").fetchall()
        self._listing: tuple[list[tuple], list[tuple[exp.Table, str | None]]] = ([], [])
        self._search_path: tuple[tuple[str, str], ...] = ()
        self._optimizers: tuple[str, int] | None = None  # as the last listing saw them

    def columns(self, source: str) -> list[str]:
        try:
            return [
                row[0] for row in self._con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
            ]
        except duckdb.Error:
            raise PrivacyError(f"cannot read the columns of {source}") from None

    def file_groups(self, reader: exp.Table) -> tuple[FileGroup, ...]:
        return footer_groups(self._con, reader)

    def convert(self, column: exp.Expr, found: str, kind: str) -> exp.Expr | None:
        return try_cast(column, found, kind)

    def tables(self) -> list[tuple[exp.Table, str | None]]:
        # A table's definition lists its columns and their types: a renamed, added or
        # retyped column changes the listing, and so does any table or view made or dropped.
        # A view is listed by its catalogue oid, not its definition (writing out the SQL of
        # DuckDB's many internal views costs more than a small query): a view replaced
        # gets a new oid, a view renamed or moved a new name, and oids are never reused
        # within the process (an attached database gets new ones each time).
        generation = _try_kept_whole.generation  # before the listing reads the setting
        listing = self._con.execute(LISTING.format(definition="NULL")).fetchall()
        self._optimizers = (listing[0][8], generation) if listing else None
        listed = [row[:-2] for row in listing]
        if listed == self._listing[0]:
            return self._listing[1]
        # The definitions and the listing they go with come from one statement: a view
        # replaced in between is a change the next query's listing sees.
        rows = self._con.execute(LISTING.format(definition="sql")).fetchall()
        found = []
        for database, schema, name, _, oid, *_, sql in rows:
            definition = sql if oid is not None else None
            found.append((exp.table_(name, db=schema, catalog=database), definition))
        self._search_path = search_path(*rows[0][5:8]) if rows else ()
        self._listing = ([row[:-2] for row in rows], found)
        return found

    def search_path(self) -> tuple[tuple[str, str], ...]:
        return self._search_path

    def defined_functions(self) -> frozenset[str]:
        rows = self._con.execute(  # no function call: a defined one would run in its place
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE NOT internal"
        ).fetchall()
        return frozenset(name.lower() for (name,) in rows)

    def types(self, statement: str) -> list[str]:
        try:
            return [row[1] for row in self._con.execute(f"DESCRIBE {statement}").fetchall()]
        except duckdb.Error:
            raise UnsupportedQuery("cannot bind the query's GROUP BY keys") from None

    def check(self, analysis: Analysis) -> None:
        return None

    def private(self, work: Callable[[], T]) -> T:
        seen, self._optimizers = self._optimizers, None  # one private part per listing
        with _try_kept_whole.around(
            self._con, give_back=not self._owned, seen=seen if self._owned else None
        ):
            self._con.execute("BEGIN TRANSACTION")
            try:
                return work()
            except (
                duckdb.ParserException,
                duckdb.BinderException,
                duckdb.CatalogException,
            ) as e:
                outcome: PrivacyError = UnsupportedQuery(UNBOUND.format(type(e).__name__))
            except duckdb.Error:
                outcome = PrivacyError(WITHHELD)
            finally:
                # A fatal error invalidates the database and its ROLLBACK fails too: that
                # failure must not replace the withheld outcome (its message quotes values).
                with contextlib.suppress(duckdb.Error):
                    self._con.execute("ROLLBACK")
        raise outcome  # outside the handlers: no engine exception in its context

    def row(self, statement: str, secret: int) -> tuple:
        return self.rows(statement, secret)[0]

    def rows(self, statement: str, secret: int) -> list[tuple]:
        return self._con.execute(statement, _parameters(statement, secret)).fetchall()

    def release(self, stages: Stages, secret: int) -> pa.Table:
        statement = stages.noisy()
        with warnings.catch_warnings():  # the extra copy is of the few released rows
            warnings.simplefilter("ignore", UserWarning)
            return self._con.execute(statement, _parameters(statement, secret)).to_arrow_table()

    def check_public(self, query: exp.Query, public: frozenset[str]) -> None:
        check_public_reads(self._con, query.sql(dialect="duckdb"), public, self._database)

    def public(self, query: exp.Query) -> pa.Table:
        return self._con.sql(query.sql(dialect="duckdb")).to_arrow_table()

    def interrupt(self) -> None:
        self._con.interrupt()  # this session's cursor alone: another's statements run on


SPARK_READS_AS = frozenset({("TIMESTAMP WITH TIME ZONE", "TIMESTAMP")})
"""(Spark's type, DuckDB's type) of one column that are one reading of its values: Spark
reads the timestamps it writes (INT96, or INT64 adjusted to UTC) as its TIMESTAMP, an
instant, where DuckDB names them TIMESTAMP. Within a list, struct or map too
(``_reads_as``)."""


def _read_alike(spark: Schema, duckdb_schema: Schema) -> bool:
    """Whether Spark reads a group by the columns DuckDB reads it by: the same names, in
    order, each of the same type up to the pairs in ``SPARK_READS_AS`` (``_reads_as``)."""
    return len(spark) == len(duckdb_schema) and all(
        name == other and _reads_as(kind, known)
        for (name, kind), (other, known) in zip(spark, duckdb_schema, strict=True)
    )


def _reads_as(kind: str, known: str) -> bool:
    """Whether Spark's type ``kind`` of a column is DuckDB's ``known`` once each type of a
    pair in ``SPARK_READS_AS`` within it — the column's, a list's items', a struct's
    fields', a map's keys' or values' — is DuckDB's: Spark reads a timestamp inside a list,
    struct or map as it reads one in a column of its own (a group with one was left out
    whole). Field names and nesting must be the same; a name sqlglot cannot parse is no
    match."""
    if kind == known or (kind, known) in SPARK_READS_AS:
        return True
    try:
        found, wanted = (exp.DataType.build(k, dialect="duckdb") for k in (kind, known))
    except SqlglotError:
        return False
    reads = {
        exp.DataType.build(spark, dialect="duckdb"): exp.DataType.build(duck, dialect="duckdb")
        for spark, duck in SPARK_READS_AS
    }
    read = found.transform(lambda node: reads[node].copy() if node in reads else node)
    return read.sql(dialect="duckdb") == wanted.sql(dialect="duckdb")


SPARK_CODECS = frozenset({"UNCOMPRESSED", "SNAPPY", "GZIP", "ZSTD", "LZ4_RAW"})
"""The Parquet compression codecs Spark reads without extra libraries (not BROTLI, LZO, or
Hadoop's old LZ4 framing)."""

PARTITION_TYPE_INFERENCE = "spark.sql.sources.partitionColumnTypeInference.enabled"
UNNAMED = re.compile(r"[`:]")
"""What a file's name (past its scheme) cannot hold in a Spark SQL path: a backquote ends
the quoted path, a colon is a URI's."""


def _unnamed(file: str) -> bool:
    """Whether a Spark SQL path cannot name ``file``: it is left out by itself (taking its
    group with it would take other units' rows)."""
    return bool(UNNAMED.search(file.partition("://")[2] or file))


class SparkEngine:
    """The data is in Spark; aggregation runs there, the release in the local DuckDB.

    Spark runs without a transaction: each statement reads the tables as they are when it
    runs, so a source rewritten during a query may be read in two states (each one's
    contributions are still bounded). Spark must have ``spark.sql.ansi.enabled=false``:
    with it, Spark raises errors that can depend on private values; and, to read files,
    ``PARTITION_TYPE_INFERENCE=false``, so partition columns are strings whatever their
    directories are named (as ``hive_types_autocast = false`` on DuckDB).
    """

    def __init__(self, spark: Any, connection: duckdb.DuckDBPyConnection) -> None:
        self._spark = spark
        self._con = connection

    def _sql(self, statement: str, secret: int | None = None) -> Any:
        spark_sql = to_spark(statement)
        if secret is not None and f"${SECRET}" in statement:
            return self._spark.sql(spark_sql, args={SECRET: secret})
        return self._spark.sql(spark_sql)

    def columns(self, source: str) -> list[str]:
        from pyspark.errors import PySparkException

        try:
            return list(self._sql(f"SELECT * FROM {source}").columns)
        except PySparkException:
            raise PrivacyError(f"cannot read the columns of {source}") from None

    def file_groups(self, reader: exp.Table) -> tuple[FileGroup, ...]:
        """The files DuckDB's rule groups (``footers.footer_groups``: by footer, the files it
        cannot read or decode left out), each group with the schema Spark reads it with.

        Spark read a glob with one file's schema, and failed the read on a file whose
        footer gave a column another type (one unit's file with ``INT64`` where the others
        hold ``DOUBLE`` refused every query, for free: red team 34); each group is now read
        by itself, where no file disagrees, and converted to the declared schema
        (``rewriter.files.conformed_read``, ``convert``). A group Spark cannot read (a type
        it has not) is left out as an unreadable file is, and so is a file whose name a
        Spark path cannot hold.
        Spark reads a file by the schema written in its footer's key-value metadata
        (``footers.SPARK_SCHEMA``), whatever its columns: one unit's file with that entry
        forged (the unit's column renamed, a column left out) dropped or nulled every
        other unit's rows of its group (red team 35). The entry is part of the footer the
        files are grouped by, so one group's files share it, and a group Spark reads with
        other columns or types than DuckDB does (``footer_groups``' schema) is left out
        (where the entry is absent, Spark reads the footer DuckDB read). So is a group
        compressed with a codec Spark has not (``SPARK_CODECS``: one unit's Brotli file
        failed every query of its group, red team 36). Each group is read by its files'
        names, never by the reader's glob: Spark's glob matches directories too, whose
        files no footer check saw (one unit's directory named ``u.parquet`` added its rows,
        or failed every query, red team 36).
        The footers are read by DuckDB: files it cannot reach are refused."""
        groups = footer_groups(self._con, reader)
        if not groups:
            raise UnsupportedQuery(
                "the Spark engine reads Parquet files only where privsql can read their "
                f"footers, and found none for {reader.sql(dialect='duckdb')}"
            )
        read = []
        for group in groups:
            files = tuple(file for file in group.files if not _unnamed(file))
            if not files:
                continue
            found = codecs(self._con, files[0])  # one group's files share them
            if found is None or not found <= SPARK_CODECS:
                continue
            schema = self._spark_schema(files)
            if schema is None:
                continue
            if not written_by_spark(self._con, files[0]) or _read_alike(schema, group.schema):
                read.append(FileGroup(files, schema, every_file=False))
        return tuple(read)

    def _spark_schema(self, files: tuple[str, ...]) -> Schema | None:
        """The columns and types (as DuckDB names them) Spark reads ``files`` (one group)
        with, from their footers (one for all); None if it cannot, or if DuckDB has no name
        for a type Spark reads (a Spark ML vector: such a file, written by Spark or forged
        by one unit, failed every query over its glob)."""
        listed = exp.Array(expressions=[exp.Literal.string(file) for file in files])
        source = exp.Table(this=exp.ReadParquet(expressions=[listed])).sql(dialect="duckdb")
        try:
            names = self.columns(source)
            kinds = [self._named(kind) for kind in self.types(f"SELECT * FROM {source}")]
        except (PrivacyError, duckdb.Error):
            return None
        return tuple(zip(names, kinds, strict=True))

    def convert(self, column: exp.Expr, found: str, kind: str) -> exp.Expr | None:
        """Spark's conversion (``transpile.spark_conversion``); a type declared by another
        of its names (``TEXT`` for ``VARCHAR``, as older declarations on Spark were
        recorded) is the same type."""
        if self._named(kind) == found:
            return column
        return spark_conversion(column, found, kind)

    def _named(self, kind: str) -> str:
        """A type as DuckDB names it (``VARCHAR``, not ``TEXT``; ``INTEGER``, not ``INT``),
        as the declared ones are (``Session._file_schema``)."""
        ((named,),) = self._con.execute(f"SELECT typeof(CAST(NULL AS {kind}))").fetchall()
        return str(named)

    def tables(self) -> list[tuple[exp.Table, str | None]]:
        found: list[tuple[exp.Table, str | None]] = []
        for table in self._spark.catalog.listTables():
            namespace = list(table.namespace or [])
            if table.isTemporary or namespace in ([], ["default"]):
                found.append((exp.table_(table.name), None))
            else:
                found.append((exp.table_(table.name, db=".".join(namespace)), None))
        return found

    def search_path(self) -> tuple[tuple[str, str], ...]:
        return ()  # names as written; a temporary view named like a table is ambiguous

    def defined_functions(self) -> frozenset[str]:
        """The functions the Spark session defines (Python UDFs, temporary and persistent SQL
        functions of the current database), by their unqualified names: a name DuckDB's
        dialect passes through unchanged would call them."""
        rows = self._spark.sql("SHOW USER FUNCTIONS").collect()
        return frozenset(row[0].rsplit(".", 1)[-1].lower() for row in rows)

    def types(self, statement: str) -> list[str]:
        from pyspark.errors import PySparkException

        try:
            fields = self._sql(statement).schema.fields
        except PySparkException:
            raise UnsupportedQuery("cannot bind the query's GROUP BY keys") from None
        try:
            return [
                exp.DataType.build(_spelt(f.dataType), dialect="spark").sql(dialect="duckdb")
                for f in fields
            ]
        except SqlglotError:
            raise UnsupportedQuery("cannot name the type of a column Spark reads") from None

    def check(self, analysis: Analysis) -> None:
        check_for_spark(analysis.select)
        ansi = self._spark.conf.get("spark.sql.ansi.enabled", "false")
        if str(ansi).lower() == "true":
            raise PrivacyError(
                "the Spark engine needs spark.sql.ansi.enabled=false: in ANSI mode Spark "
                "raises errors that can depend on private values"
            )
        reads_files = any(isinstance(t.this, exp.Func) for t in analysis.select.find_all(exp.Table))
        inference = self._spark.conf.get(PARTITION_TYPE_INFERENCE, "true")
        if reads_files and str(inference).lower() != "false":
            raise PrivacyError(
                f"the Spark engine reads files only with {PARTITION_TYPE_INFERENCE}=false: "
                "Spark types partition columns from their directories' names, which are data"
            )

    def private(self, work: Callable[[], T]) -> T:
        from py4j.protocol import Py4JError
        from pyspark.errors import AnalysisException, PySparkException

        try:
            return work()
        except AnalysisException as error:  # decided from the SQL and the schema alone
            outcome: PrivacyError = UnsupportedQuery(
                f"Spark cannot run the query: {_first_line(error)}"
            )
        except (PySparkException, Py4JError):
            outcome = PrivacyError(WITHHELD)
        raise outcome  # outside the handlers: no engine exception in its context

    def row(self, statement: str, secret: int) -> tuple:
        return self.rows(statement, secret)[0]

    def rows(self, statement: str, secret: int) -> list[tuple]:
        return [tuple(row) for row in self._sql(statement, secret).collect()]

    def release(self, stages: Stages, secret: int) -> pa.Table:
        outputs = {
            name: self._sql(stages.output(name), secret).toArrow() for name in stages.outputs
        }
        for name, table in outputs.items():
            self._con.register(name, table)
        try:
            with warnings.catch_warnings():  # the extra copy is of the few released rows
                warnings.simplefilter("ignore", UserWarning)
                return self._con.execute(stages.noisy(from_outputs=True)).to_arrow_table()
        except duckdb.Error:  # over per-group aggregates of private rows
            pass  # withheld below, outside the handler: no engine exception in its context
        finally:
            for name in outputs:
                self._con.unregister(name)
        raise PrivacyError(WITHHELD)

    def check_public(self, query: exp.Query, public: frozenset[str]) -> None:
        """Not checked on Spark: it has no macros, and its session's functions are refused
        (``defined_functions``)."""

    def public(self, query: exp.Query) -> pa.Table:
        return self._spark.sql(query.sql(dialect="spark")).toArrow()

    def interrupt(self) -> None:
        """Not on Spark: cancelling its jobs would cancel other sessions' of the same
        SparkSession too (``privsql serve`` serves DuckDB alone)."""


def _spelt(kind: Any) -> str:
    """A Spark type (``pyspark.sql.types.DataType``) as Spark SQL spells it, each struct
    field's name backquoted: its ``simpleString`` leaves them bare, so a field named
    ``first name`` was read as no type (its group left out) and one named with a backquote
    failed to parse (one unit's file with one failed every query over its glob)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(kind, StructType):
        fields = (f"`{field.name.replace('`', '``')}`:{_spelt(field.dataType)}" for field in kind)
        return f"struct<{','.join(fields)}>"
    if isinstance(kind, ArrayType):
        return f"array<{_spelt(kind.elementType)}>"
    if isinstance(kind, MapType):
        return f"map<{_spelt(kind.keyType)},{_spelt(kind.valueType)}>"
    return str(kind.simpleString())


def post_process(statement: str, released: pa.Table, selected: Selection | None = None) -> pa.Table:
    """The analyst's post-processing (``Stages.final``) over released values only.

    When it only selects released columns in the order of the group keys, perhaps within
    a LIMIT (``selected``, ``Stages.selected``), the table it returns is made in Arrow
    from the released table alone, without a statement (1–3 ms of a small query's
    overhead); anything else runs as below.

    It runs after the charge, in a database of its own (``_released_only``) where
    ``__released`` is the released table and nothing else is: no table, view, macro,
    sequence, setting of the session's database and no file is in its reach, whatever
    the statement calls. So what it computes — and any error it raises — is a function of
    released values (post-processing, SPEC §2). On the session's own connection a macro
    read private tables and ``pg_get_viewdef`` printed views' definitions (red team 15).
    """
    if selected is not None and (table := _select(selected, released)) is not None:
        return table
    cursor = _released_only().cursor()
    try:
        cursor.register(RELEASED, released)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return cursor.execute(statement).to_arrow_table()
    except duckdb.Error as error:
        message = _first_line(error)
    finally:
        cursor.close()
    raise PostProcessingError(
        f"{message} (the answer was released and charged; it is stored, and re-running the "
        "query returns it at no cost)"
    )


def _select(selected: Selection, released: pa.Table) -> pa.Table | None:
    """``selected`` made from ``released``, as DuckDB returns it, or None where a column is
    missing, or of a type whose ``TRY_CAST`` to BIGINT or whose order this does not
    mirror."""
    if selected.order:
        keys = [released.column(c) if c in released.column_names else None for c in selected.order]
        if not all(key is not None and _orders_alike(key.type) for key in keys):
            return None
        order = [(c, "ascending") for c in selected.order]  # Arrow's default: NULLs last
        released = released.take(pc.sort_indices(released, sort_keys=order))
    rows = released.num_rows
    limit = rows if selected.limit is None else min(selected.limit, rows)
    released = released.slice(min(selected.offset, rows), limit)
    columns = []
    for output in selected.outputs:
        if output.column not in released.column_names:
            return None
        column = released.column(output.column)
        if output.bigint:
            column = _try_bigint(column)
            if column is None:
                return None
        columns.append(column)
    return pa.Table.from_arrays(columns, names=[output.name for output in selected.outputs])


def _orders_alike(kind: pa.DataType) -> bool:
    """Whether Arrow sorts values of ``kind`` as DuckDB orders them in the released-only
    database (ascending, NULLs last; a NaN above every number, below NULL): numbers, text
    (by its bytes: that database has no collation), dates, times and timestamps, and
    booleans — not a dictionary (an ENUM orders by its members), an interval, a binary or
    a nested value."""
    if pa.types.is_interval(kind) or pa.types.is_duration(kind):
        return False
    return any(
        test(kind)
        for test in (
            pa.types.is_integer,
            pa.types.is_floating,
            pa.types.is_decimal,
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_temporal,
            pa.types.is_boolean,
        )
    )


def _try_bigint(column: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """DuckDB's ``TRY_CAST(column AS BIGINT)`` of a whole-number decimal (a HUGEINT) or a
    BIGINT: the same number, NULL where it does not fit; None for any other type."""
    if pa.types.is_int64(column.type):
        return column
    if not (pa.types.is_decimal(column.type) and column.type.scale == 0):
        return None
    low, high = (pa.scalar(Decimal(end), column.type) for end in (-(2**63), 2**63 - 1))
    fits = pc.and_(pc.greater_equal(column, low), pc.less_equal(column, high))
    return pc.cast(pc.if_else(fits, column, pa.scalar(None, column.type)), pa.int64())


@functools.cache
def builtin_functions() -> frozenset[str]:
    """The names of DuckDB's own functions, read from an empty database, where every
    function is DuckDB's."""
    with _released_only().cursor() as cursor:  # sessions opened together call it together
        rows = cursor.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE internal"
        ).fetchall()
    return frozenset(name.lower() for (name,) in rows)


@functools.cache
def _released_only() -> duckdb.DuckDBPyConnection:
    """An empty in-memory database, shared by the process, that reads no file and whose
    settings are locked: where post-processing runs (each call on a cursor of its own)."""
    connection = duckdb.connect(config={"enable_external_access": False})
    connection.execute("SET lock_configuration = true")
    return connection


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0]
