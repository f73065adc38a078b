"""A Parquet glob is read with its declared schema, whatever one unit's file holds.

DuckDB takes a glob's schema from its first file and fails the read when another file
disagrees; with one file per unit (or per batch, types inferred from its values) one unit
decided the columns of every query or made it fail (red team 8). privsql reads every file
*to* the declared schema (``rewriter.files``), so whether a query runs, its columns and
what it costs do not change with such a file; an undeclared glob whose files disagree is
refused from their footers alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import privsql
from privsql.ledger import LedgerCorrupted

GOOD = "SELECT {unit} AS u, (r % 7)::DOUBLE AS x, 'n' || r AS s FROM range(6) t(r)"
HOSTILE = {
    "text": "SELECT 900 AS u, 'zz' AS x, 's' AS s",
    "numeric text": "SELECT 900 AS u, '3.5' AS x, 's' AS s",
    "struct": "SELECT 900 AS u, {'q': 1} AS x, 's' AS s",
    "list": "SELECT 900 AS u, [1.5, 2.5] AS x",
    "no such column": "SELECT 900 AS u, 1.0 AS y",
    "unit as text": "SELECT 'ZQX' AS u, 1.0 AS x",
    "no unit": "SELECT 2.0 AS x",
    "extra column": "SELECT 900 AS u, 1.0 AS x, 's' AS s, 42 AS extra",
}
QUERY = (
    "SELECT COUNT(*) AS n, SUM(x CLAMPED BETWEEN 0 AND 6) AS total "
    "FROM read_parquet('{glob}') PRIVACY_UNIT u BOUND ROWS 1 EPSILON 100000"
)


def write(path: Path, select: str) -> None:
    duckdb.connect().execute(f"COPY ({select}) TO '{path}'")


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "parts"
    folder.mkdir()
    for unit in range(30):
        write(folder / f"m{unit:02d}.parquet", GOOD.format(unit=unit))
    return folder


def declared(folder: Path, **given) -> privsql.Session:
    db = privsql.connect(budget=1e6, seed=11, insecure=True, **given)
    db.protect(f"read_parquet('{folder}/*.parquet')", privacy_unit="u")
    return db


def answer(db: privsql.Session, folder: Path) -> tuple[list[str], tuple]:
    result = db.sql(QUERY.format(glob=f"{folder}/*.parquet"))
    return result.columns, result.fetchall()[0]


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("name", ["a_first.parquet", "z_last.parquet"])
@pytest.mark.parametrize("restricted", [False, True], ids=["owner", "declared files only"])
def test_one_units_file_moves_a_declared_glob_only_by_its_contribution(
    files, hostile, name, restricted
):
    db = declared(files, declared_files_only=restricted)
    without = answer(db, files)
    write(files / name, hostile)
    columns, (count, total) = answer(db, files)
    assert columns == without[0]
    # at ε = 10^5 (noise ~10^-4) the answers differ by the unit's bounded contribution only
    assert abs(count - without[1][0]) <= 1.01
    assert abs(total - without[1][1]) <= 6.01


NOT_PARQUET = {
    "garbage": b"zq planted bytes, not a Parquet file",
    "empty": b"",
    "truncated": None,  # the first half of a good file
}


@pytest.mark.parametrize("kind", NOT_PARQUET, ids=NOT_PARQUET.keys())
@pytest.mark.parametrize("name", ["a_first.parquet", "z_last.parquet"])
@pytest.mark.parametrize("restricted", [False, True], ids=["owner", "declared files only"])
def test_a_file_that_is_not_parquet_leaves_a_declared_glob_running(files, kind, name, restricted):
    """One unit's file whose footer cannot be read holds no row anyone can read: the query
    runs on the others, with the same columns (it refused every query, red team 15), and
    explain() is the same text."""
    db = declared(files, declared_files_only=restricted)
    without = answer(db, files)
    explained = str(db.explain(QUERY.format(glob=f"{files}/*.parquet")))
    good = (files / "m00.parquet").read_bytes()
    (files / name).write_bytes(NOT_PARQUET[kind] if kind != "truncated" else good[: len(good) // 2])
    columns, (count, total) = answer(db, files)
    assert columns == without[0]
    assert abs(count - without[1][0]) <= 0.01 and abs(total - without[1][1]) <= 0.01
    assert str(db.explain(QUERY.format(glob=f"{files}/*.parquet"))) == explained


def _text(raw: bytes) -> pa.Array:
    """One string whose bytes need not be UTF-8 (pyarrow checks only what it builds)."""
    offsets = pa.py_buffer(np.array([0, len(raw)], np.int32).tobytes())
    return pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(raw)])


def _typed_row(unit: int, s: pa.Array, t: pa.Array, c: pa.Array) -> pa.Table:
    return pa.table(
        {"u": pa.array([unit], pa.int32()), "x": pa.array([1.0]), "s": s, "t": t, "c": c}
    )


FINE = {
    "s": pa.array(["n"]),
    "t": pa.array([1_700_000_000_000], pa.timestamp("ms")),
    "c": pa.array([3_600_000_000], pa.time64("us")),
}
UNDECODABLE = {
    "text not UTF-8": {**FINE, "s": _text(b"m\xfcller")},
    "timestamp out of range": {**FINE, "t": pa.array([2**62], pa.timestamp("ms"))},
    "time past a day": {**FINE, "c": pa.array([2**40], pa.time64("us"))},
}
TYPED_QUERY = (
    "SELECT COUNT(*) AS n, COUNT(s) AS texts, COUNT(t) AS times, COUNT(c) AS clocks "
    "FROM read_parquet('{glob}') PRIVACY_UNIT u BOUND ROWS 1 EPSILON 100000"
)


@pytest.mark.parametrize("kind", UNDECODABLE, ids=UNDECODABLE.keys())
@pytest.mark.parametrize("restricted", [False, True], ids=["owner", "declared files only"])
def test_a_file_with_a_value_duckdb_cannot_decode_is_left_out(tmp_path, kind, restricted):
    """A valid footer over one value DuckDB cannot decode failed every query naming its
    column: answered on D, withheld (and free) with the unit's file (red team 22). Such a
    file is left out as one without a footer: the answer and its columns are D's."""
    folder = tmp_path / "parts"
    folder.mkdir()
    for unit in range(30):
        pq.write_table(_typed_row(unit, **FINE), folder / f"m{unit:02d}.parquet")
    db = declared(folder, declared_files_only=restricted)
    query = TYPED_QUERY.format(glob=f"{folder}/*.parquet")
    without = db.sql(query)
    pq.write_table(_typed_row(900, **UNDECODABLE[kind]), folder / "z_planted.parquet")
    with_it = db.sql(query)
    assert with_it.columns == without.columns
    assert with_it.fetchall()[0] == pytest.approx(without.fetchall()[0], abs=0.01)
    pq.write_table(_typed_row(900, **FINE), folder / "z_planted.parquet")  # decodes now
    assert db.sql(query).fetchall()[0][0] == pytest.approx(31, abs=0.01)


