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
import os
import queue
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

    done = _run(target)
    start = time.monotonic()
    shown: Bar | None = None
    try:
        while not done.is_set():
            elapsed = time.monotonic() - start
            if elapsed >= after:
                shown = shown or bar()
                if shown is None:
                    done.wait()
                    break
                shown.update(_progress(connection), elapsed)
            done.wait(interval)
    except KeyboardInterrupt:
        connection.interrupt()
        done.wait()
        raise
    finally:
        if shown is not None:
            shown.close()
    if "error" in outcome:
        raise outcome.pop("error")
    return outcome["value"]


class _Worker:
    """A thread kept to run watched work, one piece at a time: starting a thread for each
    query cost about 1 ms of a 20 ms query."""

    def __init__(self) -> None:
        self.busy = False
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._serve, name="privsql-query", daemon=True).start()

    def _serve(self) -> None:
        while True:
            target, done = self._jobs.get()
            try:
                target()  # catches everything itself
            finally:
                self.busy = False
                done.set()
                # kept no longer: the work's session is freed once its owner drops it
                del target, done

    def submit(self, target: Callable[[], None], done: threading.Event) -> None:
        self.busy = True
        self._jobs.put((target, done))


_worker: _Worker | None = None
_workers = threading.Lock()


def _forget_worker() -> None:
    global _worker, _workers
    _worker, _workers = None, threading.Lock()  # a forked child has no such thread


os.register_at_fork(after_in_child=_forget_worker)


def _run(target: Callable[[], None]) -> threading.Event:
    """Start ``target()`` in another thread: the kept worker when it is idle, else (work
    still running, after a second Ctrl-C) a thread of its own. Set once it has returned."""
    global _worker
    done = threading.Event()
    with _workers:
        if _worker is None:
            _worker = _Worker()
        if not _worker.busy:
            _worker.submit(target, done)
            return done

    def alone() -> None:
        try:
            target()
        finally:
            done.set()

    threading.Thread(target=alone, name="privsql-query", daemon=True).start()
    return done


def _progress(connection: Any) -> float:
    try:
        return float(connection.query_progress())
    except Exception:  # no statement running at this instant, or an engine without it
        return -1.0
