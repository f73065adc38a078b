"""The privsql REPL: ``privsql [DATABASE] [--budget E]``.

Built on prompt_toolkit (``pip install "privsql[repl]"``): persistent history, multi-line
input that runs when a statement ends with ``;``, completion of keywords, tables and
columns, dot commands like DuckDB's CLI (``.help`` lists them: ``.mode``, ``.timer``,
``.read``, ``.output``, and ``.protect``/``.public`` for the data owner), ``DESCRIBE`` and
``SHOW TABLES`` answered from the schema, boxed results with each noisy cell's ± interval
and the ε charged, and a progress bar on long queries (Ctrl-C cancels them). A refusal
prints one line and the REPL carries on.

Without a terminal (input piped in) it reads commands from stdin with no prompts and
exits with the highest code of its commands (see privsql/cli.py).
"""

from __future__ import annotations

import html
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError, TokenError
from sqlglot.tokens import TokenType

import privsql
from privsql.cli import (
    ALPHA,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_REFUSED,
    FORMATS,
    Command,
    CommandBuffer,
    describe_cost,
    error_line,
    format_result,
    interval_display,
    is_complete,
    plain_columns,
    read_script,
    render_box,
    split_commands,
    style,
)
from privsql.schema import schema_statement
from rewriter.catalog import Bounds
from rewriter.dialect import PrivSQL

HISTORY_ENV = "PRIVSQL_HISTORY"
"""Where the REPL keeps its history; default ``~/.privsql_history``."""

MAX_READ_DEPTH = 16
"""How deeply ``.read`` may read files that ``.read`` files."""

PROTECT_USAGE = ".protect TABLE UNIT [COLUMN BETWEEN LOW AND HIGH | COLUMN IN (VALUE, ...)], ..."

HELP = """\
End SQL with ; to run it (Enter on an unfinished statement starts a new line;
Alt-Enter runs it anyway). Tab completes keywords, tables and columns.

  DESCRIBE TABLE;       columns, DuckDB types and what the owner declared (also SHOW TABLE)
  SHOW [ALL] TABLES;    tables, views and declared Parquet files; schemas cost nothing
  .tables               tables, views and declared files, and who may read them how
  .schema [TABLE]       columns, types, the privacy unit and declared bounds and keys
  .explain SQL          the plan: sensitivities, noise scales and ε; spends nothing
                        (EXPLAIN SELECT ...; works too)
  .budget               ε spent and remaining, and every charge
  .mode [MODE]          show or set the output mode: table, csv, json, markdown or line
                        (also .format)
  .intervals on|off     csv/json: add a <column>_pm column (the ±) per noisy column
  .timer on|off         print each statement's run time
  .read FILE            run every command of FILE, reporting each
  .output [FILE]        send results to FILE; without FILE, back to the screen
  .protect TABLE UNIT [COLUMN BETWEEN LOW AND HIGH | COLUMN IN (VALUE, ...)], ...
                        the data owner declares TABLE (or read_parquet('...')) private per
                        UNIT, with bounds and public GROUP BY keys
  .public TABLE         the data owner declares TABLE public: read exactly, for free
  .help                 this text
  .exit                 leave (also .quit or Ctrl-D)

A private query names its privacy unit and bounds each unit's contribution:
  SELECT origin, COUNT(*) AS flights, COUNT(DISTINCT tailnum) AS planes
  FROM flights GROUP BY origin
  PRIVACY_UNIT tailnum BOUND WEIGHTS 300 MAX_GROUPS 3 EPSILON 2;
(a plane flies from up to 3 airports, 99% under 300 times from one: the bound keeps
99% of flights; ±2,696 flights and ±9 planes per airport). .explain shows the ± first.
Noisy cells read "value ± w": the noise moved the value by more than w with
probability at most 5%. docs/query-language.md describes the whole language."""

