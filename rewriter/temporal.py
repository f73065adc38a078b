"""Dates and timestamps as aggregated values: measured as numbers, returned in their type.

privsql's mechanisms add noise to numbers. An AVG, QUANTILE or MEDIAN of a DATE or
TIMESTAMP column, bounded by ``CLAMPED BETWEEN DATE '2013-01-01' AND DATE '2013-12-31'``
(or TIMESTAMP constants), is rewritten in the front end into the same aggregate of a
number — days since 1970-01-01 for a DATE, seconds since 1970-01-01 00:00 UTC (DuckDB's
``epoch``) for a TIMESTAMP or TIMESTAMPTZ — between the bounds' numbers, and the output is
remembered with its type. After the release, as post-processing, the released number is
turned back into the column's type (``restore_sql``); its interval stays in the units it
was measured in: days for a DATE, seconds for a timestamp. SUM of a date has no meaning
(DuckDB has none) and is a type error; a date or timestamp aggregate without CLAMPED
bounds is refused: the owner's declared bounds and BOUND AUTO's estimates are numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sqlglot import exp

from rewriter.catalog import Catalog
from rewriter.dialect import output_name, to_sql
from rewriter.errors import InvalidOption, MissingBounds, UnsupportedQuery
from rewriter.expressions import Clamped
from rewriter.relations import over_from

EPOCH_DATE = "DATE '1970-01-01'"
VALUE = "__privsql_value"
"""Where the aggregated value goes in ``number_sql``'s expression."""
MEASURED = (exp.Avg, exp.Quantile, exp.Median, exp.PercentileCont, exp.PercentileDisc)
"""Aggregates of a value whose answer is a value of the same kind (unlike COUNT)."""


def is_temporal(kind: str) -> bool:
    """Whether a DuckDB type name is a date or a timestamp (with or without time zone)."""
    return kind.upper() == "DATE" or kind.upper().startswith("TIMESTAMP")


def number_sql(value: str, kind: str) -> str:
    """A date or timestamp expression as the number it is measured as."""
    if kind.upper() == "DATE":
        return f"date_diff('day', {EPOCH_DATE}, {value})"
    return f"epoch({value})"


def measure_as_numbers(select: exp.Select, catalog: Catalog) -> dict[str, str]:
    """Rewrite, in place, each output of the query that is a date or timestamp aggregate
    to measure a number between its bounds' numbers; those outputs' types, by output name.

    The types come from binding the aggregated values over the query's FROM (the schema
    only), one statement for all of them, and only for queries with such aggregates."""
    positions = [i for i, item in enumerate(select.expressions) if _aggregate(item.unalias())]
    if not positions:
        return {}
    values = [_value(_aggregate(select.expressions[i].unalias())) for i in positions]
    kinds = _types(select, values, catalog)
    if not any(is_temporal(kind) for kind in kinds):
        return {}
    temporal: dict[str, str] = {}
    written: list[exp.Expr] = []
    for position, kind in zip(positions, kinds, strict=True):
        if is_temporal(kind):
            item = select.expressions[position]
            aggregate = _aggregate(item.unalias())
            written.append(aggregate.copy())
            _measure(aggregate, kind, catalog)
            temporal[output_name(item)] = kind
    _refuse_elsewhere(select, temporal, written)
    return temporal


def restore_sql(temporal: Mapping[str, str], columns: list[str], source: str) -> str | None:
    """A statement over ``source`` (the released table) returning every column, with each
    temporal output turned back from its number into its type; None if there is none."""
    if not any(c in temporal for c in columns):
        return None
    parts = []
    for column in columns:
        name = exp.to_identifier(column, quoted=True).sql(dialect="duckdb")
        kind = temporal.get(column)
        if kind is None:
            parts.append(name)
        elif kind.upper() == "DATE":
            parts.append(f"CAST({EPOCH_DATE} + CAST(round({name}) AS INTEGER) AS DATE) AS {name}")
        elif "TIME ZONE" in kind.upper():
            parts.append(f"to_timestamp({name}) AS {name}")
        else:
            micros = f"CAST(round({name} * 1000000) AS BIGINT)"
            parts.append(f"CAST(make_timestamp({micros}) AS {kind}) AS {name}")
    return f"SELECT {', '.join(parts)} FROM {source}"


