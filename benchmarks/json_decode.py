"""The JSON decoder beside Avro and Protobuf on the same records: the sample orders as `value.format: jsonschema`
(Confluent's framing, JSON text as confluent-kafka's JSONSerializer writes it) and, for comparison, as Avro and
Protobuf (benchmarks/protobuf_decode.py).

Without `--spark`: the Python decoders in process, records/s of `BatchDecoder.decode_batch` over Arrow batches of
Kafka rows, as the executors run it. With `--spark`: JSON's one path (Python through mapInArrow; there is no JVM
path, docs/json.md#decoders) in a local Spark session, records/s of a decode into Spark's no-op sink.

    python benchmarks/json_decode.py [--records 20000] [--batch 10000] [--repeat 3] [--spark]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from benchmarks.protobuf_decode import _records, avro_values, measure, measure_spark, protobuf_values
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import encode
from ingestion.schema import json_schemas

# The orders' JSON Schema: the Avro schema's fields (schemas/orders-value/1.avsc), `amount` as a number.
ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["order_id", "customer_id", "status", "amount", "currency", "items", "placed_at"],
    "properties": {
        "order_id": {"type": "string"},
        "customer_id": {"type": "integer"},
        "status": {"enum": ["PLACED", "PAID", "SHIPPED", "CANCELLED"]},
        "amount": {"type": "number"},
        "currency": {"type": "string"},
        "items": {"type": "array", "items": {"type": "object", "required": ["sku", "quantity", "unit_price"],
                                             "properties": {"sku": {"type": "string"},
                                                            "quantity": {"type": "integer"},
                                                            "unit_price": {"type": "number"}}}},
        "placed_at": {"type": "string", "format": "date-time"},
        "note": {"type": ["string", "null"]},
    },
}


def json_values(records: list[dict[str, Any]]) -> tuple[DecodeSpec, list[bytes]]:
    doc = json_schemas.document(ORDER_SCHEMA)
    values = []
    for r in records:
        placed: dt.datetime = r["placed_at"]
        body = {**r, "amount": float(r["amount"]), "placed_at": placed.isoformat().replace("+00:00", "Z")}
        values.append(encode(1, json.dumps(body).encode()))  # JSONSerializer's json.dumps defaults
    spec = DecodeSpec(writer_schemas={1: doc}, reader_schema=doc, max_bytes=1 << 20, fail_fast=False,
                      key_format="none", value_format="jsonschema")
    return spec, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="the Python path in a local Spark session")
    args = parser.parse_args()
    records = _records(args.records)
    if args.spark:
        from ingestion.runtime.session import get_session

        spark = get_session("json-bench", conf={"spark.sql.shuffle.partitions": "2"})
        for path, rate in measure_spark(spark, *json_values(records), args.repeat).items():
            print(f"json      {path:7s} {rate:10,.0f} records/s  ({args.records} records, Spark local[*])")
        spark.stop()
        return
    for name, build in (("json (json + checks)", json_values), ("avro (fastavro)", avro_values),
                        ("protobuf (upb)", protobuf_values)):
        rate, size = measure(*build(records), args.batch, args.repeat)
        print(f"{name:21s} {rate:10,.0f} records/s  ({size} bytes per value, {args.records} records)")


if __name__ == "__main__":
    main()