def test_a_corrupt_bloom_filter_decides_no_join(tmp_path):
    """A join on a private Parquet column pushed the public side's one key value into the
    scan, which probed the bloom filter of every row group whose min/max admit it: one
    unit's file with a corrupt bloom filter (values, footer and statistics valid, so it
    decodes) failed exactly the joins on a value inside its range, a free search for its
    values (red team 23); a public side's constant carried by the join's equality into the
    scan did the same (red team 24). No filter is pushed into a private scan."""
    folder = tmp_path / "parts"
    folder.mkdir()
    con = duckdb.connect()
    for part in range(4):
        con.execute(
            f"COPY (SELECT 'u' || ({part} * 20 + i % 20) AS u, 'v' || (i % 7) AS s "
            f"FROM range(200) r(i)) TO '{folder}/f{part}.parquet'"
        )
    victim = folder / "victim.parquet"
    victim_rows = "SELECT 'w' AS u, 'band_' || (41 + i % 2) AS s FROM range(10) r(i)"
    con.execute(f"COPY ({victim_rows}) TO '{victim}'")
    blooms = con.execute(
        f"SELECT bloom_filter_offset, bloom_filter_length FROM parquet_metadata('{victim}') "
        "WHERE bloom_filter_offset IS NOT NULL"
    ).fetchall()
    assert blooms  # DuckDB writes one for a dictionary-encoded text column
    data = bytearray(victim.read_bytes())
    for offset, length in blooms:
        data[offset : offset + length] = b"\xff" * length
    victim.write_bytes(bytes(data))
    con.execute("CREATE TABLE bands AS SELECT 'band_' || i AS name FROM range(50) r(i)")
    db = privsql.connect(con, budget=1e6, insecure=True)
    db.protect(f"read_parquet('{folder}/*.parquet')", privacy_unit="u")
    db.public("bands")
    files = f"read_parquet('{folder}/*.parquet')"
    forms = [  # the join filter (round 23), and a constant carried by the join's equality
        "SELECT COUNT(*) AS n FROM {files} p JOIN bands q ON p.s = q.name "
        "WHERE q.name = '{value}'",
        "SELECT COUNT(*) AS n FROM {files} p "
        "JOIN (SELECT name FROM bands WHERE name = '{value}') q ON p.s = q.name",
        "WITH q AS (SELECT name FROM bands WHERE name = '{value}') "
        "SELECT COUNT(*) AS n FROM {files} p JOIN q ON p.s = q.name",
    ]
    for form in forms:
        for value in ("band_1", "band_41", "band_42"):
            query = form.format(files=files, value=value) + " PRIVACY_UNIT u EPSILON 1000"
            assert db.sql(query).columns == ["n"]


