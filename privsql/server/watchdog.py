"""Clients' statements over public data only: a time limit, cancel requests, clients gone.

A query over public data only runs as written, free (ε = 0). Without a limit, two such
queries (``SELECT count(*) FROM range(10**13) t(i)``) held both cores of a server for
hours, cancel requests were ignored, and a query ran on after its client had gone (red
team 37). ``Watchdog`` keeps each signed-in client by the process id and secret key it was
sent (BackendKeyData) and, in one thread while any client is signed in, interrupts a
client's public statement

- past the time limit (``privsql serve --public-timeout``), answered with SQLSTATE 57014;
- when its client has hung up: on Linux the peer's shutdown (``POLLRDHUP``) is seen even
  behind messages not read yet, as PostgreSQL's ``client_connection_check_interval`` sees
  it; elsewhere only a connection broken both ways is, and the time limit bounds the rest;

and ``cancel`` interrupts one for a cancel request bearing the client's process id and
secret key. A private statement is never interrupted (``privsql.interrupt``): it runs to
its charge, whatever the limit, a cancel request or its client does.
"""

from __future__ import annotations

import secrets
import select
import socket
import threading
import time
from dataclasses import dataclass

from privsql.interrupt import PUBLIC_TIMEOUT
from privsql.server.backend import ClientSession

TICK = 0.25
"""Seconds between the watchdog's looks at the clients' statements: a statement is cut at
most this long past its limit, or after its client hung up."""
HUNG_UP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)
TIMED_OUT = (
    "canceling statement due to statement timeout: a query over public data only may run "
    "for {limit:g} s on this server"
)
CANCELED = "canceling statement due to user request"
GONE = "canceling statement: its client has gone"


@dataclass(frozen=True)
class _Client:
    secret: int
    session: ClientSession
    connection: socket.socket


class Watchdog:
    """The signed-in clients by process id; their public statements' time limit (None for
    none), cancel requests, and hang-ups."""

    def __init__(self, limit: float | None = PUBLIC_TIMEOUT) -> None:
        self.limit = limit
        self._changed = threading.Condition()
        self._clients: dict[int, _Client] = {}
        self._thread: threading.Thread | None = None

    def add(self, session: ClientSession, connection: socket.socket) -> tuple[int, int]:
        """Watch a signed-in client; its process id and secret key. The key is drawn from
        the system's random source (buenavista's, from ``random``, could be predicted by
        a client that saw a few hundred of them), the id anew for each client."""
        secret = secrets.randbits(32)
        with self._changed:
            process = 1 + secrets.randbelow(2**31 - 1)
            while process in self._clients:
                process = 1 + secrets.randbelow(2**31 - 1)
            self._clients[process] = _Client(secret, session, connection)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="privsql-watchdog", daemon=True
                )
                self._thread.start()
        return process, secret

    def remove(self, process: int) -> None:
        """Stop watching a client. Once this returns nothing here interrupts its session,
        which goes back to its analyst's pool for another client."""
        with self._changed:
            self._clients.pop(process, None)

    def cancel(self, process: int, secret: int) -> None:
        """A cancel request: interrupt the client's public statement, if one runs and the
        key is the client's (a process id alone, which is no secret, cancels nothing)."""
        with self._changed:
            client = self._clients.get(process)
            if client is not None and secrets.compare_digest(
                secret.to_bytes(4, "big"), client.secret.to_bytes(4, "big")
            ):
                client.session.interrupt(CANCELED)

    def _watch(self) -> None:
        """Every ``TICK`` while a client is signed in: interrupt the public statements past
        the limit or whose clients hung up. Under the lock, so that a client ``remove``d
        is never interrupted afterwards."""
        with self._changed:
            while self._clients:
                self._changed.wait(TICK)
                now = time.monotonic()
                for client in self._clients.values():
                    started = client.session.public_started()
                    if started is None:
                        continue
                    if self.limit is not None and now - started >= self.limit:
                        client.session.interrupt(TIMED_OUT.format(limit=self.limit))
                    elif _hung_up(client.connection):
                        client.session.interrupt(GONE)
            self._thread = None


def _hung_up(connection: socket.socket) -> bool:
    """Whether the client closed its end of the connection, or the connection broke."""
    poller = select.poll()
    try:
        poller.register(connection, HUNG_UP)
    except ValueError:  # closed here already
        return True
    return bool(poller.poll(0))
