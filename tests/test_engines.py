"""Engine plumbing that needs no Spark: the split of a private query into aggregation and
release, the Spark transpilation's rewrites and refusals, and ``ledger=`` on DuckDB."""

from __future__ import annotations

import duckdb
import pytest

import privsql
from privsql.session import FUNCTIONS
from rewriter.analyze import analyze
from rewriter.errors import UnsupportedQuery
from rewriter.generate import generate, stages
from rewriter.plan import plan
from rewriter.transpile import to_spark


@pytest.fixture
def db():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT i % 50 AS uid, i % 4 AS g, i / 7 AS v, 'x' || i AS s "
        "FROM range(2000) AS r(i)"
    )
    session = privsql.connect(con, budget=100, seed=1, insecure=True)
    session.protect("t", "uid", keys={"g": [0, 1, 2, 3]})
    return session


QUERY = (
    "SELECT g, COUNT(*) AS n, SUM(v CLAMPED BETWEEN 0 AND 100) AS s, "
    "MEDIAN(v CLAMPED BETWEEN 0 AND 300) AS m FROM t GROUP BY g "
    "PRIVACY_UNIT uid BOUND WEIGHTS 3 MAX_GROUPS 2"
)


def _stages(db: privsql.Session, query: str, epsilon: float = 1.0):
    return stages(plan(analyze(query, db._catalog()), epsilon=epsilon, delta=1e-6), FUNCTIONS)


@pytest.mark.filterwarnings("ignore:Arrow output on a DB-API result")
def test_the_release_reads_only_the_aggregated_outputs(db):
    """Run apart — outputs computed first and handed over as tables — the two parts give
    what the single statement gives (at an ε where the noise is below the tolerance)."""
    parts = _stages(db, QUERY, epsilon=1e7)
    assert parts.statement() == generate(
        plan(analyze(QUERY, db._catalog()), epsilon=1e7, delta=1e-6), FUNCTIONS
    )
    assert parts.outputs == ("__groups", "__counts0", "__cuts", "__excess", "__domain0")
    secret = {"privsql_secret": 7}
    whole = db._con.execute(parts.statement(), secret).fetchall()
    other = privsql.connect(duckdb.connect(), seed=2, insecure=True)
    for name in parts.outputs:
        other._con.register(name, db._con.execute(parts.output(name), secret).to_arrow_table())
    apart = other._con.execute(parts.released()).fetchall()
    assert len(apart) == len(whole) == 4
    for left, right in zip(sorted(apart), sorted(whole), strict=True):
        # abs: a median may lie anywhere in the buckets from one middle value to the next:
        # 4/7 apart, plus two buckets of 0.073
        assert left == pytest.approx(right, rel=1e-3, abs=0.75)
    for source in ("FROM t", "__source", "__bounded"):
        assert source not in parts.released()


def test_spark_sql_keeps_sums_exact_and_rows_from_raising(db):
    sql = to_spark(_stages(db, QUERY).output("__groups"))
    assert "SUM(CAST(" in sql and "DECIMAL(38, 0)" in sql
    assert "INT128" not in sql and "HUGEINT" not in sql
    guarded = to_spark(
        _stages(
            db,
            "SELECT COUNT(*) FROM t WHERE v / 2 + 1 > CAST(s AS INT) % 3 "
            "PRIVACY_UNIT uid BOUND ROWS 2",
        ).output("__groups")
    )
    for function in ("TRY_DIVIDE", "TRY_ADD", "TRY_MOD", "TRY_CAST(t.s AS INT)"):
        assert function in guarded
    ranked = to_spark(
        _stages(db, "SELECT g, COUNT(*) FROM t GROUP BY g PRIVACY_UNIT uid BOUND ROWS 2").output(
            "__groups"
        )
    )
    assert "XXHASH64(:privsql_secret" in ranked


@pytest.mark.parametrize(
    ("where", "refused"),
    [
        ("regexp_matches(s, 'x1')", "REGEXP"),
        ("v // 2 > 1", "INTDIV"),
        ("strlen(s) > 2", "STRLEN"),
    ],
)
def test_spark_refuses_row_level_functions_it_cannot_match(db, where, refused):
    statement = _stages(db, f"SELECT COUNT(*) FROM t WHERE {where} PRIVACY_UNIT uid BOUND ROWS 2")
    with pytest.raises(UnsupportedQuery, match=refused):
        to_spark(statement.output("__groups"))


def test_spark_reads_one_parquet_path_or_a_list_of_files_only():
    """A path is read as written; a list of files (one footer group of a declared glob) as
    the one Hadoop glob naming exactly them, their pattern characters escaped."""
    assert "parquet.`/data/*.parquet`" in to_spark("SELECT * FROM read_parquet('/data/*.parquet')")
    listed = to_spark("SELECT * FROM read_parquet(['/d/a.parquet', '/d/e/b{1,2}*.parquet'])")
    assert r"parquet.`/d/{a.parquet,e/b\{1\,2\}\*.parquet}`" in listed
    for reader in ("read_parquet('/a', filename = true)", "read_csv('/a.csv')"):
        with pytest.raises(UnsupportedQuery, match="read_parquet"):
            to_spark(f"SELECT * FROM {reader}")