@pytest.mark.parametrize("directory", ["P=3", "p=3=4", "p=3"])
def test_a_units_partition_directory_leaves_a_hive_glob_running(tmp_path, directory):
    """A file under ``P=3/`` or ``p=3=4/`` beside ``p=1/`` and ``p=2/``, grouped with them
    by a key parsed here, made DuckDB refuse every read of the group (a hive partition
    mismatch), so one unit's directory refused every query (red team 24). Files are
    grouped by the columns DuckDB itself reads from each."""
    con = duckdb.connect()

    def part(name: str, prefix: str, rows: int) -> None:
        (tmp_path / name).mkdir()
        con.execute(
            f"COPY (SELECT '{prefix}' || (i % 10) AS u, i AS x FROM range({rows}) r(i)) "
            f"TO '{tmp_path / name / 'f.parquet'}'"
        )

    part("p=1", "a", 100)
    part("p=2", "b", 100)
    reader = f"read_parquet('{tmp_path}/*/*.parquet', hive_partitioning = true)"
    db = privsql.connect(con, budget=1e6, insecure=True)
    db.protect(reader, privacy_unit="u")
    part(directory, "w", 1)
    for where in ("", "WHERE p = '1' "):
        query = f"SELECT COUNT(*) AS n FROM {reader} {where}PRIVACY_UNIT u EPSILON 100000"
        assert db.sql(query).columns == ["n"]


