"""The ``privsql`` command: an interactive REPL, one query (``-c``) or a file of queries (``-f``).

    privsql flights.duckdb --budget 3             # the REPL (see privsql/repl.py)
    privsql flights.duckdb -c "SELECT COUNT(*) FROM flights PRIVACY_UNIT tailnum BOUND ROWS 10"
    privsql flights.duckdb -f queries.sql --format csv --bail

Results go to stdout (a boxed table with each noisy cell's ± interval, CSV, JSON, Markdown
or one line per column); the ε charged, refusals and errors go to stderr. ``-c`` and ``-f``
run every statement and report each, a refusal or error prefixed with where it was
(``queries.sql:3:``); ``--bail`` stops at the first failure. The exit code is that of the
worst outcome: 0 success, 1 a query was refused (a privacy rule or the budget; nothing was
charged), 2 any other error (an unknown name, a type mismatch, bad arguments, a missing file,
a database that cannot be opened, a DuckDB error), 3 a syntax error.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import duckdb
import pyarrow as pa
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

import privsql
from privsql import admin
from privsql.plot import noisy_columns
from privsql.result import Result
from rewriter.dialect import PrivSQL

ALPHA = 0.05
"""Intervals shown next to noisy cells hold the noise with probability 1 - ALPHA."""

EXIT_OK, EXIT_REFUSED, EXIT_ERROR, EXIT_SYNTAX = 0, 1, 2, 3
"""Exit codes; of several outcomes the highest is the command's (a syntax error is worst)."""

FORMATS = ("table", "csv", "json", "markdown", "line")
SEPARATE_INTERVALS = ("csv", "json")
"""Formats that show intervals only when asked, as ``<column>_pm`` columns."""

INTERVAL_SUFFIX = "_pm"
"""Name suffix of the column holding a noisy column's interval half-widths (plus-minus)."""

# -- text styles (ANSI; used only when writing to a terminal) ---------------------------

