"""Generated DuckDB SQL for Spark: sqlglot's transpilation plus the rewrites that keep every
bounded quantity what it is on DuckDB.

Only the aggregation part of a private query (and its fingerprint and summaries) runs on
Spark; noise is added elsewhere (``generate.Stages``). What must hold there is what the
DuckDB statement enforces: each per-row value is the same clamped integer, sums are exact,
and no row-level expression raises an error that depends on a private value. The
differences from DuckDB are data (``SPARK_TYPES``, ``SPARK_FUNCTIONS``,
``SPARK_ROW_LEVEL``); what cannot be matched exactly is refused with ``UnsupportedQuery``.

Spark must run with ``spark.sql.ansi.enabled=false`` (the engine checks): casts and
arithmetic are then written as ``try_*`` forms, which yield NULL where DuckDB's ``TRY``
does.
"""

from __future__ import annotations

import os
import re

import sqlglot
from sqlglot import exp

from rewriter.errors import UnsupportedQuery

EXACT = exp.DataType.build("DECIMAL(38, 0)", dialect="spark")
"""Spark's widest exact integer: HUGEINT's stand-in (HUGEINT reaches 2**127, this 10**38)."""

SPARK_TYPES = {exp.DType.INT128: EXACT, exp.DType.UINT128: EXACT}
"""DuckDB types the generated SQL uses, by the Spark type that holds the same values."""

SPARK_FUNCTIONS = {"hash": "xxhash64"}
"""DuckDB functions by their Spark counterpart (``hash``: a keyed 64-bit row hash; which
hash does not matter, only that it is keyed by the secret and fixed per row)."""

SPARK_ARITHMETIC = {
    exp.Add: "try_add",
    exp.Sub: "try_subtract",
    exp.Mul: "try_multiply",
    exp.Div: "try_divide",
    exp.Mod: "try_mod",
}
"""Arithmetic inside TRY, by the Spark function that yields NULL on overflow or zero division."""

SPARK_ROW_LEVEL = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.Paren,
    exp.Neg,
    exp.Not,
    exp.And,
    exp.Or,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.Is,
    exp.In,
    exp.Between,
    exp.Case,
    exp.If,
    exp.Coalesce,
    exp.Cast,
    exp.TryCast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Greatest,
    exp.Least,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Abs,
    exp.IsNan,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Year,
    exp.Month,
    exp.Day,
    *SPARK_ARITHMETIC,
)
"""What a row-level expression (WHERE, ON, GROUP BY keys, aggregate arguments) may use on
Spark: operations that compute the same value as on DuckDB and, written as below, never
raise. Anything else is refused rather than risk a data-dependent error or another value."""


def check_for_spark(select: exp.Select) -> None:
    """Refuse a query whose nested queries (CTEs, derived tables, subqueries) use functions
    outside ``SPARK_ROW_LEVEL`` (aggregates of public subqueries aside).

    Their row-level expressions over private rows are guarded like the outer query's (they
    reach Spark inside TRY); what is not — projections of public data, correlations — must
    still compute what DuckDB computes and, with ANSI mode off, cannot raise.
    """
    for query in select.find_all(exp.Query):
        if query is select:
            continue
        for node in query.walk():
            if isinstance(node, exp.Func) and not isinstance(
                node, (*SPARK_ROW_LEVEL, exp.Count, exp.Max, exp.Min, exp.Sum)
            ):
                raise UnsupportedQuery(
                    f"{_name(node)} is not supported in nested queries on the Spark engine"
                )


