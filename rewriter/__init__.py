"""privsql's rewriter: the SQL dialect, analysis, planning and generation.

It knows SQL and nothing of noise: a query is parsed (``dialect``), resolved so that every
name has one meaning (``resolve``: scoped CTE names, one identity per source, stars and
column lists expanded, every column qualified), checked (``analyze``, ``relations``, the
row-level allow-list in ``functions``), planned (``plan``) and generated (``generate``) as
DuckDB statements that bound each unit's contribution and call release functions whose
names the caller gives. ``compile_query`` (``compiler``) is the one entry point after
analysis: it takes the private decisions made so far as data and returns the next search
statement to decide from, or the release.
"""

from rewriter.analyze import Analysis, PublicQuery, analyze, parse
from rewriter.catalog import Catalog, Protection
from rewriter.compiler import Compiled, Decided, Search, compile_all, compile_query
from rewriter.dialect import PrivSQL, to_sql
from rewriter.generate import Functions, generate
from rewriter.plan import Plan, plan

__all__ = [
    "Analysis",
    "Catalog",
    "Compiled",
    "Decided",
    "Functions",
    "Plan",
    "PrivSQL",
    "Protection",
    "PublicQuery",
    "Search",
    "analyze",
    "compile_all",
    "compile_query",
    "generate",
    "parse",
    "plan",
    "to_sql",
]
