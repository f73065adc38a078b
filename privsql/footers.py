"""The files a Parquet reader names, grouped by the schema their footers give.

Footers are metadata: grouping reads no row. Files of one group are read together by
``rewriter.files.conformed_read``; DuckDB could only fail to read them together if their
footers differed, or if a file held a value DuckDB cannot decode: a glob's files are
checked for that once (per file, while it stays the same file) and left out if they do.
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
        if not _decodes(con, paths[0], options):
            raise PrivacyError(
                "the file this reader names holds values DuckDB cannot decode: the data "
                "owner must write it again"
            )
        return (FileGroup((paths[0],), _described(con, paths, options)),)
    try:
        footers, every_file = _footers(con, paths), True
    except duckdb.Error:  # some file's footer or name cannot be read: each file's alone
        footers, every_file = _readable_footers(con, paths), False
    decoding = [(file, footer) for file, footer in footers if _decodes(con, file, options)]
    every_file, footers = every_file and len(decoding) == len(footers), decoding
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
    for file in _listed(con, paths):
        try:
            footers += _footers(con, [file])
        except duckdb.Error:
            continue
    return footers


def _listed(con: duckdb.DuckDBPyConnection, paths: list[str]) -> list[str]:
    """The files ``paths`` name that DuckDB can name back. DuckDB's ``glob`` fails on a
    file name that is not UTF-8 (one unit's such file failed every query over the glob,
    red team 22); the file system's listing is then read, without such names."""
    files = []
    for path in paths:
        try:
            files += [f for (f,) in con.execute("SELECT file FROM glob(?)", [path]).fetchall()]
        except duckdb.Error:
            files += sorted(f for f in glob.glob(path, recursive=True) if _utf8(f))
    return files


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # an undecodable byte, kept by Python as a lone surrogate
        return False
    return True


_DECODES: dict[tuple[object, ...], bool] = {}
"""Whether a file decodes, by its path, inode, size, modification and change times and
the reader's options. The change time is the kernel's: copying with times kept (``cp -p``,
``rsync -t``) or rewriting bytes in place sets the modification time back, not it (a
verdict kept across such a rewrite failed queries again, red team 23)."""


def _decodes(con: duckdb.DuckDBPyConnection, file: str, options: list[exp.Expr]) -> bool:
    """Whether DuckDB decodes every value of ``file`` (read with the reader's ``options``).
    A valid footer over a value DuckDB cannot decode (a string that is not UTF-8, a
    timestamp or time out of range) failed every query naming its column, whatever else
    it did, so one unit's file decided answered or withheld (red team 22); such a file
    holds no row anyone can read, as one without a footer, and is left out of a glob (a
    file named alone refuses every query instead, whatever it names)."""
    read = _read([file], options)
    try:
        status = os.stat(file)
    except OSError:  # not on the local file system: checked on every read
        return _decoded(con, read)
    key = (file, status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
    key += (status.st_ctime_ns, read)
    if key not in _DECODES:
        _DECODES[key] = _decoded(con, read)
    return _DECODES[key]


def _decoded(con: duckdb.DuckDBPyConnection, read: str) -> bool:
    try:  # a hash of every column decodes every value
        con.execute(f"SELECT bit_xor(hash(COLUMNS(*))) FROM {read}").fetchall()
    except duckdb.Error:
        return False
    return True


def _read(files: list[str], options: list[exp.Expr]) -> str:
    """A ``read_parquet`` of ``files`` with the reader's ``options``, as DuckDB SQL."""
    listed = exp.Array(expressions=[exp.Literal.string(f) for f in files])
    read = exp.ReadParquet(expressions=[listed, *(o.copy() for o in options)])
    return read.sql(dialect="duckdb")


def _partitions(path: str) -> tuple[str, ...]:
    """The hive partition keys a file's directories name (``year=2013/…``)."""
    directories = os.path.dirname(path).split(os.sep)
    return tuple(d.split(HIVE_KEY, 1)[0].lower() for d in directories if HIVE_KEY in d)


def _described(
    con: duckdb.DuckDBPyConnection, files: list[str], options: list[exp.Expr]
) -> tuple[tuple[str, str], ...]:
    try:
        rows = con.execute(f"DESCRIBE SELECT * FROM {_read(files, options)}").fetchall()
    except duckdb.Error:
        raise PrivacyError("cannot read the columns of the files this reader names") from None
    return tuple((name, public_type(kind)) for name, kind, *_ in rows)
