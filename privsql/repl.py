"""The privsql REPL: ``privsql [DATABASE] [--budget E]``.

Built on prompt_toolkit (``pip install "privsql[repl]"``): persistent history, multi-line
input that runs when a statement ends with ``;``, completion of keywords, tables and
columns, dot commands (``.help`` lists them), boxed results with each noisy cell's ±
interval and the ε charged, and a progress bar on long queries (Ctrl-C cancels them).
A refusal prints one line and the REPL carries on.

Without a terminal (input piped in) it reads commands from stdin with no prompts and
exits non-zero if any command was refused (1) or failed (2).
"""

from __future__ import annotations

import html
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import privsql
from privsql.cli import (
    ALPHA,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_REFUSED,
    FORMATS,
    CommandBuffer,
    describe_cost,
    error_line,
    format_result,
    is_complete,
    plain_columns,
    render_box,
    style,
)

HISTORY_ENV = "PRIVSQL_HISTORY"
"""Where the REPL keeps its history; default ``~/.privsql_history``."""

HELP = """\
End SQL with ; to run it (Enter on an unfinished statement starts a new line;
Alt-Enter runs it anyway). Tab completes keywords, tables and columns.

  .tables               tables and views, and who may read them how
  .schema [TABLE]       columns, types, the privacy unit and declared bounds and keys
  .explain SQL          the plan: sensitivities, noise scales and ε; spends nothing
                        (EXPLAIN SELECT ...; works too)
  .budget               ε spent and remaining, and every charge
  .format [FORMAT]      show or set the output format: table, csv or json
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
    "TRY_CAST", "EXPLAIN", "DISTINCT", "TRUE", "FALSE",
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
DOT_COMMANDS = (".budget", ".exit", ".explain", ".format", ".help", ".quit", ".schema", ".tables")
# fmt: on


# -- the catalogue ---------------------------------------------------------------------


def catalog(db: privsql.Session) -> dict[str, list[tuple[str, str]]]:
    """Tables and views of the database (privsql's own schema hidden): name -> columns, types."""
    rows = db._con.execute(
        """
        SELECT schema_name, table_name, column_name, data_type
        FROM duckdb_columns()
        WHERE NOT internal AND schema_name <> '__privsql'
          AND database_name = current_database()
        ORDER BY schema_name <> 'main', schema_name, table_name, column_index
        """
    ).fetchall()
    tables: dict[str, list[tuple[str, str]]] = {}
    for schema, table, column, kind in rows:
        name = table if schema == "main" else f"{schema}.{table}"
        tables.setdefault(name, []).append((column, kind))
    return tables


def declarations(db: privsql.Session) -> dict[str, tuple[Any, bool]]:
    """The data owner's declarations: lower-case name -> (protection or None, public)."""
    try:
        return dict(db._ledger.declarations())
    except Exception:  # the ledger is another module's: never let a listing fail on it
        return {}


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


class Shell:
    """Runs commands (SQL or dot commands) on a session and prints what they return.

    ``interactive`` prints everything to ``out``; otherwise results go to ``out`` and
    costs, refusals and errors to ``err`` (with ``prefix``). ``run`` returns an exit code.
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
        self.color = color
        self.err_color = color if err_color is None else err_color
        self.interactive = interactive
        self.prefix = prefix
        self.out = out or sys.stdout
        self.err = self.out if interactive else (err or sys.stderr)
        self.done = False
        self.progress_stream = (self.out if interactive else self.err) if progress else None
        if progress:
            try:  # DuckDB reports progress only with the bar on; privsql draws its own
                db._con.execute("SET enable_progress_bar = true")
                db._con.execute("SET enable_progress_bar_print = false")
            except Exception:
                self.progress_stream = None

    # output

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def note(self, text: str, name: str = "dim") -> None:
        color = self.color if self.interactive else self.err_color
        self.err.write(style(self.prefix + text if not self.interactive else text, name, color))
        self.err.write("\n")
        self.err.flush()

    def fail(self, error: BaseException) -> int:
        message, code = error_line(error)
        self.note(message, "red")
        return code

    # dispatch

    def run(self, command: str) -> int:
        """Run one command: a dot command or one SQL statement (a trailing ``;`` is optional)."""
        command = command.strip()
        if not command:
            return EXIT_OK
        try:
            if command.startswith("."):
                return self._dot(command)
            explained = re.match(r"(?is)^explain\s+(?!analy[sz]e\b)(.*)$", command)
            if explained:
                return self._explain(explained.group(1))
            return self._query(command)
        except Interrupted:
            self.note("interrupted: the query was cancelled and nothing was charged", "yellow")
            return EXIT_ERROR
        except Exception as error:
            return self.fail(error)

    def _dot(self, command: str) -> int:
        name, _, argument = command.partition(" ")
        argument = argument.strip().rstrip(";").strip()
        name = name.lower().rstrip(";")
        if name in (".exit", ".quit"):
            self.done = True
            return EXIT_OK
        if name == ".help":
            self.say(HELP)
            return EXIT_OK
        if name == ".budget":
            return self._budget()
        if name == ".tables":
            return self._tables()
        if name == ".schema":
            return self._schema(argument)
        if name == ".explain":
            if not argument:
                self.note("usage: .explain SELECT ...", "red")
                return EXIT_ERROR
            return self._explain(argument)
        if name == ".format":
            if not argument:
                self.say(self.fmt)
                return EXIT_OK
            if argument not in FORMATS:
                self.note(f"error: .format takes one of {', '.join(FORMATS)}", "red")
                return EXIT_ERROR
            self.fmt = argument
            return EXIT_OK
        self.note(f"error: unknown command {name}; .help lists the commands", "red")
        return EXIT_ERROR

    # commands

    def _query(self, sql: str) -> int:
        db = self.db
        result = run_with_progress(db._con, lambda: db.sql(sql), stream=self.progress_stream)
        self.say(
            format_result(
                result, self.fmt, alpha=self.alpha, color=self.color, intervals=self.intervals
            )
        )
        self.note(describe_cost(result, db.budget, self.alpha))
        return EXIT_OK

    def _explain(self, sql: str) -> int:
        plan = str(self.db.explain(sql.strip().rstrip(";")))
        summary, _, generated = plan.partition("\n\n")
        self.say(summary)
        if generated:
            self.say(style(generated, "dim", self.color))
        self.note("explain reads no data and spends nothing")
        return EXIT_OK

    def _budget(self) -> int:
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
        self.say(render_box(table, color=self.color, max_width=56))
        return EXIT_OK

    def _tables(self) -> int:
        tables = catalog(self.db)
        if not tables:
            self.say("no tables; read files with read_parquet('...') in FROM")
            return EXIT_OK
        declared = declarations(self.db)
        rows = []
        for name, columns in tables.items():
            protection, public = declared.get(name.lower(), (None, False))
            if public:
                access, unit = "public", ""
            elif protection is not None:
                access, unit = "private", protection.privacy_unit
            else:
                access, unit = "private", "chosen per query"
            rows.append((name, access, unit, ", ".join(c for c, _ in columns)))
        box = plain_columns(["table", "access", "privacy unit", "columns"], rows)
        self.say(render_box(box, color=self.color, max_width=60))
        return EXIT_OK

    def _schema(self, table: str) -> int:
        tables = catalog(self.db)
        if not table:
            for name in tables:
                self._schema(name)
            return EXIT_OK
        matches = [n for n in tables if n.lower() == table.lower().strip('"')]
        if not matches:
            self.note(f"error: no table {table}; .tables lists them", "red")
            return EXIT_ERROR
        name = matches[0]
        protection, public = declarations(self.db).get(name.lower(), (None, False))
        if public:
            header = f"{name}: public — anyone may read it exactly"
        elif protection is not None:
            header = f"{name}: private, privacy unit {protection.privacy_unit}"
        else:
            header = f"{name}: private (no declaration: name its unit in PRIVACY_UNIT)"
        self.say(style(header, "bold", self.color))
        bounds = {k.lower(): v for k, v in (protection.bounds if protection else {}).items()}
        keys = {k.lower(): v for k, v in (protection.keys if protection else {}).items()}
        rows = []
        for column, kind in tables[name]:
            bound = bounds.get(column.lower())
            key = keys.get(column.lower())
            rows.append(
                (
                    column,
                    kind,
                    f"{bound[0]:g} .. {bound[1]:g}" if bound else "",
                    ", ".join(map(str, key)) if key else "",
                )
            )
        names = ["column", "type", "declared bounds", "public keys"]
        used = [i for i in range(4) if i < 2 or any(r[i] for r in rows)]
        table_rows = [[r[i] for i in used] for r in rows]
        self.say(render_box(plain_columns([names[i] for i in used], table_rows), color=self.color))
        return EXIT_OK


# -- the loops ---------------------------------------------------------------------------


def _worst(codes: Iterable[int]) -> int:
    codes = list(codes)
    return EXIT_ERROR if EXIT_ERROR in codes else EXIT_REFUSED if EXIT_REFUSED in codes else EXIT_OK


def run_lines(shell: Shell, lines: Iterator[str]) -> int:
    """Feed lines to the shell until they run out or ``.exit``; the worst exit code."""
    buffer = CommandBuffer()
    codes = []
    for line in lines:
        for command in buffer.feed(line.rstrip("\n")):
            codes.append(shell.run(command))
            if shell.done:
                return _worst(codes)
    codes += [shell.run(command) for command in buffer.flush()]
    return _worst(codes)


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
        return run_lines(shell, iter(sys.stdin))
    shell = Shell(db, **options, color=color, progress=tty, interactive=True)
    print(banner(db, args.database))
    try:
        import prompt_toolkit  # noqa: F401
    except ImportError:
        print('(install "privsql[repl]" for history, completion and multi-line editing)')
        run_lines(shell, _plain_prompts())
        return EXIT_OK
    if not tty:
        run_lines(shell, _plain_prompts())
        return EXIT_OK
    return _prompt_toolkit_loop(db, shell, args)


# -- prompt_toolkit --------------------------------------------------------------------


def history_path() -> Path:
    return Path(os.environ.get(HISTORY_ENV) or Path.home() / ".privsql_history")


def make_completer(db: privsql.Session) -> Any:
    from prompt_toolkit.completion import Completer, Completion

    class SQLCompleter(Completer):
        """Keywords, functions, tables and columns; dot commands and tables after ``.schema``."""

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
                if head.lower() == ".schema":
                    for name in self.tables:
                        if name.lower().startswith(rest.lower()):
                            yield Completion(name, -len(rest), display_meta="table")
                    return
                if head.lower() == ".format":
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

    try:
        path = history_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        history: Any = FileHistory(str(path))
    except OSError:
        history = InMemoryHistory()
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
            f"format {shell.fmt} · Tab completes · .help"
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
        buffer = CommandBuffer()
        commands = [c for line in text.splitlines() for c in buffer.feed(line)] + buffer.flush()
        for command in commands:
            shell.run(command)
            if shell.done:
                break
        completer.refresh()
        update_toolbar()
    return EXIT_OK
