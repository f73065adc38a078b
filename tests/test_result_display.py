"""How an answer shows itself: the boxed text and HTML tables with their intervals, the
half-width columns of df/pl/arrow, clamping into known ranges (post-processing), the
message when polars is missing, and the user's own connection left as it was."""

from __future__ import annotations

import datetime
import io
import math
import sys
import threading
import types
from decimal import Decimal

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import privsql
from privsql.cli import format_interval
from privsql.progress import NotebookBar, default_bar, watch
from rewriter.functions import DISABLED_OPTIMIZERS

BY_ORIGIN = """
    SELECT origin, COUNT(*) AS flights, AVG(dep_delay CLAMPED BETWEEN -30 AND 120) AS delay
    FROM flights GROUP BY origin
    PRIVACY_UNIT tailnum BOUND ROWS 200 MAX_GROUPS 3 EPSILON 0.5
"""
NEARLY_EMPTY = """
    SELECT month, COUNT(*) AS flights, SUM(distance CLAMPED BETWEEN 0 AND 5000) AS miles,
           AVG(dep_delay CLAMPED BETWEEN 0 AND 60) AS delay,
           MEDIAN(air_time CLAMPED BETWEEN 20 AND 600) AS air_time
    FROM flights WHERE dep_delay > 1000 GROUP BY month
    PRIVACY_UNIT tailnum BOUND ROWS 1 MAX_GROUPS 12 EPSILON 0.05
"""
"""Groups of (almost) no rows: the noise puts counts below 0 and AVGs outside their bounds."""
MONTHS = {"month": list(range(1, 13))}


def cells(result: privsql.Result, name: str) -> list[str]:
    """The column's cells as the REPL writes them: ``value ± half-width``."""
    values = result.arrow().column(name).to_pylist()
    widths = result.accuracy().column(name).to_pylist()
    return [" ".join(format_interval(v, w)).strip() for v, w in zip(values, widths, strict=True)]


def test_an_answer_prints_as_a_boxed_table_with_intervals_and_its_cost(flights_db):
    result = flights_db.sql(BY_ORIGIN)
    text = repr(result)
    assert str(result) == text
    lines = text.splitlines()
    assert lines[0].startswith("┌") and "│ origin" in lines[1] and "VARCHAR" in lines[2]
    for name in ("flights", "delay"):
        assert name in lines[1]
        for cell in cells(result, name):
            assert "±" in cell and cell in text
    assert f"ε = {result.epsilon:g} charged" in lines[-1]
    assert "± 95% noise interval" in lines[-1]
    stored = flights_db.sql(BY_ORIGIN)
    assert "stored answer, no cost" in repr(stored)


def test_a_bounding_warning_is_shown_under_the_table(flights_db):
    result = flights_db.sql(
        "SELECT COUNT(*) AS flights FROM flights PRIVACY_UNIT tailnum BOUND ROWS 1 EPSILON 5"
    )
    warning = result.warning()
    assert warning is not None
    assert repr(result).endswith(warning)
    assert warning in result._repr_html_()


def test_the_html_table_shows_the_same_cells_and_footer(flights_db):
    result = flights_db.sql(BY_ORIGIN)
    page = result._repr_html_()
    assert page.count("<tr>") == len(result) + 1
    for name in result.columns:
        assert f"<th>{name}</th>" in page
    for name in ("flights", "delay"):
        for value, interval in (
            format_interval(v, w)
            for v, w in zip(
                result.arrow().column(name).to_pylist(),
                result.accuracy().column(name).to_pylist(),
                strict=True,
            )
        ):
            assert f'{value}<span class="pm">{interval}</span>' in page
    assert f"ε = {result.epsilon:g} charged" in page


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_intervals_add_a_half_width_column_after_each_noisy_column(flights_db, alpha):
    result = flights_db.sql(BY_ORIGIN)
    expected = ["origin", "flights", "flights_pm", "delay", "delay_pm"]
    widths = result.accuracy(alpha)
    table = result.arrow(intervals=True, alpha=alpha)
    assert table.column_names == expected
    for name in ("flights", "delay"):
        assert table.column(name).equals(result.arrow().column(name))
        assert table.column(f"{name}_pm").to_pylist() == widths.column(name).to_pylist()
    frame = result.df(intervals=True, alpha=alpha)
    assert list(frame.columns) == expected
    assert frame["delay_pm"].tolist() == widths.column("delay").to_pylist()
    pytest.importorskip("polars")
    assert result.pl(intervals=True, alpha=alpha).columns == expected
    assert result.df().columns.tolist() == result.columns  # no intervals unless asked


