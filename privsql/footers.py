"""The files a Parquet reader names, grouped by the schema DuckDB reads from each.

Files of one group are read together by ``rewriter.files.conformed_read``; DuckDB could
fail to read them together if their footers or partition directories differed, or if a
file held a value DuckDB cannot decode: each file is read alone once (while it stays the
same file) for its columns and every value, and left out if that fails.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections import defaultdict

import duckdb
from sqlglot import exp

from rewriter.catalog import public_type, reader_paths
from rewriter.errors import PrivacyError
from rewriter.files import FileGroup, Schema

FOOTER = (
    "SELECT name, type, type_length, repetition_type, num_children, converted_type, scale, "
    "precision, field_id, logical_type, duckdb_type FROM parquet_schema({path}) "
    "ORDER BY column_id"
)
"""A file's footer: its schema elements, in order."""

SPARK_SCHEMA = "org.apache.spark.sql.parquet.row.metadata"
"""The footer's key-value entry where Spark keeps the schema it wrote a file with, and
reads a file by, whatever the file's columns are (``SparkEngine.file_groups``)."""

SPARK_FOOTER = (
    f"SELECT value FROM parquet_kv_metadata({{path}}) WHERE key = encode('{SPARK_SCHEMA}')"
)


def footer_groups(con: duckdb.DuckDBPyConnection, reader: exp.Table) -> tuple[FileGroup, ...]:
    """The files ``reader`` (a ``read_parquet`` table) reads, grouped by footer and by the
    columns DuckDB reads from each alone with the reader's own options (hive partitions
    come from each file's directories, as DuckDB parses their names: one unit's ``P=3/``
    or ``p=3=4/`` beside ``p=1/``, grouped by a key parsed here, failed every read of
    the glob together, red team 24). ``con`` (the session's) only names the files, as
    its settings resolve them (``file_search_path``); they are read apart (``_apart``).

    A file is read by its name, which DuckDB takes for a pattern again: one unit's file
    named ``*.parquet`` (or in a directory ``p=*``) read every other unit's file twice
    (red team 25), so a name with a pattern's characters is left out."""
    paths = [p.name for p in reader_paths(reader.this)]
    options = [a for a in reader.this.expressions if isinstance(a, (exp.EQ, exp.PropertyEQ))]
    if len(paths) == 1 and not glob.has_magic(paths[0]):
        found, _ = _listed(con, paths)
        checked = _checked(con, found[0], options) if len(found) == 1 else None
        if checked is None:
            raise PrivacyError(
                "cannot read the file this reader names, or it holds values DuckDB cannot "
                "decode: the data owner must write it again"
            )
        return (FileGroup((paths[0],), checked[1]),)
    listed, whole = _listed(con, paths)
    grouped: dict[Checked, list[str]] = defaultdict(list)
    for file in listed:
        checked = None if glob.has_magic(file) else _checked(con, file, options)
        if checked is not None:
            grouped[checked].append(file)
    every_file = whole and sum(map(len, grouped.values())) == len(listed)
    groups = sorted((sorted(files), schema) for (_, schema), files in grouped.items())
    return tuple(FileGroup(tuple(files), schema, every_file) for files, schema in groups)


def _listed(con: duckdb.DuckDBPyConnection, paths: list[str]) -> tuple[list[str], bool]:
    """The files ``paths`` name, by the names DuckDB resolves them to (no file is opened),
    and whether DuckDB could name them all. Its ``glob`` fails on a file name that is not
    UTF-8 (one unit's such file failed every query over the glob, red team 22); the file
    system's listing is then read, without such names."""
    files, whole = [], True
    for path in paths:
        try:
            files += [f for (f,) in con.execute("SELECT file FROM glob(?)", [path]).fetchall()]
        except duckdb.Error:
            files += sorted(f for f in glob.glob(path, recursive=True) if _utf8(f))
            whole = False
    return files, whole


def _apart(con: duckdb.DuckDBPyConnection, file: str) -> contextlib.AbstractContextManager:
    """Where ``file`` is read for its footer, its columns and its values: an empty in-memory
    database of its own. One corrupt page made DuckDB fail with an INTERNAL error, which
    invalidates the database it ran in, so one unit's file stopped every later statement
    of every session, the ledger's too, when it was read on the session's (red team 25).
    A remote file is read on the session's, whose secrets and extensions reach it."""
    if REMOTE in file:
        return contextlib.nullcontext(con)
    return duckdb.connect()


REMOTE = "://"
"""What a remote file's name holds (``s3://``, ``https://``)."""


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # an undecodable byte, kept by Python as a lone surrogate
        return False
    return True


