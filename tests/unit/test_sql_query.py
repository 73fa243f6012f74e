"""`ingest sql` without a JVM: which queries DuckDB answers (pipeline tables by their catalog names, VERSION AS
OF included) and which go to Spark; nested values as JSON text in CSV."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest

from ingestion.ops.sql_query import NotForDuckDB, TableRef, as_text, rewrite

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
    ("SELECT 1", "the query names no pipeline table"),
    ("SELECT * FROM other VERSION AS OF 2 JOIN payments", "VERSION AS OF on a table that is not a pipeline's"),
])
def test_what_spark_answers(query: str, reason: str) -> None:
    with pytest.raises(NotForDuckDB) as caught:
        rewrite(query, TABLES)
    assert str(caught.value) == reason


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
