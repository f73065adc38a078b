"""privsql: differentially private SQL over DuckDB tables and Parquet files.

import privsql
db = privsql.connect("shop.duckdb", budget=3.0)
db.protect("orders", privacy_unit="user_id", bounds={"amount": (0, 500)})
db.sql("SELECT COUNT(*) FROM orders PRIVACY_UNIT user_id BOUND ROWS 10").df()
"""

from privsql.explain import Suggestion
from privsql.ledger import BudgetExceeded, Charge
from privsql.magic import load_ipython_extension
from privsql.result import Result
from privsql.session import Budget, Explanation, Session, connect
from rewriter.errors import (
    ChargedFailure,
    InvalidOption,
    InvalidPrivacyUnit,
    MissingBounds,
    MissingPrivacyUnit,
    NonDPAggregate,
    NonPrivateOutput,
    PostProcessingError,
    PrivacyError,
    QuerySyntaxError,
    StatementNotAllowed,
    TypeMismatch,
    UnknownName,
    UnsupportedQuery,
)

__all__ = [
    "Budget",
    "BudgetExceeded",
    "Charge",
    "ChargedFailure",
    "Explanation",
    "InvalidOption",
    "InvalidPrivacyUnit",
    "MissingBounds",
    "MissingPrivacyUnit",
    "NonDPAggregate",
    "NonPrivateOutput",
    "PostProcessingError",
    "PrivacyError",
    "QuerySyntaxError",
    "Result",
    "Session",
    "StatementNotAllowed",
    "Suggestion",
    "TypeMismatch",
    "UnknownName",
    "UnsupportedQuery",
    "connect",
    "load_ipython_extension",
]
