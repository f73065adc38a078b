"""What the rewriter may know about the data: which sources are private, which public.

The session fills a ``Catalog`` from the data owner's declarations (``protect`` and
``public``) and from DuckDB's own catalogue; the rewriter only reads it. Every source has
one *identity* (``identity``): a table's name without the default catalogue and schema,
its ASCII capitals lower-cased as DuckDB compares names (``t``, ``main.t``, ``"T"`` and
``memory.main.t`` are all ``t``), each part quoted where it holds a dot or a quote so that
two sources never share one; or a file reader's absolute paths. Declarations are keyed
by it.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from rewriter.errors import InvalidPrivacyUnit, StatementNotAllowed, UnsupportedQuery
from rewriter.files import Schema

Bounds = tuple[float, float]
FILE = "file:"


ENUM = re.compile(r"ENUM\((?:\s*'(?:[^']|'')*'\s*,?)*\s*\)", re.IGNORECASE)
"""An ENUM type with its member list, wherever it stands in a type (a list's, a STRUCT's)."""


def public_type(kind: str) -> str:
    """A column's type as privsql shows or stands it in: an ENUM's member list is drawn
    from data (``CREATE TYPE … AS ENUM (SELECT DISTINCT …)``, a pandas Categorical), so
    every ENUM in it, nested ones included, is VARCHAR."""
    return ENUM.sub("VARCHAR", kind)


@dataclass(frozen=True)
class Protection:
    """A data owner's declaration for one private table."""

    privacy_unit: str
    bounds: Mapping[str, Bounds] = field(default_factory=dict)
    keys: Mapping[str, Sequence[object]] = field(default_factory=dict)
    columns: Schema = ()
    """A file source's columns and types, as declared (``rewriter.files``); a table's
    are the catalogue's."""


def reader_paths(reader: exp.Func) -> list[exp.Expr]:
    """The path arguments of a file reader: one literal or the items of a list."""
    path = reader.this if reader.this is not None else (reader.expressions or [None])[0]
    return list(path.expressions) if isinstance(path, exp.Array) else [path]


def identity(source: exp.Table, database: str = "memory") -> str:
    """One name per source, whatever its spelling (``database``: the default catalogue)."""
    if isinstance(source.this, exp.Func):
        paths = sorted(
            _opened_path(p.name) for p in reader_paths(source.this) if isinstance(p, exp.Literal)
        )
        return FILE + "\n".join(paths)
    return ".".join(_name_parts(source, database, fold_case, _spelt))


def legacy_identity(source: exp.Table, database: str = "memory") -> str:
    """The identity declarations were kept under before ``identity`` was one-to-one: the
    parts joined bare and lower-cased by Unicode's rules. Read only to hold a table to a
    privacy unit declared then (two tables it merges are both held to it)."""
    return ".".join(_name_parts(source, database, str.lower, lambda part: part))


def _name_parts(
    source: exp.Table,
    database: str,
    fold: Callable[[str], str],
    spell: Callable[[str], str],
) -> list[str]:
    parts = [fold(part) for part in (source.catalog, source.db) if part]
    if len(parts) == 2 and parts[0] == fold(database):
        parts.pop(0)
    if len(parts) == 1 and parts[0] == "main":
        parts.pop()
    return [spell(part) for part in [*parts, fold(source.name)]]


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold_case(name: str) -> str:
    """A name as DuckDB compares it: its ASCII capitals lower-cased and nothing else
    (``"Études"`` and ``"études"`` are two tables there, ``"ABC"`` and ``"abc"`` one)."""
    return name.translate(_ASCII_LOWER)


_BARE = re.compile(r'[^."]+')


def _spelt(part: str) -> str:
    """One part of an identity: bare, unless it holds a dot or a quote (or is empty), then
    quoted, so that no two sources share an identity (table ``"ref.codes"`` of the
    default schema and table ``codes`` of schema ``ref`` were one, red team 37)."""
    return part if _BARE.fullmatch(part) else '"' + part.replace('"', '""') + '"'


