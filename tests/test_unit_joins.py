"""Private sources joined on the unit pair each row with its own unit only.

DuckDB's equality can be coarser than a unit's identity: BIGINT against DOUBLE compares
as DOUBLE (2^60 + k are one value for k < 128) and a ``NOCASE`` collation on either side
makes 'Victim' and 'victim' equal, so one unit's rows in one table joined every similar
unit's rows in the other and moved ``COUNT(*) BOUND ROWS 1`` by 129 (red team 12).
Unit columns must be of one type (or integers compared exactly) and text compares
byte for byte (``ir._Builder.unit_equality``).
"""

from __future__ import annotations

import duckdb
import pytest

import privsql

EPSILON = 100000  # noise ~10^-5: the answers are the bounded counts


def answers(setup: str, hostile: str, query: str, units: dict[str, str]) -> list[float]:
    """The query's answer on D and on D plus the hostile unit's rows."""
    found = []
    for extra in ("", hostile):
        con = duckdb.connect()
        con.execute(setup + extra)
        db = privsql.connect(con, budget=1e9, seed=3, insecure=True)
        for table, unit in units.items():
            db.protect(table, privacy_unit=unit)
        found.append(db.sql(query).fetchall()[0][0])
    return found


NEAR_2_60 = "(2::HUGEINT ** 60)::BIGINT"
MIXED = {
    "BIGINT = DOUBLE": ("BIGINT", "DOUBLE"),
    "INTEGER = FLOAT": ("INTEGER", "FLOAT"),
    "VARCHAR = UUID": ("VARCHAR", "UUID"),
    "HUGEINT = UHUGEINT": ("HUGEINT", "UHUGEINT"),
    "BIGINT = VARCHAR": ("BIGINT", "VARCHAR"),
    "DATE = TIMESTAMP": ("DATE", "TIMESTAMP"),
}


@pytest.mark.parametrize("kinds", MIXED.values(), ids=MIXED.keys())
@pytest.mark.parametrize(
    "join",
    [
        "FROM a JOIN b ON a.u = b.u",
        "FROM a, b WHERE b.u = a.u",
        "FROM a JOIN b USING (u)",
        "FROM a JOIN (SELECT u FROM b) d ON a.u = d.u",
    ],
)
def test_unit_columns_of_other_types_are_not_joined(kinds, join):
    con = duckdb.connect()
    con.execute(f"CREATE TABLE a (u {kinds[0]}); CREATE TABLE b (u {kinds[1]})")
    db = privsql.connect(con, budget=10)
    for table in "ab":
        db.protect(table, privacy_unit="u")
    unit = "u" if "USING" in join else "a.u"
    with pytest.raises(privsql.PrivacyError, match="joined between columns of") as refused:
        db.sql(f"SELECT COUNT(*) {join} PRIVACY_UNIT {unit}")
    assert db.budget.spent == 0
    assert "ENUM" not in str(refused.value)


def test_a_unit_near_2_60_moves_a_count_by_one():
    setup = (
        f"CREATE TABLE events AS SELECT {NEAR_2_60} + 1 + i AS u FROM range(255) r(i);"
        f"CREATE TABLE acct AS SELECT {NEAR_2_60} + 1 + i AS u FROM range(255) r(i);"
    )
    hostile = f"INSERT INTO events VALUES ({NEAR_2_60}); INSERT INTO acct VALUES ({NEAR_2_60});"
    query = (
        "SELECT COUNT(*) FROM events e JOIN acct a ON e.u = a.u PRIVACY_UNIT e.u "
        f"BOUND ROWS 1 EPSILON {EPSILON}"
    )
    without, with_unit = answers(setup, hostile, query, {"events": "u", "acct": "u"})
    assert without == pytest.approx(255, abs=0.01)
    assert abs(with_unit - without) <= 1.01


def case_variants(word: str) -> list[str]:
    """Every spelling of ``word`` in upper and lower case but its own."""
    spelt = (
        "".join(c.upper() if bits >> i & 1 else c for i, c in enumerate(word))
        for bits in range(1, 2 ** len(word))
    )
    return sorted(set(spelt))


@pytest.mark.parametrize("collated", ["accts", "both"])
def test_a_collation_does_not_merge_units_in_a_join(collated):
    nocase = "VARCHAR COLLATE NOCASE"
    variants = ", ".join(f"('{v}')" for v in case_variants("victim"))
    setup = (
        f"CREATE TABLE mails (email {nocase if collated == 'both' else 'VARCHAR'});"
        f"CREATE TABLE accts (email {nocase});"
        f"INSERT INTO mails VALUES {variants}, ('other');"
        "INSERT INTO accts VALUES ('other');"
    )
    hostile = "INSERT INTO mails VALUES ('victim'); INSERT INTO accts VALUES ('victim');"
    query = (
        "SELECT COUNT(*) FROM mails m JOIN accts a ON m.email = a.email PRIVACY_UNIT m.email "
        f"BOUND ROWS 1 EPSILON {EPSILON}"
    )
    without, with_unit = answers(setup, hostile, query, {"mails": "email", "accts": "email"})
    assert abs(with_unit - without) <= 1.01


def test_integers_of_other_widths_still_join():
    setup = (
        "CREATE TABLE a AS SELECT i::INTEGER AS u FROM range(40) r(i);"
        "CREATE TABLE b AS SELECT i::UBIGINT AS u FROM range(40) r(i);"
    )
    query = f"SELECT COUNT(*) FROM a JOIN b USING (u) PRIVACY_UNIT u BOUND ROWS 1 EPSILON {EPSILON}"
    hostile = "INSERT INTO a VALUES (40); INSERT INTO b VALUES (40);"
    without, with_unit = answers(setup, hostile, query, {"a": "u", "b": "u"})
    assert without == pytest.approx(40, abs=0.01)
    assert with_unit == pytest.approx(41, abs=0.01)