# fmt: off
KEYWORDS = (
    "SELECT", "FROM", "WHERE", "GROUP BY", "HAVING", "ORDER BY", "LIMIT", "AS", "AND", "OR",
    "NOT", "IN", "IS", "NULL", "JOIN", "LEFT JOIN", "INNER JOIN", "ON", "USING", "WITH",
    "CASE", "WHEN", "THEN", "ELSE", "END", "ASC", "DESC", "BETWEEN", "LIKE", "ILIKE", "CAST",
    "TRY_CAST", "EXPLAIN", "DISTINCT", "TRUE", "FALSE", "DESCRIBE", "SHOW TABLES",
    # privsql's clause
    "PRIVACY_UNIT", "BOUND ROWS", "BOUND WEIGHTS", "BOUND CLIP", "BOUND AUTO", "MAX_GROUPS",
    "EPSILON", "DELTA", "CLAMPED BETWEEN",
)
FUNCTIONS = (
    "COUNT", "SUM", "AVG", "MEDIAN", "QUANTILE", "PERCENTILE_CONT", "VARIANCE", "STDDEV",
    "ROUND", "ABS", "COALESCE", "LEAST", "GREATEST", "date_trunc", "year", "month",
    "read_parquet", "read_csv",
)
CLAUSE_WORDS = (
    "PRIVACY_UNIT", "BOUND", "ROWS", "WEIGHTS", "CLIP", "AUTO", "MAX_GROUPS", "EPSILON",
    "DELTA", "CLAMPED",
)
DOT_COMMANDS = (
    ".budget", ".exit", ".explain", ".format", ".help", ".intervals", ".mode", ".output",
    ".protect", ".public", ".quit", ".read", ".schema", ".tables", ".timer",
)
# fmt: on


# -- the catalogue ---------------------------------------------------------------------


def catalog(db: privsql.Session) -> dict[str, list[tuple[str, str]]]:
    """Tables and views of the session (privsql's own schema hidden): name -> columns, types."""
    return {
        qualified_name(entry): list(zip(entry["column_names"], entry["column_types"], strict=True))
        for entry in db.tables().to_pylist()
        if entry["schema"] is not None
    }


# -- running queries with a progress bar -------------------------------------------------


class Interrupted(Exception):
    """The analyst pressed Ctrl-C while a query ran."""