def to_spark(sql: str) -> str:
    """A generated DuckDB statement as Spark SQL; the secret becomes ``:privsql_secret``."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    for table in tree.find_all(exp.Table):
        _check_source(table)
    for rewrite in SPARK_REWRITES:
        tree = tree.transform(rewrite)
    return tree.sql(dialect="spark")


def _check_source(table: exp.Table) -> None:
    """Spark reads tables, views and Parquet files: ``read_parquet('<path or glob>')`` or
    a list of files (one group of a declared glob: ``rewriter.files.conformed_read``),
    which is read as one Hadoop glob (``spark_path``). The partitioning options privsql
    pins on DuckDB's readers are dropped: Spark finds partition directories itself, and
    types them as strings under the engine's required setting
    (``privsql.engines.PARTITION_TYPE_INFERENCE``)."""
    reader = table.this
    if not isinstance(reader, exp.Func):
        return
    arguments = reader.expressions if isinstance(reader, exp.ReadParquet) else []
    arguments = [a for a in arguments if not _partitioning_option(a)]
    path = _path(arguments[0]) if len(arguments) == 1 else None
    if path is None:
        raise UnsupportedQuery(
            "the Spark engine reads tables, views and read_parquet('<one path or glob>'); "
            f"not {reader.sql(dialect='duckdb')}"
        )
    reader.set("expressions", [exp.Literal.string(path)])


def _path(argument: exp.Expr) -> str | None:
    """The path a reader names as written (a glob stays a glob), or the one Hadoop glob that
    names exactly the files it lists; None for anything else."""
    if isinstance(argument, exp.Literal) and argument.is_string:
        return argument.name
    files = argument.expressions if isinstance(argument, exp.Array) else []
    if files and all(isinstance(f, exp.Literal) and f.is_string for f in files):
        return _hadoop_glob([f.name for f in files])
    return None


HADOOP_GLOB = re.compile(r"([\\{}\[\]*?,])")
"""What Hadoop's glob reads as a pattern's (``\\`` escapes each)."""


def _hadoop_glob(files: list[str]) -> str:
    """The Hadoop glob that names exactly ``files``: their common directory and
    ``{name,...}`` under it, every pattern character of a name escaped."""
    prefix = os.path.commonprefix(files)  # noqa: RUF071 (by characters, cut at a "/" here)
    prefix = prefix[: prefix.rfind("/") + 1]
    names = ",".join(_literal(file[len(prefix) :]) for file in files)
    return f"{_literal(prefix)}{{{names}}}"


def _literal(path: str) -> str:
    return HADOOP_GLOB.sub(r"\\\1", path)


SPARK_INTEGERS = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT"})
SPARK_CONVERSIONS = frozenset(
    {(found, kind) for found in SPARK_INTEGERS for kind in SPARK_INTEGERS}
    | {(found, "DOUBLE") for found in (*SPARK_INTEGERS, "FLOAT")}
)
"""The conversions between a group's type and a declared one whose ``try_cast`` on Spark
gives, for every value, what DuckDB's ``TRY_CAST`` gives (integers exactly or NULL,
doubles rounded to nearest). Text to DOUBLE is ``_text_to_double``; anything else reads as
NULL on Spark (a double to an integer rounds on DuckDB and truncates on Spark, a number
is written as text differently, ...)."""

SPACE = r"[ \t\n\x0B\f\r]*"
DIGITS = r"[0-9](?:_?[0-9])*"
NUMBER = rf"^{SPACE}[+-]?(?:{DIGITS}(?:\.(?:{DIGITS})?)?|\.{DIGITS})(?:[eE][+-]?{DIGITS})?{SPACE}\z"
NAN = rf"^{SPACE}[+-]?[nN][aA][nN]{SPACE}\z"
INFINITY = rf"^{SPACE}[+-]?[iI][nN][fF](?:[iI][nN][iI][tT][yY])?{SPACE}\z"
"""The text DuckDB's ``TRY_CAST`` reads as a DOUBLE (same in RE2 and Java's regular
expressions): a decimal number (one ``_`` allowed between digits), or NaN or infinity of
either case and sign, between ASCII spaces."""


def spark_conversion(column: exp.Expr, found: str, kind: str) -> exp.Expr | None:
    """``column`` of a file group, of type ``found``, as the declared type ``kind`` on Spark
    (``rewriter.files.Conversion``): the very value DuckDB's ``TRY_CAST`` gives, or None
    where Spark's conversion is not known to give it."""
    if (found, kind) in SPARK_CONVERSIONS:
        return _try_cast(column, exp.DataType.build(kind, dialect="duckdb"))
    if (found, kind) == ("VARCHAR", "DOUBLE"):
        return _text_to_double(column)
    return None


def _text_to_double(column: exp.Expr) -> exp.Expr:
    """DuckDB's ``TRY_CAST(column AS DOUBLE)`` of text, on Spark: only text that DuckDB reads
    (``NUMBER``, ``NAN``, ``INFINITY``) is converted, without its ``_``, by Java's
    correctly rounded parser (out of range is infinity on both); Spark's cast alone also
    reads ``1d``, ``0x1p3`` and control characters, and not ``+nan`` or ``1_000``."""
    double = exp.DataType.build("DOUBLE")
    number, nan, infinity = (
        exp.RegexpLike(this=column.copy(), expression=exp.Literal.string(pattern))
        for pattern in (NUMBER, NAN, INFINITY)
    )
    unseparated = exp.func(
        "replace", column.copy(), exp.Literal.string("_"), exp.Literal.string("")
    )
    return (
        exp.Case()
        .when(number, _try_cast(unseparated, double))
        .when(nan, exp.Cast(this=exp.Literal.string("NaN"), to=double.copy()))
        .when(infinity, _try_cast(column.copy(), double))
    )