def test_a_single_file_that_does_not_decode_refuses_every_query_alike(tmp_path):
    """A file named alone (no glob) is checked as a glob's files are: protect() refuses
    it, and once declared, a rewrite that cannot be decoded refuses every query on it with
    one message, whatever column it names (it refused only those naming the column)."""
    path = tmp_path / "one.parquet"
    rows = [_typed_row(unit, **FINE) for unit in range(20)]
    pq.write_table(pa.concat_tables(rows), path)
    db = privsql.connect(budget=1e6, seed=11, insecure=True)
    db.protect(f"read_parquet('{path}')", privacy_unit="u")
    planted = _typed_row(900, **UNDECODABLE["text not UTF-8"])
    pq.write_table(pa.concat_tables([*rows, planted]), path)
    messages = set()
    for query in ("SELECT COUNT(*) AS n FROM {}", "SELECT COUNT(s) AS n FROM {}"):
        with pytest.raises(privsql.PrivacyError) as refused:
            db.sql(query.format(f"read_parquet('{path}')") + " PRIVACY_UNIT u EPSILON 1")
        messages.add(str(refused.value))
    assert len(messages) == 1 and "cannot decode" in messages.pop()
    assert db.budget.spent == 0
    with pytest.raises(privsql.PrivacyError, match="cannot decode"):
        privsql.connect(insecure=True).protect(f"read_parquet('{path}')", privacy_unit="u")


