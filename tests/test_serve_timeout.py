"""Statements over public data only on the server (red team 37): they run free, so they
are bounded by the time limit, cut by a cancel request bearing the client's secret key,
and cut when their client hangs up; another client's statement, and any private one,
run on (``privsql.server.watchdog``).

``ENDLESS`` would hold the server's cores for hours: each test gives it generous bounds
(a minute where the fix takes a fraction of a second), so that on the code before the fix
it fails instead of waiting."""

from __future__ import annotations

import resource
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import privsql.server
import privsql.session
from privsql import admin
from privsql.engines import DuckDBEngine
from privsql.server import wire
from privsql.server.watchdog import Watchdog
from tests.serve_support import ANALYSTS, RawClient, by_origin, error_code, make_database
from tests.test_serve_hostile import consistent_ledger

psycopg = pytest.importorskip("psycopg")

ENDLESS = "SELECT count(*) AS n FROM range(10000000000000) t(i) WHERE i % 7 = 3"
"""Free (public data only), and hours of both cores' work."""
AIRLINES = "SELECT count(*) AS n FROM airlines"
BOUND = 60.0
"""Seconds a cut statement may take to answer: it takes well under one with the fix."""


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_database(tmp_path_factory.mktemp("timeout") / "flights.duckdb")


@contextmanager
def serving(database: Path, limit: float | None) -> Iterator[privsql.server.Running]:
    running = privsql.server.start(database, public_timeout=limit)
    try:
        yield running
    finally:
        running.stop()


def signed_in(server: privsql.server.Running, user: str = "alice") -> tuple[RawClient, int, int]:
    """A client signed in as ``user``, with the process id and secret key it was sent."""
    client = RawClient(server.host, server.port)
    messages = client.login(user, ANALYSTS[user])
    assert messages[-1][0] == b"Z"
    (key,) = [body for kind, body in messages if kind == b"K"]
    process, secret = struct.unpack("!II", key)
    client.sock.settimeout(BOUND)
    return client, process, secret


def cancel(server: privsql.server.Running, process: int, secret: int) -> None:
    """A CancelRequest, as libpq sends it; the server closes the connection unanswered."""
    with socket.create_connection((server.host, server.port), timeout=10) as connection:
        connection.sendall(struct.pack("!IIII", 16, wire.CANCEL_REQUEST, process, secret))
        assert connection.recv(1) == b""


def error(messages: list[tuple[bytes, bytes]]) -> dict[bytes, str]:
    """The fields of the one ErrorResponse among ``messages``."""
    (body,) = [body for kind, body in messages if kind == b"E"]
    return {field[:1]: field[1:].decode() for field in body.split(b"\x00") if field}


def answered_within(client: RawClient, seconds: float) -> bool:
    """Whether the server sends the client anything within ``seconds``."""
    client.sock.settimeout(seconds)
    try:
        return client.sock.recv(1, socket.MSG_PEEK) != b""
    except TimeoutError:
        return False
    finally:
        client.sock.settimeout(BOUND)


def running(client: RawClient, sql: str) -> None:
    """Send ``sql`` and give it a moment to start."""
    client.send(b"Q", sql.encode() + b"\x00")
    time.sleep(1.0)


def test_a_public_query_past_the_limit_is_cut_and_the_connection_serves_on(database):
    with serving(database, 2.0) as server:
        client, _, _ = signed_in(server)
        started = time.monotonic()
        messages = client.query(ENDLESS)
        assert time.monotonic() - started < BOUND
        found = error(messages)
        assert found[b"C"] == "57014"
        assert "statement timeout" in found[b"M"] and "2 s" in found[b"M"]
        assert b"D" not in [kind for kind, _ in messages]
        assert [kind for kind, _ in client.query(AIRLINES)] == [b"T", b"D", b"N", b"C", b"Z"]
        client.close()


def test_a_cancel_request_with_the_secret_key_cuts_a_public_query(database):
    """Another analyst's statement, and a cancel request with a wrong key, change nothing;
    the right key cuts the statement at once (not at the limit: there is none)."""
    with serving(database, None) as server:
        alice, process, secret = signed_in(server)
        bob, bob_process, bob_secret = signed_in(server, "bob")
        running(bob, ENDLESS)
        running(alice, ENDLESS)
        cancel(server, process, secret ^ 1)
        cancel(server, bob_process + 1, bob_secret)
        assert not answered_within(alice, 2.0)
        started = time.monotonic()
        cancel(server, process, secret)
        messages = alice.until_ready()
        assert time.monotonic() - started < BOUND
        found = error(messages)
        assert found[b"C"] == "57014" and "user request" in found[b"M"]
        assert not answered_within(bob, 2.0)  # bob's statement runs on
        cancel(server, bob_process, bob_secret)
        assert error(bob.until_ready())[b"C"] == "57014"
        assert [kind for kind, _ in alice.query(AIRLINES)][-1] == b"Z"
        alice.close()
        bob.close()


