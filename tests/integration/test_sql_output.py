"""`ingest sql --output`: Parquet keeps nested types (arrays of records, maps) as they are, CSV holds nested values
as JSON text, whichever engine answered (Spark, or DuckDB over delta-rs with `VERSION AS OF`), read back equal."""

from __future__ import annotations

import base64
import csv
import decimal
import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.dev.samples import avro_body, order
from ingestion.ops import sql_query
from ingestion.stream import pipeline
from tests.conftest import pipeline_yaml
from tests.integration.test_readers import _rows

pytestmark = pytest.mark.integration


def _as_json(value: Any) -> Any:
    """A value as `sql_query.as_text` writes it: (non-empty) maps as objects, decimals as text, bytes as base64."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return {k: _as_json(v) for k, v in value}
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def test_parquet_and_csv_of_nested_columns_read_back_equal(spark, kafka_servers, make_topic, orders_schema,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka import Producer

    schema = {**orders_schema, "fields": [*orders_schema["fields"],
                                          {"name": "attrs", "type": {"type": "map", "values": "long"}}]}
    (tmp_path / "schemas" / "nested-value").mkdir(parents=True)
    (tmp_path / "schemas" / "nested-value" / "1.avsc").write_text(json.dumps(schema))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path / "schemas"))
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    for seq in range(4):
        record = {**order(seq, random.Random(seq)), "attrs": {f"k{i}": i * seq for i in range(seq)}}
        producer.produce(topic, key=b"k", value=encode(1, avro_body(schema, record)))
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="value:\n  format: confluent\n  subject: nested-value\n"))
    pipeline.run(spark, config, available_now=True)

    # Spark's answer, as `ingest sql --engine spark` hands it on (toArrow), and DuckDB's at the same version.
    by_spark = spark.read.format("delta").option("versionAsOf", 1).load(config.table_path).toArrow()
    by_duckdb = sql_query.duckdb_answer("SELECT * FROM orders VERSION AS OF 1 ORDER BY _kafka_offset", [config])
    assert _rows(by_duckdb) == _rows(by_spark)
    assert len(_rows(by_spark)) == 4 and [len(r["items"]) for r in _rows(by_spark)] != [0] * 4

    for name, table in (("spark", by_spark), ("duckdb", by_duckdb)):
        parquet, text = tmp_path / f"{name}.parquet", tmp_path / f"{name}.csv"
        sql_query.write(table, parquet)
        sql_query.write(table, text)
        back = pq.read_table(parquet)
        assert back.schema.types == table.schema.types  # list<struct<...>> and map<string, long> as they were
        assert back.to_pylist() == table.to_pylist()
        with text.open(newline="") as f:
            lines = list(csv.DictReader(f))
        assert len(text.read_text().splitlines()) == 5  # a header and one line per row: no newline inside values
        expected = {r["_kafka_offset"]: r for r in table.to_pylist()}
        for line in lines:
            row = expected[int(line["_kafka_offset"])]
            for column in ("items", "_kafka_headers"):
                shown = None if line[column] == "" else json.loads(line[column])  # CSV's null is empty
                assert shown == _as_json(row[column]), (name, column)
            assert json.loads(line["attrs"]) == {k: v for k, v in row["attrs"]}  # a map as a JSON object
            assert len(row["attrs"]) == row["_kafka_offset"]
            assert line["order_id"] == row["order_id"]