def test_a_rewrite_keeping_size_and_modification_time_is_decoded_again(files):
    """The decode verdict is kept per file while its change time stays (``cp -p`` and
    in-place rewrites keep size and modification time, red team 23)."""
    db = declared(files)
    planted = files / "z_planted.parquet"
    text = pa.table({"u": pa.array([900], pa.int32()), "x": [1.0], "s": ["zqzq"]})
    pq.write_table(text, planted, compression="none")
    before = answer(db, files)[1]
    stat = planted.stat()
    data = bytearray(planted.read_bytes())
    offset = data.find(b"zqzq")  # the value in its data page, rewritten in place
    data[offset : offset + 2] = b"\xff\xfe"
    planted.write_bytes(bytes(data))
    os.utime(planted, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert planted.stat().st_size == stat.st_size
    result = db.sql(
        f"SELECT COUNT(s) AS n FROM read_parquet('{files}/*.parquet') PRIVACY_UNIT u "
        "BOUND ROWS 1 EPSILON 100000"
    )
    assert result.fetchall()[0][0] == pytest.approx(before[0] - 1, abs=0.01)


CORRUPT_PAGE = (
    "SELECT i % 10 AS u, 'n' || (i % 5) AS s, i::DOUBLE / 3 AS x, {'a': i, 'b': 'q' || i} "
    "AS st, [i, i + 1] AS l, TIMESTAMP '2020-01-01' + to_seconds(i) AS ts, (i % 3 = 0) AS b, "
    "i::DECIMAL(18, 3) AS d FROM range(300) r(i)"
)
"""The file red team 25 found by flipping bytes: DuckDB 2.0.0 writes it byte for byte the
same, and byte 11 166 (in the LIST column's data page) changed from 148 to 151 makes its
reader fail with an INTERNAL error."""


def test_a_file_that_invalidates_a_database_is_read_apart(tmp_path):
    """An INTERNAL error invalidates the database it happens in: one unit's file with one
    corrupt byte, checked on the session's database, stopped every later statement of every
    session, the ledger's too, and the error named a value decoded from it (red team 25).
    Files are read for their checks in a database of their own; this one is left out."""
    folder = tmp_path / "parts"
    folder.mkdir()
    con = duckdb.connect()
    for unit in range(10):
        write(folder / f"u{unit:02d}.parquet", GOOD.format(unit=unit))
    victim = tmp_path / "victim.parquet"
    con.execute(f"COPY ({CORRUPT_PAGE}) TO '{victim}' (ROW_GROUP_SIZE 100)")
    data = bytearray(victim.read_bytes())
    assert (len(data), data[11166]) == (11792, 148)  # the same file as the red team's
    data[11166] = 151
    victim.write_bytes(bytes(data))
    with pytest.raises(duckdb.Error, match="INTERNAL"):  # what it does to a database
        duckdb.connect().execute(f"SELECT bit_xor(hash(COLUMNS(*))) FROM '{victim}'").fetchall()
    con.execute("CREATE TABLE other AS SELECT i % 50 AS pid FROM range(1000) r(i)")
    db = privsql.connect(con, budget=1e6, insecure=True)
    db.protect(f"read_parquet('{folder}/*.parquet')", privacy_unit="u")
    db.protect("other", privacy_unit="pid")
    victim.rename(folder / "victim.parquet")  # the unit's file arrives after protect()
    without_victim = answer(db, folder)
    assert without_victim[0] == ["n", "total"]
    assert db.sql("SELECT COUNT(*) AS n FROM other PRIVACY_UNIT pid EPSILON 1").columns == ["n"]
    assert db.budget.remaining > 0


@pytest.mark.parametrize("name", ["*.parquet", "m0[0-4].parquet", "m?0.parquet"])
def test_a_file_named_like_a_pattern_reads_no_other_file(files, name):
    """A file is read by its name, which DuckDB takes for a pattern again: one unit's file
    named ``*.parquet`` read every other unit's file a second time (red team 25)."""
    db = declared(files)
    (files / "zz.parquet").write_bytes(NOT_PARQUET["garbage"])  # the rest read by name
    query = QUERY.format(glob=f"{files}/*.parquet").replace("ROWS 1", "ROWS 100")
    without = db.sql(query).fetchall()[0]
    write(files / name, GOOD.format(unit=900))
    count, total = db.sql(query).fetchall()[0]
    # a unit of 6 rows of x in [0, 6]: the answers move by at most its 6 rows
    assert abs(count - without[0]) <= 6.01 and abs(total - without[1]) <= 36.01


@pytest.mark.parametrize("restricted", [False, True], ids=["owner", "declared files only"])
def test_a_file_whose_name_is_not_utf8_leaves_a_declared_glob_running(files, restricted):
    """DuckDB's glob fails on such a name, which failed every query over the glob with a
    raw engine exception (red team 22); the file is left out."""
    db = declared(files, declared_files_only=restricted)
    without = answer(db, files)
    planted = os.fsencode(files) + b"/user_m\xfcller.parquet"
    duckdb.connect().execute(f"COPY ({GOOD.format(unit=900)}) TO '{files}/good.parquet'")
    os.rename(os.fsencode(files) + b"/good.parquet", planted)
    columns, row = answer(db, files)
    assert columns == without[0]
    assert row == pytest.approx(without[1], abs=0.01)


@pytest.mark.parametrize("unit", ["'02'", "' 2'", "1.5::DOUBLE", "2.4::DECIMAL(4, 1)"])
def test_a_file_never_converts_its_unit_into_another_units(tmp_path, unit):
    """TRY_CAST is not one-to-one: '02', ' 2', 1.5 and 2.4 are all INTEGER 2, so a unit's
    file whose unit column has another type joined unit 2's rows and replaced its bounded
    contribution, moving a sum by twice the sensitivity (red team 13). Such a unit reads
    as NULL: its rows are dropped."""
    folder = tmp_path / "parts"
    folder.mkdir()
    for unit_id in range(30):
        write(folder / f"m{unit_id:02d}.parquet", f"SELECT {unit_id} AS u, -6.0 AS x")
    db = declared(folder)
    query = (
        f"SELECT SUM(x CLAMPED BETWEEN -6 AND 6) FROM read_parquet('{folder}/*.parquet') "
        "PRIVACY_UNIT u BOUND ROWS 1 EPSILON 100000"
    )
    without = db.sql(query).fetchall()[0][0]
    rows = "FROM range(200) r(i)"  # distinct rows: the row kept is a hostile one
    write(folder / "z_hostile.parquet", f"SELECT {unit} AS u, 6.0 - i / 1000 AS x {rows}")
    assert abs(db.sql(query).fetchall()[0][0] - without) <= 6.01


def test_the_declared_types_convert_what_converts(files):
    db = declared(files)
    write(files / "a_first.parquet", HOSTILE["numeric text"])
    rows = db.sql(
        f"SELECT COUNT(x) AS n FROM read_parquet('{files}/*.parquet') WHERE x = 3.5 "
        "PRIVACY_UNIT u BOUND ROWS 1 EPSILON 1000"
    ).fetchall()
    assert rows[0][0] == pytest.approx(1, abs=0.05)  # ε = 1000: the one row, read as DOUBLE


def test_describe_shows_the_declared_schema(files):
    db = declared(files)
    write(files / "a_first.parquet", HOSTILE["struct"])
    described = db.sql(f"DESCRIBE read_parquet('{files}/*.parquet')").fetchall()
    assert [(name, kind) for name, kind, _ in described] == [
        ("u", "INTEGER"),
        ("x", "DOUBLE"),
        ("s", "VARCHAR"),
    ]


@pytest.mark.parametrize("name", ["a_first.parquet", "z_last.parquet"])
def test_an_undeclared_glob_whose_files_disagree_is_refused_from_footers(files, name):
    db = privsql.connect(budget=10)
    write(files / name, HOSTILE["text"])
    with pytest.raises(privsql.PrivacyError, match="do not share one schema") as refused:
        db.sql(QUERY.format(glob=f"{files}/*.parquet").replace("EPSILON 100000", "EPSILON 1"))
    assert "zz" not in str(refused.value)
    assert db.budget.spent == 0


def test_the_owner_names_the_columns_of_files_that_disagree(files):
    write(files / "a_first.parquet", HOSTILE["text"])
    db = privsql.connect(budget=1e6, seed=11, insecure=True)
    reader = f"read_parquet('{files}/*.parquet')"
    with pytest.raises(privsql.PrivacyError, match="columns="):
        db.protect(reader, privacy_unit="u")
    db.protect(reader, privacy_unit="u", columns={"u": "BIGINT", "x": "double", "s": "TEXT"})
    described = db.sql(f"DESCRIBE {reader}").fetchall()
    assert [(name, kind) for name, kind, _ in described] == [
        ("u", "BIGINT"),
        ("x", "DOUBLE"),
        ("s", "VARCHAR"),
    ]
    count, _ = answer(db, files)[1]
    assert count == pytest.approx(31, abs=0.05)


def test_columns_are_only_declared_for_files_and_as_types(files):
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 1 AS u")
    db = privsql.connect(con, budget=10)
    with pytest.raises(privsql.PrivacyError, match="file"):
        db.protect("t", privacy_unit="u", columns={"u": "INTEGER"})
    with pytest.raises(privsql.PrivacyError, match="not a DuckDB type"):
        db.protect(
            f"read_parquet('{files}/*.parquet')", privacy_unit="u", columns={"u": "NO SUCH"}
        )


def test_declared_columns_are_kept_and_sealed_in_the_ledger(files, tmp_path):
    path = str(tmp_path / "owner.duckdb")
    db = privsql.connect(path, budget=10)
    db.protect(f"read_parquet('{files}/*.parquet')", privacy_unit="u")
    db.close()
    again = privsql.connect(path)
    write(files / "a_first.parquet", HOSTILE["text"])
    described = again.sql(f"DESCRIBE read_parquet('{files}/*.parquet')").fetchall()
    assert [kind for _, kind, _ in described] == ["INTEGER", "DOUBLE", "VARCHAR"]
    again.close()
    con = duckdb.connect(path)
    con.execute("UPDATE __privsql.sources SET columns = '[[\"u\", \"VARCHAR\"]]'")
    con.close()
    with pytest.raises(LedgerCorrupted):
        privsql.connect(path).sql(f"DESCRIBE read_parquet('{files}/*.parquet')")


def test_a_ledger_from_before_declared_columns_opens_unchanged(tmp_path):
    path = str(tmp_path / "old.duckdb")
    db = privsql.connect(path, budget=10)
    db._con.execute("CREATE TABLE t AS SELECT 1 AS u")
    db.protect("t", privacy_unit="u")
    db.close()
    con = duckdb.connect(path)
    con.execute("ALTER TABLE __privsql.sources DROP COLUMN columns")
    con.close()
    reopened = privsql.connect(path)
    assert reopened.sql("SELECT COUNT(*) FROM t PRIVACY_UNIT u EPSILON 1").epsilon == 1
