"""A fingerprint of the data a query reads, to recognise a re-run on unchanged data.

privsql returns the stored answer, at no cost, when the same query meets the same
data. "The same data" is decided per source, over all of its rows (before WHERE),
from the columns the query reads: a row count and a sum of row hashes. Whether a
whole source changed between two runs is treated as public (like a file's
modification time); nothing finer about any unit is revealed by it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlglot import exp


def fingerprint_sql(
    select: exp.Select,
    sources: Sequence[exp.Table],
    columns: Callable[[str], Sequence[str]],
    unit: exp.Column,
) -> str:
    """One statement returning one row: (rows, hash-sum) per source, in order."""
    read = {c.name.lower() for c in select.find_all(exp.Column)} | {unit.name.lower()}
    parts = []
    for i, source in enumerate(sources):
        bare = source.copy()
        bare.set("alias", None)
        text = bare.sql(dialect="duckdb")
        used = [c for c in columns(text) if c.lower() in read]
        hashed = ", ".join(exp.to_identifier(c, quoted=True).sql() for c in used) or "1"
        parts.append(
            f"(SELECT count(*) || ':' || coalesce(sum(hash({hashed})::HUGEINT), 0) "
            f"FROM {text}) AS s{i}"
        )
    return "SELECT " + ", ".join(parts)
