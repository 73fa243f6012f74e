"""The Python decoders side by side on the same records: the sample orders as Avro (fastavro, the `confluent`
format) and as Protobuf (upb, `value.format: protobuf`), in process, without Spark: records/s of
`BatchDecoder.decode_batch` over Arrow batches of Kafka rows, as the executors run it (docs/performance.md).

    python benchmarks/protobuf_decode.py [--records 50000] [--batch 10000] [--repeat 3]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    records = _records(args.records)
    for name, build in (("avro (fastavro)", avro_values), ("protobuf (upb)", protobuf_values)):
        rate, size = measure(*build(records), args.batch, args.repeat)
        print(f"{name:18s} {rate:10,.0f} records/s  ({size} bytes per value, {args.records} records)")


if __name__ == "__main__":
    main()
