"""A fingerprint of the data a query reads, to recognise a re-run on unchanged data.

privsql returns the stored answer, at no cost, when the same query meets the same
data. "The same data" is decided per source, over all of its rows (before WHERE),
from the columns the query reads: a row count and a sum of row hashes — or, for files
the caller can name without reading them, their identities (``known``: each file's
device, inode, size, modification and change times, and how they are read). Whether a
whole source changed between two runs is treated as public (like a file's modification
time); nothing finer about any unit is revealed by it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sqlglot import exp

from rewriter.catalog import Catalog
from rewriter.dialect import to_sql
from rewriter.resolve import IDENTITY


def fingerprint_sql(
    select: exp.Select,
    sources: Sequence[exp.Table],
    catalog: Catalog,
    unit: exp.Column,
    known: Mapping[int, str] | None = None,
) -> str:
    """One statement returning one row: (rows, hash-sum) per source, in order, each read
    as the generated SQL reads it (``Catalog.read``) — but the sources ``known`` gives a
    fingerprint for (by position), which read none of their rows. A stored-answer re-run
    of a selective query on 5M rows of Parquet cost a whole scan (120 ms) for this."""
    read = {c.name.lower() for c in select.find_all(exp.Column)} | {unit.name.lower()}
    parts = []
    for i, source in enumerate(sources):
        if known and i in known:
            parts.append(f"{exp.Literal.string(known[i]).sql(dialect='duckdb')} AS s{i}")
            continue
        bare = source.copy()
        bare.set("alias", None)
        used = [c for c in catalog.columns(bare.sql(dialect="duckdb")) if c.lower() in read]
        hashed = ", ".join(exp.to_identifier(c, quoted=True).sql() for c in used) or "1"
        parts.append(
            f"(SELECT count(*) || ':' || coalesce(sum(hash({hashed})::HUGEINT), 0) "
            f"FROM {catalog.read(bare).sql(dialect='duckdb')}) AS s{i}"
        )
    return "SELECT " + ", ".join(parts)


def answer_spelling(select: exp.Select) -> Callable[[exp.Expr], str]:
    """A printer of the nodes of one analysed query in a spelling shared by every way of
    writing it, for the key of its stored answer: the same question asked in another case,
    with other whitespace or comments, other output aliases or other table aliases costs once.

    The query is already parsed (keywords and whitespace are gone) and resolved (every
    column is qualified by its FROM item, every base source carries its catalogue
    identity). The printer then writes each base source as its identity (``FLIGHTS``,
    ``main.flights`` and ``flights`` are one table), every table alias as ``__tN`` in order
    of first appearance, every output alias of the outermost SELECT — and each reference
    to it in ORDER BY, HAVING, QUALIFY or a later output — as ``__outN`` by position, and
    every identifier in lower case (DuckDB's identifiers are case-insensitive, quoted or
    not). Each renaming is one-to-one, so two texts that print alike are one query up to
    names: constants, ε, bounds and keys are printed as they are.
    """
    tables: dict[str, str] = {}
    for alias in select.find_all(exp.TableAlias):
        if not isinstance(alias.parent, exp.CTE):  # CTE names are already __cte_N
            tables.setdefault(alias.name.lower(), f"__t{len(tables)}")
    outputs = {
        item.alias.lower(): f"__out{i}" for i, item in enumerate(select.expressions) if item.alias
    }

    def spelt(node: exp.Expr) -> str:
        root = node.copy()
        outer = root if node is select else None
        for part in list(root.walk()):
            part.comments = None  # a comment is whitespace to the question
            _respell(part, tables, outputs if outer is not None else {}, outer)
        return to_sql(root, copy=False)  # root is a copy already

    return spelt


def _respell(
    node: exp.Expr, tables: dict[str, str], outputs: dict[str, str], outer: exp.Expr | None
) -> None:
    """One node of ``answer_spelling``'s printing, changed in place."""
    if isinstance(node, exp.Table) and IDENTITY in node.meta:
        for part in ("db", "catalog"):
            node.set(part, None)
        node.set("this", exp.Literal.string(node.meta[IDENTITY]))  # file paths keep their case
    elif isinstance(node, exp.TableAlias) and not isinstance(node.parent, exp.CTE):
        node.set("this", exp.to_identifier(tables.get(node.name.lower(), node.name)))
    elif isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
        if node.table:
            node.set("table", exp.to_identifier(tables.get(node.table.lower(), node.table)))
        elif node.name.lower() in outputs and node.find_ancestor(exp.Select) is outer:
            node.set("this", exp.to_identifier(outputs[node.name.lower()]))
    elif isinstance(node, exp.Alias) and outer is not None and node.parent is outer:
        node.set("alias", exp.to_identifier(outputs[node.alias.lower()]))
    elif isinstance(node, exp.Identifier):
        node.set("this", node.name.lower())
        node.set("quoted", False)