Checked = tuple[tuple[object, ...], Schema]
"""A file's footer (``parquet_schema``'s rows) and the columns DuckDB reads from it alone."""

_CHECKED: dict[tuple[object, ...], Checked | None] = {}
"""``_checked``'s verdicts, by path, inode, size, modification and change times and the
reader's options. The change time is the kernel's: copying with times kept (``cp -p``,
``rsync -t``) or rewriting bytes in place sets the modification time back, not it (a
verdict kept across such a rewrite failed queries again, red team 23)."""


def _checked(con: duckdb.DuckDBPyConnection, file: str, options: list[exp.Expr]) -> Checked | None:
    """``file``'s footer and the columns DuckDB reads from it alone with the reader's
    ``options``, or None if it cannot read them or decode every value. A file that is not
    Parquet (truncated, empty, another format) holds no rows anyone can read: one unit's
    such file refused every query over the glob (red team 15). A valid footer over a value
    DuckDB cannot decode (a string that is not UTF-8, a timestamp or time out of range)
    failed every query naming its column, so one unit's file decided answered or withheld
    (red team 22). Such files are left out of a glob (a file named alone refuses every
    query instead, whatever it names)."""
    read = _read(file, options)
    state = file_state(file)
    if state is None:  # not on the local file system: checked on every read
        return _check(con, file, read)
    key = (*state, read)
    if key not in _CHECKED:
        _CHECKED[key] = _check(con, file, read)
    return _CHECKED[key]


def file_state(file: str) -> tuple[object, ...] | None:
    """A local file as it is now: path, device, inode, size, modification and change times
    (the kernel's change time, which copying with times kept or rewriting bytes in place
    moves, unlike the modification time); None when it is not on the local file system."""
    try:
        status = os.stat(file)
    except OSError:
        return None
    size, modified, changed = status.st_size, status.st_mtime_ns, status.st_ctime_ns
    return (file, status.st_dev, status.st_ino, size, modified, changed)


def _check(con: duckdb.DuckDBPyConnection, file: str, read: str) -> Checked | None:
    try:
        with _apart(con, file) as reading:  # a hash of every column decodes every value
            footer = reading.execute(FOOTER.format(path=_quoted(file))).fetchall()
            footer += reading.execute(SPARK_FOOTER.format(path=_quoted(file))).fetchall()
            footer += reading.execute(CODECS.format(path=_quoted(file))).fetchall()
            reading.execute(f"SELECT bit_xor(hash(COLUMNS(*))) FROM {read}").fetchall()
            rows = reading.execute(f"DESCRIBE SELECT * FROM {read}").fetchall()
    except duckdb.Error:
        return None
    schema = tuple((name, public_type(kind)) for name, kind, *_ in rows)
    return tuple(footer), schema


CODECS = "SELECT DISTINCT compression FROM parquet_metadata({path}) ORDER BY 1"
"""The compression codecs of a file's column chunks (part of the footer files are grouped
by: ``SparkEngine.file_groups`` leaves out a group whose codec Spark cannot read)."""


def codecs(con: duckdb.DuckDBPyConnection, file: str) -> frozenset[str] | None:
    """The compression codecs of ``file``'s column chunks; None where they cannot be told."""
    found = _footer_rows(con, file, CODECS)
    return None if found is None else frozenset(codec for (codec,) in found)


def written_by_spark(con: duckdb.DuckDBPyConnection, file: str) -> bool:
    """Whether ``file``'s footer holds a schema Spark reads it by (``SPARK_SCHEMA``); True
    where that cannot be told. ``footer_groups`` groups files by that entry too."""
    found = _footer_rows(con, file, SPARK_FOOTER)
    return found is None or bool(found)


def _footer_rows(con: duckdb.DuckDBPyConnection, file: str, query: str) -> list[tuple] | None:
    """``query``'s rows about ``file``'s footer, read apart (``_apart``); None on failure."""
    try:
        with _apart(con, file) as reading:
            return reading.execute(query.format(path=_quoted(file))).fetchall()
    except duckdb.Error:
        return None


def _read(file: str, options: list[exp.Expr]) -> str:
    """A ``read_parquet`` of ``file`` with the reader's ``options``, as DuckDB SQL."""
    read = exp.ReadParquet(expressions=[exp.Literal.string(file), *(o.copy() for o in options)])
    return read.sql(dialect="duckdb")


def _quoted(file: str) -> str:
    return exp.Literal.string(file).sql(dialect="duckdb")
