"""The notebook magics: ``%load_ext privsql``, then ``%%privsql db`` cells and ``%privsql`` lines.

    %load_ext privsql

    %%privsql db
    SELECT origin, COUNT(*) AS flights FROM flights GROUP BY origin
    PRIVACY_UNIT tailnum BOUND ROWS 100 EPSILON 0.5

    %privsql db
    month = 7
    df = %privsql SELECT COUNT(*) AS n FROM flights WHERE month = {month} PRIVACY_UNIT tailnum

A cell runs its SQL on the privsql session held in the variable named on the line (the
current session when the line names none: the last one a ``%privsql`` line connected to,
else an in-memory one) and returns a pandas DataFrame, shown as a table whose noisy cells
read ``value ± half-width`` of their 95% noise interval, with what the answer cost. A
``%privsql`` line is the same with its SQL on the line, after the options; a line with no
SQL makes its session the current one. The session is a variable holding a privsql
Session (or a ``privsql.dbapi`` connection), or a URL: ``privsql:///flights.duckdb``
(query options as for SQLAlchemy: ``privsql:///new.duckdb?budget=3``), or a server's
``privsql+server://alice@host:5433/db`` (``privsql.remote``; answers are then plain
DataFrames, with the server's notice of their cost). Options:

    -o NAME          also store the privsql Result in NAME (for NAME.plot(), .accuracy())
    -k COL=V1,V2     public values of a GROUP BY key (repeatable), like db.sql(keys=...)
    -a ALPHA         interval level: 1 - ALPHA (default 0.05)
    --explain        show the plan instead of running the query; spends nothing

``{name}`` in the SQL (outside strings and comments) is the value of the notebook
variable ``name``, written as a SQL literal by sqlglot (strings quoted safely, never
pasted in as SQL): ``WHERE carrier = {carrier}``, ``EPSILON {eps}``. It stands for a
value, not for a table or column name.

A refused query prints one line (the rule and why; nothing is charged) and the cell
returns nothing. Needs IPython and pandas: ``pip install "privsql[notebook]"``.
"""

from __future__ import annotations

import html
import math
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

import privsql
from privsql import dbapi
from privsql.remote import QueryFailed, RemoteSession, is_server_url
from rewriter.dialect import PrivSQL

ALPHA = 0.05
VALUE_OPTIONS = ("-o", "--output", "-k", "--keys", "-a", "--alpha")
"""The options followed by a value."""


def _frame_class() -> type:
    """A DataFrame that displays its noise intervals; derived frames are plain DataFrames."""
    try:
        import pandas as pd
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            'the privsql magic needs pandas: pip install "privsql[notebook]"'
        ) from error

    class NoisyFrame(pd.DataFrame):
        """A privsql answer as a pandas DataFrame, displayed with intervals and cost.

        ``privsql_result`` is the privsql Result (``.plot()``, ``.accuracy()``); any
        operation on the frame returns an ordinary DataFrame.
        """

        _metadata = ["privsql_result", "privsql_alpha", "privsql_note"]

        @property
        def _constructor(self) -> type:
            return pd.DataFrame

        def _intact(self) -> bool:
            result = getattr(self, "privsql_result", None)
            return (
                result is not None
                and list(self.columns) == result.columns
                and len(self) == len(result)
                and isinstance(self.index, pd.RangeIndex)
                and self.index.start == 0
                and self.index.step == 1
            )

        def _repr_html_(self) -> str | None:
            if not self._intact():
                return super()._repr_html_()
            return html_table(self.privsql_result, self.privsql_alpha, self.privsql_note)

        def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
            if cycle or not self._intact():
                printer.text(pd.DataFrame.__repr__(self))
                return
            from privsql.cli import format_table

            table = format_table(self.privsql_result, alpha=self.privsql_alpha)
            printer.text(f"{table}\n{self.privsql_note}")

    return NoisyFrame


_NOISY_FRAME: type | None = None


def noisy_frame(result: privsql.Result, *, alpha: float = ALPHA, note: str = "") -> Any:
    """The result as a pandas DataFrame that displays with its intervals and ``note``."""
    from privsql.cli import describe_cost

    global _NOISY_FRAME
    if _NOISY_FRAME is None:
        _NOISY_FRAME = _frame_class()
    frame = _NOISY_FRAME(result.df())
    frame.privsql_result = result
    frame.privsql_alpha = alpha
    frame.privsql_note = note or describe_cost(result, alpha=alpha)
    return frame


_CSS = (
    "<style>"
    ".privsql-result td.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".privsql-result td.txt{text-align:left}"
    ".privsql-result .pm{color:#888;margin-left:.35em}"
    ".privsql-result caption{caption-side:bottom;text-align:left;color:#666;"
    "font-size:90%;padding-top:.3em}"
    "</style>"
)