def test_an_empty_answer_has_the_same_interval_columns(flights_db):
    result = flights_db.sql(
        "SELECT carrier, COUNT(*) AS n FROM flights WHERE month = 1 AND day = 1 AND hour = 5 "
        "GROUP BY carrier PRIVACY_UNIT tailnum BOUND ROWS 1 EPSILON 0.05"
    )
    assert len(result) == 0  # no carrier reached the partition-selection threshold
    assert result.arrow(intervals=True).column_names == ["carrier", "n", "n_pm"]
    assert result.warning() is not None and repr(result).endswith(result.warning())


def test_clamping_moves_values_into_their_known_range_and_cuts_intervals(flights_db):
    spent = flights_db.budget.spent
    raw = flights_db.sql(NEARLY_EMPTY, keys=MONTHS)
    charged = flights_db.budget.spent
    assert charged > spent
    clamped = raw.clamp()
    assert flights_db.budget.spent == charged  # post-processing: nothing charged
    assert clamped.clamp() is clamped and clamped.clamped and not raw.clamped
    ranges = {
        "flights": (0, math.inf),
        "miles": (0, math.inf),
        "delay": (0, 60),
        "air_time": (20, 600),
    }
    before = raw.arrow()
    after = clamped.arrow()
    assert after.column("month").equals(before.column("month"))
    assert after.schema == before.schema
    outside = 0
    for name, (low, high) in ranges.items():
        values = np.array(before.column(name).to_pylist(), dtype=float)
        moved = np.array(after.column(name).to_pylist(), dtype=float)
        outside += int(np.sum((values < low) | (values > high)))
        assert np.array_equal(moved, np.clip(values, low, high))
        # the clamped interval, cut to the range, holds all of the released one's range part
        w = np.array(raw.accuracy().column(name).to_pylist(), dtype=float)
        cut = np.array(clamped.accuracy().column(name).to_pylist(), dtype=float)
        assert np.all(cut <= w)
        assert np.all(np.maximum(moved - cut, low) <= np.maximum(values - w, low) + 1e-9)
        assert np.all(np.minimum(moved + cut, high) >= np.minimum(values + w, high) - 1e-9)
    assert outside >= 5  # the test data puts values out of range: clamping had work to do
    assert "clamped to known ranges" in repr(clamped)
    for frame in (raw.df(clamp=True), raw.df(clamp=True, intervals=True)):
        assert frame["flights"].min() >= 0
        assert frame["delay"].between(0, 60).all()
    assert raw.arrow(clamp=True, intervals=True).column("delay_pm").to_pylist() == (
        clamped.accuracy().column("delay").to_pylist()
    )
    assert raw.df()["flights"].min() < 0  # the released answer itself is kept as released


def test_clamping_leaves_nulls_null():
    table = pa.table({"n": pa.array([None, -3, 5], pa.int64()), "mean": [0.5, None, 7.0]})
    result = privsql.Result(
        table,
        half_widths={"n": lambda alpha: pa.array([4.0, 4.0, 4.0])},
        ranges={"n": (0.0, math.inf), "mean": (1.0, 5.0)},
    ).clamp()
    assert result.arrow().column("n").to_pylist() == [None, 0, 5]
    assert result.arrow().column("mean").to_pylist() == [1.0, None, 5.0]
    assert result.accuracy().column("n").to_pylist() == [4.0, 4.0, 4.0]


def test_clamping_keeps_each_column_type():
    day = datetime.date(2013, 1, 1)
    table = pa.table(
        {
            "amount": pa.array([Decimal("-1.5"), Decimal("7.25")], pa.decimal128(5, 2)),
            "day": pa.array([day, day], pa.date32()),
        }
    )
    result = privsql.Result(table, ranges={"amount": (0.0, 5.0), "day": (0.0, 1.0)}).clamp()
    assert result.arrow().schema == table.schema
    assert result.arrow().column("amount").to_pylist() == [Decimal("0.00"), Decimal("5.00")]
    assert result.arrow().column("day").to_pylist() == [day, day]  # not a number: as released


