"""What a text that is not one privsql query is: a syntax error, or a statement not allowed.

sqlglot reads some malformed text as something else (``FOO BAR`` is a column with an
alias) and cannot read some statements DuckDB knows (``CALL``, ``LOAD``). DuckDB's own
parser decides which statements the text holds: a text it reads as statements other than
SELECT is a statement privsql does not run (``[select-only]``); a text neither parser
reads is a syntax error (``[syntax]``), reported like DuckDB reports it. A parser sees
only the text, never data, so its message quotes nothing but what the analyst typed.
"""

from __future__ import annotations

import re

import duckdb
from sqlglot.errors import ParseError

from rewriter.errors import PrivacyError, QuerySyntaxError, StatementNotAllowed

PRIVSQL_WORDS = re.compile(r"\b(PRIVACY_UNIT|CLAMPED)\b", re.IGNORECASE)
"""Words of privsql's own syntax, which DuckDB's parser does not know."""


def unparsed(sql: str, error: ParseError | None, kind: str = "") -> PrivacyError:
    """The refusal of ``sql``, which sqlglot could not read as one query (``error``), or
    read as a statement (``kind``, e.g. ``DESCRIBE``) or expression that is not a query."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.ParserException as refused:
        message = _duckdb_message(refused)
        if _before_privsql_syntax(message, sql):
            return QuerySyntaxError(message)
        if error is None:  # a statement around privsql syntax: DESCRIBE (SELECT ... PRIVACY_UNIT)
            return StatementNotAllowed(f"{kind} statements are not allowed; only SELECT is")
        return QuerySyntaxError(_sqlglot_message(error))
    if error is None or "SELECT" not in {s.type.name for s in statements}:
        kinds = kind or ", ".join(sorted({s.type.name for s in statements}))
        return StatementNotAllowed(f"{kinds} statements are not allowed; only SELECT is")
    return QuerySyntaxError(_sqlglot_message(error))


def _before_privsql_syntax(message: str, sql: str) -> bool:
    """Whether DuckDB's error is in the part of the text it can read: before any word of
    privsql's own syntax, which DuckDB reports as an error wherever the query is fine."""
    privsql = PRIVSQL_WORDS.search(sql)
    if privsql is None:
        return True
    near = re.search(r'at or near "([^"]*)"', message)
    return near is not None and -1 < sql.find(near[1]) < privsql.start()


def _duckdb_message(error: duckdb.Error) -> str:
    """DuckDB's first line without its ``Parser Error:`` prefix."""
    line = str(error).strip().splitlines()[0]
    return line.split(": ", 1)[1] if line.startswith("Parser Error: ") else line


def _sqlglot_message(error: ParseError) -> str:
    """``syntax error at or near "X"``, where X is, and what was expected when sqlglot says
    it readably (its descriptions that print parser tokens are left out)."""
    if not error.errors:
        return str(error).strip().splitlines()[0]
    found = error.errors[0]
    near = (found.get("highlight") or "").strip()
    where = f'at or near "{near}"' if near else "at the end of the query"
    description = found.get("description") or ""
    readable = f": {description}" if description and "<" not in description else ""
    return f"syntax error {where} (line {found.get('line')}, column {found.get('col')}){readable}"
