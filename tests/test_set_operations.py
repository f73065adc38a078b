"""Set operations over private data are refused (SPEC: "window functions, DISTINCT, set
operations ... over private data"), in every spelling, for nothing, with the same message
with or without any one unit; set operations of public rows stay usable, and a public one
joined to private rows has its fan-out counted through parenthesised operands."""

from __future__ import annotations

import pytest
import test_ir
from test_ir import PLANTED

import privsql
from privsql import PrivacyError, UnsupportedQuery

con = test_ir.con
"""test_ir's tables: ``visits`` (unit ``user_id``, a heavy unit of planted notes),
``orders`` (unit ``uid``) and public ``sites``."""
db = test_ir.db

VISITS = "SELECT user_id, site FROM visits"
ORDERS = "SELECT uid, total % 5 AS site FROM orders"
PRIVATE = {
    "UNION ALL": f"{VISITS} UNION ALL {ORDERS}",
    "UNION": f"{VISITS} UNION {ORDERS}",
    "INTERSECT": f"{VISITS} INTERSECT {ORDERS}",
    "INTERSECT ALL": f"{VISITS} INTERSECT ALL {VISITS} WHERE site > 2",
    "EXCEPT": f"{VISITS} EXCEPT {ORDERS}",
    "EXCEPT ALL": f"{VISITS} EXCEPT ALL {ORDERS}",
    "nested": f"{VISITS} UNION ALL ({ORDERS} EXCEPT {VISITS} WHERE site = 1)",
    "nested first": f"({VISITS} EXCEPT {ORDERS}) UNION ALL {ORDERS}",
    "by name": f"{VISITS} UNION ALL BY NAME SELECT uid AS user_id, total AS site FROM orders",
    "a unit swap": f"{VISITS} UNION ALL SELECT site, user_id FROM visits",
    "with a public branch": f"{VISITS} UNION ALL SELECT site, site FROM sites",
    "per unit": (
        "SELECT user_id, COUNT(*) AS n FROM visits GROUP BY user_id "
        "UNION ALL SELECT uid, COUNT(*) FROM orders GROUP BY uid"
    ),
}


@pytest.mark.parametrize("name", PRIVATE)
@pytest.mark.parametrize("place", ["derived table", "CTE"])
def test_a_set_operation_over_private_rows_is_refused(
    db: privsql.Session, name: str, place: str
) -> None:
    body = PRIVATE[name]
    if place == "CTE":
        sql = f"WITH u AS ({body}) SELECT COUNT(*) FROM u PRIVACY_UNIT user_id EPSILON 0.5"
    else:
        sql = f"SELECT COUNT(*) FROM ({body}) AS u PRIVACY_UNIT user_id EPSILON 0.5"
    with pytest.raises(UnsupportedQuery) as refused:
        db.sql(sql)
    assert "set operation" in str(refused.value) or "UNION" in str(refused.value).upper()
    assert PLANTED not in str(refused.value)
    assert db.budget.spent == 0


def test_the_refusal_is_the_same_without_the_heavy_unit(con, db: privsql.Session) -> None:
    sql = f"SELECT COUNT(*) FROM ({PRIVATE['UNION ALL']}) AS u PRIVACY_UNIT user_id EPSILON 0.5"
    messages = []
    for remove in (False, True):
        if remove:
            con.execute("DELETE FROM visits WHERE note = ?", [PLANTED])
        with pytest.raises(UnsupportedQuery) as refused:
            db.sql(sql)
        messages.append(str(refused.value))
    assert messages[0] == messages[1]


def test_a_set_operation_of_public_rows_joined_to_private_rows_is_answered(
    db: privsql.Session,
) -> None:
    sql = (
        "SELECT COUNT(*) AS n FROM visits AS v JOIN (SELECT site FROM sites UNION "
        "SELECT site FROM sites) AS s ON v.site = s.site PRIVACY_UNIT user_id EPSILON 0.5"
    )
    assert len(db.sql(sql)) == 1


def test_a_parenthesised_operand_of_a_public_set_operation_has_its_fan_out_counted(
    db: privsql.Session,
) -> None:
    """A public table function inside a parenthesised operand repeats each private row
    1,000 times: counted there as anywhere else, and refused (it was counted as one row)."""
    sql = (
        "SELECT COUNT(*) FROM visits AS v, (SELECT site FROM sites UNION ALL "
        "(SELECT i AS site FROM range(1000) AS r(i) UNION ALL SELECT site FROM sites)) AS p "
        "PRIVACY_UNIT user_id EPSILON 0.5"
    )
    with pytest.raises(PrivacyError, match="repeat each one"):
        db.sql(sql)
    assert db.budget.spent == 0
