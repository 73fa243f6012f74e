"""`ingest sql` without a JVM: which queries DuckDB answers (pipeline tables by their catalog names, VERSION AS
OF included, columns named like DuckDB's keywords) and which go to Spark; an unknown table in one line; nested
values as JSON text in CSV."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pytest

from ingestion.errors import IngestionError
from ingestion.ops.sql_query import (
    NotForDuckDB,
    TableRef,
    UnknownColumn,
    UnknownTable,
    as_text,
    quote_reserved,
    rewrite,
)

TABLES = {"bronze.orders": "/t/orders", "bronze.orders_quarantine": "/t/orders_q", "payments": "/t/payments"}


def test_pipeline_tables_and_their_versions_become_views() -> None:
    text, refs = rewrite("SELECT o.x, 'bronze.orders' AS s FROM bronze.orders VERSION AS OF 3 o "
                         "JOIN Bronze.Orders ON 1=1 JOIN bronze.orders_quarantine q -- bronze.orders\n"
                         "JOIN payments version as of 1 USING (x)", TABLES)
    assert text == ("SELECT o.x, 'bronze.orders' AS s FROM __ingest_0 o JOIN __ingest_1 ON 1=1 JOIN __ingest_2 q  \n"
                    "JOIN __ingest_3 USING (x)")
    assert refs == [TableRef("bronze.orders", "/t/orders", 3), TableRef("bronze.orders", "/t/orders", None),
                    TableRef("bronze.orders_quarantine", "/t/orders_q", None), TableRef("payments", "/t/payments", 1)]


@pytest.mark.parametrize(("query", "reason"), [
    ("INSERT INTO payments SELECT 1", "not a SELECT or WITH query"),
    ("SHOW TABLES", "not a SELECT or WITH query"),
    ("SELECT * FROM payments TIMESTAMP AS OF '2026-01-01'", "TIMESTAMP AS OF or a table by path"),
    ("SELECT * FROM delta.`/t/payments`", "TIMESTAMP AS OF or a table by path"),
])
def test_what_spark_answers(query: str, reason: str) -> None:
    with pytest.raises(NotForDuckDB) as caught:
        rewrite(query, TABLES)
    assert str(caught.value) == reason


def test_spark_quoting_becomes_duckdbs_and_a_query_of_no_table_is_duckdbs() -> None:
    assert rewrite("SELECT `at`, `a``b` FROM `payments` WHERE s = '`x`'", TABLES) == (
        'SELECT "at", "a`b" FROM __ingest_0 WHERE s = \'`x`\'', [TableRef("payments", "/t/payments", None)])
    assert rewrite("SELECT 1", TABLES) == ("SELECT 1", [])


def test_version_as_of_a_table_no_pipeline_has_is_an_unknown_table_naming_the_known_ones() -> None:
    with pytest.raises(UnknownTable) as caught:
        rewrite("SELECT * FROM silver.other VERSION AS OF 2 JOIN payments", TABLES)
    assert str(caught.value) == ("no table 'silver.other': the pipelines' tables are bronze.orders, "
                                 "bronze.orders_quarantine, payments (`--engine spark` asks Spark's catalog for "
                                 "others)")


def test_columns_named_like_duckdb_keywords_are_quoted_where_bare() -> None:
    reserved = {"at", "left", "order", "from"}
    text = ("SELECT kind, min(at), t.at, left(s, 1), \"order\", 'at' FROM __ingest_0 t "
            "LEFT JOIN x ON at > 1 ORDER BY at")
    assert quote_reserved(text, {"kind", "AT", "s"}, reserved) == (
        "SELECT kind, min(\"at\"), t.at, left(s, 1), \"order\", 'at' FROM __ingest_0 t "
        "LEFT JOIN x ON \"at\" > 1 ORDER BY \"at\"")
    assert quote_reserved(text, {"kind"}, reserved) == text


def test_duckdb_answers_over_a_column_named_at_and_names_an_unknown_table(tmp_path: Path) -> None:
    """A real Delta table (written by delta-rs) with columns `kind` and `at`: DuckDB, which reserves `at`, answers
    the query as Spark would; a table no pipeline has is one line naming the pipelines' tables."""
    from deltalake import write_deltalake

    from ingestion.config import load_pipeline
    from ingestion.ops.sql_query import duckdb_answer

    at = [dt.datetime(2026, 1, d, tzinfo=dt.UTC) for d in (3, 1, 2)]
    write_deltalake(str(tmp_path / "events"), pa.table({"kind": ["a", "b", "a"], "at": at}))
    file = tmp_path / "events.yaml"
    file.write_text(f"name: events\ntopic: events\nsink:\n  table: {tmp_path / 'events'}\n"
                    "  catalogTable: bronze.events\nsilver:\n  key: [kind]\n  catalogTable: silver.events\n")
    configs = [load_pipeline(file)]
    found = duckdb_answer("SELECT kind, min(at) AS first, count(*) AS n FROM bronze.events GROUP BY 1 ORDER BY 1",
                          configs)
    assert found.to_pylist() == [{"kind": "a", "first": at[2], "n": 2}, {"kind": "b", "first": at[1], "n": 1}]
    for name in ("events", "events_silver", "silver.nosuch"):
        with pytest.raises(UnknownTable) as caught:
            duckdb_answer(f"SELECT count(*) FROM {name}", configs)
        assert str(caught.value) == (f"no table {name!r}: the pipelines' tables are bronze.events, "
                                     "bronze.events_quarantine, silver.events (`--engine spark` asks Spark's "
                                     "catalog for others)")
    with pytest.raises(IngestionError, match=r"table silver.events has no Delta table at .*events_silver yet"):
        duckdb_answer("SELECT count(*) FROM silver.events", configs)
    with pytest.raises(NotForDuckDB, match="DuckDB: Catalog Error: Scalar Function with name no_such_fn"):
        duckdb_answer("SELECT no_such_fn(kind) FROM bronze.events", configs)
    # A column no table has is said at once (Spark would not find it either); in double quotes it is Spark's string.
    with pytest.raises(UnknownColumn, match=r'Referenced column "id" not found .*Candidate bindings: .*"kind"'):
        duckdb_answer("SELECT count(DISTINCT id) FROM bronze.events", configs)
    with pytest.raises(NotForDuckDB):
        duckdb_answer('SELECT count(*) FROM bronze.events WHERE kind = "a"', configs)


