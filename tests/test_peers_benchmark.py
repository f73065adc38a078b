"""The peer benchmark's DuckDB runner on a tiny workload (the peers themselves are not run).

It checks the runner's record format, that privsql's release is noisy but near the truth,
and that the floor and raw lines reproduce the bounded and exact truths the driver scores
every library against.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from benchmarks.core import B_SUM, RAW
from benchmarks.data import make_table

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> dict[str, dict]:
    path = tmp_path_factory.mktemp("peers") / "workload.parquet"
    con = duckdb.connect()
    make_table(con, 5000)
    con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/peers/run_duckdb.py"), str(path), "--runs=2"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    found = {r["library"]: r for r in map(json.loads, out.splitlines())}
    truths = {
        name: {str(g): [float(n), float(s)] for g, n, s in con.sql(sql.format(t="t")).fetchall()}
        for name, sql in (("exact", RAW["sum"]), ("bounded", B_SUM))
    }
    return {"records": found, **truths}


def test_every_line_has_a_timed_record(records):
    lines = records["records"]
    assert set(lines) == {
        "privsql (DuckDB)",
        "privsql (DuckDB, on Parquet)",
        "privsql (DuckDB, BOUND WEIGHTS 10)",
        "hand-written bounded query (floor)",
        "raw DuckDB GROUP BY",
    }
    for record in lines.values():
        assert len(record["releases"]) == 2
        assert record["query_s"] > 0
        assert all(len(r["answer"]) == 50 for r in record["releases"])
    assert lines["privsql (DuckDB, on Parquet)"]["load_s"] is None
    assert len(lines["privsql (DuckDB)"]["loads"]) == 3


def test_floor_and_raw_reproduce_the_truths(records):
    floor = records["records"]["hand-written bounded query (floor)"]["releases"][0]["answer"]
    raw = records["records"]["raw DuckDB GROUP BY"]["releases"][0]["answer"]
    for g, (n, s) in records["bounded"].items():
        assert floor[g] == pytest.approx([n, s])
    for g, (n, s) in records["exact"].items():
        assert raw[g] == pytest.approx([n, s])


def test_privsql_releases_are_noisy_and_fresh(records):
    """Two releases differ (no stored answer) and stay within the Laplace tails.

    COUNT noise has scale 1000 (ε/2, L1 500): 100 draws all within 25 scales of the truth
    fail with probability < 100·e⁻²⁵ ≈ 1e-9.
    """
    first, second = (r["answer"] for r in records["records"]["privsql (DuckDB)"]["releases"])
    assert first != second
    for answer in (first, second):
        for g, (n, _) in records["bounded"].items():
            assert abs(answer[g][0] - n) < 25 * 1000
