"""The JVM decode path (Spark's from_avro + verification) against the Python decoder, on the same Kafka rows.

The promise: whichever path decodes a record, bronze and quarantine get the same rows and values, and the JVM
decodes the ordinary records itself (they never reach a Python worker).
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from pyspark.sql import functions as F

from ingestion.columns import KAFKA_SOURCE_SCHEMA
from ingestion.config import load_pipeline
from ingestion.decode import bronze
from ingestion.decode import jvm_decoder as fastpath
from ingestion.decode.python_decoder import decode_in_python
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import encode
from ingestion.delta import ledger
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.errors import ConfigError
from ingestion.stream import setup
from ingestion.stream.batch import WritePath
from ingestion.stream.writer import BronzeWriter
from tests.conftest import pipeline_yaml
from tests.helpers import delta_txns

INNER = {"type": "record", "name": "Inner", "fields": [{"name": "s", "type": "string"}]}
KIND = {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}
HEAD = [
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "name", "type": "string"},
]
TAGS = [{"name": "tags", "type": {"type": "map", "values": "string"}}]
TAIL = [
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "kind", "type": KIND},
    {"name": "items", "type": {"type": "array", "items": "string"}},
    {"name": "inner", "type": INNER},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "either", "type": ["null", "int", "string"], "default": None},
]
EXTRA = [{"name": "extra", "type": "long", "default": 7}]


def record_schema(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": "R", "namespace": "t", "fields": fields}


V1 = record_schema(HEAD + TAGS + TAIL)
V2 = record_schema(HEAD + TAGS + TAIL + EXTRA)  # the reader: v1 records need schema resolution (Python)
UUID = "0b5c7a5e-3f6d-4c1e-9a8b-2d4f6e8a0c1b"


def avro_bytes(fields: list[dict[str, Any]], values: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(record_schema(fields)), values)
    return out.getvalue()


def varint(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def text(raw: bytes) -> bytes:
    return varint(len(raw)) + raw


def values(i: int, **overrides: Any) -> dict[str, Any]:
    return {"id": UUID, "name": f"name-{i}", "tags": {"a": "1", "b": "2"}, "note": None if i % 2 else "n",
            "kind": "B", "items": ["x", "y"], "inner": {"s": "in"},
            "at": dt.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=dt.UTC), "amount": decimal.Decimal("12.34"),
            "day": dt.date(2026, 1, 2), "either": [None, 5, "five"][i % 3], "extra": 100 + i, **overrides}


def v2(i: int, **overrides: Any) -> bytes:
    return encode(2, avro_bytes(HEAD + TAGS + TAIL + EXTRA, values(i, **overrides)))


def spliced(i: int, tags_encoding: bytes, name: bytes | None = None) -> bytes:
    """A v2 record with its `tags` map (and optionally `name`) encoded by hand."""
    head = avro_bytes(HEAD[:1], values(i)) + text(name) if name is not None else avro_bytes(HEAD, values(i))
    return encode(2, head + tags_encoding + avro_bytes(TAIL + EXTRA, values(i)))


GOOD = 6  # offsets 0..5: ordinary records the JVM must decode itself
CASES: list[tuple[bytes | None, bytes | None]] = [
    *((f"k{i}".encode(), v2(i)) for i in range(GOOD)),
    (b"k", None),  # 6: tombstone (verified)
    (b"k", v2(7, id=UUID.upper())),  # 7: uuid not canonical: Python normalizes it
    (b"k", spliced(8, varint(1) + text(b"a") + text(b"1") + varint(1) + text(b"b") + text(b"2") + varint(0))),
    (b"k", spliced(9, varint(-2) + varint(6) + text(b"a") + text(b"1") + text(b"b") + text(b"2") + varint(0))),
    (b"k", spliced(10, varint(0), name=b"\xff\xfe")),  # 10: invalid UTF-8 in a string
    (b"k", v2(11) + b"\x00\x00"),  # trailing bytes
    (b"k", v2(12)[:-3]),  # truncated
    (b"k", b"\x01" + v2(13)[1:]),  # wrong magic byte
    (b"k", b"\x00\x00"),  # short header
    (b"k", encode(99, avro_bytes(HEAD, values(15)))),  # unknown schema id
    (b"k", encode(1, avro_bytes(HEAD + TAGS + TAIL, values(16)))),  # older version: resolved in Python
    (b"\xff\xfe", v2(17)),  # key not UTF-8 (key.format string)
    (None, v2(18)),  # null key
    (b"k", v2(19, name="x" * 3000)),  # over value.maxBytes
]
VERIFIED = {*range(GOOD), 6, 18}  # what the JVM path decodes without Python


@pytest.fixture(scope="module")
def kafka_rows(spark: Any) -> Any:
    ts = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [(key, value, "t", offset % 2, offset, ts, 0, [("h", b"v")]) for offset, (key, value) in enumerate(CASES)]
    return spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA)


def spec(key_format: str = "string") -> DecodeSpec:
    return DecodeSpec(writer_schemas={1: json.dumps(V1), 2: json.dumps(V2)}, reader_schema=json.dumps(V2),
                      max_bytes=2000, fail_fast=False, key_format=key_format)


def collect(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.orderBy("offset").collect()]


@pytest.mark.parametrize("key_format", ["string", "bytes", "none"])
def test_jvm_path_lands_the_same_rows_as_the_python_decoder(spark: Any, kafka_rows: Any, key_format: str) -> None:
    s = spec(key_format)
    assert fastpath.unusable(spark, s) is None
    expected = collect(decode_in_python(kafka_rows, s))
    fast = fastpath.decode_in_jvm(kafka_rows, s).cache()
    verified = {r["offset"] for r in fast.where(F.col("_error_class").isNull()).select("offset").collect()}
    key_verified = VERIFIED | ({17} if key_format != "string" else set())
    assert verified == key_verified
    settled, python = fastpath.settle_in_python(fast, s, kafka_rows.schema)
    try:
        actual = collect(settled)
    finally:
        python.unpersist()
        fast.unpersist()
    assert [r["offset"] for r in actual] == list(range(len(CASES)))
    for got, want in zip(actual, expected, strict=True):
        assert got == want, f"offset {want['offset']}"
    # The cases cover what they mean to: both encodings of the map decode, the rest fails for its own reason.
    classes = {r["offset"]: r["_error_class"] for r in expected}
    assert classes[8] is None and classes[9] is None and classes[7] is None and classes[16] is None
    assert expected[7]["_payload"]["id"] == UUID and expected[16]["_payload"]["extra"] == 7
    assert {classes[o] for o in (10, 11, 12, 13, 14, 15, 19)} == {
        "MalformedAvroError", "TrailingBytesError", "WireFormatError", "UnknownSchemaError", "RecordTooLargeError"}
    assert classes[17] == ("KeyDecodeError" if key_format == "string" else None)


def test_batch_stats_summarize_each_partition_in_the_jvm(spark: Any, kafka_rows: Any) -> None:
    stats = bronze.batch_stats(decode_in_python(kafka_rows, spec()))
    assert [(s["topic"], s["partition"]) for s in stats] == [("t", 0), ("t", 1)]
    even, odd = stats
    assert (even["first"], even["last"], even["count"]) == (0, 18, 10)
    assert (odd["first"], odd["last"], odd["count"]) == (1, 19, 10)
    # failed: 10 12 14 (even); 11 13 15 17 19 (odd)
    assert (even["failed_first"], even["failed_last"], even["failed"]) == (10, 14, 3)
    assert (odd["failed_first"], odd["failed_last"], odd["failed"]) == (11, 19, 5)
    assert odd["unknown_ids"] == [99] and even["unknown_ids"] == []
    assert even["schema_ids"] == [1, 2] and odd["schema_ids"] == [2, 99]
    assert even["max_timestamp"] == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert even["bytes"] == sum(len(v) for o, (_, v) in enumerate(CASES) if o % 2 == 0 and v is not None)


# The body check's edges, by hand: each field of EDGE as bytes, a record as the concatenation.
EDGE = record_schema([
    {"name": "b", "type": "boolean"},
    {"name": "n", "type": "long"},
    {"name": "d", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}},
    {"name": "e", "type": KIND},
    {"name": "u", "type": ["null", "int", "string"], "default": None},
    {"name": "s", "type": "string"},
    {"name": "m", "type": {"type": "map", "values": "string"}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
])
EDGE_FIELDS = {"b": b"\x01", "n": varint(5), "d": varint(20_000), "ts": varint(1_700_000_000_000),
               "dec": text(b"\x04\xd2"), "e": varint(1), "u": varint(2) + text(b"x"),
               "s": text("h\u00e9llo \u2713 \U0001f600".encode()), "m": varint(1) + text(b"k") + text(b"v") + varint(0),
               "id": text(UUID.encode())}


def edge(**fields: bytes) -> bytes:
    return encode(1, b"".join({**EDGE_FIELDS, **fields}[name] for name in EDGE_FIELDS))


EDGE_CASES: dict[str, tuple[bytes, bool]] = {  # name: (value, whether the JVM may decode it itself)
    "ordinary, with 2-, 3- and 4-byte UTF-8": (edge(), True),
    "extremes: min long, no map, null union, false": (
        edge(b=b"\x00", n=b"\xff" * 9 + b"\x01", m=varint(0), u=varint(0), dec=text(b"\xd8\xf1"),
             d=varint(-719_162), ts=varint(253_402_300_799_999)), True),
    "boolean byte 2": (edge(b=b"\x02"), False),
    "a varint longer than it needs": (edge(n=b"\x8a\x00"), False),
    "a date after year 9999": (edge(d=varint(2_932_897)), False),
    "a timestamp before year 1": (edge(ts=varint(-62_135_596_800_001)), False),
    "decimal with a redundant sign byte": (edge(dec=text(b"\x00\x04\xd2")), False),
    "decimal beyond its precision": (edge(dec=text(b"\x01\x86\xa0")), False),
    "decimal of no bytes": (edge(dec=varint(0)), False),
    "enum index out of range": (edge(e=varint(5)), False),
    "union index out of range": (edge(u=varint(3)), False),
    "a UTF-16 surrogate in a string": (edge(s=text(b"\xed\xa0\x80")), False),
    "an overlong UTF-8 form": (edge(s=text(b"\xc0\xaf")), False),
    "a code point above U+10FFFF": (edge(s=text(b"\xf4\x90\x80\x80")), False),
    "invalid UTF-8 in a map key": (edge(m=varint(1) + text(b"\xff") + text(b"v") + varint(0)), False),
    "a uuid without hyphens": (edge(id=text(UUID.replace("-", "").encode() + b"0000")), False),
    "a string length past the end": (edge(id=varint(100) + UUID.encode()), False),
}


def test_jvm_body_check_trusts_exactly_what_both_decoders_read_alike(spark: Any) -> None:
    """Each edge the Java body check judges: trusted cases are decoded by the JVM, the rest go to Python, and
    either way the rows are the Python decoder's."""
    ts = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    names = list(EDGE_CASES)
    kafka = spark.createDataFrame([(b"k", value, "t", 0, offset, ts, 0, []) for offset, (value, _) in
                                   enumerate(EDGE_CASES.values())], KAFKA_SOURCE_SCHEMA)
    s = DecodeSpec(writer_schemas={1: json.dumps(EDGE)}, reader_schema=json.dumps(EDGE), max_bytes=2000,
                   fail_fast=False, key_format="string")
    assert fastpath.unusable(spark, s) is None
    fast = fastpath.decode_in_jvm(kafka, s).cache()
    try:
        verified = {names[r["offset"]] for r in fast.where(F.col("_error_class").isNull()).collect()}
        assert verified == {name for name, (_, trusted) in EDGE_CASES.items() if trusted}
        settled, python = fastpath.settle_in_python(fast, s, kafka.schema)
        actual = collect(settled)
        python.unpersist()
    finally:
        fast.unpersist()
    expected = collect(decode_in_python(kafka, s))
    for got, want in zip(actual, expected, strict=True):
        assert got == want, names[want["offset"]]
    assert expected[0]["_payload"]["s"] == "h\u00e9llo \u2713 \U0001f600"
    assert expected[1]["_payload"]["n"] == -(2**63) and expected[1]["_payload"]["dec"] == decimal.Decimal("-99.99")


