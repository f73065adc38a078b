"""SQLSTATE codes of privsql's refusals, so PostgreSQL clients see them as ordinary errors.

Classes ``42`` (syntax error or access rule violation), ``22`` (data exception), ``0A``
(feature not supported), ``53`` (insufficient resources) and ``XX`` (internal error) are
PostgreSQL's own; a privacy refusal with no PostgreSQL equivalent gets a code in class
``PV``, a class PostgreSQL leaves to implementations (it starts with a letter past ``H``).
docs/serving.md lists the map.
"""

from __future__ import annotations

from privsql.ledger import BudgetExceeded, LedgerCorrupted
from rewriter.errors import PrivacyError, UnknownName

BY_RULE = {
    "syntax": "42601",  # syntax_error
    "type": "42804",  # datatype_mismatch
    "select-only": "42501",  # insufficient_privilege: analysts may only read
    "option": "22023",  # invalid_parameter_value
    "unsupported": "0A000",  # feature_not_supported
    "busy": "40001",  # serialization_failure: try again
    "canceled": "57014",  # query_canceled: a public query's time limit or a cancel request
    "privacy-unit-required": "PV001",
    "privacy-unit": "PV002",
    "output": "PV003",
    "aggregate": "PV004",
    "bounds": "PV005",
    "post-processing": "PV006",
    "failed": "PV007",  # the query failed after reading private data: charged
    "privacy": "PV000",
}
"""SQLSTATE by ``PrivacyError.rule``; other kinds are decided in ``sqlstate``."""

BUDGET = "53000"  # insufficient_resources: the budget is what ran out
LEDGER = "XX001"  # data_corrupted
UNDEFINED_TABLE = "42P01"
UNDEFINED_COLUMN = "42703"
UNDEFINED_FUNCTION = "42883"
INVALID_PASSWORD = "28P01"
PROTOCOL_VIOLATION = "08P01"
TOO_MANY_CONNECTIONS = "53300"
PROGRAM_LIMIT = "54000"  # program_limit_exceeded: a message too large
INTERNAL = "XX000"
UNRECOGNIZED_PARAMETER = "42704"  # undefined_object: SHOW of an unknown setting


def sqlstate(error: PrivacyError) -> str:
    """The SQLSTATE of a privsql refusal."""
    if isinstance(error, BudgetExceeded):
        return BUDGET
    if isinstance(error, LedgerCorrupted):
        return LEDGER
    if isinstance(error, UnknownName):
        # The analyser names what is unknown first: "table t does not exist", or DuckDB's
        # binder message about a column or a function.
        text = str(error).lower()
        if "table" in text.split(" does not exist")[0].split()[:3]:
            return UNDEFINED_TABLE
        if "function" in text:
            return UNDEFINED_FUNCTION
        return UNDEFINED_COLUMN
    return BY_RULE.get(error.rule, BY_RULE["privacy"])
