"""Fan-out keys compared under a collation (rewriter/fanout.py ``_as_compared``).

A VARCHAR equality between a public column and a private one compares under the
collation of either side: one private value ``'abcdefghi'`` under ``NOCASE`` meets all 512
case variants of it in a public table, and under an ICU locale (``de``) every variant
followed by zero-width spaces. The public rows must be grouped under the collation the join
uses, or the fan-out bound (``MAX_FAN_OUT``) is not one (docs/privacy.md §8).
"""

from __future__ import annotations

import duckdb
import pytest
from neighbours import with_rows

import privsql
from privsql import PrivacyError
from rewriter.fanout import MAX_FAN_OUT

WORD = "abcdefghi"
CASE_VARIANTS = 2 ** len(WORD)
ZERO_WIDTH_VARIANTS = 300
PLANTED = "zq_planted_collate_4410"

COLLATIONS = {
    "declared NOCASE": ("COLLATE NOCASE", None),
    "declared ICU locale": ("COLLATE de", None),
    "database default": ("", "nocase"),
}
"""How the private column's comparisons get a collation: its declaration, or the
database's default collation."""


def _connect(declared: str, default: str | None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    if default is not None:
        con.execute(f"SET default_collation = '{default}'")
    con.execute(f"CREATE TABLE visits (user_id INTEGER, code VARCHAR {declared}, n INTEGER)")
    con.execute(f"INSERT INTO visits SELECT i % 30, '{WORD}', i FROM range(600) r(i)")
    variants = ", ".join(f"(VALUES ('{c}'), ('{c.upper()}')) AS t{c}(c)" for c in WORD)
    spelled = " || ".join(f"t{c}.c" for c in WORD)
    con.execute(f"CREATE TABLE codes AS SELECT {spelled} AS code FROM {variants}")
    con.execute(
        f"INSERT INTO codes SELECT '{WORD}' || repeat(chr(8203), i) "
        f"FROM range(1, {ZERO_WIDTH_VARIANTS}) r(i)"
    )
    return con


def _session(con: duckdb.DuckDBPyConnection) -> privsql.Session:
    db = privsql.connect(con, budget=100, seed=7, insecure=True)
    db.protect("visits", privacy_unit="user_id")
    db.public("codes")
    return db


JOINED = (
    "SELECT COUNT(*) FROM visits AS v JOIN codes AS c ON c.code = v.code "
    "PRIVACY_UNIT user_id EPSILON 0.5"
)


@pytest.mark.parametrize("name", COLLATIONS)
def test_a_key_compared_under_a_collation_is_counted_under_it(name: str) -> None:
    """The join really repeats each private row more than MAX_FAN_OUT times (DuckDB's own
    count), and privsql refuses it, charging nothing — on D and on D plus a unit of planted
    strings alike (the refusal reads public data and the SQL only)."""
    con = _connect(*COLLATIONS[name])
    matched = con.execute(
        "SELECT count(*) FROM visits AS v JOIN codes AS c ON c.code = v.code WHERE v.n = 0"
    ).fetchall()[0][0]
    assert matched > MAX_FAN_OUT
    db = _session(con)
    messages = []
    for planted in (False, True):
        insert = (
            f"INSERT INTO visits SELECT 999, '{PLANTED}' || repeat(chr(8203), i), i "
            "FROM range(50) r(i)"
        )
        with with_rows(con, insert if planted else "SELECT 1"):
            with pytest.raises(PrivacyError, match="more than 256 times") as caught:
                db.sql(JOINED)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and PLANTED not in messages[0]
    assert db.budget.spent == 0


def test_a_key_compared_without_a_collation_still_bounds_the_join() -> None:
    """The same public table joined on a column with no collation matches one row per
    private row: the equality is still a key, and the query runs."""
    con = _connect("", None)
    matched = con.execute(
        "SELECT count(*) FROM visits AS v JOIN codes AS c ON c.code = v.code WHERE v.n = 0"
    ).fetchall()[0][0]
    assert matched == 1
    db = _session(con)
    assert db.sql(JOINED).arrow().num_rows == 1


def test_a_collation_on_the_public_side_is_counted_too() -> None:
    """A public column declared NOCASE groups its case variants as the join meets them."""
    con = _connect("", None)
    con.execute(
        "CREATE TABLE nocase_codes AS SELECT code::VARCHAR COLLATE NOCASE AS code FROM codes"
    )
    db = _session(con)
    db.public("nocase_codes")
    with pytest.raises(PrivacyError, match="more than 256 times"):
        db.sql(JOINED.replace("JOIN codes", "JOIN nocase_codes"))
    assert db.budget.spent == 0
