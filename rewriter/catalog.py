"""What the rewriter may know about the data: which sources are private, which public.

The session fills a ``Catalog`` from the data owner's declarations (``protect`` and
``public``) and from DuckDB's own catalogue; the rewriter only reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

Bounds = tuple[float, float]


@dataclass(frozen=True)
class Protection:
    """A data owner's declaration for one private table."""

    privacy_unit: str
    bounds: Mapping[str, Bounds] = field(default_factory=dict)
    keys: Mapping[str, Sequence[object]] = field(default_factory=dict)


@dataclass(frozen=True)
class Catalog:
    """Declarations plus a way to list a source's columns.

    ``protected`` and ``public`` are keyed by lower-case table name. Every source that
    is not public is private, declared or not. ``columns`` takes a source's SQL (a
    table name or a table function call) and returns its column names.
    ``aggregates`` names every aggregate function the engine knows, so that an
    aggregate sqlglot does not model is still recognised (and refused).
    """

    protected: Mapping[str, Protection]
    public: frozenset[str]
    columns: Callable[[str], Sequence[str]]
    aggregates: frozenset[str] = frozenset()
    reserved_schema: str = "__privsql"
