"""Any Delta reader: the snippets of docs/readers.md (delta-rs, Polars, DuckDB), run as written against a bronze
table with every Avro type the project maps (plus a tombstone) and its quarantine, read every row and column as
Spark reads them; delta-rs's history holds the offsets ledger; the tables need no reader feature beyond the ones
docs/readers.md lists."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta import ledger
from ingestion.dev.samples import avro_body
from ingestion.stream import pipeline
from tests.conftest import REPO, pipeline_yaml
from tests.integration.test_onboarding import ALL_TYPES

pytestmark = pytest.mark.integration

PAGE = REPO / "docs" / "readers.md"


def _record(n: int) -> dict[str, Any]:
    return {
        "b": n % 2 == 0, "i": -n, "l": 2**40 + n, "f": 1.5 * n, "d": 2.25 * n, "raw": bytes([0, 255, n]),
        "s": f"héllo {n}", "e": "GREEN" if n % 2 else "RED", "fx": b"abc" + bytes([n]),
        "dec": decimal.Decimal(f"{n}.345"), "decfx": decimal.Decimal(f"-{n}9.50"), "day": dt.date(2026, 2, n + 1),
        "tmil": dt.time(1, 2, 3, 4000), "tmic": dt.time(1, 2, n, 4005),
        "tsmil": dt.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=dt.UTC),
        "tsmic": dt.datetime(2026, 1, 2, 3, 4, n, 6007, tzinfo=dt.UTC),
        "ltsmil": dt.datetime(2026, 1, 2, 3, 4, 5, 6000), "ltsmic": dt.datetime(2026, 1, 2, 3, 4, n, 6007),
        "id": uuid.UUID(int=n), "opt": None if n % 2 else f"o{n}", "multi": n if n % 2 else f"m{n}",
        "nums": list(range(n)), "tags": {f"k{i}": f"v{i}" for i in range(n)},
        "inner": {"x": n, "c": "RED"}, "again": b"wxy" + bytes([n]),
    }


def _snippets() -> list[str]:
    return [block for block in re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.M | re.S)]


def _plain(value: Any) -> Any:
    """One shape for what readers hand back differently: maps as sorted (key, value) pairs (Polars gives a list
    of key/value structs, Arrow a list of tuples), structs as dicts."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return sorted(value)
    if isinstance(value, list) and value and all(isinstance(v, dict) and set(v) == {"key", "value"} for v in value):
        return sorted((v["key"], v["value"]) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    rows = [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]
    return sorted(rows, key=lambda r: (r["_kafka_partition"], r["_kafka_offset"]))


def test_documented_readers_read_every_row_and_column_as_spark_does(spark, kafka_servers, make_topic,
                                                                   tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka import Producer

    schemas = tmp_path / "schemas"
    (schemas / "everything-value").mkdir(parents=True)
    (schemas / "everything-value" / "1.avsc").write_text(json.dumps(ALL_TYPES))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    for n in range(1, 5):
        producer.produce(topic, key=f"k{n}", value=encode(1, avro_body(ALL_TYPES, _record(n))),
                         headers=[("h", f"v{n}".encode())])
    producer.produce(topic, key="gone", value=None)  # a tombstone: a row with null payload columns
    producer.produce(topic, key="bad", value=b"\x00\x00\x00\x00\x01\xff")  # quarantined
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="value:\n  format: confluent\n  subject: everything-value\n"
                                               "source:\n  maxOffsetsPerTrigger: 3\n"))
    pipeline.run(spark, config, available_now=True)

    spark_bronze = _rows(spark.read.format("delta").load(config.table_path).toArrow())
    spark_quarantine = spark.read.format("delta").load(config.quarantine_path)
    assert len(spark_bronze) == 5 and spark_quarantine.count() == 1
    assert sum(row["_kafka_tombstone"] for row in spark_bronze) == 1
    columns = set(spark_bronze[0])
    assert set(ALL_TYPES_FIELDS) <= columns

    code = {}
    for snippet in _snippets():
        text = snippet.replace(".ingest/tables/orders_quarantine", config.quarantine_path).replace(
            ".ingest/tables/orders", config.table_path)
        namespace: dict[str, Any] = {}
        exec(compile(text, str(PAGE), "exec"), namespace)  # the documented snippet, as written
        code.update({k: v for k, v in namespace.items() if not k.startswith("__")})

    # delta-rs: every row and column, the ledger in history(), time travel, the quarantine
    assert _rows(code["rows"]) == spark_bronze
    records = ledger.history(spark, config.table_path)
    assert sorted(code["ledger"]) == [r.version for r in records] == [1, 2]
    assert [[(x["partition"], x["first"], x["last"]) for x in code["ledger"][v]] for v in (1, 2)] == [
        [(0, 0, 2)], [(0, 3, 5)]]
    assert code["first_version"]["n"].to_pylist() == [records[0].rows]
    assert code["quarantined"].to_pylist() == [{"_kafka_partition": 0, "_kafka_offset": 5,
                                                "_error_class": "MalformedAvroError"}]
    # Polars
    assert _rows(code["frame"].to_arrow()) == spark_bronze
    assert code["per_partition"].rows() == [(0, 4)]
    assert code["as_of_1"].height == records[0].rows
    # DuckDB
    assert _rows(code["table"]) == spark_bronze
    assert code["by_error"] == [("MalformedAvroError", 1)]

    # The protocol docs/readers.md promises: reader 3 only for timestamp_ntz columns, no other reader feature.
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{config.table_path}`").first()
    assert (detail["minReaderVersion"], sorted(detail["tableFeatures"])) == (3, ["appendOnly", "invariants",
                                                                                 "timestampNtz"])
    quarantine = spark.sql(f"DESCRIBE DETAIL delta.`{config.quarantine_path}`").first()
    assert (quarantine["minReaderVersion"], quarantine["minWriterVersion"]) == (1, 2)


ALL_TYPES_FIELDS = [field["name"] for field in ALL_TYPES["fields"]]
