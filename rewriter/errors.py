"""Refusals: every query privsql will not run raises a subclass of ``PrivacyError``.

Messages name the rule that was broken and the offending *SQL* (column names,
function names, option values the analyst typed); they never contain values read
from private data, because refusals happen before any data is read.
"""

from __future__ import annotations


class PrivacyError(Exception):
    """A query or call that privsql refuses; no ε is charged for it (but for
    ``ChargedFailure``, a failure after private data was read)."""

    rule = "privacy"

    def __init__(self, message: str) -> None:
        super().__init__(f"[{self.rule}] {message}")


class QuerySyntaxError(PrivacyError):
    """The text is not a single well-formed privsql SELECT."""

    rule = "syntax"


class UnknownName(PrivacyError):
    """A table, column or function the query names does not exist or is ambiguous."""

    rule = "unknown-name"


class TypeMismatch(PrivacyError):
    """Types that do not fit (a number compared with text), decided from the schema alone."""

    rule = "type"


class StatementNotAllowed(PrivacyError):
    """Anything but one SELECT: DDL, DML, COPY, ATTACH, PRAGMA, SET, set operations, ..."""

    rule = "select-only"


class MissingPrivacyUnit(PrivacyError):
    """Private data is read without a ``PRIVACY_UNIT`` clause."""

    rule = "privacy-unit-required"


class InvalidPrivacyUnit(PrivacyError):
    """The unit is not a column of the private source, or not the one its owner declared."""

    rule = "privacy-unit"


class InvalidOption(PrivacyError):
    """An ε, δ, BOUND or MAX_GROUPS value that is not allowed."""

    rule = "option"


class NonPrivateOutput(PrivacyError):
    """An output that is neither a DP aggregate, a GROUP BY key, nor post-processing of those."""

    rule = "output"


class NonDPAggregate(PrivacyError):
    """An aggregate with no differentially private mechanism (MIN, MAX, LIST, ...)."""

    rule = "aggregate"


class MissingBounds(PrivacyError):
    """A SUM or AVG whose values are not bounded by CLAMPED BETWEEN or by the data owner."""

    rule = "bounds"


class UnsupportedQuery(PrivacyError):
    """A query shape privsql does not (yet) know how to answer privately."""

    rule = "unsupported"


class PostProcessingError(PrivacyError):
    """The analyst's post-processing failed on released values (after they were charged)."""

    rule = "post-processing"


class ChargedFailure(PrivacyError):
    """A query failed after it had read private data (its searches or its release ran): its
    ε was charged, as for an answer, and nothing was released. Whether it fails may depend
    on the data (or on noise drawn from it), so it may not be free to ask again."""

    rule = "failed"

    def __init__(self, epsilon: float, delta: float) -> None:
        super().__init__(
            "the query failed after reading private data: its ε was charged and nothing "
            "was released"
        )
        self.epsilon = epsilon
        self.delta = delta

