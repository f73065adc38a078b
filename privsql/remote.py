"""A ``privsql serve`` server as the notebook magics see it: SQL in; a table and the
server's notices (what each answer cost) out.

The server speaks the PostgreSQL protocol, so this is a psycopg connection; the server does
all of privsql's work (analysis, noise, the analyst's budget), and refusals come back as
PostgreSQL errors whose message starts with privsql's rule. Needs psycopg:
``pip install "psycopg[binary]"``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

SERVER_PORT = 5433
"""The port ``privsql serve`` listens on unless told otherwise."""
SCHEMES = ("privsql+server", "postgresql", "postgres")


class QueryFailed(Exception):
    """The server refused a query or could not answer it; the message is its one line."""


def is_server_url(url: str) -> bool:
    return urlsplit(url).scheme in SCHEMES


def libpq_url(url: str) -> str:
    """``privsql+server://alice@host/db`` as the PostgreSQL URL psycopg takes (port 5433
    unless the URL names one)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.scheme == "privsql+server" and parts.port is None:
        netloc = f"{netloc}:{SERVER_PORT}"
    return urlunsplit(("postgresql", netloc, parts.path, parts.query, ""))


class RemoteSession:
    """One analyst's connection to a ``privsql serve`` server.

    The password is best kept out of the URL (and the notebook): psycopg also reads it from
    ``PGPASSWORD`` or ``~/.pgpass``.
    """

    def __init__(self, url: str) -> None:
        import psycopg

        parts = urlsplit(url)
        self.where = f"{parts.hostname}:{parts.port or SERVER_PORT} as {parts.username}"
        try:
            self._connection = psycopg.connect(libpq_url(url), autocommit=True)
        except psycopg.Error as error:
            raise QueryFailed(_first_line(error)) from None
        self._notices: list[str] = []
        self._connection.add_notice_handler(
            lambda notice: self._notices.append(notice.message_primary or "")
        )

    def sql(self, query: str) -> tuple[Any, list[str]]:
        """The answer to ``query`` as a pandas DataFrame, and the server's notices about it."""
        import pandas as pd
        import psycopg

        self._notices.clear()
        try:
            with self._connection.cursor() as cursor:
                cursor.execute(query)  # no parameters: psycopg sends the text as it is
                if cursor.description is None:
                    return pd.DataFrame(), list(self._notices)
                names = [column.name for column in cursor.description]
                rows = cursor.fetchall()
        except psycopg.Error as error:
            message = error.diag.message_primary or _first_line(error)
            kind = "refused" if message.startswith("[") else "error"
            raise QueryFailed(f"{kind}: {message} (SQLSTATE {error.sqlstate})") from None
        return pd.DataFrame.from_records(rows, columns=names), list(self._notices)

    def close(self) -> None:
        self._connection.close()


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