def test_nested_values_are_json_text_and_bytes_base64() -> None:
    items = pa.array([[{"sku": "a", "qty": 2}], [], None], pa.list_(pa.struct([("sku", pa.string()),
                                                                                ("qty", pa.int32())])))
    tags = pa.array([[("k", decimal.Decimal("1.50"))], [], None], pa.map_(pa.string(), pa.decimal128(5, 2)))
    when = pa.array([[dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC)], [], None],
                    pa.list_(pa.timestamp("us", tz="UTC")))
    raw = pa.array([b"\x00\xff", b"", None], pa.binary())
    flat = as_text(pa.table({"items": items, "tags": tags, "when": when, "raw": raw, "n": [1, 2, 3]}))
    assert flat.to_pylist() == [
        {"items": '[{"sku": "a", "qty": 2}]', "tags": '{"k": "1.50"}', "when": '["2026-01-02T03:04:05.000006+00:00"]',
         "raw": "AP8=", "n": 1},
        {"items": "[]", "tags": "{}", "when": "[]", "raw": "", "n": 2},
        {"items": None, "tags": None, "when": None, "raw": None, "n": 3}]
    assert json.loads(flat["items"][0].as_py()) == [{"sku": "a", "qty": 2}]


def test_printed_rows_are_a_right_aligned_text_table() -> None:
    from ingestion.ops.sql_query import render

    table = pa.table({"p": [0, 12], "note": ["a\nb", None], "items": [[1, 2], []]})
    assert render(table).splitlines() == [" p note  items", " 0  a b [1, 2]", "12 NULL     []"]
    assert render(pa.table({"s": ["x" * 70]}), width=10).splitlines()[1] == "xxxxxxx..."


@pytest.mark.parametrize("name", ["x.csv", "x.parquet"])
def test_output_makes_its_folders_and_a_path_that_cannot_be_written_is_named(tmp_path: Path, name: str) -> None:
    from ingestion.ops.sql_query import write

    table = pa.table({"id": [1, 2]})
    out = tmp_path / "nodir" / "sub" / name
    write(table, out)
    assert out.stat().st_size > 0
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    (tmp_path / "folder" / name).mkdir(parents=True)
    for path in (blocked / "sub" / name, tmp_path / "folder" / name):  # under a file; a folder itself
        with pytest.raises(IngestionError, match=rf"^cannot write '{path}': \w") as info:
            write(table, path)
        assert "\n" not in str(info.value)