def _candidates(source: exp.Table, search_path: Sequence[tuple[str, str]]) -> list[exp.Table]:
    """Every listed source a reference may name as DuckDB looks names up: as written with
    its catalogue; a schema in each catalogue searched, or a catalogue's ``main`` schema;
    a bare name in each (catalogue, schema) searched, in order. Wider than DuckDB's lookup
    where unsure: a name more than one could answer to is refused, never guessed."""
    name, schema = source.args["this"], source.args.get("db")
    if source.catalog:
        return [source.copy()]
    if schema is not None:
        catalogs = dict.fromkeys(catalog for catalog, _ in search_path)
        return [
            *(exp.Table(this=name.copy(), db=schema.copy(), catalog=_quoted(c)) for c in catalogs),
            exp.Table(this=name.copy(), db=_quoted("main"), catalog=schema.copy()),
        ]
    return [
        exp.Table(this=name.copy(), db=_quoted(db), catalog=_quoted(catalog))
        for catalog, db in search_path
    ]


def _quoted(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _opened_path(path: str) -> str:
    """A path as the engine opens it: ``~`` expanded, made absolute, and *not* normalised
    as text — ``/proc/self/root/../x`` and ``link/..`` are resolved by the file system, so
    textual ``..`` folding would name another file than the one read. Files are compared
    by what the file system says they are (``Catalog.files``), never by this text alone."""
    expanded = os.path.expanduser(path)
    return expanded if os.path.isabs(expanded) else os.path.join(os.getcwd(), expanded)


@dataclass(frozen=True)
class Catalog:
    """Declarations plus a way to list a source's columns.

    ``protected`` and ``public`` are keyed by identity. Every source that is not public is
    private, declared or not; a view declared public is in ``public`` only while it reads
    public tables alone (``rewriter.analyze.public_sources``). ``columns`` takes a source's
    SQL (a table name or a table function call) and returns its column names. ``files``
    lists the files a file identity names (its globs expanded), so that a declared file is
    found however a query spells it. ``aggregates`` names every aggregate function the
    engine knows, so that an aggregate sqlglot does not model is still recognised (and
    refused). ``types`` gives the column types of a statement by binding it (schema only, no
    rows read), every ENUM in them as VARCHAR (``public_type``: its members are data, and a
    type the rewriter knows is a type it may print, in a message or in the SQL ``explain``
    shows); ``evaluate`` runs a statement that reads no source at all (a key list's casts).
    """

    protected: Mapping[str, Protection]
    public: frozenset[str]
    columns: Callable[[str], Sequence[str]]
    aggregates: frozenset[str] = frozenset()
    reserved_schema: str = "__privsql"
    database: str = "memory"
    files: Callable[[str], frozenset[str]] = lambda _: frozenset()
    types: Callable[[str], list[str]] = lambda _: []
    evaluate: Callable[[str], list[tuple]] = lambda _: []
    forbidden: frozenset[str] = frozenset()
    declared_files_only: bool = False
    tables: frozenset[str] | None = None
    """The identities of every table and view, where known: a name that is none of them is
    refused rather than left to the engine (DuckDB would read a file by that name)."""
    search_path: tuple[tuple[str, str], ...] = ()
    """The (catalogue, schema) pairs an unqualified name may be found in, in the engine's
    order (temporary objects first); empty where the engine's names are taken as written
    (Spark)."""
    ambiguous: frozenset[str] = frozenset()
    """Identities the engine lists more than once (Spark's temporary view and table of one
    name): a reference to one is refused."""
    views: Mapping[str, str] = field(default_factory=dict)
    """Each view's definition (``CREATE VIEW ...``), by identity."""
    count_rows: Callable[[exp.Query], int] = lambda _: 0
    """The one number a query over public data only computes (``rewriter.fanout``)."""
    read: Callable[[exp.Table], exp.Expr] = lambda source: source.copy()
    """How the generated SQL reads a base source (without its alias): a file reader's
    files read to its schema (``rewriter.files.conformed_read``)."""
    builtins: frozenset[str] = frozenset()
    """The names of the engine's own functions: one the database defines again replaces
    it (``rewriter.functions.refuse_defined``)."""
    defined: frozenset[str] = frozenset()
    """The functions the database defines (macros, UDFs, privsql's own): analyst SQL calls
    none of them (``rewriter.functions.refuse_defined``)."""
    memo: dict[object, object] = field(default_factory=dict)
    """Results computed from this catalogue and a query's constants alone (a key list's
    cast values), kept for as long as the catalogue is (a new one starts empty)."""

    def view(self, source: exp.Table) -> str | None:
        """The definition of a view, which a query reads as the query it is (compiled and
        guarded like the analyst's own SQL); a public view (one over public tables alone) is
        read as it is.

        A view declared private (ledgers from before ``protect`` refused views) is refused:
        read as a source of its own, its definition ran unguarded, so a cast that fails on
        one unit's value failed the query (red team 12)."""
        name = self.identity(source)
        if isinstance(source.this, exp.Func) or name in self.public:
            return None
        if name in self.protected and name in self.views:
            raise UnsupportedQuery(
                f"{name} is a view declared private: views are read as the queries they "
                "are; the data owner declares the tables it reads instead"
            )
        return self.views.get(name)

    def identity(self, source: exp.Table) -> str:
        """The identity of the source a reference names (``bound``), found once per name
        and catalogue (``memo``: the catalogue is made anew when its listing changes)."""
        if isinstance(source.this, exp.Func):
            return identity(source, self.database)
        key = ("identity", source.catalog, source.db, source.name)
        if key not in self.memo:
            self.memo[key] = identity(self.bound(source), self.database)
        name = str(self.memo[key])
        if name in self.ambiguous:
            raise UnsupportedQuery(
                f"{source.name} names more than one table or view: name it with its schema"
            )
        return name

    def bound(self, source: exp.Table) -> exp.Table:
        """The table or view a reference names, fully qualified, by the order the engine
        looks names up in (``search_path``); the reference itself where that order is not
        known or it names nothing listed. The generated SQL reads it so, so what runs is
        what was checked, whatever the engine's own lookup would find. A name two listed
        sources could answer to is refused: a temporary table ``t`` answered both to ``t``
        (as DuckDB reads it) and to ``memory.main.t`` (a main table ``t``), so one's
        declaration governed the other (red team 38)."""
        if isinstance(source.this, exp.Func) or not self.search_path or self.tables is None:
            return source
        named: dict[str, exp.Table] = {}
        for table in _candidates(source, self.search_path):
            name = identity(table, self.database)
            if name in self.tables:
                named.setdefault(name, table)
        if len(named) > 1:
            raise UnsupportedQuery(
                f"{source.name} names more than one table or view "
                f"({', '.join(sorted(named))}): name it with its catalogue and schema"
            )
        if not named:
            return source
        (table,) = named.values()
        found = source.copy()  # its alias, sample and hints as written
        found.set("db", table.args["db"])
        found.set("catalog", table.args["catalog"])
        return found

    def check_readable(self, source: exp.Table) -> None:
        """Refuse a file reader that reaches a forbidden file, or (``declared_files_only``)
        any reader but one the owner declared; decided from paths, before the file is opened.

        With ``declared_files_only`` the reader's paths must be a declaration's own, as
        text: a narrower glob inside a declared one is refused too, whether or not it
        matches files, so that which globs are answered never tells which files exist
        (partition directories named by a unit's id or a private attribute)."""
        if not isinstance(source.this, exp.Func):
            return
        if self.declared_files_only and self.identity(source) not in self.protected:
            raise StatementNotAllowed("this session reads only files the data owner declared")
        if self.files(self.identity(source)) & self.forbidden:
            raise StatementNotAllowed("the database's own files cannot be read")

    def is_public(self, source: exp.Table) -> bool:
        return not isinstance(source.this, exp.Func) and self.identity(source) in self.public

    def protection(self, source: exp.Table) -> Protection | None:
        """The owner's declaration that governs a source.

        A file reader is governed by every declared file reader it shares a file with, its
        own identity's declaration included: it must read only files of one declaration
        (then that declaration applies), else it is refused — a declared file read under a
        glob is still declared. Sharing is decided before the reader's own declaration is
        looked up, so two declarations of one file (an older ledger's; ``protect`` refuses
        a second, ``sharing``) refuse the reader rather than let its spelling pick the unit
        (red team 34).
        """
        name = self.identity(source)
        if not name.startswith(FILE):
            declared = self.protected.get(name)
            return declared or self.protected.get(legacy_identity(source, self.database))
        declared = self.sharing(name)
        if not declared:
            return None
        if len(declared) > 1 or not self.files(name) <= self.files(declared[0]):
            raise InvalidPrivacyUnit(
                "the query reads files declared by the data owner together with other "
                "files, or files of two declarations: read one declaration's files by "
                "themselves"
            )
        return self.protected[declared[0]]

    def sharing(self, name: str) -> list[str]:
        """The declared file readers (identities) that share a file with file identity
        ``name``, or are ``name`` itself: the declarations a reader of it is held to."""
        files = self.files(name)
        return [
            declared
            for declared in self.protected
            if declared.startswith(FILE)
            and (declared == name or files & self.files(declared))
        ]
