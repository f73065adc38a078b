"""What a statement reads as DuckDB binds it: views, macros and subqueries expanded.

The analyser classifies a query as public from its text: it names only public tables, and
calls only allow-listed functions (``rewriter.functions``). A query over public data then
runs as written, so anything in it that DuckDB binds to more than its text shows (a macro
whose body reads a private table, a view, a function that reads the catalogue) would
answer exactly and for free (red teams 15-18). This is the second, independent check:
DuckDB's own bound plan of the statement (``json_serialize_plan``, which binds and reads no
row) must scan only public tables — a public view's tables included — and no table
function but those that compute from their arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import duckdb
from sqlglot import exp

from rewriter.catalog import identity
from rewriter.errors import MissingPrivacyUnit, UnsupportedQuery

TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
"""Table functions a query over public data may read: each computes rows from its
arguments alone (which the analyser checked)."""


def check_public_reads(
    con: duckdb.DuckDBPyConnection, statement: str, public: Iterable[str], database: str
) -> None:
    """Refuse ``statement`` unless every table DuckDB binds it to scan is a ``public`` one
    (identities), and every table function is one of ``TABLE_FUNCTIONS``.

    A public view is bound to the tables it reads, so they must be public too: what a view
    declared public scans is not public by the owner's word (a view over a private table
    answered its rows exactly, for free: red team 34)."""
    if not _reads(con, statement, database) <= set(TABLE_FUNCTIONS) | set(public):
        raise MissingPrivacyUnit(
            "the query reads private data as the database binds it (a view, macro or "
            "function reading other tables): add PRIVACY_UNIT <column>"
        )


def _reads(con: duckdb.DuckDBPyConnection, statement: str, database: str) -> set[str]:
    """The tables (by catalogue identity) and table functions (by name) ``statement``
    scans, wherever they are in its plan."""
    rows = con.execute("SELECT json_serialize_plan(?, optimize := false)", [statement]).fetchall()
    plan = json.loads(rows[0][0])
    if plan.get("error"):
        raise UnsupportedQuery(f"the query does not bind: {plan.get('error_message', '')}")
    return set(_scans(plan["plans"], database))


def _scans(node: object, database: str) -> Iterator[str]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if item.get("type") == "LOGICAL_GET":
                yield _scanned(item, database)
            stack.extend(item.values())


def _scanned(get: dict, database: str) -> str:
    data = get.get("function_data")
    if isinstance(data, dict) and "table" in data:
        table = exp.table_(data["table"], db=data.get("schema"), catalog=data.get("catalog"))
        return identity(table, database)
    return get["qname"]["path"][-1].lower()
