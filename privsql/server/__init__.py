"""``privsql serve``: a database served to analysts over the PostgreSQL wire protocol.

The server holds the database, its ledger and key; analysts connect with any PostgreSQL
client (psql, psycopg, SQLAlchemy, pandas, BI tools) as the analysts ``privsql analysts``
added, and can only send SQL: every statement goes through the same analysis as
``Session.sql`` and every answer is charged to the analyst and to the database
(docs/serving.md).

``start`` runs a server in a background thread of this process (tests, notebooks, the
benchmark); ``serve`` runs one in the foreground until interrupted (the command).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from privsql.interrupt import PUBLIC_TIMEOUT
from privsql.server.backend import Backend
from privsql.server.wire import Server

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5433


@dataclass(frozen=True)
class Running:
    """A server running in a background thread: where it listens, and how to stop it."""

    host: str
    port: int
    stop: Callable[[], None]

    def dsn(self, user: str, password: str, dbname: str = "privsql") -> str:
        """A libpq connection string for ``user`` (for psql and psycopg)."""
        return (
            f"host={self.host} port={self.port} user={user} password={password} "
            f"dbname={dbname} sslmode=disable"
        )


def _server(
    database: str | Path, host: str, port: int, share_answers: bool, public_timeout: float | None
) -> tuple[Server, Backend]:
    backend = Backend(database, share_answers=share_answers)
    try:
        return Server((host, port), backend, public_timeout), backend
    except BaseException:
        backend.close()
        raise


def start(
    database: str | Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = 0,
    share_answers: bool = False,
    public_timeout: float | None = PUBLIC_TIMEOUT,
) -> Running:
    """Serve ``database`` from a background thread; ``port=0`` picks a free port.
    ``public_timeout`` is the seconds a statement over public data only may run (None:
    no limit); a private one always runs to its charge.

    Returns the address and a ``stop()`` that closes the listening socket, cuts off the
    clients still connected (a private query running finishes first; a public one is
    interrupted) and closes the database.
    """
    server, backend = _server(database, host, port, share_answers, public_timeout)
    thread = threading.Thread(target=server.serve_forever, name="privsql-serve", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()
        server.disconnect_all()
        backend.close()

    bound_host, bound_port = server.server_address[:2]
    return Running(str(bound_host), int(bound_port), stop)


def serve(
    database: str | Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    share_answers: bool = False,
    public_timeout: float | None = PUBLIC_TIMEOUT,
    ready: Callable[[str, int], None] | None = None,
) -> None:
    """Serve ``database`` in the foreground until interrupted (``privsql serve``)."""
    server, backend = _server(database, host, port, share_answers, public_timeout)
    try:
        if ready is not None:
            bound_host, bound_port = server.server_address[:2]
            ready(str(bound_host), int(bound_port))
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.disconnect_all()
        backend.close()
