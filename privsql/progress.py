"""A progress display for private queries that take a while, in notebooks and terminals.

``watch`` runs a query's work in a thread and, once it has run ``after`` seconds, shows
DuckDB's estimate of how far the running statement is (``query_progress()``) on a bar:
an HTML ``<progress>`` element in a Jupyter notebook, a line on standard error in a
terminal, nothing elsewhere (a script's output piped to a file stays clean). Ctrl-C
(or a notebook's interrupt) stops the running statement. The bar shows only how far
DuckDB got and how long it took, no value computed from the data.
"""

from __future__ import annotations

import html
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO, TypeVar

T = TypeVar("T")
AFTER = 1.0
"""Seconds a query runs before its progress is shown (``connect(progress=True)``)."""
INTERVAL = 0.1
"""Seconds between two updates of the bar."""


class Bar(Protocol):
    """Where progress is shown: ``percent`` is DuckDB's estimate, below 0 when it has none."""

    def update(self, percent: float, elapsed: float) -> None: ...

    def close(self) -> None: ...


class TextBar:
    """A bar redrawn in place on one line of a terminal (the REPL's bar)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def update(self, percent: float, elapsed: float) -> None:
        from privsql.repl import progress_line

        self._stream.write("\r\x1b[2K" + progress_line(percent, elapsed))
        self._stream.flush()

    def close(self) -> None:
        self._stream.write("\r\x1b[2K")
        self._stream.flush()


class NotebookBar:
    """An HTML ``<progress>`` element under the running cell, removed when the query ends."""

    def __init__(self, display: Callable[..., Any]) -> None:
        self._display = display
        self._handle: Any = None

    def update(self, percent: float, elapsed: float) -> None:
        from IPython.display import HTML

        value = f' value="{percent:.0f}" max="100"' if percent >= 0 else ""
        label = f"{percent:.0f}%" if percent >= 0 else "running"
        page = HTML(
            f"<progress{value} style='width:20em'></progress> "
            f"{html.escape(label)} · {elapsed:.1f} s"
        )
        if self._handle is None:
            self._handle = self._display(page, display_id=True)
        else:
            self._handle.update(page)

    def close(self) -> None:
        if self._handle is not None:
            from IPython.display import HTML

            self._handle.update(HTML(""))


def default_bar() -> Bar | None:
    """A notebook bar in a Jupyter kernel, a text bar when standard error is a terminal,
    else None (nothing is shown)."""
    shell = _ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        from IPython.display import display

        return NotebookBar(display)
    stream = sys.stderr
    if stream is not None and stream.isatty():
        return TextBar(stream)
    return None


def _ipython() -> Any:
    module = sys.modules.get("IPython")  # only a running IPython has imported it
    return None if module is None else module.get_ipython()


def watch(
    connection: Any,
    work: Callable[[], T],
    *,
    after: float = AFTER,
    bar: Callable[[], Bar | None] = default_bar,
    interval: float = INTERVAL,
) -> T:
    """``work()``, with a progress bar from ``bar()`` once it has run ``after`` seconds.

    The work runs in a thread; this one polls ``connection.query_progress()``. Its result
    or exception is passed on as if it had run here. A KeyboardInterrupt interrupts the
    connection's running statement, waits for the work to end and is raised again.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # passed on below, in the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, name="privsql-query", daemon=True)
    start = time.monotonic()
    shown: Bar | None = None
    thread.start()
    try:
        while thread.is_alive():
            elapsed = time.monotonic() - start
            if elapsed >= after:
                shown = shown or bar()
                if shown is None:
                    thread.join()
                    break
                shown.update(_progress(connection), elapsed)
            thread.join(interval)
    except KeyboardInterrupt:
        connection.interrupt()
        thread.join()
        raise
    finally:
        if shown is not None:
            shown.close()
    if "error" in outcome:
        raise outcome.pop("error")
    return outcome["value"]


def _progress(connection: Any) -> float:
    try:
        return float(connection.query_progress())
    except Exception:  # no statement running at this instant, or an engine without it
        return -1.0