def run_with_progress(
    con: Any,
    work: Callable[[], Any],
    *,
    stream: TextIO | None,
    delay: float = 0.5,
    interval: float = 0.1,
    width: int = 30,
) -> Any:
    """Run ``work`` in a thread; after ``delay`` seconds draw a bar from ``con.query_progress()``.

    Ctrl-C interrupts the running DuckDB query (``con.interrupt()``) and raises
    ``Interrupted``. Without a ``stream`` nothing is drawn.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target, name="privsql-query", daemon=True)
    start = time.monotonic()
    drawn = False
    thread.start()
    try:
        while thread.is_alive():
            thread.join(interval)
            elapsed = time.monotonic() - start
            if stream is None or elapsed < delay or not thread.is_alive():
                continue
            stream.write("\r\x1b[2K" + progress_line(_progress(con), elapsed, width))
            stream.flush()
            drawn = True
    except KeyboardInterrupt:
        con.interrupt()
        thread.join()
        raise Interrupted from None
    finally:
        if drawn and stream is not None:
            stream.write("\r\x1b[2K")
            stream.flush()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _progress(con: Any) -> float:
    try:
        return float(con.query_progress())
    except Exception:
        return -1.0


def progress_line(percent: float, elapsed: float, width: int = 30) -> str:
    """``▕█████░░░░░▏  45%  3.2 s`` (a moving block when DuckDB cannot tell the progress)."""
    if percent < 0:
        position = int(elapsed * 8) % width
        bar = "░" * position + "█" + "░" * (width - position - 1)
        label = "  …  "
    else:
        filled = min(round(percent / 100 * width), width)
        bar = "█" * filled + "░" * (width - filled)
        label = f"{percent:4.0f}%"
    return f"▕{bar}▏ {label}  {elapsed:.1f} s  (Ctrl-C cancels)"


# -- the shell: one command at a time ------------------------------------------------------


def parse_protect(argument: str) -> tuple[str, str, dict[str, Bounds], dict[str, list[object]]]:
    """``.protect``'s argument: SOURCE UNIT, then optional comma-separated declarations
    ``COLUMN BETWEEN LOW AND HIGH`` (bounds) and ``COLUMN IN (VALUE, ...)`` (public keys),
    as SQL: the arguments of ``Session.protect``. SOURCE is a table, a view or a Parquet
    reader call."""
    usage = ValueError(PROTECT_USAGE)
    try:
        tokens = PrivSQL().tokenize(argument)
    except TokenError:
        raise usage from None
    at = 1  # the token after the source: a name, a dotted name, or a reader call
    if len(tokens) > 1 and tokens[1].token_type == TokenType.L_PAREN:
        depth = 0
        for index in range(1, len(tokens)):
            depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[index].token_type, 0)
            if depth == 0:
                at = index + 1
                break
        else:
            raise usage
    while len(tokens) > at + 1 and tokens[at].token_type == TokenType.DOT:
        at += 2
    named = len(tokens) > at and (
        tokens[at].token_type == TokenType.IDENTIFIER or tokens[at].text.isidentifier()
    )
    if not named:  # the unit: a name, quoted or not (``user`` is a keyword to the tokenizer)
        raise usage
    source = argument[: tokens[at - 1].end + 1].strip()
    unit = tokens[at].text
    rest = argument[tokens[at].end + 1 :].strip()
    bounds: dict[str, Bounds] = {}
    keys: dict[str, list[object]] = {}
    if not rest:
        return source, unit, bounds, keys
    try:
        declared = sqlglot.parse_one(f"SELECT {rest}", read="duckdb").expressions
        for item in declared:
            if not isinstance(item.this, exp.Column):
                raise usage
            if isinstance(item, exp.Between):
                low, high = _constant(item.args["low"]), _constant(item.args["high"])
                if not all(isinstance(v, int | float) for v in (low, high)):
                    raise usage
                bounds[item.this.name] = (low, high)
            elif isinstance(item, exp.In) and item.expressions:
                keys[item.this.name] = [_constant(value) for value in item.expressions]
            else:
                raise usage
    except (SqlglotError, ValueError):
        raise usage from None
    return source, unit, bounds, keys


def _constant(node: exp.Expr) -> object:
    """A literal's value (a decimal number as a float); ValueError for anything else."""
    value = node.to_py()
    return float(value) if isinstance(value, Decimal) else value