def test_psycopg_cancels_a_public_query(database):
    with serving(database, None) as server:
        connection = psycopg.connect(
            f"host={server.host} port={server.port} user=alice "
            f"password='{ANALYSTS['alice']}' dbname=flights sslmode=disable",
            autocommit=True,
        )
        outcome: list[BaseException] = []

        def endless() -> None:
            try:
                connection.execute(ENDLESS)
            except psycopg.Error as raised:
                outcome.append(raised)

        thread = threading.Thread(target=endless, daemon=True)
        thread.start()
        time.sleep(1.0)
        connection.cancel_safe(timeout=10)  # cancel() holds the GIL: this server is in-process
        thread.join(BOUND)
        assert [type(e) for e in outcome] == [psycopg.errors.QueryCanceled]
        assert connection.execute(AIRLINES).fetchall() == [(16,)]
        connection.close()


def test_a_cancel_request_while_the_query_is_analysed_cuts_it_as_it_starts(database, monkeypatch):
    """A cancel request that comes while the query is still being analysed (slowed down
    here) cuts its statement as it starts: before, it found no statement running and was
    lost, and the statement ran on (no time limit here). The request's end forgets it: the
    next query answers."""
    analyze = privsql.session.analyze
    analysing = threading.Event()

    def slow(query: str, *args, **kwargs):
        if "range(" in query:
            analysing.set()
            time.sleep(1.5)
        return analyze(query, *args, **kwargs)

    monkeypatch.setattr(privsql.session, "analyze", slow)
    with serving(database, None) as server:
        client, process, secret = signed_in(server)
        client.send(b"Q", ENDLESS.encode() + b"\x00")
        assert analysing.wait(BOUND)
        cancel(server, process, secret)
        started = time.monotonic()
        found = error(client.until_ready())
        assert time.monotonic() - started < BOUND
        assert found[b"C"] == "57014" and "user request" in found[b"M"]
        assert [kind for kind, _ in client.query(AIRLINES)] == [b"T", b"D", b"N", b"C", b"Z"]
        client.close()


def test_a_private_query_runs_to_its_charge_through_cancel_requests(database, monkeypatch):
    """Cancel requests with the right key keep coming while a private query draws its
    noise and before it is charged (its release slowed down to leave them time): its
    answer and its charge stand. The same requests then cut a public query."""
    release = DuckDBEngine.release
    arrived: list[bool] = []
    releasing = threading.Event()

    def slow_release(self, stages, secret):
        releasing.set()
        time.sleep(1.0)
        table = release(self, stages, secret)
        time.sleep(1.0)  # the noise is drawn, the charge not made yet
        releasing.clear()
        return table

    cancel_request = Watchdog.cancel

    def counted(self, process: int, secret: int) -> None:
        arrived.append(releasing.is_set())
        cancel_request(self, process, secret)

    monkeypatch.setattr(DuckDBEngine, "release", slow_release)
    monkeypatch.setattr(Watchdog, "cancel", counted)
    with serving(database, None) as server:
        before = consistent_ledger(database)
        client, process, secret = signed_in(server, "bob")
        stop = threading.Event()

        def cancels() -> None:
            while not stop.is_set():
                cancel(server, process, secret)
                time.sleep(0.05)

        thread = threading.Thread(target=cancels, daemon=True)
        thread.start()
        try:
            messages = client.query(by_origin(0.25))
            assert [error_code(m) for m in messages] == [None] * len(messages)
            # every row the answer has (an origin may miss partition selection at this ε)
            (tag,) = [body for kind, body in messages if kind == b"C"]
            rows = [kind for kind, _ in messages].count(b"D")
            assert tag.rstrip(b"\x00") == f"SELECT {rows}".encode() and rows >= 1
            assert sum(arrived) >= 10  # during the release, and after it before the charge
            assert error(client.query(ENDLESS))[b"C"] == "57014"
        finally:
            stop.set()
            thread.join()
        client.close()
    after = consistent_ledger(database)
    assert after["bob"] == pytest.approx(before["bob"] + 0.25)


def test_a_client_gone_frees_the_cores_its_public_query_held(database):
    """The client hangs up mid-statement: the statement stops (the process goes quiet),
    and another client's next query is answered."""
    with serving(database, None) as server:
        client, _, _ = signed_in(server)
        running(client, ENDLESS)
        client.close()
        deadline = time.monotonic() + BOUND
        while (busy := cpu_seconds(over=3.0)) > 0.3 and time.monotonic() < deadline:
            pass
        assert busy <= 0.3, f"the server used {busy:.1f} s of CPU in 3 s after its client left"
        other, _, _ = signed_in(server, "bob")
        assert [kind for kind, _ in other.query(AIRLINES)][-1] == b"Z"
        other.close()


def cpu_seconds(over: float) -> float:
    """The CPU time this process (and so the server in it) uses in the next ``over`` s."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(over)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def test_the_time_limit_is_an_option_of_privsql_serve():
    assert admin.parser().parse_args(["serve", "db"]).public_timeout == 30.0
    assert admin.parser().parse_args(["serve", "db", "--public-timeout", "0"]).public_timeout == 0
    with pytest.raises(SystemExit):
        admin.parser().parse_args(["serve", "db", "--public-timeout", "-1"])
