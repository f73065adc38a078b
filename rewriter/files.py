"""The columns a Parquet reader is read with, and the SQL that reads its files that way.

A glob's files each carry their own schema in their footer, and DuckDB takes the first
file's: a file whose writer inferred another type for a column (a text value where the
others hold numbers, a column missing or added) would decide the columns every query sees,
or fail the read for every file that disagrees (SPEC §2: a private source's schema never
comes from its data). So a reader's schema is the owner's declaration (recorded by
``protect`` from the files as the owner saw them, or named there) and every file is read
*to* it: files are grouped by their footers' schemas (metadata, no row read), each group
is read by itself — within a group no cast can fail — and its columns are converted to the
declared types with ``TRY_CAST`` (a value that does not convert is NULL, a column a group
lacks or holds as another nested type is NULL; on Spark, so is one whose conversion Spark
does not compute as DuckDB does: ``Conversion``). Which rows a unit contributes and what
each holds can change with its files; whether the query runs, and its columns, cannot.

An undeclared reader (the owner's own session: SPEC's threat model makes no boundary
against an analyst who can read the files) is read only when its files share one schema.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from rewriter.errors import UnsupportedQuery

Schema = tuple[tuple[str, str], ...]
"""Column names and DuckDB types, in order."""

Conversion = Callable[[exp.Expr, str, str], exp.Expr | None]
"""How an engine converts a column of one group (its type there) to the declared type: the
converted value, which is never an error, or None where the engine cannot compute what
DuckDB's ``TRY_CAST`` computes (the column is then NULL in that group)."""


def try_cast(column: exp.Expr, found: str, kind: str) -> exp.Expr:
    """DuckDB's conversion: ``TRY_CAST``, NULL where a value does not convert."""
    return exp.TryCast(this=column, to=exp.DataType.build(kind, dialect="duckdb"))


@dataclass(frozen=True)
class FileGroup:
    """Files whose footers give one schema (read together, they never need a cast)."""

    files: tuple[str, ...]
    schema: Schema
    every_file: bool = True
    """Whether the groups hold every file the reader names: a file without a readable
    footer is in none, and then each group is read by its files' names."""


def reader_schema(declared: Schema, groups: Sequence[FileGroup]) -> Schema:
    """The schema a reader is read with: the declared one, else its files' shared one."""
    if declared:
        return declared
    if len({group.schema for group in groups}) > 1:
        raise UnsupportedQuery(
            "the files this reader names do not share one schema: the data owner can "
            "declare them with protect(..., columns={...}) to read them all with it"
        )
    return groups[0].schema if groups else ()


def conformed_read(
    reader: exp.Table,
    schema: Schema,
    groups: Sequence[FileGroup],
    unit: str = "",
    convert: Conversion = try_cast,
) -> exp.Expr:
    """``reader`` (without its alias) reading its files with ``schema``: the reader itself
    where its files' one schema is ``schema``, else a union of one read per group, each
    column converted with the engine's ``convert``.

    The ``unit`` column is kept only where a group holds it in the declared type: a
    conversion can make two values one (``'02'``, ``' 2'`` and ``1.5`` are all INTEGER 2),
    and a file's rows would join another unit's and move its bounded contribution (red
    team 13); such rows have no unit, and are dropped as any row without one. Integers
    convert to integers exactly or not at all."""
    if not groups or (len(groups) == 1 and groups[0].schema == schema and groups[0].every_file):
        bare = reader.copy()  # no files: the reader's own error, as for any missing file
        bare.set("alias", None)
        return bare
    reads = [_group_read(reader.this, schema, group, unit.lower(), convert) for group in groups]
    union: exp.Query = reads[0]
    for read in reads[1:]:
        union = exp.Union(this=union, expression=read, distinct=False)
    return exp.Subquery(this=union)


def _group_read(
    reader: exp.Func, schema: Schema, group: FileGroup, unit: str, convert: Conversion
) -> exp.Select:
    found = {name.lower(): kind for name, kind in group.schema}
    declared = {name.lower(): kind for name, kind in schema}
    if unit in found and not _one_to_one(found[unit], declared.get(unit)):
        del found[unit]  # read as NULL: a converted unit could be another unit's
    options = [a.copy() for a in reader.expressions if isinstance(a, (exp.EQ, exp.PropertyEQ))]
    files = exp.Array(expressions=[exp.Literal.string(f) for f in group.files])
    read = exp.Table(this=exp.ReadParquet(expressions=[files, *options]))
    columns = [_converted(name, kind, found.get(name.lower()), convert) for name, kind in schema]
    return exp.select(*columns).from_(read)


def _converted(name: str, kind: str, found: str | None, convert: Conversion) -> exp.Expr:
    """Column ``name`` of one group as type ``kind`` (``found``: its type there, if any)."""
    column = exp.column(name, quoted=True)
    value: exp.Expr | None = None
    if found == kind:
        value = column
    elif found is not None and not (_nested(kind) or _nested(found)):
        value = convert(column, found, kind)
    if value is None:
        value = exp.Cast(this=exp.null(), to=exp.DataType.build(kind, dialect="duckdb"))
    return exp.alias_(value, name, quoted=True)


INTEGERS = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT"}
    | {"UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"}
)
"""Types a TRY_CAST among which keeps every value it does not make NULL."""


def _one_to_one(found: str, kind: str | None) -> bool:
    """Whether TRY_CAST from ``found`` to ``kind`` never makes two values one."""
    return found == kind or {found, kind} <= INTEGERS


def _nested(kind: str) -> bool:
    return exp.DataType.build(kind, dialect="duckdb").is_type(*exp.DataType.NESTED_TYPES)