class Shell:
    """Runs commands (SQL or dot commands) on a session and prints what they return.

    ``interactive`` prints everything to ``out``; otherwise results go to ``out`` and
    costs, refusals and errors to ``err`` (with ``prefix``). ``.output FILE`` sends results
    to a file instead. ``run`` returns an exit code.
    """

    def __init__(
        self,
        db: privsql.Session,
        *,
        fmt: str = "table",
        alpha: float = ALPHA,
        intervals: bool = False,
        color: bool = False,
        err_color: bool | None = None,
        progress: bool = False,
        interactive: bool = False,
        prefix: str = "",
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.db = db
        self.fmt = fmt
        self.alpha = alpha
        self.intervals = intervals
        self.timer = False
        self.color = color
        self.err_color = color if err_color is None else err_color
        self.interactive = interactive
        self.prefix = prefix
        self.screen = out or sys.stdout
        self.out = self.screen
        self.err = self.screen if interactive else (err or sys.stderr)
        self.done = False
        self._reading = 0  # how deeply .read is reading files
        self.progress_stream = self.err if progress else None
        if progress:
            try:  # DuckDB reports progress only with the bar on; privsql draws its own
                db._con.execute("SET enable_progress_bar = true")
                db._con.execute("SET enable_progress_bar_print = false")
            except Exception:
                self.progress_stream = None

    # output

    def say(self, text: str) -> None:
        """Write a result (to ``.output``'s file, if one is set)."""
        self.out.write(text + "\n")
        self.out.flush()

    def note(self, text: str, name: str = "dim") -> None:
        """Write a message: a cost, a refusal, an error (never to ``.output``'s file)."""
        color = self.color if self.interactive else self.err_color
        self.err.write(style(self.prefix + text if not self.interactive else text, name, color))
        self.err.write("\n")
        self.err.flush()

    def fail(self, error: BaseException, where: str = "", *, quote: bool = True) -> int:
        """Report a command's failure (``error_line``; ``quote`` as there) and its exit code."""
        message, code = error_line(error, quote=quote)
        self.note(f"{where}: {message}" if where else message, "red")
        return code

    @property
    def _colored(self) -> bool:
        return self.color and self.out is self.screen

    def close(self) -> None:
        """Close ``.output``'s file, if one is open."""
        if self.out is not self.screen:
            self.out.close()
            self.out = self.screen

    # dispatch

    def run(self, command: str, where: str = "", *, quote: bool = True) -> int:
        """Run one command: a dot command or one SQL statement (a trailing ``;`` is optional).
        A refusal or error is reported with ``where`` (``file.sql:3``) before it. Without
        ``quote`` (a command read from a file) a syntax error or an unknown dot command is
        reported without the command's text, which could be any file's content."""
        command = command.strip()
        if not command:
            return EXIT_OK
        try:
            if command.startswith("."):
                return self._dot(command, where, quote=quote)
            explained = re.match(r"(?is)^explain\s+(?!analy[sz]e\b)(.*)$", command)
            if explained:
                return self._explain(explained.group(1))
            return self._timed(lambda: self._statement(command))
        except Interrupted:
            self.note("interrupted: the query was cancelled and nothing was charged", "yellow")
            return EXIT_ERROR
        except Exception as error:
            return self.fail(error, where, quote=quote)

    def run_all(
        self, commands: Sequence[Command], *, where: str | None, bail: bool, quote: bool = True
    ) -> int:
        """Run commands in order and report each: a failure names the line it came from in
        ``where`` (a file), or its number among several. ``bail`` stops at the first failure
        and says how many were not run; ``quote`` is as for ``run``. The highest exit code
        of all."""
        codes = []
        for number, command in enumerate(commands, start=1):
            place = f"statement {number}" if len(commands) > 1 else ""
            place = f"{where}:{command.line}" if where else place
            code = self.run(command.text, place, quote=quote)
            codes.append(code)
            if self.done:
                break
            if code != EXIT_OK and bail:
                left = len(commands) - number
                if left:
                    self.note(f"stopped at the first failure (--bail): {left} not run", "yellow")
                break
        failed = sum(code not in (EXIT_OK, EXIT_REFUSED) for code in codes)
        if len(commands) > 1 and (failed or EXIT_REFUSED in codes):
            self.note(
                f"{where + ': ' if where else ''}{len(commands)} commands: "
                f"{codes.count(EXIT_OK)} ran, {codes.count(EXIT_REFUSED)} refused, "
                f"{failed} failed" + (f", {len(commands) - len(codes)} not run" if bail else ""),
                "yellow",
            )
        return max(codes, default=EXIT_OK)

    def _dot(self, command: str, where: str = "", *, quote: bool = True) -> int:
        name, _, argument = command.partition(" ")
        argument = argument.strip().rstrip(";").strip()
        name = name.lower().rstrip(";")
        if name in (".exit", ".quit"):
            self.done = True
            return EXIT_OK
        handler = {
            ".help": self._help,
            ".budget": self._budget,
            ".tables": self._tables,
            ".schema": self._schema,
            ".explain": self._explain,
            ".mode": self._mode,
            ".format": self._mode,
            ".intervals": lambda argument: self._toggle(argument, "intervals"),
            ".timer": lambda argument: self._toggle(argument, "timer"),
            ".read": self._read,
            ".output": self._output,
            ".protect": self._protect,
            ".public": self._public,
        }.get(name)
        if handler is None:
            shown = name if quote else "(its text, from a file, is not shown)"
            place = f"{where}: " if where else ""
            self.note(f"{place}error: unknown command {shown}; .help lists the commands", "red")
            return EXIT_ERROR
        return handler(argument)

    def _usage(self, text: str) -> int:
        self.note(f"error: usage: {text}", "red")
        return EXIT_ERROR

    # commands

    def _timed(self, work: Callable[[], int]) -> int:
        """``work()``, followed by its run time when ``.timer`` is on (as DuckDB's CLI)."""
        start, times = time.perf_counter(), os.times()
        try:
            return work()
        finally:
            if self.timer:
                after = os.times()
                self.note(
                    f"Run Time (s): real {time.perf_counter() - start:.3f} "
                    f"user {after.user - times.user:.3f} sys {after.system - times.system:.3f}"
                )

    def _statement(self, sql: str) -> int:
        """DESCRIBE / SHOW TABLES from the schema, anything else as a privsql query."""
        schema = schema_statement(sql, self.db)
        if schema is not None:
            self.say(format_result(schema, self.fmt, color=self._colored))
            rows = len(schema)
            self.note(f"{rows} row{'s' if rows != 1 else ''} · schemas are not private: no cost")
            return EXIT_OK
        db = self.db
        result = run_with_progress(db._con, lambda: db.sql(sql), stream=self.progress_stream)
        self.say(
            format_result(
                result, self.fmt, alpha=self.alpha, color=self._colored, intervals=self.intervals
            )
        )
        shown = interval_display(self.fmt, self.intervals)
        self.note(describe_cost(result, db.budget, self.alpha, intervals=shown))
        return EXIT_OK

    def _explain(self, sql: str) -> int:
        if not sql:
            return self._usage(".explain SELECT ...")
        plan = str(self.db.explain(sql.strip().rstrip(";")))
        summary, _, generated = plan.partition("\n\n")
        self.say(summary)
        if generated:
            self.say(style(generated, "dim", self._colored))
        self.note("explain reads no data and spends nothing")
        return EXIT_OK

    def _help(self, _: str) -> int:
        self.say(HELP)
        return EXIT_OK

    def _mode(self, argument: str) -> int:
        if not argument:
            self.say(self.fmt)
            return EXIT_OK
        if argument.lower() not in FORMATS:
            return self._usage(f".mode {'|'.join(FORMATS)}")
        self.fmt = argument.lower()
        return EXIT_OK

    def _toggle(self, argument: str, setting: str) -> int:
        """``.intervals`` and ``.timer``: show the setting, or turn it ``on`` or ``off``."""
        if not argument:
            self.say("on" if getattr(self, setting) else "off")
            return EXIT_OK
        if argument.lower() not in ("on", "off"):
            return self._usage(f".{setting} on|off")
        setattr(self, setting, argument.lower() == "on")
        return EXIT_OK

    def _read(self, argument: str) -> int:
        """Run every command of a file, never one of the database's own files, and without
        quoting the file's text in syntax errors (``run``)."""
        if not argument:
            return self._usage(".read FILE")
        path = argument.strip("'\"")
        if self._reading >= MAX_READ_DEPTH:
            self.note(f"error: .read nested more than {MAX_READ_DEPTH} deep", "red")
            return EXIT_ERROR
        if self._own_file(".read", path):
            return EXIT_ERROR
        try:
            text = read_script(path)
        except OSError as error:
            self.note(f"error: {error}", "red")
            return EXIT_ERROR
        self._reading += 1
        try:
            return self.run_all(split_commands(text), where=path, bail=False, quote=False)
        finally:
            self._reading -= 1

    def _output(self, argument: str) -> int:
        """Send results to a file (created or truncated), never one of the database's own
        files; without one, back to the screen."""
        target = argument.strip("'\"")
        if target:
            # The file checked is the file opened, truncated only once checked: a name
            # swapped for a link to the key in between, or a ``~`` the check expanded and
            # ``open`` did not, reached another file than the one checked (red team 35).
            try:
                descriptor = os.open(os.path.expanduser(target), os.O_WRONLY | os.O_CREAT, 0o666)
            except OSError as error:
                self.note(f"error: {error.strerror}: {target}", "red")
                return EXIT_ERROR
            if self._own_file(".output", f"/proc/self/fd/{descriptor}", shown=target):
                os.close(descriptor)
                return EXIT_ERROR
            os.ftruncate(descriptor, 0)
            opened = os.fdopen(descriptor, "w", encoding="utf-8")  # closed by .output or close()
            self.close()
            self.out = opened
            return EXIT_OK
        self.close()
        return EXIT_OK

    def _own_file(self, command: str, path: str, shown: str | None = None) -> bool:
        """Whether ``path`` is one of the session's own files (``Session.is_own_file``),
        which ``command`` then refuses, saying so (of ``shown``, the name typed)."""
        if not self.db.is_own_file(path):
            return False
        self.note(
            f"error: {command} refuses {shown or path}: it is this database's own file (its data, "
            "write-ahead log, ledger or ledger key)",
            "red",
        )
        return True

    def _protect(self, argument: str) -> int:
        try:
            source, unit, bounds, keys = parse_protect(argument)
        except ValueError:
            return self._usage(PROTECT_USAGE)
        self.db.protect(source, unit, bounds=bounds, keys=keys)
        return self._schema(source)

    def _public(self, argument: str) -> int:
        if not argument:
            return self._usage(".public TABLE")
        self.db.public(argument)
        return self._schema(argument)

    def _budget(self, _: str) -> int:
        budget = self.db.budget
        line = f"ε budget {budget.total:g}: spent {budget.spent:g}, remaining {budget.remaining:g}"
        self.say(
            line + f"; δ budget {budget.delta_total:g}: spent {budget.delta_spent:g}, "
            f"remaining {budget.delta_remaining:g}, at most {budget.max_query_delta:g} per query"
        )
        history = budget.history
        if not history:
            self.say("no charges yet")
            return EXIT_OK
        rows = [
            (
                f"{charge.at:%Y-%m-%d %H:%M:%S}" if hasattr(charge.at, "strftime") else charge.at,
                charge.epsilon,
                charge.delta,
                " ".join(charge.query.split()),
            )
            for charge in history
        ]
        table = plain_columns(["at", "ε", "δ", "query"], rows)
        self.say(render_box(table, color=self._colored, max_width=56))
        return EXIT_OK

    def _tables(self, _: str) -> int:
        listing = self.db.tables().to_pylist()
        if not listing:
            self.say("no tables; read files with read_parquet('...') in FROM")
            return EXIT_OK
        rows = [
            (
                qualified_name(entry),
                entry["access"],
                entry["privacy_unit"] or ("" if entry["access"] == "public" else "per query"),
                ", ".join(entry["column_names"]),
            )
            for entry in listing
        ]
        box = plain_columns(["table", "access", "privacy unit", "columns"], rows)
        self.say(render_box(box, color=self._colored, max_width=60))
        return EXIT_OK

    def _schema(self, table: str) -> int:
        if not table:
            for entry in self.db.tables().to_pylist():
                if entry["column_names"]:
                    self._schema(qualified_name(entry))
            return EXIT_OK
        columns = self.db.describe(table).to_pylist()
        privacy = [c["privacy"] for c in columns]
        units = [c["column_name"] for c in columns if c["privacy"] == "privacy unit"]
        if privacy and all(p == "public" for p in privacy):
            header = f"{table}: public — anyone may read it exactly"
        elif units:
            header = f"{table}: private, privacy unit {units[0]}"
        else:
            header = f"{table}: private (no declaration: name its unit in PRIVACY_UNIT)"
        self.say(style(header, "bold", self._colored))
        rows = [(c["column_name"], c["column_type"], c["privacy"]) for c in columns]
        box = plain_columns(["column", "type", "privacy"], rows)
        self.say(render_box(box, color=self._colored, max_width=60))
        return EXIT_OK


def qualified_name(entry: dict[str, Any]) -> str:
    """A ``Session.tables()`` row's name as a query writes it (``schema.name`` off main)."""
    schema = entry["schema"]
    return entry["name"] if schema in (None, "main") else f"{schema}.{entry['name']}"


# -- the loops ---------------------------------------------------------------------------


def run_lines(shell: Shell, lines: Iterator[str], where: str | None = None) -> int:
    """Feed lines to the shell until they run out or ``.exit``; the highest exit code. A
    failure is reported with ``where:line`` when ``where`` names the input."""
    buffer = CommandBuffer()
    codes = []

    def run(command: Command) -> None:
        codes.append(shell.run(command.text, f"{where}:{command.line}" if where else ""))

    for line in lines:
        for command in buffer.feed(line.rstrip("\n")):
            run(command)
            if shell.done:
                return max(codes)
    for command in buffer.flush():
        run(command)
    return max(codes, default=EXIT_OK)


def _plain_prompts() -> Iterator[str]:
    """Lines from ``input()`` with prompts, for a terminal without prompt_toolkit."""
    pending = ""
    while True:
        try:
            line = input("   ...> " if pending.strip() else "privsql> ")
        except EOFError:
            print()
            return
        except KeyboardInterrupt:
            print()
            pending = ""
            continue
        text = f"{pending}\n{line}"
        pending = "" if is_complete(text) else text
        yield line


def banner(db: privsql.Session, database: str) -> str:
    budget = db.budget
    where = "in memory" if database == ":memory:" else database
    return (
        f"privsql {_version()} — differentially private SQL on DuckDB ({where})\n"
        f"ε budget {budget.total:g}: {budget.spent:g} spent, {budget.remaining:g} remaining. "
        "End SQL with ; · .help for help · .exit to leave"
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("privsql")
    except Exception:
        return "0.1.0"


def interact(db: privsql.Session, args: Any) -> int:
    """The REPL: prompt_toolkit on a terminal, plain lines otherwise."""
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    wants_color = not getattr(args, "no_color", False) and os.environ.get("NO_COLOR") is None
    color = tty and wants_color
    options = {"fmt": args.format, "alpha": args.alpha, "intervals": args.intervals}
    if not sys.stdin.isatty():
        shell = Shell(
            db,
            **options,
            err_color=sys.stderr.isatty() and wants_color,
            prefix="privsql: ",
            progress=sys.stderr.isatty(),
        )
        try:
            return run_lines(shell, iter(sys.stdin), "<stdin>")
        finally:
            shell.close()
    shell = Shell(db, **options, color=color, progress=tty, interactive=True)
    print(banner(db, args.database))
    try:
        import prompt_toolkit  # noqa: F401
    except ImportError:
        print('(install "privsql[repl]" for history, completion and multi-line editing)')
        tty = False
    try:
        if not tty:
            run_lines(shell, _plain_prompts())
            return EXIT_OK
        return _prompt_toolkit_loop(db, shell, args)
    finally:
        shell.close()


# -- prompt_toolkit --------------------------------------------------------------------


def history_path() -> Path:
    return Path(os.environ.get(HISTORY_ENV) or Path.home() / ".privsql_history")


def make_completer(db: privsql.Session) -> Any:
    from prompt_toolkit.completion import Completer, Completion

    class SQLCompleter(Completer):
        """Keywords, functions, tables and columns; dot commands, tables after ``.schema``
        (and ``.protect``, ``.public``) and modes after ``.mode``."""

        def __init__(self) -> None:
            self.tables: dict[str, list[tuple[str, str]]] = {}

        def refresh(self) -> None:
            try:
                self.tables = catalog(db)
            except Exception:
                pass

        def get_completions(self, document, complete_event):  # type: ignore[no-untyped-def]
            text = document.text_before_cursor
            if text.lstrip().startswith(".") and "\n" not in text:
                head, space, rest = text.lstrip().partition(" ")
                if not space:
                    for command in DOT_COMMANDS:
                        if command.startswith(head.lower()):
                            yield Completion(command, -len(head), display_meta="command")
                    return
                if head.lower() in (".schema", ".public", ".protect"):
                    for name in self.tables:
                        if name.lower().startswith(rest.lower()):
                            yield Completion(name, -len(rest), display_meta="table")
                    return
                if head.lower() in (".mode", ".format"):
                    for name in FORMATS:
                        if name.startswith(rest.lower()):
                            yield Completion(name, -len(rest), display_meta="format")
                    return
            word = document.get_word_before_cursor(pattern=re.compile(r"[\w]+"))
            if not word:
                return
            yield from self._words(text, word)

        def _words(self, text: str, word: str) -> Iterator[Completion]:
            lower = word.lower()
            mentioned = {
                name
                for name in self.tables
                if re.search(rf"\b{re.escape(name)}\b", text, re.IGNORECASE)
            }
            previous = re.findall(r"[A-Za-z_]+", text[: len(text) - len(word)])
            after_from = bool(previous) and previous[-1].upper() in ("FROM", "JOIN")
            seen: set[str] = set()

            def emit(candidate: str, meta: str) -> Iterator[Completion]:
                if candidate.lower().startswith(lower) and candidate.lower() not in seen:
                    seen.add(candidate.lower())
                    yield Completion(candidate, -len(word), display_meta=meta)

            tables = [(n, "table") for n in self.tables]
            columns = [
                (column, f"{kind.lower()} · {table}")
                for table in sorted(self.tables, key=lambda t: t not in mentioned)
                for column, kind in self.tables[table]
            ]
            upper = word[:1].isupper() or not word[:1].isalpha()
            words = [(k if upper else k.lower(), "keyword") for k in KEYWORDS]
            words += [(f if upper else f.lower(), "function") for f in FUNCTIONS]
            order = tables + columns + words if after_from else columns + words + tables
            for candidate, meta in order:
                yield from emit(candidate, meta)

    return SQLCompleter()


def _prompt_toolkit_loop(db: privsql.Session, shell: Shell, args: Any) -> int:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.filters import completion_is_selected
    from prompt_toolkit.formatted_text import HTML
    from prompt_toolkit.history import FileHistory, InMemoryHistory
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.styles import Style

    bindings = KeyBindings()

    @bindings.add("enter", filter=completion_is_selected)
    def _accept_completion(event):  # type: ignore[no-untyped-def]
        event.current_buffer.complete_state = None

    @bindings.add("enter", filter=~completion_is_selected)
    def _enter(event):  # type: ignore[no-untyped-def]
        buffer = event.current_buffer
        if is_complete(buffer.text):
            buffer.validate_and_handle()
        else:
            buffer.insert_text("\n")

    @bindings.add("escape", "enter")
    def _run_anyway(event):  # type: ignore[no-untyped-def]
        event.current_buffer.validate_and_handle()

    path = history_path()
    history: Any = InMemoryHistory()
    if not db.is_own_file(path):  # lines appended to the key or the database would ruin it
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            history = FileHistory(str(path))
        except OSError:
            pass
    completer = make_completer(db)
    completer.refresh()
    lexer = None
    try:
        from prompt_toolkit.lexers import PygmentsLexer
        from pygments.lexer import inherit, words
        from pygments.lexers.sql import SqlLexer
        from pygments.token import Keyword

        class PrivSQLLexer(SqlLexer):
            """DuckDB SQL with privsql's clause words highlighted as keywords."""

            tokens = {"root": [(words(CLAUSE_WORDS, suffix=r"\b"), Keyword), inherit]}

        lexer = PygmentsLexer(PrivSQLLexer)
    except ImportError:  # pygments is optional: no colours then
        pass
    where = html.escape("in memory" if args.database == ":memory:" else Path(args.database).name)
    toolbar = {"text": ""}

    def update_toolbar() -> None:
        budget = db.budget
        toolbar["text"] = (
            f" ε remaining <b>{budget.remaining:g}</b> of {budget.total:g} · {where} · "
            f"mode {shell.fmt} · Tab completes · .help"
        )

    update_toolbar()
    session: PromptSession = PromptSession(
        history=history,
        multiline=True,
        key_bindings=bindings,
        completer=completer,
        complete_while_typing=True,
        lexer=lexer,
        prompt_continuation=lambda width, line, soft: "...> ".rjust(width),
        bottom_toolbar=lambda: HTML(toolbar["text"]),
        style=Style.from_dict({"prompt": "ansigreen bold", "bottom-toolbar": "noreverse"})
        if shell.color
        else None,
        color_depth=None,
    )
    while not shell.done:
        try:
            text = session.prompt([("class:prompt", "privsql> ")])
        except KeyboardInterrupt:
            continue
        except EOFError:
            break
        for command in split_commands(text):
            shell.run(command.text)
            if shell.done:
                break
        completer.refresh()
        update_toolbar()
    return EXIT_OK
