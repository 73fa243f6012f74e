"""The decoders side by side on the same records: the sample orders as Avro (the `confluent` format) and as
Protobuf (`value.format: protobuf`).

Without `--spark`: the Python decoders in process (fastavro, upb), records/s of `BatchDecoder.decode_batch` over
Arrow batches of Kafka rows, as the executors run it. With `--spark`: both paths of both formats in a local Spark
session (the JVM path with its verification: from_avro + AvroBodyCheck, ProtobufDecode; the Python path through
mapInArrow), records/s of a decode into Spark's no-op sink over a cached DataFrame of the framed values.

    python benchmarks/protobuf_decode.py [--records 50000] [--batch 10000] [--repeat 3] [--spark]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingestion.decode.protobuf_wire import index_bytes
from ingestion.decode.python_decoder import batch_decoder
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import encode
from ingestion.dev.samples import avro_body, order
from ingestion.schema import protobuf_schemas
from ingestion.schema.files import canonical_json

ROOT = Path(__file__).resolve().parent.parent
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _kafka_batch(values: list[bytes]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays([
        pa.array([None] * n, pa.binary()), pa.array(values, pa.binary()), pa.array(["orders"] * n),
        pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
        pa.array([0] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32()), pa.array([[]] * n, HEADERS),
    ], names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"])


def _records(count: int) -> list[dict[str, Any]]:
    rng = random.Random(7)
    return [order(seq, rng) for seq in range(count)]


def avro_values(records: list[dict[str, Any]]) -> tuple[DecodeSpec, list[bytes]]:
    schema = json.loads((ROOT / "schemas" / "orders-value" / "1.avsc").read_text())
    text = canonical_json(schema)
    spec = DecodeSpec(writer_schemas={1: text}, reader_schema=text, max_bytes=1 << 20, fail_fast=False,
                      key_format="none")
    return spec, [encode(1, avro_body(schema, r)) for r in records]


def protobuf_values(records: list[dict[str, Any]]) -> tuple[DecodeSpec, list[bytes]]:
    from google.protobuf import message_factory

    name = "orders.proto"
    doc = protobuf_schemas.document(name, {name: (ROOT / "benchmarks" / "schemas" / name).read_text()})
    cls = message_factory.GetMessageClass(protobuf_schemas.find_message(doc, "com.example.shop.Order"))
    statuses = {"PLACED": 0, "PAID": 1, "SHIPPED": 2, "CANCELLED": 3}
    values = []
    for r in records:
        msg = cls(order_id=r["order_id"], customer_id=r["customer_id"], status=statuses[r["status"]],
                  amount_cents=int(r["amount"] * 100), currency=r["currency"])
        for item in r["items"]:
            msg.items.add(sku=item["sku"], quantity=item["quantity"], unit_price=item["unit_price"])
        msg.placed_at.FromDatetime(r["placed_at"])
        if r["note"] is not None:
            msg.note.value = r["note"]
        values.append(encode(1, index_bytes([0]) + msg.SerializeToString()))
    spec = DecodeSpec(writer_schemas={1: doc}, reader_schema=doc, max_bytes=1 << 20, fail_fast=False,
                      key_format="none", value_format="protobuf", message_name="com.example.shop.Order")
    return spec, values


def measure(spec: DecodeSpec, values: list[bytes], batch: int, repeat: int) -> tuple[float, int]:
    """(median records/s over `repeat` passes, bytes per record)."""
    batches = [_kafka_batch(values[i:i + batch]) for i in range(0, len(values), batch)]
    decoder: Any = batch_decoder(spec)
    list(decoder(iter(batches[:1])))  # warm: the decoder's schemas are prepared once per task
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        for out in decoder(iter(batches)):
            assert out.column("_error_class").null_count == out.num_rows
        rates.append(len(values) / (time.perf_counter() - started))
    return statistics.median(rates), sum(map(len, values)) // len(values)


def measure_spark(spark: Any, spec: DecodeSpec, values: list[bytes], repeat: int) -> dict[str, float]:
    """Median records/s of the JVM and the Python path over the same cached Kafka rows (the Python path alone
    where the format has no JVM path)."""
    import datetime as dt

    from ingestion.columns import KAFKA_SOURCE_SCHEMA
    from ingestion.decode import jvm_decoder
    from ingestion.decode.python_decoder import decode_in_python

    at = dt.datetime(2026, 1, 1)
    rows = spark.createDataFrame([(None, v, "orders", i % 2, i, at, 0, []) for i, v in enumerate(values)],
                                 KAFKA_SOURCE_SCHEMA).repartition(2).cache()
    rows.count()
    paths = {"jvm": lambda: jvm_decoder.decode_in_jvm(rows, spec), "python": lambda: decode_in_python(rows, spec)}
    if jvm_decoder.unusable(spark, spec) is not None:
        del paths["jvm"]
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeat + 1):  # the first round warms the JVM and the Python workers
        for name, decode in paths.items():
            started = time.perf_counter()
            decode().write.format("noop").mode("overwrite").save()
            rates[name].append(len(values) / (time.perf_counter() - started))
    rows.unpersist()
    return {name: statistics.median(r[1:]) for name, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="both paths in a local Spark session")
    args = parser.parse_args()
    records = _records(args.records)
    if args.spark:
        from ingestion.runtime.session import get_session

        spark = get_session("protobuf-bench", conf={"spark.sql.shuffle.partitions": "2"})
        for name, build in (("avro", avro_values), ("protobuf", protobuf_values)):
            spec, values = build(records)
            for path, rate in measure_spark(spark, spec, values, args.repeat).items():
                print(f"{name:9s} {path:7s} {rate:10,.0f} records/s  ({args.records} records, Spark local[*])")
        spark.stop()
        return
    for name, build in (("avro (fastavro)", avro_values), ("protobuf (upb)", protobuf_values)):
        rate, size = measure(*build(records), args.batch, args.repeat)
        print(f"{name:18s} {rate:10,.0f} records/s  ({size} bytes per value, {args.records} records)")


if __name__ == "__main__":
    main()
