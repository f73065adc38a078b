"""A private GROUP BY key is released in one form per group, whatever the data hold.

DuckDB groups values it finds equal — -0.0 and 0.0, text under a collation, intervals of
one length — and returns whichever form the group's first row had: one unit's raw value,
released without noise, read bit by bit by a binary search (red team 45: a salary to the
dollar for ε = 2.8). Each neighbour pair below plants one unit whose rows come first."""

from __future__ import annotations

import struct

import duckdb
import pytest

import privsql
from privsql import PrivacyError


def _session(ddl: str, rows: list[str]) -> privsql.Session:
    con = duckdb.connect()
    con.execute("SET threads = 1")  # rows in the order they were written
    con.execute("SET default_collation = 'nocase'")  # the owner's: JSON text compares so too
    con.execute(ddl)
    for statement in rows:  # in this order: the planted unit's rows first
        con.execute(statement)
    db = privsql.connect(con, budget=1e6, seed=3, insecure=True)
    db.protect("t", privacy_unit="uid")
    return db


def _bits(value: object) -> str:
    return struct.pack(">d", value).hex() if isinstance(value, float) else repr(value)


def _released_on_both(
    ddl: str, rows: str, planting: str, query: str, keys: dict | None = None
) -> tuple[set[str], ...]:
    """The forms of ``k`` released on D (``rows``) and on D plus the planted unit, whose
    rows come first: a group of one unit misses partition selection at ε = 1 (threshold
    ~ 15 units), so the two sets differ only where a form is the planted unit's."""
    return tuple(
        {_bits(v) for v in db.sql(query, keys=keys).arrow().column("k").to_pylist()}
        for db in (_session(ddl, [rows]), _session(ddl, [planting, rows]))
    )


COMMON = "INSERT INTO t SELECT i // 3, {value} FROM range(3000) r(i)"  # 1 000 units


@pytest.mark.parametrize(
    ("column", "common", "planted", "key"),
    [
        ("v DOUBLE", "1 + i % 7", "-42.5", "v * 0.0"),
        ("v DOUBLE", "1 + i % 7", "-42.5", "CASE WHEN v < 0 THEN -0.0::DOUBLE ELSE 0.0 END"),
        ("v FLOAT", "1 + i % 7", "-42.5", "v * 0.0::FLOAT"),
        ("v DOUBLE", "'nan'", "-'nan'::DOUBLE", "v"),
        ("v VARCHAR COLLATE NOCASE", "'aa'", "'AA'", "v"),
        ("v VARCHAR COLLATE NOACCENT", "'e'", "'é'", "v"),
        ("v INTERVAL", "INTERVAL '30 days'", "INTERVAL '1 month'", "v"),
        ("v INTERVAL", "INTERVAL '1 day'", "INTERVAL '24 hours'", "v"),
    ],
)
def test_a_private_key_is_released_in_one_form_per_group(
    column: str, common: str, planted: str, key: str
) -> None:
    ddl = f"CREATE TABLE t (uid BIGINT, {column})"
    query = (
        f"SELECT {key} AS k, COUNT(*) AS n FROM t GROUP BY {key} "
        "PRIVACY_UNIT uid BOUND ROWS 3 MAX_GROUPS 1 EPSILON 1"
    )
    planting = f"INSERT INTO t SELECT -1, {planted} FROM range(3)"
    alone, beside = _released_on_both(ddl, COMMON.format(value=common), planting, query)
    assert alone == beside


@pytest.mark.parametrize(
    "kind",
    ["TIMETZ", "DOUBLE[]", "STRUCT(a DOUBLE)", "MAP(VARCHAR, INT)", "VARIANT", "GEOMETRY", "JSON"],
)
def test_a_key_no_release_shows_whole_is_refused(kind: str) -> None:
    """A TIMETZ loses its offset on the way out (two groups tied as one time: the order
    told whether a unit held a listed key); a nested or VARIANT private key may hold any
    of the forms above; JSON is text DuckDB compares under the owner's default collation
    (red team 47) and will not group byte for byte. Only the types known to show one form
    per group are released from the data. Refused before anything runs or is charged."""
    db = _session(f"CREATE TABLE t (uid BIGINT, v {kind})", [])
    with pytest.raises(PrivacyError, match="GROUP BY key of type"):
        db.sql("SELECT v AS k, COUNT(*) AS n FROM t GROUP BY v PRIVACY_UNIT uid BOUND ROWS 3")
    assert db.budget.spent == 0


def test_a_listed_timetz_key_is_refused() -> None:
    db = _session("CREATE TABLE t (uid BIGINT, v TIMETZ)", [])
    query = "SELECT v AS k, COUNT(*) AS n FROM t GROUP BY v PRIVACY_UNIT uid BOUND ROWS 3"
    with pytest.raises(PrivacyError, match="GROUP BY key of type"):
        db.sql(query, keys={"k": ["12:00:00+01", "12:00:00+02"]})
    assert db.budget.spent == 0


@pytest.mark.parametrize(
    ("column", "common", "planted", "listed"),
    [
        ("v VARCHAR COLLATE NOCASE", "'aa'", "'AA'", "aa"),
        ("v INTERVAL", "INTERVAL '30 days'", "INTERVAL '1 month'", "30 days"),
    ],
)
def test_a_listed_key_beside_a_private_one_is_released_in_one_form(
    column: str, common: str, planted: str, listed: object
) -> None:
    """With one key private, partition selection releases every key from the groups, a
    listed one too (red team 46: the listed key ``k`` showed the planted unit's form)."""
    ddl = f"CREATE TABLE t (uid BIGINT, d INT, {column})"
    query = (
        "SELECT v AS k, d, COUNT(*) AS n FROM t GROUP BY v, d "
        "PRIVACY_UNIT uid BOUND ROWS 3 MAX_GROUPS 1 EPSILON 1"
    )
    planting = f"INSERT INTO t SELECT -1, 0, {planted} FROM range(3)"
    rows = f"INSERT INTO t SELECT i // 3, 0, {common} FROM range(3000) r(i)"
    alone, beside = _released_on_both(ddl, rows, planting, query, {"k": [listed]})
    assert alone == beside


def test_a_key_list_with_text_duckdb_cannot_read_is_refused() -> None:
    db = _session("CREATE TABLE t (uid BIGINT, v VARCHAR)", [])
    query = "SELECT v AS k, COUNT(*) AS n FROM t GROUP BY v PRIVACY_UNIT uid BOUND ROWS 3"
    with pytest.raises(PrivacyError, match="not valid Unicode"):
        db.sql(query, keys={"k": ["a", "\ud800"]})
    assert db.budget.spent == 0
