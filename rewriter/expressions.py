"""Expression nodes that privsql adds to sqlglot's tree.

Two pieces of syntax exist only in privsql SQL: the query-level clause
``PRIVACY_UNIT col [BOUND ...] [MAX_GROUPS g] [EPSILON e] [DELTA d]`` and the
aggregate-argument suffix ``x CLAMPED BETWEEN lo AND hi``. Each is a small
expression class, in the style of sqlglot's own, so the rest of the rewriter can
walk, copy and transform trees that carry them.
"""

from __future__ import annotations

from sqlglot import exp


class Bound(exp.Expression):
    """``BOUND <strategy> [<threshold> | AUTO]``: how one unit's contribution is bounded.

    ``this`` is the strategy name (ROWS, WEIGHTS, CLIP, AUTO); ``threshold`` is a
    number literal, ``AUTO``, or absent.
    """

    arg_types = {"this": True, "threshold": False}

    @property
    def strategy(self) -> str:
        return self.name.upper()


class PrivacyUnit(exp.Expression):
    """The ``PRIVACY_UNIT`` clause: the unit column and the query's privacy options."""

    arg_types = {
        "this": True,
        "bound": False,
        "max_groups": False,
        "epsilon": False,
        "delta": False,
    }


class Clamped(exp.Expression):
    """``x CLAMPED BETWEEN low AND high`` inside an aggregate's arguments.

    For ``QUANTILE(x, p CLAMPED BETWEEN lo AND hi)`` the clamp is written after the
    last argument but bounds the aggregated column; the parser keeps it where it
    was written and the planner interprets it.
    """

    arg_types = {"this": True, "low": True, "high": True}