def _aggregate(node: exp.Expr) -> exp.Expr | None:
    """The measured aggregate an output is, if it is one by itself."""
    if isinstance(node, exp.WithinGroup) and isinstance(node.this, MEASURED):
        return node
    return node if isinstance(node, MEASURED) else None


REPRESENTABLE = ("'0001-01-01'", "'9999-12-31'")
"""The range of dates a released value must fall in to be returned (Python's, and so
pandas', Arrow's conversions and every client's): bounds outside it are refused."""


def _value(aggregate: exp.Expr) -> exp.Expr:
    """The aggregated value as it stands in the aggregate (inside its clamp, if the clamp
    follows it)."""
    if isinstance(aggregate, exp.WithinGroup):
        value = aggregate.expression.expressions[0].this
    else:
        value = aggregate.this
    return value.this if isinstance(value, Clamped) else value


def _types(select: exp.Select, values: list[exp.Expr], catalog: Catalog) -> list[str]:
    """The DuckDB types of row-level expressions of the query, by binding them over its
    FROM (the schema only: no row is read)."""
    typed = over_from(select, values)
    kinds = catalog.types(typed.sql(dialect="duckdb"))
    return kinds if len(kinds) == len(values) else ["" for _ in values]


def _measure(aggregate: exp.Expr, kind: str, catalog: Catalog) -> None:
    """Rewrite one aggregate, in place, to measure its value as a number between the
    numbers of its bounds."""
    name = to_sql(aggregate).split("(", 1)[0].upper()
    clamp = next(iter(aggregate.find_all(Clamped)), None)
    if clamp is None:
        raise MissingBounds(
            f"{name} of a {kind} needs bounds of its type: write "
            f"{name}(x CLAMPED BETWEEN {kind} '...' AND {kind} '...')"
        )
    for bound in (clamp.args["low"], clamp.args["high"]):
        if not _constant(bound):
            raise InvalidOption(
                f"the bounds of {name} must be constants ({kind} '...'): they are public "
                "parameters of the query, never computed from data"
            )
    bounds = [clamp.args["low"].sql(dialect="duckdb"), clamp.args["high"].sql(dialect="duckdb")]
    *numbers, first, last = catalog.evaluate(
        "SELECT "
        + ", ".join(number_sql(f"CAST({b} AS {kind})", kind) for b in [*bounds, *REPRESENTABLE])
    )[0]
    if any(n is None or not math.isfinite(n) or not first <= n <= last for n in numbers):
        raise InvalidOption(
            f"the bounds of {name} must be dates or timestamps between the years 1 and 9999"
        )
    clamp.set("low", exp.Literal.number(repr(float(numbers[0]))))
    clamp.set("high", exp.Literal.number(repr(float(numbers[1]))))
    value = _value(aggregate)
    measured = exp.maybe_parse(number_sql(VALUE, kind), dialect="duckdb")
    value.replace(
        measured.transform(
            lambda n: value.copy() if isinstance(n, exp.Column) and n.name == VALUE else n
        )
    )


def _constant(bound: exp.Expr) -> bool:
    """A date or timestamp constant as analysts write one: a string, optionally cast
    (``DATE '2013-01-01'``, ``'2013-01-01'::TIMESTAMP``) — nothing that could read data."""
    node = bound.this if isinstance(bound, exp.Cast) else bound
    return isinstance(node, exp.Literal) and node.is_string


def _refuse_elsewhere(
    select: exp.Select, temporal: Mapping[str, str], written: list[exp.Expr]
) -> None:
    """A date or timestamp aggregate is released as an output by itself, and may be
    ordered by: in HAVING or in an expression, post-processing would see a number where
    it expects a date. ``written`` are those aggregates as the analyst wrote them (an
    output's alias in HAVING is already replaced by its aggregate)."""
    having = select.args.get("having")
    if having is not None and any(node in written for node in having.walk()):
        raise UnsupportedQuery(
            "a date or timestamp aggregate cannot be used in HAVING: "
            "filter the result after it is returned"
        )
    order = select.args.get("order")
    ordered = [o.this for o in order.expressions] if order is not None else []
    for arg in ("having", "order"):
        node = select.args.get(arg)
        for column in node.find_all(exp.Column) if node is not None else ():
            if column.table or column.name not in temporal or column in ordered:
                continue
            raise UnsupportedQuery(
                f"the date or timestamp output {column.name} can only be ordered by, not "
                f"used in {arg.upper()} expressions: filter the result after it is returned"
            )