def test_jvm_path_says_why_it_cannot_decode(spark: Any) -> None:
    nested_uuid = record_schema([{"name": "inner", "type": {"type": "record", "name": "U", "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}}]}}])
    text_ = json.dumps(nested_uuid)
    assert "uuid" in str(fastpath.unusable(spark, DecodeSpec({1: text_}, text_, 100, False)))
    assert "key.format avro" in str(fastpath.unusable(spark, spec("avro")))


@pytest.mark.parametrize(("decoder", "jvm"), [("auto", True), ("python", False)])
def test_value_decoder_setting_picks_the_path(spark: Any, tmp_path: Any, decoder: str, jvm: bool) -> None:
    config = _config(tmp_path, f"value:\n  format: confluent\n  subject: orders-value\n  decoder: {decoder}\n")
    assert BronzeWriter(config=config, app_id="a", resolver=_Specs(spec())).jvm_path(spark) is jvm


def test_value_decoder_jvm_refuses_to_start_when_the_jvm_cannot_decode(spark: Any, tmp_path: Any) -> None:
    config = _config(tmp_path, "value:\n  format: confluent\n  subject: orders-value\n  decoder: jvm\n")
    writer = BronzeWriter(config=config, app_id="a", resolver=_Specs(spec("avro")))
    with pytest.raises(ConfigError, match=r"value\.decoder is jvm, but key\.format avro is decoded in Python"):
        writer.jvm_path(spark)


def test_every_batch_is_written_once_its_unverified_records_decoded_in_python_in_the_same_commit(
        spark: Any, kafka_rows: Any, tmp_path: Any) -> None:
    """One Spark job writes the records the JVM verifies; the others (bad input, older or unknown schema ids,
    unusual encodings) are decoded in Python by the driver: their bronze rows join the same transaction, their
    failures go to quarantine first. No batch is written twice, no file is discarded, and the rows and ledger are
    the ones the Python decoder would give."""
    config = _config(tmp_path, "value:\n  format: confluent\n  subject: orders-value\n")
    s = spec()
    setup.ensure_tables(spark, config, s)
    results: list[Any] = []
    writer = BronzeWriter(config=config, app_id="app", resolver=_Specs(s), on_batch=results.append)
    clean = kafka_rows.where(F.col("offset").isin(sorted(VERIFIED)))

    def shifted(frame: Any, by: int) -> Any:
        return frame.withColumn("offset", F.col("offset") + by)

    writer(clean, 0)
    writer(clean, 0)  # Spark replaying a committed batch
    writer(shifted(kafka_rows, 100), 1)  # records for the Python decoder and for quarantine
    writer(shifted(kafka_rows, 200), 2)  # again: each such batch is written once, in one pass
    writer(shifted(clean, 300), 3)

    assert [(r.batch_id, r.path, r.committed) for r in results] == [
        (0, WritePath.SPARK, True), (0, WritePath.SPARK, False), (1, WritePath.SPARK, True),
        (2, WritePath.SPARK, True), (3, WritePath.SPARK, True)]
    assert [r.version for r in results] == [1, 1, 2, 3, 4]  # bronze versions: one commit per batch
    assert (results[0].rows, results[0].quarantined) == (len(VERIFIED), 0)
    assert [(r.rows, r.quarantined) for r in results[2:4]] == [(len(CASES) - 8, 8)] * 2
    assert results[0].bytes == sum(len(CASES[o][1] or b"") for o in VERIFIED)
    assert results[2].bytes == sum(len(v or b"") for _, v in CASES)

    # Rows: as the Python decoder lands them, whichever decoder decoded them.
    now = dt.datetime.now(dt.UTC)
    table = spark.read.format("delta").load(config.table_path)
    strip = ["_ingested_at", "_batch_id"]

    def rows(frame: Any) -> list[dict[str, Any]]:
        return [r.asDict(recursive=True) for r in frame.drop(*strip).orderBy("_kafka_offset").collect()]

    for batch_id, frame in ((0, clean), (1, shifted(kafka_rows, 100)), (2, shifted(kafka_rows, 200))):
        python = decode_in_python(frame, s)
        assert rows(table.where(f"_batch_id = {batch_id}")) == rows(
            bronze.bronze_rows(python, batch_id=batch_id, ingested_at=now)), batch_id
    quarantine = spark.read.format("delta").load(config.quarantine_path)
    assert rows(quarantine.where("_batch_id = 1")) == rows(
        bronze.quarantine_rows(decode_in_python(shifted(kafka_rows, 100), s), batch_id=1, ingested_at=now))

    # Ledger: each commit records what the Python decoder's summary would have recorded.
    records = {r.batch_id: r for r in DeltaRsReader().history(config.table_path)}
    for batch_id, frame in ((0, clean), (1, shifted(kafka_rows, 100))):
        expected, failed = ledger.batch_records(bronze.batch_stats(decode_in_python(frame, s)), pipeline=config.name,
                                                batch_id=batch_id, kind="stream", app_id="app",
                                                quarantine_app_id="app.quarantine")
        assert records[batch_id] == expected
        if failed is not None:
            assert [r for r in DeltaRsReader().history(config.quarantine_path) if r.batch_id == batch_id] == [failed]
    assert records[3].ranges == tuple(replace(r, first=r.first + 300, last=r.last + 300) for r in records[0].ranges)
    assert [(a, v) for _, a, v in delta_txns(Path(config.table_path))] == [("app", b) for b in range(4)]
    assert [(a, v) for _, a, v in delta_txns(Path(config.quarantine_path))] == [("app.quarantine", 1),
                                                                              ("app.quarantine", 2)]

    # Nothing was written to be thrown away: every data file is in the log.
    live = {Path(f).name for f in table.inputFiles()}
    on_disk = {f.name for f in Path(config.table_path).rglob("*.parquet") if "_delta_log" not in f.parts}
    assert on_disk == live


def test_a_table_partitioned_by_a_kafka_coordinate_commits_in_one_pass(spark: Any, kafka_rows: Any,
                                                                         tmp_path: Any) -> None:
    """The ledger's per-partition summary is computed while the files are written, not read back from them, so
    it holds for coordinates that are partition columns (which data files do not carry)."""
    config = _config(tmp_path, "value:\n  format: confluent\n  subject: orders-value\n",
                     sink="  partitionBy: [_kafka_partition]\n")
    s = spec()
    setup.ensure_tables(spark, config, s)
    results: list[Any] = []
    writer = BronzeWriter(config=config, app_id="app", resolver=_Specs(s), on_batch=results.append)
    clean = kafka_rows.where(F.col("offset").isin(sorted(VERIFIED)))
    writer(clean, 0)

    assert [(r.batch_id, r.path, r.committed, r.rows) for r in results] == [
        (0, WritePath.SPARK, True, len(VERIFIED))]
    assert results[0].max_timestamp == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    expected, _ = ledger.batch_records(bronze.batch_stats(decode_in_python(clean, s)), pipeline=config.name, batch_id=0,
                                       kind="stream", app_id="app", quarantine_app_id="app.quarantine")
    assert [r for r in DeltaRsReader().history(config.table_path) if r.batch_id == 0] == [expected]
    assert {p.name for p in Path(config.table_path).iterdir() if not p.name.startswith("_delta")} == {
        "_kafka_partition=0", "_kafka_partition=1"}
    table = spark.read.format("delta").load(config.table_path)
    assert sorted(r[0] for r in table.select("_kafka_offset").collect()) == sorted(VERIFIED)


class _Specs:
    """A resolver that already knows its spec (the registry is not what these tests are about)."""

    def __init__(self, spec: DecodeSpec) -> None:
        self.spec = spec

    def refresh(self, ids: set[int], topics: object = frozenset(), records: object = None) -> bool:
        return False


def _config(tmp_path: Any, extra: str, sink: str = "") -> Any:
    return load_pipeline(pipeline_yaml(tmp_path, topic="t", servers="127.0.0.1:9", extra=extra, sink=sink))


def _debezium(name: str, kind: str) -> list[Any]:
    return ["null", {"type": kind, "connect.version": 1, "connect.name": name}]


DEBEZIUM_ROW = {"type": "record", "name": "Value", "namespace": "shop.public.customers", "fields": [
    {"name": "zoned", "type": _debezium("io.debezium.time.ZonedTimestamp", "string"), "default": None},
    {"name": "micros", "type": _debezium("io.debezium.time.MicroTimestamp", "long"), "default": None},
    {"name": "millis", "type": _debezium("io.debezium.time.Timestamp", "long"), "default": None},
    {"name": "nanos", "type": _debezium("io.debezium.time.NanoTimestamp", "long"), "default": None},
    {"name": "day", "type": _debezium("io.debezium.time.Date", "int"), "default": None},
    {"name": "time_ms", "type": _debezium("io.debezium.time.Time", "int"), "default": None},
    {"name": "time_us", "type": _debezium("io.debezium.time.MicroTime", "long"), "default": None},
    {"name": "time_ns", "type": _debezium("io.debezium.time.NanoTime", "long"), "default": None},
    {"name": "amount", "default": None, "type": ["null", {
        "type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data", "connect.version": 1,
        "connect.name": "io.debezium.data.VariableScaleDecimal",
        "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]}]},
    {"name": "doc", "type": _debezium("io.debezium.data.Json", "string"), "default": None},
    {"name": "stamps", "type": {"type": "array", "items": {"type": "long", "connect.name":
                                                            "io.debezium.time.MicroTimestamp"}}, "default": []},
]}
DEBEZIUM_AVRO = {"type": "record", "name": "Envelope", "namespace": "shop.public.customers", "fields": [
    {"name": "before", "type": ["null", DEBEZIUM_ROW], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "op", "type": "string"}]}
# (row, whether the JVM vouches for it): every edge of each semantic type, the rows the Python path must settle
_MAX_LONG = 2**63 - 1
DEBEZIUM_EDGES: dict[str, tuple[dict[str, Any], bool]] = {
    "plain": ({"zoned": "2026-03-01T10:00:00Z", "micros": 1_767_225_600_000_001, "millis": 1_767_225_600_001,
               "nanos": 1_767_225_600_000_001_999, "day": 20_454, "time_ms": 3_723_004, "time_us": 3_723_000_005,
               "time_ns": 3_723_000_005_999, "doc": '{"a": 1}', "stamps": [0, -1]}, True),
    "offsets": ({"zoned": "2026-03-01T00:30:00.123456789-05:30", "micros": -1, "millis": -1500, "nanos": -1,
                 "day": -1, "time_ms": 0, "time_us": 86_400_000_000, "time_ns": 0}, True),
    "fraction": ({"zoned": "1969-12-31T23:59:59.5+14:00"}, True),
    "short fraction": ({"zoned": "2026-03-01T10:00:00.5+02:00"}, True),
    # (a day inside years 1 to 9999 at the low end: collect() makes datetimes in local time)
    "extremes": ({"zoned": "0001-01-02T00:00:00Z", "micros": -62_135_510_400_000_000, "day": 2_932_896,
                  "nanos": -(2**63), "millis": 253_402_300_799_999}, True),
    "lowercase": ({"zoned": "2026-03-01t10:00:00z"}, False),
    "before year 1": ({"zoned": "0001-01-01T00:00:00+01:00"}, False),
    "february 30": ({"zoned": "2026-02-30T10:00:00Z"}, False),
    "not a time": ({"zoned": "yesterday"}, False),
    "micros beyond": ({"micros": _MAX_LONG}, False),
    "millis beyond": ({"millis": -(2**62)}, False),
    "day beyond": ({"day": 2_932_897}, False),
    "time beyond": ({"time_us": 86_400_000_001}, False),
    "negative time": ({"time_ms": -1}, False),
    "array beyond": ({"stamps": [1, _MAX_LONG]}, False),
    "decimal": ({"amount": {"scale": 2, "value": (-12345).to_bytes(2, "big", signed=True)}}, False),
    "decimal too fine": ({"amount": {"scale": 19, "value": b"\x01"}}, False),
    "nulls": ({}, True),
}


def test_debeziums_avro_semantic_types_land_alike_on_both_paths(spark: Any) -> None:
    """Debezium's AvroConverter output (`connect.name`): the JVM converts what it can reproduce exactly and leaves
    the rest to Python; the rows (values, error classes, messages) are the Python decoder's either way."""
    from tests.helpers import decode_both_ways

    parsed = parse_schema(DEBEZIUM_AVRO)
    values = []
    for row, _ in DEBEZIUM_EDGES.values():
        image = {"stamps": [], **row}
        buffer = io.BytesIO()
        schemaless_writer(buffer, parsed, {"before": None, "after": image, "op": "c"})
        values.append(encode(1, buffer.getvalue()))
    text = json.dumps(DEBEZIUM_AVRO)
    spec = DecodeSpec(writer_schemas={1: text}, reader_schema=text, max_bytes=10_000, fail_fast=False,
                      key_format="string")
    assert spec.payload_type["after"].dataType.simpleString() == (
        "struct<zoned:timestamp,micros:timestamp,millis:timestamp,nanos:timestamp,day:date,time_ms:string,"
        "time_us:string,time_ns:string,amount:decimal(38,18),doc:string,stamps:array<timestamp>>")
    jvm_rows, python_rows, unverified = decode_both_ways(spark, spec, values)
    names = list(DEBEZIUM_EDGES)
    assert {names[i] for i in unverified} == {n for n, (_, trusted) in DEBEZIUM_EDGES.items() if not trusted}
    for got, want in zip(jvm_rows, python_rows, strict=True):
        assert got == want, names[want["offset"]]
    rows = {names[r["offset"]]: r for r in python_rows}
    plain = rows["plain"]["_payload"]["after"]
    assert (plain["zoned"], plain["micros"], plain["nanos"], plain["day"], plain["time_ms"], plain["time_ns"]) == (
        dt.datetime(2026, 3, 1, 10), dt.datetime(2026, 1, 1, 0, 0, 0, 1), dt.datetime(2026, 1, 1, 0, 0, 0, 1),
        dt.date(2026, 1, 1), "01:02:03.004", "01:02:03.000005")
    offsets = rows["offsets"]["_payload"]["after"]
    assert offsets["zoned"] == dt.datetime(2026, 3, 1, 6, 0, 0, 123_456)
    assert offsets["nanos"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999_999)
    assert offsets["time_us"] == "24:00:00.000000"
    assert rows["decimal"]["_payload"]["after"]["amount"] == decimal.Decimal("-123.45")
    assert (rows["february 30"]["_error_class"], rows["decimal too fine"]["_error_class"],
            rows["micros beyond"]["_error_class"]) == ("JsonFormatError", "JsonRangeError", "JsonRangeError")
    assert rows["february 30"]["_error_message"].startswith('$.after.zoned: "2026-02-30T10:00:00Z" is not a ')
