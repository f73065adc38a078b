"""The notebook magic: ``%load_ext privsql``, then ``%%privsql db`` cells.

    %load_ext privsql

    %%privsql db
    SELECT origin, COUNT(*) AS flights FROM flights GROUP BY origin
    PRIVACY_UNIT tailnum BOUND ROWS 100 EPSILON 0.5

A cell runs its SQL on the privsql session held in the variable named on the line (an
in-memory session when the line names none) and returns a pandas DataFrame, shown as a
table whose noisy cells read ``value ± half-width`` of their 95% noise interval, with
what the answer cost. Options on the line:

    -o NAME          also store the privsql Result in NAME (for NAME.plot(), .accuracy())
    -k COL=V1,V2     public values of a GROUP BY key (repeatable), like db.sql(keys=...)
    -a ALPHA         interval level: 1 - ALPHA (default 0.05)
    --explain        show the plan instead of running the query; spends nothing

A refused query prints one line (the rule and why; nothing is charged) and the cell
returns nothing. Needs IPython and pandas: ``pip install "privsql[notebook]"``.
"""

from __future__ import annotations

import html
import math
import shlex
import sys
from typing import Any

import privsql

ALPHA = 0.05


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
        if word in ("-o", "--output", "-k", "--keys", "-a", "--alpha"):
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


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext privsql``: register the ``%%privsql`` cell magic."""
    from IPython.core.magic import Magics, cell_magic, magics_class

    @magics_class
    class PrivsqlMagics(Magics):
        _default: privsql.Session | None = None

        @cell_magic
        def privsql(self, line: str, cell: str) -> Any:
            """Run the cell's SQL on a privsql session; see ``privsql.magic``."""
            from IPython.core.error import UsageError

            from privsql.cli import describe_cost, error_line, statements

            try:
                options = parse_line(line)
            except ValueError as error:
                raise UsageError(f"%%privsql: {error}") from None
            db = self._session(options["session"], UsageError)
            queries = statements(cell)
            if not queries:
                raise UsageError("%%privsql: the cell holds no SQL")
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

        def _session(self, name: str | None, usage: type[Exception]) -> privsql.Session:
            if name is None:
                if PrivsqlMagics._default is None:
                    PrivsqlMagics._default = privsql.connect()
                return PrivsqlMagics._default
            if name not in self.shell.user_ns:
                raise usage(f"%%privsql: no variable named {name}")
            db = self.shell.user_ns[name]
            if not isinstance(db, privsql.Session):
                raise usage(
                    f"%%privsql: {name} is a {type(db).__name__}, not a privsql session "
                    "(make one with privsql.connect(...))"
                )
            return db

    ipython.register_magics(PrivsqlMagics)
