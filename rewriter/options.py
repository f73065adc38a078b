"""The privacy options of one query, read from its ``PRIVACY_UNIT`` clause and checked.

Invalid values (zero, negative, NaN, infinite, non-integer caps) are refused here,
before anything else happens; duplicated options are refused by the parser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlglot import exp

from rewriter.errors import InvalidOption
from rewriter.expressions import PrivacyUnit

AUTO = "AUTO"


@dataclass(frozen=True)
class PrivacyOptions:
    """What the clause asks for; ``None`` means "use the session's default"."""

    unit: exp.Column
    strategy: str | None
    threshold: int | str | None
    max_groups: int | None
    """MAX_GROUPS g, or None: chosen privately (MAX_GROUPS AUTO, the default)."""
    epsilon: float | None
    delta: float | None


def _number(node: exp.Expr, option: str) -> float:
    if isinstance(node, exp.Neg):
        return -_number(node.this, option)
    if isinstance(node, exp.Literal) and not node.is_string:
        return float(node.this)
    raise InvalidOption(f"{option} must be a number")


def _positive(node: exp.Expr | None, option: str) -> float | None:
    if node is None:
        return None
    value = _number(node, option)
    if not math.isfinite(value) or value < SMALLEST:
        raise InvalidOption(f"{option} must be a finite number of at least {SMALLEST:g}")
    return value


SMALLEST = 1e-9
"""The smallest ε or δ a query may ask for: below it a charge is lost to float rounding
in the ledger's sums (and the answer is noise)."""


LARGEST_CAP = 2**31 - 1
"""Row and group caps above this are refused: they bound nothing and would overflow."""


def _count(node: exp.Expr | None, option: str) -> int | None:
    value = _positive(node, option)
    if value is None:
        return None
    if value != int(value) or value > LARGEST_CAP:
        raise InvalidOption(f"{option} must be a whole number from 1 to {LARGEST_CAP}")
    return int(value)


def _unless_auto(node: exp.Expr | None) -> exp.Expr | None:
    """An option's value, or None where it says AUTO (the default: chosen privately)."""
    return None if isinstance(node, exp.Var) else node


def read_options(clause: PrivacyUnit) -> PrivacyOptions:
    """Turn the parsed clause into checked options."""
    bound = clause.args.get("bound")
    strategy = bound.strategy if bound is not None else None
    threshold: int | str | None = None
    if bound is not None and bound.args.get("threshold") is not None:
        node = bound.args["threshold"]
        if isinstance(node, exp.Var):
            threshold = AUTO
        else:
            threshold = _count(node, f"BOUND {strategy}")
    delta = _positive(clause.args.get("delta"), "DELTA")
    if delta is not None and delta >= 1:
        raise InvalidOption("DELTA must be smaller than 1")
    return PrivacyOptions(
        unit=clause.this,
        strategy=strategy,
        threshold=threshold,
        max_groups=_count(_unless_auto(clause.args.get("max_groups")), "MAX_GROUPS"),
        epsilon=_positive(clause.args.get("epsilon"), "EPSILON"),
        delta=delta,
    )
