"""The files a Parquet reader names, grouped by the schema DuckDB reads from each.

Files of one group are read together by ``rewriter.files.conformed_read``; DuckDB could
fail to read them together if their footers or partition directories differed, or if a
file held a value DuckDB cannot decode: each file is read alone once (while it stays the
same file) for its columns and every value, and left out if that fails.
"""

from __future__ import annotations

import glob
import os
from collections import defaultdict

import duckdb
from sqlglot import exp

from rewriter.catalog import public_type, reader_paths
from rewriter.errors import PrivacyError
from rewriter.files import FileGroup, Schema

FOOTER = (
    "SELECT file_name, list((name, type, type_length, repetition_type, num_children, "
    "converted_type, scale, precision, field_id, logical_type, duckdb_type) "
    "ORDER BY column_id) FROM parquet_schema({paths}) GROUP BY file_name"
)


def footer_groups(reader: exp.Table) -> tuple[FileGroup, ...]:
    """The files ``reader`` (a ``read_parquet`` table) reads, grouped by footer and by the
    columns DuckDB reads from each alone with the reader's own options (hive partitions
    come from each file's directories, as DuckDB parses their names: one unit's ``P=3/``
    or ``p=3=4/`` beside ``p=1/``, grouped by a key parsed here, failed every read of
    the glob together, red team 24). A file is read by its name, which DuckDB takes for a
    pattern again: one unit's file named ``*.parquet`` (or in a directory ``p=*``) read
    every other unit's file twice (red team 25), so a name with a pattern's characters is
    left out."""
    paths = [p.name for p in reader_paths(reader.this)]
    options = [a for a in reader.this.expressions if isinstance(a, (exp.EQ, exp.PropertyEQ))]
    if len(paths) == 1 and not glob.has_magic(paths[0]):
        schema = _checked(paths[0], options)
        if schema is None:
            raise PrivacyError(
                "cannot read the file this reader names, or it holds values DuckDB cannot "
                "decode: the data owner must write it again"
            )
        return (FileGroup((paths[0],), schema),)
    try:
        with _apart() as con:
            footers, every_file = _footers(con, paths), True
    except duckdb.Error:  # some file's footer or name cannot be read: each file's alone
        footers, every_file = _readable_footers(paths), False
    grouped: dict[tuple[object, Schema], list[str]] = defaultdict(list)
    for file, footer in footers:
        schema = None if glob.has_magic(file) else _checked(file, options)
        if schema is None:
            every_file = False
        else:
            grouped[(tuple(map(tuple, footer)), schema)].append(file)
    groups = sorted((sorted(files), schema) for (_, schema), files in grouped.items())
    return tuple(FileGroup(tuple(files), schema, every_file) for files, schema in groups)


def _footers(con: duckdb.DuckDBPyConnection, paths: list[str]) -> list[tuple]:
    listed = exp.Array(expressions=[exp.Literal.string(p) for p in paths]).sql(dialect="duckdb")
    return con.execute(FOOTER.format(paths=listed)).fetchall()


def _readable_footers(paths: list[str]) -> list[tuple]:
    """The footers of the files ``paths`` name that have one. A file that is not Parquet
    (truncated, empty, another format) holds no rows anyone can read; one unit's such file
    refused every query over the glob before (red team 15), so it is left out."""
    footers = []
    for file in _listed(paths):
        if glob.has_magic(file):  # named, it would be expanded again (footer_groups)
            continue
        try:
            with _apart() as con:
                footers += _footers(con, [file])
        except duckdb.Error:
            continue
    return footers


def _listed(paths: list[str]) -> list[str]:
    """The files ``paths`` name that DuckDB can name back. DuckDB's ``glob`` fails on a
    file name that is not UTF-8 (one unit's such file failed every query over the glob,
    red team 22); the file system's listing is then read, without such names."""
    files = []
    for path in paths:
        try:
            with _apart() as con:
                files += [f for (f,) in con.execute("SELECT file FROM glob(?)", [path]).fetchall()]
        except duckdb.Error:
            files += sorted(f for f in glob.glob(path, recursive=True) if _utf8(f))
    return files


def _apart() -> duckdb.DuckDBPyConnection:
    """An empty in-memory database of its own, where a file is read for its footer, its
    columns and its values: one corrupt page made DuckDB fail with an INTERNAL error, which
    invalidates the database it ran in, so one unit's file stopped every later statement
    of every session, the ledger's too, when it was read on the session's (red team 25)."""
    return duckdb.connect()


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # an undecodable byte, kept by Python as a lone surrogate
        return False
    return True


_CHECKED: dict[tuple[object, ...], Schema | None] = {}
"""``_checked``'s verdicts, by path, inode, size, modification and change times and the
reader's options. The change time is the kernel's: copying with times kept (``cp -p``,
``rsync -t``) or rewriting bytes in place sets the modification time back, not it (a
verdict kept across such a rewrite failed queries again, red team 23)."""


def _checked(file: str, options: list[exp.Expr]) -> Schema | None:
    """The columns DuckDB reads from ``file`` alone with the reader's ``options``, or None
    if it cannot read them or decode every value. A valid footer over a value DuckDB
    cannot decode (a string that is not UTF-8, a timestamp or time out of range) failed
    every query naming its column, so one unit's file decided answered or withheld (red
    team 22); such a file holds no row anyone can read, as one without a footer, and is
    left out of a glob (a file named alone refuses every query instead, whatever it
    names)."""
    read = _read([file], options)
    try:
        status = os.stat(file)
    except OSError:  # not on the local file system: checked on every read
        return _check(read)
    key = (file, status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
    key += (status.st_ctime_ns, read)
    if key not in _CHECKED:
        _CHECKED[key] = _check(read)
    return _CHECKED[key]


def _check(read: str) -> Schema | None:
    try:
        with _apart() as con:  # a hash of every column decodes every value
            con.execute(f"SELECT bit_xor(hash(COLUMNS(*))) FROM {read}").fetchall()
            rows = con.execute(f"DESCRIBE SELECT * FROM {read}").fetchall()
    except duckdb.Error:
        return None
    return tuple((name, public_type(kind)) for name, kind, *_ in rows)


def _read(files: list[str], options: list[exp.Expr]) -> str:
    """A ``read_parquet`` of ``files`` with the reader's ``options``, as DuckDB SQL."""
    listed = exp.Array(expressions=[exp.Literal.string(f) for f in files])
    read = exp.ReadParquet(expressions=[listed, *(o.copy() for o in options)])
    return read.sql(dialect="duckdb")