def _partitioning_option(argument: exp.Expr) -> bool:
    return (
        isinstance(argument, exp.EQ)
        and isinstance(argument.this, exp.Column)
        and argument.this.name.lower() in ("hive_partitioning", "hive_types_autocast")
    )


def _guard(node: exp.Expr) -> exp.Expr:
    return _row_level(node.this) if isinstance(node, exp.Try) else node


def _exact_quotient(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.IntDiv) and isinstance(node.this, exp.Mul):
        return _scaled_quotient(node.this.this, node.this.expression, node.expression)
    return node


def _exact_sum(node: exp.Expr) -> exp.Expr:
    """Sums as DECIMAL(38, 0): Spark's BIGINT sum would wrap around (or raise)."""
    if isinstance(node, exp.Sum):
        return exp.Sum(this=exp.Cast(this=node.this, to=EXACT.copy()))
    return node


def _function(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Anonymous) and node.name.lower() in SPARK_FUNCTIONS:
        return exp.Anonymous(this=SPARK_FUNCTIONS[node.name.lower()], expressions=node.expressions)
    return node


def _type(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.DataType) and node.this in SPARK_TYPES:
        return SPARK_TYPES[node.this].copy()
    return node


def _scaled_quotient(value: exp.Expr, scale: exp.Expr, divisor: exp.Expr) -> exp.Expr:
    """``value * scale // divisor``, truncated toward zero like DuckDB's HUGEINT ``//``.

    Spark's ``DIV`` returns a BIGINT, too narrow for ``value * scale / divisor``; with
    ``value = q * divisor + r`` (q = value DIV divisor, r = value % divisor, of value's
    sign) it is exactly ``q * scale + (r * scale) DIV divisor``, where the last quotient
    is below ``scale``.
    """
    quotient = exp.Cast(this=exp.IntDiv(this=value, expression=divisor), to=EXACT.copy())
    remainder = exp.paren(exp.Mod(this=value.copy(), expression=divisor.copy()), copy=False)
    return exp.paren(
        exp.Add(
            this=exp.Mul(this=quotient, expression=scale),
            expression=exp.IntDiv(
                this=exp.Mul(this=remainder, expression=scale.copy()),
                expression=divisor.copy(),
            ),
        ),
        copy=False,
    )


def _collation(node: exp.Expr) -> exp.Expr:
    """DuckDB's byte-for-byte collation (``POSIX``: how units are joined) is Spark's
    ``UTF8_BINARY``."""
    if isinstance(node, exp.Collate) and node.expression.name.upper() == "POSIX":
        return exp.Collate(this=node.this, expression=exp.Var(this="UTF8_BINARY"))
    return node


SPARK_REWRITES = (_guard, _exact_quotient, _exact_sum, _function, _type, _collation)
"""The rewrites, in order: each pass rewrites one kind of node (a pass does not revisit
what it produced)."""


def _row_level(node: exp.Expr) -> exp.Expr:
    """A row-level expression that yields NULL where it would raise, as DuckDB's TRY does."""
    for inner in node.walk():
        if not isinstance(inner, SPARK_ROW_LEVEL):
            raise UnsupportedQuery(
                f"{_name(inner)} is not supported in row-level expressions on the Spark engine"
            )
        if isinstance(inner, exp.In) and inner.args.get("query"):
            raise UnsupportedQuery("IN (subquery) is not supported on the Spark engine")

    root = node.copy()
    for inner in reversed(list(root.walk(bfs=False))):  # children before their parent
        guarded = _never_raise(inner)
        if guarded is not inner:
            root = guarded if inner is root else root
            inner.replace(guarded)
    return root


def _never_raise(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Cast):
        return _try_cast(node.this, node.to)
    if isinstance(node, exp.Div):  # DuckDB's / divides as DOUBLE, whatever the operands
        double = exp.DataType.build("DOUBLE")
        return exp.func(
            "try_divide", _try_cast(node.this, double), _try_cast(node.expression, double)
        )
    if type(node) in SPARK_ARITHMETIC:
        return exp.func(SPARK_ARITHMETIC[type(node)], node.this, node.expression)
    return node


def _try_cast(node: exp.Expr, to: exp.DataType) -> exp.Expr:
    return exp.TryCast(this=node, to=to.copy(), safe=True)


def _name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return node.name.upper()
    if isinstance(node, exp.Func):
        return node.sql_name()
    return node.key.upper()
