"""Analysts' passwords: SCRAM-SHA-256 (RFC 5802, RFC 7677) through the ``scramp`` library.

SCRAM is the strongest scheme PostgreSQL clients (libpq, so psql and psycopg; JDBC) speak:
the password never crosses the wire, the client proves it knows it, the server proves it
holds the verifier, and the ledger stores only a salted, iterated verifier (PostgreSQL's
own format, ``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>``) from which the
password cannot be recovered short of guessing it — nor can a client sign in with it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from scramp import ScramException, ScramMechanism

MECHANISM = "SCRAM-SHA-256"
ITERATIONS = 4096
"""PBKDF2 iterations of a new verifier (PostgreSQL's default)."""

_MECHANISM = ScramMechanism(MECHANISM)
_DECOY_KEY = secrets.token_bytes(32)
"""The server's secret for the salts of names that are no analyst's (``_decoy``)."""


def make_verifier(password: str) -> str:
    """A salted SCRAM-SHA-256 verifier of ``password``, to store in the ledger."""
    if not password:
        raise ValueError("the password must not be empty")
    salt, stored_key, server_key, iterations = _MECHANISM.make_auth_info(
        password, iteration_count=ITERATIONS
    )
    return f"{MECHANISM}${iterations}:{_b64(salt)}${_b64(stored_key)}:{_b64(server_key)}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _parse(verifier: str) -> tuple[bytes, bytes, bytes, int]:
    """(salt, StoredKey, ServerKey, iterations), as ``scramp`` wants them."""
    mechanism, salted, keys = verifier.split("$")
    if mechanism != MECHANISM:
        raise ValueError("not a SCRAM-SHA-256 verifier")
    iterations, salt = salted.split(":")
    stored_key, server_key = keys.split(":")
    decode = base64.b64decode
    return decode(salt), decode(stored_key), decode(server_key), int(iterations)


def _decoy(analyst: str) -> str:
    """A verifier no password matches, for a name that is no analyst's: its salt is derived
    from the name (as PostgreSQL does), so asking twice shows the same salt, as a real
    analyst's would, and making it costs no key stretching, so it takes no longer."""
    salt = hmac.new(_DECOY_KEY, analyst.encode(), hashlib.sha256).digest()[:16]
    keys = f"{_b64(secrets.token_bytes(32))}:{_b64(secrets.token_bytes(32))}"
    return f"{MECHANISM}${ITERATIONS}:{_b64(salt)}${keys}"


class Exchange:
    """One SCRAM exchange on the server's side: the client's first message in, the
    server's first out; the client's final in, the server's final out (or a failure)."""

    def __init__(self, verifier: str | None, analyst: str) -> None:
        auth_info = _parse(verifier if verifier is not None else _decoy(analyst))
        self._known = verifier is not None
        # The user name inside SCRAM messages is ignored (libpq sends an empty one): the
        # analyst is the one named in the startup message, whose verifier this is.
        self._server = _MECHANISM.make_server(lambda _name: auth_info)

    def first(self, client_first: str) -> str:
        """The server-first message; raises ``Failed`` on a malformed client message."""
        try:
            self._server.set_client_first(_named(client_first))
        except (ScramException, ValueError):
            raise Failed() from None
        # The proofs cover the message as the client sent it.
        self._server.client_first_bare = client_first.split(",", 2)[2]
        return self._server.get_server_first()

    def final(self, client_final: str) -> str:
        """The server-final message; raises ``Failed`` unless the client proved the password."""
        try:
            self._server.set_client_final(client_final)
        except ScramException:
            raise Failed() from None
        if not self._known:
            raise Failed()
        return self._server.get_server_final()


def _named(client_first: str) -> str:
    """``client_first`` with a placeholder user name if it has none: libpq sends an empty
    one (RFC 5802 wants one; PostgreSQL ignores it), which ``scramp`` would refuse."""
    header, bare = client_first.split(",", 2)[:2], client_first.split(",", 2)[2]
    if bare.startswith("n=,"):
        bare = "n=*," + bare.removeprefix("n=,")
    return ",".join([*header, bare])


class Failed(Exception):
    """Authentication failed (wrong password, unknown analyst or a malformed exchange)."""
