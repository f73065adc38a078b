"""The privsql SQL dialect: DuckDB SQL plus the ``PRIVACY_UNIT`` clause and ``CLAMPED``.

The dialect is data on top of sqlglot's DuckDB dialect: one clause parser and two
generator entries. ``PRIVACY_UNIT`` may stand anywhere among a SELECT's modifiers
after FROM (before or after WHERE, GROUP BY, HAVING, ORDER BY, LIMIT); it is kept
in the SELECT's ``privacy`` arg and generated after HAVING. The clause words are
reserved where they start the clause: ``PRIVACY_UNIT`` followed by a name is never read
as a column or an implicit alias, so ``FROM t PRIVACY_UNIT u`` and ``GROUP BY ALL
PRIVACY_UNIT u`` mean the clause, while ``SELECT privacy_unit, x`` reads a column.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import ParseError
from sqlglot.generator import Generator
from sqlglot.generators.duckdb import DuckDBGenerator
from sqlglot.parsers.duckdb import DuckDBParser
from sqlglot.tokens import TokenType

from rewriter.expressions import Bound, Clamped, PrivacyUnit

CLAUSE = "PRIVACY_UNIT"
STRATEGIES = ("ROWS", "WEIGHTS", "CLIP", "AUTO")
OPTIONS = ("BOUND", "MAX_GROUPS", "EPSILON", "DELTA")


class PrivSQLParser(DuckDBParser):
    """DuckDB's parser, taught the privacy clause and clamped aggregate arguments."""

    def _at_clause_word(self) -> bool:
        token = self._curr
        return bool(token) and token.token_type == TokenType.VAR and token.text.upper() == CLAUSE

    def _at_clause(self) -> bool:
        """``PRIVACY_UNIT`` followed by a name starts the clause; alone it may be a column."""
        following = self._next
        return (
            self._at_clause_word()
            and bool(following)
            and following.token_type in self.ID_VAR_TOKENS
        )

    def _parse_table_alias(self, alias_tokens=None):  # type: ignore[no-untyped-def]
        return None if self._at_clause_word() else super()._parse_table_alias(alias_tokens)

    def _parse_alias(self, this, explicit=False):  # type: ignore[no-untyped-def]
        return this if self._at_clause_word() else super()._parse_alias(this, explicit)

    def _parse_column(self):  # type: ignore[no-untyped-def]
        return None if self._at_clause() else super()._parse_column()

    def _parse_query_modifiers(self, this):  # type: ignore[no-untyped-def]
        this = super()._parse_query_modifiers(this)
        while isinstance(this, exp.Select) and self._at_clause_word():
            self._advance()
            if this.args.get("privacy"):
                self.raise_error(f"Found multiple '{CLAUSE}' clauses")
            this.set("privacy", self._parse_privacy_unit())
            this = super()._parse_query_modifiers(this)
        return this

    def _parse_privacy_unit(self) -> PrivacyUnit:
        unit = self._parse_column()
        if not isinstance(unit, exp.Column) or isinstance(unit.this, exp.Star):
            self.raise_error(f"{CLAUSE} needs a column")
        clause = PrivacyUnit(this=unit)
        while self._curr and self._curr.text.upper() in OPTIONS:
            option = self._curr.text.upper()
            self._advance()
            key = option.lower()
            if clause.args.get(key) is not None:
                raise ParseError(f"{option} given twice in {CLAUSE}")
            if option == "BOUND":
                clause.set(key, self._parse_bound())
            elif option == "MAX_GROUPS" and self._match_text_seq("AUTO"):
                clause.set(key, exp.var("AUTO"))  # as if not given: chosen privately
            else:
                clause.set(key, self._parse_number())
        return clause

    def _parse_bound(self) -> Bound:
        strategy = self._curr.text.upper() if self._curr else ""
        if strategy not in STRATEGIES:
            self.raise_error(f"BOUND takes one of {', '.join(STRATEGIES)}")
        self._advance()
        threshold: exp.Expr | None = None
        if strategy in ("ROWS", "WEIGHTS"):
            if self._match_text_seq("AUTO"):
                threshold = exp.var("AUTO")
            else:
                threshold = self._parse_number()
        return Bound(this=exp.var(strategy), threshold=threshold)

    def _parse_number(self) -> exp.Expr:
        negative = self._match(TokenType.DASH)
        if not self._match(TokenType.NUMBER):
            self.raise_error("expected a number")
        number = exp.Literal.number(self._prev.text)
        return exp.Neg(this=number) if negative else number

    def _parse_lambda(self, alias: bool = False):  # type: ignore[no-untyped-def]
        this = super()._parse_lambda(alias=alias)
        if this is not None and self._match_text_seq("CLAMPED", "BETWEEN"):
            low = self._parse_bitwise()
            self._match(TokenType.AND)
            high = self._parse_bitwise()
            if low is None or high is None:
                self.raise_error("CLAMPED BETWEEN needs two bounds")
            this = Clamped(this=this, low=low, high=high)
        return this