def html_table(result: privsql.Result, alpha: float = ALPHA, note: str = "") -> str:
    """An HTML table of the result; a noisy cell is ``value <span>± w</span>``."""
    import pyarrow as pa

    from privsql.cli import describe_cost, flagged_interval, format_interval

    table = result.arrow()
    widths = result.accuracy(alpha)
    flags = result.flags(alpha)
    head = "".join(f"<th>{html.escape(name)}</th>" for name in table.column_names)
    rows = []
    columns = [
        (
            table.column(i).to_pylist(),
            widths.column(i).to_pylist(),
            flags.column(i).to_pylist(),
            pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t),
        )
        for i, t in enumerate(table.schema.types)
    ]
    for r in range(table.num_rows):
        cells = []
        for values, half_widths, marks, numeric in columns:
            cell = format_interval(values[r], half_widths[r])
            value, interval = flagged_interval(cell, marks[r])
            extra = f'<span class="pm">{html.escape(interval)}</span>' if interval else ""
            kind = "num" if numeric else "txt"
            cells.append(f'<td class="{kind}">{html.escape(value)}{extra}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    caption = html.escape(note or describe_cost(result, alpha=alpha)).replace("\n", "<br>")
    return (
        f'{_CSS}<table class="dataframe privsql-result"><caption>{caption}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _parse_value(text: str) -> object:
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return value if not isinstance(value, float) or math.isfinite(value) else text
    return text


def parse_line(line: str) -> dict[str, Any]:
    """The magic's line: ``[SESSION] [-o NAME] [-k COL=V1,V2 ...] [-a ALPHA] [--explain]``."""
    words = shlex.split(line)
    options: dict[str, Any] = {
        "session": None,
        "output": None,
        "keys": {},
        "alpha": ALPHA,
        "explain": False,
    }
    i = 0
    while i < len(words):
        word = words[i]
        if word in VALUE_OPTIONS:
            if i + 1 >= len(words):
                raise ValueError(f"{word} needs a value")
            value = words[i + 1]
            i += 2
            if word in ("-o", "--output"):
                if not value.isidentifier():
                    raise ValueError(f"{value} is not a variable name")
                options["output"] = value
            elif word in ("-k", "--keys"):
                column, equals, listed = value.partition("=")
                if not equals or not column:
                    raise ValueError("keys read COLUMN=VALUE1,VALUE2,...")
                options["keys"][column] = [_parse_value(v) for v in listed.split(",") if v]
            else:
                options["alpha"] = float(value)
                if not 0 < options["alpha"] < 1:
                    raise ValueError("alpha must be between 0 and 1")
            continue
        if word == "--explain":
            options["explain"] = True
        elif word.startswith("-"):
            raise ValueError(f"unknown option {word}")
        elif options["session"] is None:
            options["session"] = word
        else:
            raise ValueError(f"unexpected {word!r}: the line names at most one session")
        i += 1
    return options


def split_line(line: str, is_session: Callable[[str], bool]) -> tuple[str, str]:
    """A ``%privsql`` line as its options (the session among them) and its SQL, verbatim.

    The SQL starts at the first word that is neither an option, an option's value, nor the
    session: a URL, a word ``is_session`` accepts, or a lone last word (a session's name).
    """
    value_next = session_seen = False
    for match in re.finditer(r"\S+", line):
        word = match.group()
        if value_next or word in VALUE_OPTIONS:
            value_next = not value_next
            continue
        if re.fullmatch(r"--?[a-z][a-z-]*", word):
            continue
        lone = not line[match.end() :].strip() and word.isidentifier()
        if not session_seen and ("://" in word or is_session(word) or lone):
            session_seen = True
            continue
        return line[: match.start()], line[match.start() :]
    return line, ""


def template(sql: str, namespace: Mapping[str, Any]) -> str:
    """``sql`` with each ``{name}`` outside strings and comments replaced by the value of
    ``namespace[name]`` as a SQL literal (``privsql.dbapi.literal_text``: quoted by sqlglot)."""
    try:
        tokens = PrivSQL().tokenize(sql)
    except TokenError:
        return sql  # not SQL: the query's analysis says why
    pieces = []
    end = 0
    for left, name, right in zip(tokens, tokens[1:], tokens[2:], strict=False):
        if not (
            left.token_type == TokenType.L_BRACE
            and right.token_type == TokenType.R_BRACE
            and name.token_type not in (TokenType.STRING, TokenType.IDENTIFIER)
            and name.text.isidentifier()
        ):
            continue
        if name.text not in namespace:
            raise ValueError(f"no variable named {name.text}")
        try:
            value = dbapi.literal_text(namespace[name.text])
        except dbapi.NotSupportedError as error:
            raise ValueError(f"{{{name.text}}}: {error}") from None
        pieces += [sql[end : left.start], value]
        end = right.end + 1
    pieces.append(sql[end:])
    return "".join(pieces)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext privsql``: register the ``%privsql`` line and ``%%privsql`` cell magic."""
    from IPython.core.error import UsageError
    from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

    @magics_class
    class PrivsqlMagics(Magics):
        def __init__(self, shell: Any) -> None:
            super().__init__(shell)
            self._current: privsql.Session | RemoteSession | None = None
            self._opened: dict[str, dbapi.Connection | RemoteSession] = {}

        @no_var_expand  # IPython's own {name} and $name expansion would paste raw text
        @line_cell_magic
        def privsql(self, line: str, cell: str | None = None) -> Any:
            """Run SQL on a privsql session, or choose the session; see ``privsql.magic``."""
            from privsql.cli import statements

            magic = "%privsql" if cell is None else "%%privsql"
            if cell is None:
                line, cell = split_line(line, self._is_session)
            try:
                options = parse_line(line)
                sql = template(cell, self.shell.user_ns)
            except ValueError as error:
                raise UsageError(f"{magic}: {error}") from None
            db = self._session(options["session"], magic)
            queries = statements(sql)
            if not queries and magic == "%privsql":
                self._current = db
                if isinstance(db, RemoteSession):
                    print(f"privsql: connected to {db.where}")
                else:
                    budget = db.budget
                    print(f"privsql: ε remaining {budget.remaining:g} of {budget.total:g}")
                return None
            if not queries:
                raise UsageError(f"{magic}: the cell holds no SQL")
            if isinstance(db, RemoteSession):
                return self._run_remote(db, queries, options, magic)
            return self._run(db, queries, options)

        def _run_remote(
            self, db: RemoteSession, queries: list[str], options: dict[str, Any], magic: str
        ) -> Any:
            """Queries on a server: plain DataFrames, and the server's notices of their cost
            (``SET privsql_intervals = on`` adds the intervals as ``<column>_pm`` columns)."""
            if options["keys"] or options["explain"] or options["alpha"] != ALPHA:
                raise UsageError(f"{magic}: -k, -a and --explain need an in-process session")
            frame = None
            for query in queries:
                try:
                    frame, notices = db.sql(query)
                except QueryFailed as error:
                    print(error, file=sys.stderr)
                    return None
                for notice in notices:
                    print(notice)
                if options["output"]:
                    self.shell.user_ns[options["output"]] = frame
            return frame

        def _run(self, db: privsql.Session, queries: list[str], options: dict[str, Any]) -> Any:
            from privsql.cli import describe_cost, error_line

            keys = options["keys"] or None
            frame = None
            for query in queries:
                try:
                    if options["explain"]:
                        print(db.explain(query, keys=keys))
                        continue
                    result = db.sql(query, keys=keys)
                except Exception as error:
                    message, _ = error_line(error)
                    print(message, file=sys.stderr)
                    return None
                alpha = options["alpha"]
                frame = noisy_frame(
                    result, alpha=alpha, note=describe_cost(result, db.budget, alpha)
                )
                if options["output"]:
                    self.shell.user_ns[options["output"]] = result
            return frame

        def _is_session(self, name: str) -> bool:
            value = self.shell.user_ns.get(name)
            return isinstance(value, (privsql.Session, dbapi.Connection))

        def _session(self, name: str | None, magic: str) -> privsql.Session | RemoteSession:
            if name is None:
                if self._current is None:
                    self._current = privsql.connect()
                return self._current
            if "://" in name:
                return self._open(name, magic)
            if name not in self.shell.user_ns:
                raise UsageError(f"{magic}: no variable named {name}")
            db = self.shell.user_ns[name]
            if isinstance(db, dbapi.Connection):
                return db.session
            if not isinstance(db, privsql.Session):
                raise UsageError(
                    f"{magic}: {name} is a {type(db).__name__}, not a privsql session "
                    "(make one with privsql.connect(...))"
                )
            return db

        def _open(self, url: str, magic: str) -> privsql.Session | RemoteSession:
            """The session of a ``privsql:///PATH`` URL, or the connection to the server of
            a ``privsql+server://`` or ``postgresql://`` one, opened once per notebook."""
            if url not in self._opened:
                try:
                    if is_server_url(url):
                        self._opened[url] = RemoteSession(url)
                    else:
                        database, settings = dbapi.parse_url(url)
                        self._opened[url] = dbapi.connect(database, **settings)
                except (dbapi.Error, QueryFailed) as error:
                    raise UsageError(f"{magic}: cannot open the database: {error}") from None
            opened = self._opened[url]
            return opened if isinstance(opened, RemoteSession) else opened.session

    ipython.register_magics(PrivsqlMagics)
