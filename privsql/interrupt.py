"""Interrupting a session's statement over public data only, from another thread.

A query that reads only public data runs as written, free (ε = 0), for as long as it takes:
a server bounds its time and lets its client cancel it (``privsql.server.watchdog``).
Only such a statement can be interrupted. A private query releases noisy values and then
charges them (``Session.sql``): one interrupted between the two would have drawn fresh
noise without paying for it (its answer lost, or kept by a timing of the interruption), and
one interrupted while it releases has still spent the time of a release. Its statements
are never inside ``PublicStatement.running``, so nothing here reaches them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rewriter.errors import PrivacyError

PUBLIC_TIMEOUT = 30.0
"""Seconds a server lets a statement over public data only run, by default
(``privsql serve --public-timeout``)."""


class QueryCanceled(PrivacyError):
    """A statement over public data only was interrupted (its time limit, its client's
    cancel request, or its client gone); nothing is charged for public data."""

    rule = "canceled"


class PublicStatement:
    """The statement over public data one session runs, if any, which another thread may
    interrupt with a reason (the message of the ``QueryCanceled`` it then raises)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._interrupt: Callable[[], None] | None = None
        self._started: float | None = None
        self._reason: str | None = None
        self._asked = False
        self._pending: str | None = None

    @property
    def started(self) -> float | None:
        """When (``time.monotonic()``) the statement running started; None if none runs."""
        return self._started

    @contextmanager
    def running(self, interrupt: Callable[[], None]) -> Iterator[None]:
        """The body runs one public statement, which ``interrupt()`` stops (the engine's
        connection's). An error raised after an interruption is raised as ``QueryCanceled``
        with its reason, as is one kept for it (``request``) before it starts; an
        interruption that comes as the statement ends changes nothing (DuckDB forgets an
        interrupt that finds no statement running)."""
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is None:
                self._interrupt, self._started, self._reason = interrupt, time.monotonic(), None
        if pending is not None:
            raise QueryCanceled(pending)
        try:
            yield
        except Exception:
            with self._lock:
                reason = self._reason
            if reason is None:
                raise
            raise QueryCanceled(reason) from None
        finally:
            with self._lock:
                self._interrupt, self._started, self._reason = None, None, None

    @contextmanager
    def request(self) -> Iterator[None]:
        """The body answers one client request (a server's). PostgreSQL cancels a request
        wherever it is: an interruption that comes while none of its statements over public
        data runs yet (the query is still parsed and analysed) is kept, and cuts the first
        that starts; the request's end forgets it, so it never reaches the next one."""
        with self._lock:
            self._asked, self._pending = True, None
        try:
            yield
        finally:
            with self._lock:
                self._asked, self._pending = False, None

    def interrupt(self, reason: str) -> bool:
        """Interrupt the statement running, if one is (and was not interrupted already), or,
        inside a ``request`` where none runs yet, the first to start."""
        with self._lock:
            if self._interrupt is None and self._asked and self._pending is None:
                self._pending = reason
                return True
            if self._interrupt is None or self._reason is not None:
                return False
            self._reason = reason
            self._interrupt()
        return True