def _privacy_unit_sql(self: DuckDBGenerator, clause: PrivacyUnit) -> str:
    parts = [f"{CLAUSE} {self.sql(clause, 'this')}"]
    for option in OPTIONS:
        value = clause.args.get(option.lower())
        if value is not None:
            parts.append(self.sql(value) if option == "BOUND" else f"{option} {self.sql(value)}")
    return " ".join(parts)


def _bound_sql(self: DuckDBGenerator, bound: Bound) -> str:
    threshold = self.sql(bound, "threshold")
    return f"BOUND {bound.strategy}" + (f" {threshold}" if threshold else "")


def _clamped_sql(self: DuckDBGenerator, clamped: Clamped) -> str:
    return (
        f"{self.sql(clamped, 'this')} CLAMPED BETWEEN "
        f"{self.sql(clamped, 'low')} AND {self.sql(clamped, 'high')}"
    )


class PrivSQLGenerator(DuckDBGenerator):
    """DuckDB's generator, able to print the privacy clause and clamps back."""

    TRANSFORMS = {
        **DuckDBGenerator.TRANSFORMS,
        PrivacyUnit: _privacy_unit_sql,
        Bound: _bound_sql,
        Clamped: _clamped_sql,
    }

    def withingroup_sql(self, expression: exp.WithinGroup) -> str:
        """Keep ``PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY x)`` as written (DuckDB's
        generator rewrites it to QUANTILE_CONT, which reads back as another tree)."""
        return Generator.withingroup_sql(self, expression)

    AFTER_HAVING_MODIFIER_TRANSFORMS = {
        **DuckDBGenerator.AFTER_HAVING_MODIFIER_TRANSFORMS,
        "privacy": lambda self, e: (
            self.seg(self.sql(e, "privacy")) if e.args.get("privacy") else ""
        ),
    }


class PrivSQL(DuckDB):
    """DuckDB SQL with privsql's clause; registered with sqlglot as ``privsql``."""

    Parser = PrivSQLParser
    Generator = PrivSQLGenerator


_PRIVSQL = PrivSQL()
"""The one instance ``to_sql`` prints with: ``node.sql(dialect=PrivSQL)`` makes a new
dialect per call (a tenth of a small node's printing; a query prints some twenty)."""


def to_sql(node: exp.Expr, *, copy: bool = True) -> str:
    """The node as privsql SQL: the canonical text used to compare and cache queries.

    sqlglot's generator may change the tree it prints, so it prints a copy; ``copy=False``
    is for a tree made only to be printed here (no copy: most of a large tree's cost)."""
    return _PRIVSQL.generate(node, copy=copy)


def output_name(item: exp.Expr) -> str:
    """The name DuckDB would give a select item: its alias, column name, or text."""
    return item.alias_or_name if isinstance(item, (exp.Alias, exp.Column)) else to_sql(item)


def written(node: exp.Expr) -> str:
    """A resolved expression as an analyst would write it: columns without their FROM item."""
    bare = node.transform(
        lambda n: exp.column(n.name, quoted=n.this.quoted)
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star)
        else n
    )
    return to_sql(bare)
