"""Parquet dictionaries learnt from written files: the columns Parquet wrote plain lose theirs, the rest keep it.

Real Spark, Delta and Parquet: batches go through the one-pass writer into a Delta table, footers are read back
with pyarrow (an independent reader of what Parquet wrote).
"""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fastavro import parse_schema, schemaless_writer
from pyspark.sql import functions as F

from ingestion.columns import KAFKA_SOURCE_SCHEMA
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import encode
from ingestion.delta import dictionaries
from ingestion.stream import setup
from ingestion.stream.batch import WritePath
from ingestion.stream.writer import BronzeWriter
from tests.integration.test_fastpath import _config, _Specs

SCHEMA = {"type": "record", "name": "Reading", "namespace": "t", "fields": [
    {"name": "id", "type": "string"},  # unique: Parquet gives its dictionary up
    {"name": "site", "type": "string"},  # 3 values: the dictionary pays
    {"name": "ok", "type": "boolean"},  # booleans have no dictionary: not a decision
    {"name": "pinned", "type": "long"},  # unique, but the user pinned its dictionary on: not decided again
    {"name": "region", "type": "string"},  # 3 values, the user turned its dictionary off
]}
ROWS = 12_000  # one file per batch (a single task), above dictionaries.MIN_VALUES
SMALL = 8_000  # in two files, each below dictionaries.MIN_VALUES: the batch says nothing and decides nothing


def kafka_rows(spark: Any, first_offset: int, count: int = ROWS, files: int = 1) -> Any:
    parsed = parse_schema(SCHEMA)
    ts = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = []
    for i in range(count):
        offset = first_offset + i
        out = io.BytesIO()
        schemaless_writer(out, parsed, {"id": f"reading-{offset:08d}", "site": ["a", "b", "c"][i % 3],
                                        "ok": i % 2 == 0, "pinned": offset * 7919,
                                        "region": ["x", "y", "z"][i % 3]})
        rows.append((b"k", encode(1, out.getvalue()), "t", 0, offset, ts, 0, []))
    frame = spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA)
    return frame.repartition(files) if files > 1 else frame.coalesce(1)


def dictionary_pages(path: Path) -> dict[str, bool]:
    meta = pq.ParquetFile(path).metadata
    group = meta.row_group(0)
    return {group.column(i).path_in_schema: group.column(i).has_dictionary_page for i in range(meta.num_columns)}


def test_columns_parquet_wrote_plain_are_written_without_a_dictionary(spark: Any, tmp_path: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    judged: list[int] = []  # how many files' footers were judged, per call
    abandoned = dictionaries.abandoned
    monkeypatch.setattr(dictionaries, "abandoned", lambda s, paths: judged.append(len(paths)) or abandoned(s, paths))
    config = _config(tmp_path, "value:\n  format: confluent\n  subject: orders-value\n"
                               "sink:\n  tableProperties:\n    parquet.enable.dictionary#pinned: 'true'\n"
                                   "    parquet.enable.dictionary#region: 'false'\n")
    text = json.dumps(SCHEMA)
    spec = DecodeSpec({1: text}, text, 1000, False, key_format="string")
    setup.ensure_tables(spark, config, spec)
    results: list[Any] = []
    writer = BronzeWriter(config=config, app_id="app", resolver=_Specs(spec), on_batch=results.append)
    table = Path(config.table_path)

    writer(kafka_rows(spark, 0, SMALL, files=2), 0)  # files too small to judge: the decision waits
    small = {f.name for f in table.glob("*.parquet")}
    assert judged == [] and len(small) == 2
    writer(kafka_rows(spark, SMALL), 1)
    first = {f.name for f in table.glob("*.parquet")} - small
    properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{table}`").collect()}
    learnt = {k.removeprefix(dictionaries.PREFIX) for k, v in properties.items()
              if k.startswith(dictionaries.PREFIX) and v == "false"} - {"region"}
    # Unique values lose the dictionary; the 3-valued column and the boolean do not, the user's settings stay.
    assert {"id", "_kafka_offset"} <= learnt
    assert not learnt & {"site", "ok", "_kafka_topic", "_kafka_partition"}
    assert [properties[dictionaries.PREFIX + c] for c in ("pinned", "region")] == ["true", "false"]
    (before,) = [dictionary_pages(table / name) for name in first]
    # What was learnt is what Parquet did: every learnt column was written plain, none that kept its dictionary.
    assert all(not before[c] for c in learnt) and {c for c, has in before.items() if has}.isdisjoint(learnt)

    writer(kafka_rows(spark, SMALL + ROWS), 2)
    (second,) = {f.name for f in table.glob("*.parquet")} - first - small
    after = dictionary_pages(table / second)
    # The table property reaches Parquet's writer: the user's 3-valued `region` is plain, `site` is not.
    assert not after["region"] and after["site"] and after["_kafka_topic"]
    assert not after["id"] and not after["_kafka_offset"]

    assert [(r.batch_id, r.path, r.rows) for r in results] == [(0, WritePath.SPARK, SMALL),
                                                                (1, WritePath.SPARK, ROWS), (2, WritePath.SPARK, ROWS)]
    assert judged == [1]  # the first large batch decided; the next read no footers
    landed = spark.read.format("delta").load(str(table))
    assert landed.count() == SMALL + 2 * ROWS
    assert landed.agg(F.countDistinct("id")).first()[0] == SMALL + 2 * ROWS
    assert landed.where("site = 'b'").count() == len(range(1, SMALL, 3)) + 2 * len(range(1, ROWS, 3))


def test_a_dictionary_given_up_after_its_first_page_counts_as_given_up(spark: Any, tmp_path: Any) -> None:
    """Parquet keeps a dictionary that paid on the first page and drops it when it outgrows its page size: the
    chunk has a dictionary page and plain data pages. The building of that dictionary was wasted all the same."""
    out = str(tmp_path / "files")
    codes = F.when(F.col("id") < 1000, (F.col("id") % 3).cast("string")).otherwise(F.format_string("code-%08d", "id"))
    (spark.range(ROWS).select(codes.alias("code"), (F.col("id") % 3).alias("site")).coalesce(1).write
     .option("parquet.page.row.count.limit", "1000").option("parquet.dictionary.page.size", "20000").parquet(out))
    (path,) = Path(out).glob("*.parquet")
    chunks = {c.path_in_schema: c for c in (pq.ParquetFile(path).metadata.row_group(0).column(i) for i in range(2))}
    assert chunks["code"].has_dictionary_page and "PLAIN" in chunks["code"].encodings  # both kinds of pages
    assert chunks["site"].has_dictionary_page and "PLAIN" not in chunks["site"].encodings
    assert dictionaries.abandoned(spark, [str(path)]) == ["code"]
