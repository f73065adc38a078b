"""privsql's rewriter: the SQL dialect, analysis, planning and generation.

It knows SQL and nothing of noise: a query goes ``analyze`` → ``plan`` → ``generate``
and comes out as one DuckDB statement that bounds each unit's contribution and calls
release functions whose names the caller gives.
"""

from rewriter.analyze import Analysis, PublicQuery, analyze, parse
from rewriter.catalog import Catalog, Protection
from rewriter.dialect import PrivSQL, to_sql
from rewriter.generate import Functions, generate
from rewriter.plan import Plan, plan

__all__ = [
    "Analysis",
    "Catalog",
    "Functions",
    "Plan",
    "PrivSQL",
    "Protection",
    "PublicQuery",
    "analyze",
    "generate",
    "parse",
    "plan",
    "to_sql",
]
