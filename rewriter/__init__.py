"""privsql's rewriter: the SQL dialect, analysis, planning and generation.

It knows SQL and nothing of noise: a query is parsed (``dialect``), resolved so that every
name has one meaning (``resolve``: scoped CTE names, one identity per source, stars and
column lists expanded, every column qualified), checked (``analyze``, ``relations``, the
row-level allow-list in ``functions``), planned (``plan``) and generated (``generate``) as
DuckDB statements that bound each unit's contribution and call release functions whose
names the caller gives.
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
