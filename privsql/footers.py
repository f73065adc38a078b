"""The files a Parquet reader names, grouped by the schema their footers give.

Footers are metadata: grouping reads no row. Files of one group are read together by
``rewriter.files.conformed_read``; DuckDB could only fail to read them together if their
footers differed.
"""

from __future__ import annotations

import glob
import os
from collections import defaultdict

import duckdb
from sqlglot import exp

from rewriter.catalog import public_type, reader_paths
from rewriter.errors import PrivacyError
from rewriter.files import FileGroup

FOOTER = (
    "SELECT file_name, list((name, type, type_length, repetition_type, num_children, "
    "converted_type, scale, precision, field_id, logical_type, duckdb_type) "
    "ORDER BY column_id) FROM parquet_schema({paths}) GROUP BY file_name"
)
HIVE_KEY = "="


def footer_groups(con: duckdb.DuckDBPyConnection, reader: exp.Table) -> tuple[FileGroup, ...]:
    """The files ``reader`` (a ``read_parquet`` table) reads, grouped by footer, each group
    with the columns DuckDB reads from it (the reader's own options: hive partitions come
    from each file's directories, so they are part of what groups files)."""
    paths = [p.name for p in reader_paths(reader.this)]
    options = [a for a in reader.this.expressions if isinstance(a, (exp.EQ, exp.PropertyEQ))]
    if len(paths) == 1 and not glob.has_magic(paths[0]):
        return (FileGroup((paths[0],), _described(con, paths, options)),)
    try:
        footers, every_file = _footers(con, paths), True
    except duckdb.Error:  # some file's footer cannot be read: each file's alone
        footers, every_file = _readable_footers(con, paths), False
    hive = any(a.this.name.lower() == "hive_partitioning" and a.expression.this for a in options)
    grouped: dict[object, list[str]] = defaultdict(list)
    for file, footer in footers:
        grouped[(tuple(map(tuple, footer)), _partitions(file) if hive else ())].append(file)
    groups = [sorted(files) for files in grouped.values()]
    return tuple(
        FileGroup(tuple(f), _described(con, f[:1], options), every_file) for f in sorted(groups)
    )


def _footers(con: duckdb.DuckDBPyConnection, paths: list[str]) -> list[tuple]:
    listed = exp.Array(expressions=[exp.Literal.string(p) for p in paths]).sql(dialect="duckdb")
    return con.execute(FOOTER.format(paths=listed)).fetchall()


def _readable_footers(con: duckdb.DuckDBPyConnection, paths: list[str]) -> list[tuple]:
    """The footers of the files ``paths`` name that have one. A file that is not Parquet
    (truncated, empty, another format) holds no rows anyone can read; one unit's such file
    refused every query over the glob before (red team 15), so it is left out."""
    footers = []
    for path in paths:
        for (file,) in con.execute("SELECT file FROM glob(?)", [path]).fetchall():
            try:
                footers += _footers(con, [file])
            except duckdb.Error:
                continue
    return footers


def _partitions(path: str) -> tuple[str, ...]:
    """The hive partition keys a file's directories name (``year=2013/…``)."""
    directories = os.path.dirname(path).split(os.sep)
    return tuple(d.split(HIVE_KEY, 1)[0].lower() for d in directories if HIVE_KEY in d)


def _described(
    con: duckdb.DuckDBPyConnection, files: list[str], options: list[exp.Expr]
) -> tuple[tuple[str, str], ...]:
    files_sql = exp.Array(expressions=[exp.Literal.string(f) for f in files])
    read = exp.ReadParquet(expressions=[files_sql, *(o.copy() for o in options)])
    try:
        rows = con.execute(f"DESCRIBE SELECT * FROM {read.sql(dialect='duckdb')}").fetchall()
    except duckdb.Error:
        raise PrivacyError("cannot read the columns of the files this reader names") from None
    return tuple((name, public_type(kind)) for name, kind, *_ in rows)