def test_a_ledger_file_keeps_the_budget_of_an_in_memory_database(tmp_path):
    ledger = tmp_path / "ledger.duckdb"
    for spent in (0.5, 1.0):
        con = duckdb.connect()
        con.execute("CREATE TABLE t AS SELECT i AS uid FROM range(10) AS r(i)")
        db = privsql.connect(con, budget=2.0, ledger=ledger)
        db.sql(  # two questions: one spelt with another alias would be the stored answer
            f"SELECT COUNT(*) FROM t WHERE uid <> {spent * 2:g} "
            "PRIVACY_UNIT uid BOUND ROWS 1 EPSILON 0.5"
        )
        assert db.budget.spent == pytest.approx(spent)
        db.close()
    with pytest.raises(privsql.PrivacyError, match="spark"):
        privsql.connect(engine="spark")
    with pytest.raises(privsql.PrivacyError, match="ledger="):
        privsql.connect(tmp_path / "data.duckdb", engine="spark", spark=object())


def test_spark_release_stage_withholds_duckdb_messages():
    """The release stage runs in DuckDB over Spark's per-group outputs: an error there could
    quote an aggregate of private rows, so it is reported with neither message nor kind (two
    kinds of failure would be two outcomes), and with no context."""
    from privsql.engines import SparkEngine
    from rewriter.generate import RELEASED, Stages

    planted = "PLANTED_spark_4417"

    class Frame:
        def toArrow(self):
            import pyarrow as pa

            return pa.table({"v": [planted]})

    class Spark:
        def sql(self, statement, args=None):
            return Frame()

    engine = SparkEngine(Spark(), duckdb.connect())
    parts = Stages(
        aggregation={"__groups": "SELECT 1"},
        outputs=("__groups",),
        release={RELEASED: "SELECT CAST(v AS INTEGER) AS v FROM __groups"},
        final=f"SELECT * FROM {RELEASED}",
    )
    with pytest.raises(privsql.PrivacyError) as failed:
        engine.release(parts, secret=1)
    assert planted not in str(failed.value) and "Conversion" not in str(failed.value)
    assert failed.value.__context__ is None and failed.value.__cause__ is None


def test_a_failed_rollback_does_not_replace_the_withheld_error() -> None:
    """A fatal engine error invalidates the database, so its ROLLBACK fails too; that second
    error (which quotes the first) must not escape in place of the withheld one."""
    from privsql.engines import DuckDBEngine

    planted = "PLANTED_fatal_5521"

    class Invalidated:
        """A connection whose database a fatal error invalidates: every later statement
        fails with a message that quotes the first error."""

        def __init__(self) -> None:
            self.real = duckdb.connect()
            self.invalid = False

        def cursor(self) -> Invalidated:
            return self

        def close(self) -> None:
            return None

        def execute(self, statement: str, *args: object) -> duckdb.DuckDBPyConnection:
            if self.invalid:
                raise duckdb.FatalException(f"database invalidated: {planted}")
            return self.real.execute(statement)

    connection = Invalidated()

    def work() -> None:
        connection.invalid = True
        raise duckdb.FatalException(f"Cannot create a string of size {planted}")

    with pytest.raises(privsql.PrivacyError) as failed:
        DuckDBEngine(connection).private(work)
    assert planted not in str(failed.value)
    assert failed.value.__context__ is None and failed.value.__cause__ is None


@pytest.mark.parametrize("bound", ["BOUND ROWS 2", "BOUND WEIGHTS 2"])
def test_text_that_spells_the_secret_parameter_is_text(db, bound):
    """Red team 41: a string literal or an output name holding ``$privsql_secret`` made every
    private statement fail to bind (the secret was passed as a parameter the statement did
    not name, or the text was taken for it). Such text is the analyst's data: the query
    answers, under ROWS (whose ranking does name the secret) and WEIGHTS (which does not),
    exactly as with any other string."""
    spelt = [
        f"SELECT COUNT(*) AS n FROM t WHERE s <> '{text}' PRIVACY_UNIT uid {bound} EPSILON 10"
        for text in ("$privsql_secret", "x$privsql_secretX", "plain")
    ]
    spelt.append(f'SELECT COUNT(*) AS "$privsql_secret" FROM t PRIVACY_UNIT uid {bound} EPSILON 10')
    for query in spelt:
        [(count,)] = db.sql(query).fetchall()
        assert abs(count - 100) < 40  # 50 units of 2 rows each, ± noise at ε = 10