_STYLES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def style(text: str, name: str, color: bool = True) -> str:
    """``text`` wrapped in the ANSI style ``name`` (dim, bold, red, ...) when ``color``."""
    return f"\x1b[{_STYLES[name]}m{text}\x1b[0m" if color and text else text


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes (wide East Asian characters count twice)."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def _pad(text: str, width: int, align: str) -> str:
    gap = max(width - display_width(text), 0)
    if align == ">":
        return " " * gap + text
    if align == "^":
        return " " * (gap // 2) + text + " " * (gap - gap // 2)
    return text + " " * gap


def _truncate(text: str, width: int) -> str:
    if display_width(text) <= width:
        return text
    out = ""
    for char in text:
        if display_width(out + char) > width - 1:
            break
        out += char
    return out + "…"


# -- numbers ---------------------------------------------------------------------------


def format_value(value: object) -> str:
    """A cell without an interval: NULL, integers exactly, floats to 6 significant digits."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0:
            return "0"
        magnitude = math.floor(math.log10(abs(value)))
        if magnitude >= 15 or magnitude < -4:
            return f"{value:.6g}"
        digits = max(0, 5 - magnitude)
        text = f"{value:.{digits}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(value).replace("\r", "\\r").replace("\n", "\\n")


def format_interval(value: object, half_width: float | None) -> tuple[str, str]:
    """A noisy cell as (value, "± w"): w to two significant digits, the value to the same place."""
    if half_width is None or value is None or not isinstance(value, int | float):
        return format_value(value), ""
    if isinstance(value, bool) or not math.isfinite(half_width) or half_width <= 0:
        return format_value(value), ""
    if not math.isfinite(float(value)) or abs(float(value)) >= 1e15 or half_width >= 1e15:
        return format_value(value), f"± {half_width:.2g}"
    decimals = min(max(0, 1 - math.floor(math.log10(half_width))), 12)
    return f"{float(value):.{decimals}f}", f"± {half_width:.{decimals}f}"


# -- results -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    values: list[str]
    intervals: list[str]
    numeric: bool


@lru_cache(maxsize=1)
def _types_connection() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def duckdb_type_names(schema: pa.Schema) -> list[str]:
    """DuckDB's names of an Arrow schema's types (``TIMESTAMP WITH TIME ZONE``, not
    ``timestamp[us, tz=Etc/UTC]``), as DuckDB itself reads those Arrow types."""
    if not len(schema):
        return []
    relation = _types_connection().cursor().from_arrow(schema.empty_table())
    return [str(kind) for kind in relation.types]


FLAG = "⚠"
"""Marks a cell whose interval bounding may have made untrue (``Result.flags``)."""


def flagged_interval(cell: tuple[str, str], flagged: bool | None) -> tuple[str, str]:
    """A formatted (value, interval) with FLAG after the interval when ``flagged`` (after
    the value when it has none: a withheld answer reads ``NULL ⚠``)."""
    value, interval = cell
    if not flagged:
        return cell
    return (value, f"{interval} {FLAG}") if interval else (value, FLAG)


def _columns(result: Result, alpha: float) -> list[Column]:
    table = result.arrow()
    widths = result.accuracy(alpha)
    flags = result.flags(alpha)
    columns = []
    type_names = duckdb_type_names(table.schema)
    for field, data, type_name in zip(table.schema, table.columns, type_names, strict=True):
        values = data.to_pylist()
        half_widths = widths.column(field.name).to_pylist()
        marks = flags.column(field.name).to_pylist()
        cells = [
            flagged_interval(format_interval(v, w), m)
            for v, w, m in zip(values, half_widths, marks, strict=True)
        ]
        kind = field.type
        numeric = (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
        )
        columns.append(
            Column(
                name=field.name,
                type=type_name,
                values=[c[0] for c in cells],
                intervals=[c[1] for c in cells],
                numeric=numeric,
            )
        )
    return columns


def plain_columns(names: Sequence[str], rows: Sequence[Sequence[object]]) -> list[Column]:
    """Columns of plain values (no intervals), typed by their first non-NULL value."""
    columns = []
    for i, name in enumerate(names):
        values = [row[i] for row in rows]
        sample = next((v for v in values if v is not None), None)
        numeric = isinstance(sample, int | float) and not isinstance(sample, bool)
        texts = [format_value(v) for v in values]
        columns.append(Column(name, "", texts, [""] * len(texts), numeric))
    return columns


def format_table(
    result: Result,
    *,
    alpha: float = ALPHA,
    color: bool = False,
    max_rows: int = 40,
    max_width: int = 40,
) -> str:
    """A DuckDB-style boxed table; a noisy cell reads ``value ± half-width`` of its interval.

    More than ``max_rows`` rows show the first and last halves; longer texts are cut at
    ``max_width`` columns.
    """
    return render_box(_columns(result, alpha), color=color, max_rows=max_rows, max_width=max_width)


def render_box(
    columns: Sequence[Column], *, color: bool = False, max_rows: int = 40, max_width: int = 40
) -> str:
    """Draw columns as a boxed table, with a row of types under the names when they have one."""
    rows = len(columns[0].values) if columns else 0
    shown = list(range(rows))
    if rows > max_rows:
        shown = [*range(max_rows // 2), -1, *range(rows - max_rows // 2, rows)]
    layout = []  # per column: (value width, interval width, total width)
    for column in columns:
        values = [_truncate(column.values[i], max_width) for i in shown if i >= 0]
        intervals = [column.intervals[i] for i in shown if i >= 0]
        value_width = max([display_width(v) for v in values], default=0)
        interval_width = max([display_width(v) for v in intervals], default=0)
        body = value_width + (1 + interval_width if interval_width else 0)
        total = max(body, display_width(column.name), display_width(column.type))
        layout.append((value_width, interval_width, total))

    def rule(left: str, mid: str, right: str) -> str:
        return left + mid.join("─" * (w + 2) for *_, w in layout) + right

    def line(cells: Sequence[str]) -> str:
        return "│" + "│".join(f" {c} " for c in cells) + "│"

    widths = [w for *_, w in layout]
    out = [rule("┌", "┬", "┐")]
    out.append(line([_pad(c.name, w, "^") for c, w in zip(columns, widths, strict=True)]))
    if any(c.type for c in columns):
        types = [_pad(c.type, w, "^") for c, w in zip(columns, widths, strict=True)]
        out.append(line([style(t, "dim", color) for t in types]))
    out.append(rule("├", "┼", "┤"))
    for i in shown:
        cells = []
        for column, (value_width, interval_width, total) in zip(columns, layout, strict=True):
            if i < 0:
                cells.append(_pad("·", total, "^"))
                continue
            value = _truncate(column.values[i], max_width)
            if not interval_width:
                cells.append(_pad(value, total, ">" if column.numeric else "<"))
                continue
            interval = _pad(column.intervals[i], interval_width, "<")
            text = _pad(value, value_width, ">") + " " + style(interval, "dim", color)
            cells.append(" " * (total - value_width - 1 - interval_width) + text)
        out.append(line(cells))
    out.append(rule("└", "┴", "┘"))
    if rows > max_rows:
        out.append(f"{rows} rows ({len(shown) - 1} shown)")
    return "\n".join(out)


def _records(result: Result, alpha: float, intervals: bool) -> tuple[list[str], list[list]]:
    names = list(result.columns)
    rows = [list(r) for r in result.fetchall()]
    if intervals:
        widths = result.accuracy(alpha)
        for name in noisy_columns(result, alpha):
            names.append(f"{name}{INTERVAL_SUFFIX}")
            for row, w in zip(rows, widths.column(name).to_pylist(), strict=True):
                row.append(w)
    return names, rows


def format_csv(result: Result, *, alpha: float = ALPHA, intervals: bool = False) -> str:
    """CSV with a header; ``intervals`` adds a ``<column>_pm`` column per noisy column."""
    names, rows = _records(result, alpha, intervals)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(names)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return buffer.getvalue().rstrip("\n")


def _json_value(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return str(value)


def format_json(result: Result, *, alpha: float = ALPHA, intervals: bool = False) -> str:
    """A JSON array of row objects; ``intervals`` adds ``<column>_pm`` keys."""
    names, rows = _records(result, alpha, intervals)
    records = [{n: _json_value(v) for n, v in zip(names, row, strict=True)} for row in rows]
    return json.dumps(records, ensure_ascii=False)


def _cell(column: Column, row: int) -> str:
    """A formatted cell, its interval (if any) after its value: ``57213 ± 2996``."""
    interval = column.intervals[row]
    return f"{column.values[row]} {interval}" if interval else column.values[row]


def format_markdown(result: Result, *, alpha: float = ALPHA) -> str:
    """A Markdown (GitHub) table; noisy cells read ``value ± half-width``, numbers align right."""
    columns = _columns(result, alpha)

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    rule = "|" + "|".join("---:" if c.numeric else "---" for c in columns) + "|"
    rows = [line([_cell(c, i) for c in columns]) for i in range(len(result))]
    return "\n".join([line([c.name for c in columns]), rule, *rows])


def format_line(result: Result, *, alpha: float = ALPHA) -> str:
    """DuckDB's line mode: one ``name = value`` line per column, a blank line between rows."""
    columns = _columns(result, alpha)
    width = max((display_width(c.name) for c in columns), default=0)
    return "\n\n".join(
        "\n".join(f"{_pad(c.name, width, '>')} = {_cell(c, i)}" for c in columns)
        for i in range(len(result))
    )


def format_result(
    result: Result,
    fmt: str = "table",
    *,
    alpha: float = ALPHA,
    color: bool = False,
    intervals: bool = False,
) -> str:
    """``result`` in one of FORMATS; ``intervals`` adds ``<column>_pm`` columns to CSV/JSON
    (the other formats always show each noisy cell's interval next to it)."""
    if fmt == "csv":
        return format_csv(result, alpha=alpha, intervals=intervals)
    if fmt == "json":
        return format_json(result, alpha=alpha, intervals=intervals)
    if fmt == "markdown":
        return format_markdown(result, alpha=alpha)
    if fmt == "line":
        return format_line(result, alpha=alpha)
    return format_table(result, alpha=alpha, color=color)


def interval_display(fmt: str, intervals: bool) -> str:
    """How results in ``fmt`` show noisy cells' intervals: ``inline`` (``value ± w``),
    ``columns`` (CSV/JSON with ``intervals``: ``<column>_pm``) or ``none`` (dropped)."""
    if fmt not in SEPARATE_INTERVALS:
        return "inline"
    return "columns" if intervals else "none"


def describe_cost(
    result: Result,
    budget: privsql.Budget | None = None,
    alpha: float = ALPHA,
    *,
    intervals: str = "inline",
) -> str:
    """One line: rows, what the answer cost, what its intervals mean where the format shows
    them (``intervals``, see ``interval_display``: nothing about them when it dropped them)
    and, given the budget, what remains; then, if bounding cut enough to make some
    intervals untrue, a line saying so (``Result.warning``)."""
    rows = len(result)
    parts = [f"{rows} row{'s' if rows != 1 else ''}"]
    if result.cached:
        parts.append("stored answer, no cost")
    elif result.epsilon == 0:
        parts.append("public data: exact, no cost")
    else:
        cost = f"ε = {result.epsilon:g} charged"
        parts.append(cost + (f" (δ = {result.delta:g})" if result.delta else ""))
    if intervals != "none" and noisy_columns(result, alpha):
        level = f"{1 - alpha:.0%} noise interval"
        if intervals == "columns":
            parts.append(f"<column>{INTERVAL_SUFFIX}: half-width of the {level}")
        else:
            parts.append(f"± {level}")
    if budget is not None:
        parts.append(f"ε remaining {budget.remaining:g} of {budget.total:g}")
        if result.delta and not result.cached:
            parts.append(f"δ remaining {budget.delta_remaining:g} of {budget.delta_total:g}")
    warning = result.warning(alpha)
    if warning and intervals == "none":  # the format shows no interval to warn about
        warning = re.sub(r";[^;]*\binterval[^;]*$", "; bounding may have biased them", warning)
    return " · ".join(parts) + (f"\n{warning}" if warning else "")


def error_line(error: BaseException, *, quote: bool = True) -> tuple[str, int]:
    """A one-line message and exit code for an exception raised by a query: a syntax error
    (3); an unknown name, a type mismatch, failing post-processing, a failure after private
    data was read (charged) or any non-privsql error (2); any other privsql error is a
    refusal (1), which charged nothing.

    Without ``quote`` (a command read from a file) a syntax error does not quote the token
    it stopped at: the file may be anything (a key, a CSV of private data), and its first
    token would be shown. The caller says where it failed (``file:line``)."""
    if isinstance(error, privsql.QuerySyntaxError):
        if not quote:
            return "error: [syntax] the command does not parse (its text is not shown)", EXIT_SYNTAX
        return f"error: {error}", EXIT_SYNTAX
    errors = (
        privsql.UnknownName,
        privsql.TypeMismatch,
        privsql.PostProcessingError,
        privsql.ChargedFailure,
    )
    if isinstance(error, errors):
        return f"error: {error}", EXIT_ERROR
    if isinstance(error, privsql.PrivacyError):
        message = str(error)
        if "charged" not in message:
            message += " (no ε charged)"
        return f"refused: {message}", EXIT_REFUSED
    text = str(error).strip() or type(error).__name__
    lines = []
    for piece in text.splitlines():
        if not piece.strip() or piece.startswith("LINE "):
            break
        lines.append(piece.strip())
    return f"error: {' '.join(lines)}", EXIT_ERROR


# -- splitting input into commands -------------------------------------------------------


def is_complete(text: str) -> bool:
    """Whether ``text`` is ready to run: a dot command, or SQL whose last token is ``;``."""
    stripped = text.strip()
    if not stripped or stripped.startswith("."):
        return True
    try:
        tokens = PrivSQL().tokenize(text)
    except TokenError:
        return False  # an unterminated string or comment
    return bool(tokens) and tokens[-1].token_type == TokenType.SEMICOLON


class Command(NamedTuple):
    """One command of some input, and the line (from 1) its first token is on."""

    line: int
    text: str


def statements(text: str) -> list[str]:
    """Split on the semicolons the SQL tokenizer sees (not those inside strings or comments);
    a piece holding only comments is no statement."""
    return [command.text for command in numbered_statements(text)]


def numbered_statements(text: str) -> list[Command]:
    """``statements``, each with the line of ``text`` its first token is on."""
    try:
        tokens = PrivSQL().tokenize(text)
    except TokenError:  # an unterminated string or comment: one statement, for the parser
        stripped = text.strip()
        return [Command(text[: text.index(stripped)].count("\n") + 1, stripped)] if stripped else []
    found = []
    start, first = 0, None
    for token in tokens:
        if token.token_type != TokenType.SEMICOLON:
            first = token if first is None else first
            continue
        if first is not None:
            found.append(Command(first.line, text[start : token.start].strip()))
        start, first = token.end + 1, None
    if first is not None:
        found.append(Command(first.line, text[start:].strip()))
    return found


class CommandBuffer:
    """Turns lines of input into commands: a dot command is one line; SQL ends with ``;``.
    Each command comes with the line of the input it starts on."""

    def __init__(self) -> None:
        self._sql: list[str] = []
        self._lines = 0  # lines fed so far
        self._start = 1  # the line the pending SQL starts on

    @property
    def pending(self) -> bool:
        return any(line.strip() for line in self._sql)

    def feed(self, line: str) -> list[Command]:
        self._lines += 1
        if not self.pending:
            self._sql, self._start = [], self._lines
            if line.strip().startswith("."):
                return [Command(self._lines, line.strip())]
        self._sql.append(line)
        if not is_complete("\n".join(self._sql)):
            return []
        return self.flush()

    def flush(self) -> list[Command]:
        text, self._sql = "\n".join(self._sql), []
        return [Command(self._start + c.line - 1, c.text) for c in numbered_statements(text)]


def split_commands(text: str) -> list[Command]:
    buffer = CommandBuffer()
    commands = [c for line in text.splitlines() for c in buffer.feed(line)]
    return commands + buffer.flush()


def read_script(path: str) -> str:
    """The text of a file of commands (``-``: stdin); an OSError saying in one line why it
    cannot be read."""
    try:
        return sys.stdin.read() if path == "-" else Path(path).expanduser().read_text()
    except UnicodeDecodeError:
        raise OSError(f"not a text file: {path}") from None
    except OSError as error:
        raise OSError(f"{error.strerror or 'cannot read'}: {path}") from None


# -- the command -------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="privsql",
        description="Differentially private SQL over DuckDB. Without -c or -f, opens a REPL.",
        epilog="Exit codes: 0 success, 1 refused (nothing charged), 2 other error "
        "(unknown name, type mismatch, engine, file), 3 syntax error; of several "
        "statements, the highest.",
    )
    p.add_argument(
        "database", nargs="?", default=":memory:", help="DuckDB database file (default: in memory)"
    )
    p.add_argument("--budget", type=float, help="total ε of a new database's ledger")
    p.add_argument("--create", action="store_true", help="create the database if it is missing")
    p.add_argument("--epsilon", type=float, default=1.0, help="ε of a query naming none")
    p.add_argument(
        "--delta-budget", type=float, help="total δ of a new database's ledger (default 1e-5)"
    )
    p.add_argument(
        "--max-query-delta",
        type=float,
        help="largest δ one query may spend, for a new database's ledger (default 1e-6)",
    )
    p.add_argument(
        "--delta", type=float, help="δ of a query naming none (default 1e-6, at most the cap)"
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "-c", dest="command", metavar="SQL", help="run SQL statements (or a dot command)"
    )
    source.add_argument(
        "-f", dest="file", metavar="FILE", help="run every command of a file ('-': stdin)"
    )
    p.add_argument("--bail", action="store_true", help="-c/-f: stop at the first refusal or error")
    p.add_argument("--format", choices=FORMATS, default="table", help="output format")
    p.add_argument(
        "--intervals",
        action="store_true",
        help=f"csv/json: add a <column>{INTERVAL_SUFFIX} column per noisy column",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=ALPHA,
        help="intervals hold the noise with probability 1 - ALPHA (default 0.05)",
    )
    p.add_argument("--no-color", action="store_true", help="never use colour")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in admin.COMMANDS:  # privsql serve / analysts / budget
        return admin.main(argv)
    args = parser().parse_args(argv)
    if not 0 < args.alpha < 1:
        print("privsql: error: --alpha must be between 0 and 1", file=sys.stderr)
        return EXIT_ERROR
    text, where = None, None
    if args.command is not None:
        text = args.command
    elif args.file is not None:
        where = "<stdin>" if args.file == "-" else args.file
        try:
            text = read_script(args.file)
        except OSError as error:
            print(f"privsql: error: {error}", file=sys.stderr)
            return EXIT_ERROR
    if args.database != ":memory:" and not args.create and not Path(args.database).exists():
        print(
            f"privsql: error: no such database: {args.database} "
            "(--create --budget E creates one)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        db = privsql.connect(
            args.database,
            budget=args.budget,
            epsilon=args.epsilon,
            delta=args.delta,
            delta_budget=args.delta_budget,
            max_query_delta=args.max_query_delta,
        )
    except Exception as error:  # a bad path, a locked file, a budget that cannot change
        message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        print(f"privsql: error: cannot open {args.database}: {message}", file=sys.stderr)
        return EXIT_ERROR

    from privsql.repl import Shell, interact

    with db:
        if text is None:
            return interact(db, args)
        shell = Shell(
            db,
            fmt=args.format,
            alpha=args.alpha,
            intervals=args.intervals,
            color=False,
            err_color=sys.stderr.isatty() and not args.no_color and "NO_COLOR" not in os.environ,
            progress=sys.stderr.isatty(),
            prefix="privsql: ",
        )
        if args.file not in (None, "-") and db.is_own_file(args.file):
            print(
                f"privsql: error: -f refuses {args.file}: it is this database's own file "
                "(its data, write-ahead log, ledger or ledger key)",
                file=sys.stderr,
            )
            return EXIT_ERROR
        try:
            return shell.run_all(
                split_commands(text), where=where, bail=args.bail, quote=args.file in (None, "-")
            )
        finally:
            shell.close()


if __name__ == "__main__":
    sys.exit(main())