def test_clamping_keeps_sums_of_negative_values_non_positive(flights_db):
    result = flights_db.sql(
        "SELECT origin, SUM(arr_delay CLAMPED BETWEEN -100 AND 0) AS early, "
        "AVG(arr_delay CLAMPED BETWEEN -100 AND 0) - 1 AS shifted "
        "FROM flights WHERE arr_delay < -1000 GROUP BY origin "
        "PRIVACY_UNIT tailnum BOUND ROWS 1 MAX_GROUPS 3 EPSILON 0.01"
    )
    released = result.arrow().column("early").to_pylist()
    sums = result.clamp().arrow().column("early").to_pylist()
    assert any(s > 0 for s in released)  # the noise made one positive: clamping had work
    assert sums == [min(s, 0.0) for s in released]
    # an expression over an aggregate has no known range: left as released
    assert result.clamp().arrow().column("shifted").equals(result.arrow().column("shifted"))


def test_pl_without_polars_says_how_to_install_it(flights_db, monkeypatch):
    result = flights_db.sql(BY_ORIGIN)
    monkeypatch.setitem(sys.modules, "polars", None)  # an import of polars now fails
    with pytest.raises(ImportError, match=r"Result\.pl\(\) needs polars: pip install polars"):
        result.pl()


def _settings(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(con.execute("SELECT name, value FROM duckdb_settings()").fetchall())


def _disabled(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The optimisers the connection's database has turned off (DuckDB orders them its way)."""
    return set(_settings(con)["disabled_optimizers"].split(","))


def test_queries_leave_the_users_connection_settings_as_they_were(flights_con):
    flights_con.execute("SET disabled_optimizers = 'top_n'")
    before = _settings(flights_con)
    db = privsql.connect(flights_con, budget=100, seed=7, insecure=True)
    db.protect("flights", privacy_unit="tailnum", keys={"origin": ["EWR", "JFK", "LGA"]})
    db.sql(BY_ORIGIN)
    db.sql("SELECT COUNT(*) AS n FROM flights PRIVACY_UNIT tailnum")  # AUTO: several statements
    assert _settings(flights_con) == before
    assert before["disabled_optimizers"] == "top_n"


def test_the_optimiser_stays_off_while_another_sessions_statement_runs(flights_con):
    """Two sessions on one database: the first one's end gives the setting back only once
    the second's private statement is over."""
    from privsql.engines import _try_kept_whole

    other = flights_con.cursor()
    with pytest.raises(RuntimeError), _try_kept_whole.around(flights_con):
        with _try_kept_whole.around(other):
            assert _disabled(flights_con) == set(DISABLED_OPTIMIZERS)
        assert _disabled(flights_con) == set(DISABLED_OPTIMIZERS)
        raise RuntimeError("a statement that fails")
    assert _settings(flights_con)["disabled_optimizers"] == ""


def test_a_database_privsql_opened_keeps_the_optimiser_off_and_turns_it_off_again(monkeypatch):
    """privsql's own database is not given its setting back between queries (one statement
    per query instead of three), and a setting changed in between is undone before the
    next private statement runs."""
    from privsql import engines

    db = privsql.connect(budget=100, seed=7, insecure=True)
    db._con.execute("CREATE TABLE t AS SELECT i AS u FROM range(50) r(i)")
    query = "SELECT COUNT(*) AS n FROM t PRIVACY_UNIT u BOUND ROWS 1 EPSILON {}"
    db.sql(query.format(0.1))
    assert _disabled(db._con) == set(DISABLED_OPTIMIZERS)
    db._con.execute("SET disabled_optimizers = 'top_n'")
    during = []
    release = engines.DuckDBEngine.release

    def watched(self, stages, secret):
        during.append(_settings(self._con)["disabled_optimizers"])
        return release(self, stages, secret)

    monkeypatch.setattr(engines.DuckDBEngine, "release", watched)
    db.sql(query.format(0.2))
    assert [set(d.split(",")) for d in during] == [{*DISABLED_OPTIMIZERS, "top_n"}]
    db.close()


def test_a_setting_given_back_after_the_catalogue_was_listed_is_read_again(monkeypatch):
    """privsql's own database takes the setting from the listing of the query's catalogue
    (no statement of its own), unless a session of this process gave a setting back
    since: here another session's private part, begun on a user's connection before the
    listing, ends after it and restores the setting it found (none)."""
    from privsql import engines

    db = privsql.connect(budget=100, seed=7, insecure=True)
    db._con.execute("CREATE TABLE t AS SELECT i AS u FROM range(50) r(i)")
    other = db._con.cursor()
    tables, release = engines.DuckDBEngine.tables, engines.DuckDBEngine.release
    during = []

    def listed_while_another_runs(self):
        with engines._try_kept_whole.around(other):  # gives back "" as it ends
            return tables(self)

    def watched(self, stages, secret):
        during.append(_disabled(self._con))
        return release(self, stages, secret)

    monkeypatch.setattr(engines.DuckDBEngine, "tables", listed_while_another_runs)
    monkeypatch.setattr(engines.DuckDBEngine, "release", watched)
    db.sql("SELECT COUNT(*) AS n FROM t PRIVACY_UNIT u BOUND ROWS 1")
    assert during == [set(DISABLED_OPTIMIZERS)]
    db.close()


def test_the_generation_moves_only_once_the_setting_is_given_back(flights_con, monkeypatch):
    """A listing that reads the moved generation reads the setting as given back: moved
    before the SET that gives it back, an owned session could read the new generation and
    then a listing still showing the optimisers off, and trust it (red team 44)."""
    from privsql import engines

    made, give = [], engines._set_disabled_optimizers

    def recorded(connection, names):
        made.append((names, engines._try_kept_whole.generation))
        give(connection, names)

    monkeypatch.setattr(engines, "_set_disabled_optimizers", recorded)
    before = engines._try_kept_whole.generation
    with engines._try_kept_whole.around(flights_con):
        pass
    assert made == [(",".join(sorted(DISABLED_OPTIMIZERS)), before), ("", before)]
    assert engines._try_kept_whole.generation == before + 1


class Terminal(io.StringIO):
    """Standard error as a terminal (where the text bar is drawn)."""

    def isatty(self) -> bool:
        return True


class RecordingBar:
    """A bar that records its updates and lets the work finish once it was drawn."""

    def __init__(self, drawn: threading.Event) -> None:
        self.updates: list[tuple[float, float]] = []
        self.closed = False
        self._drawn = drawn

    def update(self, percent: float, elapsed: float) -> None:
        self.updates.append((percent, elapsed))
        self._drawn.set()

    def close(self) -> None:
        self.closed = True


def test_watch_shows_progress_after_the_delay_and_passes_on_the_outcome():
    con = duckdb.connect()
    drawn = threading.Event()
    bars: list[RecordingBar] = []

    def make() -> RecordingBar:
        bars.append(RecordingBar(drawn))
        return bars[-1]

    def work() -> str:
        assert drawn.wait(10)  # ends only once the bar was drawn
        return "done"

    assert watch(con, work, after=0, bar=make, interval=0.01) == "done"
    (bar,) = bars
    assert bar.updates and bar.closed
    assert all(percent == -1.0 or 0 <= percent <= 100 for percent, _ in bar.updates)

    def fails() -> None:
        raise privsql.PrivacyError("refused")

    with pytest.raises(privsql.PrivacyError, match="refused"):
        watch(con, fails, after=0, bar=make)
    quick = []
    assert watch(con, lambda: 7, after=60, bar=lambda: quick.append(1)) == 7
    assert not quick  # a query shorter than the delay shows nothing


def test_a_long_query_shows_a_bar_on_a_terminal_unless_turned_off(flights_con, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    shown = privsql.connect(flights_con, budget=100, seed=7, insecure=True, progress=0)
    shown.protect("flights", privacy_unit="tailnum", keys={"origin": ["EWR", "JFK", "LGA"]})
    shown.sql(BY_ORIGIN)
    assert "▕" in terminal.getvalue() and terminal.getvalue().endswith("\r\x1b[2K")
    terminal.seek(0)
    terminal.truncate()
    quiet = privsql.connect(flights_con, budget=100, seed=7, insecure=True, progress=False)
    quiet.sql(BY_ORIGIN.replace("0.5", "0.25"))
    assert terminal.getvalue() == ""
    with pytest.raises(ValueError, match="progress="):
        privsql.connect(flights_con, budget=100, progress=-1)


def test_in_a_notebook_the_bar_is_html_and_removed_at_the_end(monkeypatch):
    pytest.importorskip("IPython")
    import IPython

    shown = []

    class Handle:
        def update(self, page) -> None:
            shown.append(page.data)

    def display(page, display_id: bool) -> Handle:
        assert display_id
        shown.append(page.data)
        return Handle()

    monkeypatch.setattr(IPython, "get_ipython", lambda: types.SimpleNamespace(kernel=object()))
    monkeypatch.setattr("IPython.display.display", display)
    bar = default_bar()
    assert isinstance(bar, NotebookBar)
    bar.update(45.0, 2.5)
    bar.update(-1.0, 3.0)
    bar.close()
    assert shown[0].startswith('<progress value="45" max="100"') and "2.5 s" in shown[0]
    assert shown[1].startswith("<progress ") and "running" in shown[1]
    assert shown[2] == ""
