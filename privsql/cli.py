"""The ``privsql`` command: run one query (``-c``) or a file of queries (``-f``).

    privsql flights.duckdb -c "SELECT COUNT(*) FROM flights PRIVACY_UNIT tailnum BOUND ROWS 10"

Results go to stdout as a table, the ε charged and refusals to stderr; the exit code
is 0 on success and 1 on a refusal or error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sqlglot.tokens import TokenType

import privsql
from privsql.result import Result
from rewriter.dialect import PrivSQL


def format_table(result: Result) -> str:
    """A DuckDB-style boxed table of a result."""
    header = result.columns
    rows = [["NULL" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v) for v in row]
            for row in result.fetchall()]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(left: str, mid: str, right: str) -> str:
        return left + mid.join("─" * (w + 2) for w in widths) + right

    def cells(values: Sequence[str]) -> str:
        return "│" + "│".join(f" {v:>{w}} " for v, w in zip(values, widths, strict=True)) + "│"

    body = [line("┌", "┬", "┐"), cells(header), line("├", "┼", "┤")]
    body += [cells(r) for r in rows]
    body.append(line("└", "┴", "┘"))
    return "\n".join(body)


def _statements(text: str) -> list[str]:
    """Split on the semicolons the SQL tokenizer sees (not those inside strings)."""
    cuts = [t.start for t in PrivSQL().tokenize(text) if t.token_type == TokenType.SEMICOLON]
    pieces = [text[a:b] for a, b in zip([0, *(c + 1 for c in cuts)], [*cuts, len(text)])]
    return [p.strip() for p in pieces if p.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="privsql", description=__doc__.splitlines()[0])
    parser.add_argument("database", nargs="?", default=":memory:")
    parser.add_argument("--budget", type=float, help="total ε of a new database's ledger")
    parser.add_argument("--epsilon", type=float, default=1.0, help="ε of a query naming none")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("-c", dest="command", help="run one SQL statement")
    source.add_argument("-f", dest="file", help="run the statements of a file")
    args = parser.parse_args(argv)
    if args.command is None and args.file is None:
        parser.error("give -c SQL or -f FILE (the interactive REPL is not available yet)")
    text = args.command if args.command is not None else open(args.file).read()
    try:
        with privsql.connect(args.database, budget=args.budget, epsilon=args.epsilon) as db:
            for statement in _statements(text):
                result = db.sql(statement)
                print(format_table(result))
                cost = "stored answer, no cost" if result.cached else f"ε = {result.epsilon:g}"
                print(f"{cost}; remaining ε = {db.budget.remaining:g}", file=sys.stderr)
    except privsql.PrivacyError as error:
        print(f"privsql: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
