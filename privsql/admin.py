"""The data owner's commands: serve a database, administer its analysts and its budget.

    privsql serve flights.duckdb [--host 127.0.0.1] [--port 5433] [--share-answers]
                                 [--public-timeout 30]
    privsql analysts flights.duckdb add alice --budget 1.5     # password from stdin
    privsql analysts flights.duckdb list
    privsql analysts flights.duckdb set-budget alice --budget 3
    privsql analysts flights.duckdb set-password alice
    privsql analysts flights.duckdb remove alice
    privsql budget flights.duckdb [--total 5] [--delta-total 1e-4]

They open the database's ledger with its key (the file next to the database), so only
its owner can run them; a served database is locked by the server, so stop it first.
docs/serving.md describes them.
"""

from __future__ import annotations

import argparse
import getpass
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from privsql.interrupt import PUBLIC_TIMEOUT
from privsql.ledger import KEY_SUFFIX, Ledger, open_database

COMMANDS = ("serve", "analysts", "budget")
EXIT_OK, EXIT_ERROR = 0, 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="privsql", description="privsql's owner commands")
    commands = p.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve a database over the PostgreSQL protocol")
    serve.add_argument("database")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=5433, help="port to listen on")
    serve.add_argument(
        "--share-answers",
        action="store_true",
        help="return an answer stored for one analyst to the others too (default: not)",
    )
    serve.add_argument(
        "--public-timeout",
        type=_seconds,
        default=PUBLIC_TIMEOUT,
        metavar="SECONDS",
        help="seconds a query over public data only may run; 0 for no limit (default: "
        f"{PUBLIC_TIMEOUT:g}; a private query always runs to its charge)",
    )

    analysts = commands.add_parser("analysts", help="add, list, change or remove analysts")
    analysts.add_argument("database")
    actions = analysts.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add an analyst (password read from stdin)")
    add.add_argument("name")
    add.add_argument("--budget", type=float, required=True, help="the analyst's total ε")
    add.add_argument("--delta-budget", type=float, help="total δ (default: the database's)")
    actions.add_parser("list", help="each analyst's budget and what they spent")
    change = actions.add_parser("set-budget", help="change an analyst's ε or δ budget")
    change.add_argument("name")
    change.add_argument("--budget", type=float, help="the analyst's total ε")
    change.add_argument("--delta-budget", type=float, help="the analyst's total δ")
    password = actions.add_parser("set-password", help="change an analyst's password")
    password.add_argument("name")
    remove = actions.add_parser("remove", help="remove an analyst (their history stays)")
    remove.add_argument("name")

    budget = commands.add_parser("budget", help="show or change the database's totals")
    budget.add_argument("database")
    budget.add_argument("--total", type=float, help="new ε total (not below what was spent)")
    budget.add_argument("--delta-total", type=float, help="new δ total")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        with _ledger(args.database) as ledger:
            if args.command == "budget":
                return _budget(ledger, args)
            return _analysts(ledger, args)
    except Exception as error:  # a missing file, a locked database, a refused change
        message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        print(f"privsql: error: {message}", file=sys.stderr)
        return EXIT_ERROR


@contextmanager
def _ledger(database: str) -> Iterator[Ledger]:
    """The ledger of an existing database file (never creating one), closed on exit."""
    path = Path(database)
    if not path.is_file():
        raise FileNotFoundError(f"no such database: {database}")
    con = open_database(path)
    try:
        ledger = Ledger(con.cursor(), None)
        try:
            yield ledger
        finally:
            ledger.close()
    finally:
        con.close()


def read_password(prompt: str = "password: ") -> str:
    """A new password: asked twice without echo on a terminal, else stdin's first line."""
    if sys.stdin.isatty():
        first = getpass.getpass(prompt)
        if getpass.getpass("again: ") != first:
            raise ValueError("the passwords differ")
        password = first
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise ValueError("the password must not be empty")
    return password


def _analysts(ledger: Ledger, args: argparse.Namespace) -> int:
    from privsql.server.auth import make_verifier

    if args.action == "add":
        ledger.add_analyst(
            args.name, make_verifier(read_password()), args.budget, args.delta_budget
        )
        print(f"added {args.name}: ε budget {args.budget:g}")
    elif args.action == "list":
        print("name\tε spent\tε total\tδ spent\tδ total")
        for analyst in ledger.analysts():
            print(
                f"{analyst.name}\t{analyst.spent:g}\t{analyst.total:g}\t"
                f"{analyst.delta_spent:g}\t{analyst.delta_total:g}"
            )
    elif args.action == "set-budget":
        ledger.set_analyst(args.name, epsilon=args.budget, delta=args.delta_budget)
    elif args.action == "set-password":
        ledger.set_analyst(args.name, verifier=make_verifier(read_password()))
    else:
        ledger.remove_analyst(args.name)
    return EXIT_OK


def _budget(ledger: Ledger, args: argparse.Namespace) -> int:
    if args.total is not None or args.delta_total is not None:
        ledger.set_total(args.total, args.delta_total)
    print(
        f"ε spent {ledger.spent:g} of {ledger.total:g}; "
        f"δ spent {ledger.delta_spent:g} of {ledger.delta_total:g}"
    )
    return EXIT_OK


def _seconds(text: str) -> float:
    """A time limit in seconds: a finite number, 0 or more."""
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text}")
    return value


def _serve(args: argparse.Namespace) -> int:
    from privsql.server import serve

    path = Path(args.database)
    if not path.is_file():
        raise FileNotFoundError(f"no such database: {args.database}")
    for file in (path, path.with_name(path.name + KEY_SUFFIX)):
        if file.exists() and file.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            print(
                f"privsql: warning: {file} can be read by other users (chmod 600 it)",
                file=sys.stderr,
            )

    def ready(host: str, port: int) -> None:
        print(f"privsql: serving {args.database} on {host}:{port}", file=sys.stderr, flush=True)

    serve(
        args.database,
        host=args.host,
        port=args.port,
        share_answers=args.share_answers,
        public_timeout=args.public_timeout or None,
        ready=ready,
    )
    return EXIT_OK
