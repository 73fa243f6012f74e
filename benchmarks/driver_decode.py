"""The driver-side path's decode (`RecordDecoder.decode`: validation, fastavro, Arrow columns, the per-partition
summary) against the decode of a one-process peer (fastavro's `schemaless_reader` per record, then
`pa.Table.from_pylist`), on the same Confluent-framed sample orders (12 fields; `--payments`: the events of bench.py's
topic, 20 fields), in this process: records/s of each, median of `--repeat` runs. `--precise` turns the generated
body walk off (`decode/validate_fast.py`), as before it existed.

    python benchmarks/driver_decode.py [--records 100000] [--repeat 3] [--precise] [--payments]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import random
import statistics
import time
from pathlib import Path

import pyarrow as pa
from fastavro import parse_schema, schemaless_reader

from ingestion.decode import validate_fast
from ingestion.decode.arrow_rows import RecordDecoder
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import encode
from ingestion.dev.samples import avro_body, order
from ingestion.kafka.fetch import SOURCE_ARROW_SCHEMA

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "orders-value" / "1.avsc").read_text())


def source(values: list[bytes]) -> pa.RecordBatch:
    n, now = len(values), dt.datetime(2026, 1, 1)
    return pa.RecordBatch.from_arrays([
        pa.array([b"k%d" % i for i in range(n)], pa.binary()), pa.array(values, pa.binary()), pa.array(["t"] * n),
        pa.array([i % 2 for i in range(n)], pa.int32()), pa.array(list(range(n)), pa.int64()),
        pa.array([now] * n, SOURCE_ARROW_SCHEMA.field("timestamp").type), pa.array([0] * n, pa.int32()),
        pa.array([None] * n, SOURCE_ARROW_SCHEMA.field("headers").type)], schema=SOURCE_ARROW_SCHEMA)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--precise", action="store_true", help="without the generated body walk")
    parser.add_argument("--payments", action="store_true", help="bench.py's payment events instead of orders")
    args = parser.parse_args()
    if args.precise:
        validate_fast.generated = lambda *_: None  # type: ignore[assignment,misc]
    if args.payments:
        import datagen

        schema = datagen.schema()
        values = [value for _, value in datagen.encoded_events(0, args.records)]
    else:
        schema, rng = SCHEMA, random.Random(1)
        values = [encode(1, avro_body(SCHEMA, order(i, rng))) for i in range(args.records)]
    batch = source(values)
    text = json.dumps(schema)
    schema_id = int.from_bytes(values[0][1:5], "big")
    decoder = RecordDecoder(DecodeSpec(writer_schemas={schema_id: text}, reader_schema=text, max_bytes=1 << 20,
                                       fail_fast=False, key_format="string"))
    parsed = parse_schema(schema)
    ours, peer = [], []
    for _ in range(args.repeat):
        started = time.perf_counter()
        decoded = decoder.decode(batch, batch_id=0, ingested_at=dt.datetime.now(dt.UTC))
        ours.append(time.perf_counter() - started)
        assert decoded.bronze.num_rows == args.records and not decoded.quarantine.num_rows
        started = time.perf_counter()
        pa.Table.from_pylist([schemaless_reader(io.BytesIO(v[5:]), parsed) for v in values])
        peer.append(time.perf_counter() - started)
    a, b = statistics.median(ours), statistics.median(peer)
    kind = ("payments" if args.payments else "orders") + (" (precise walk only)" if args.precise else "")
    print(f"{args.records} {kind}: ours {args.records / a:,.0f} "
          f"records/s ({a:.2f} s), peer {args.records / b:,.0f} records/s ({b:.2f} s), ours/peer {b / a:.2f}")


if __name__ == "__main__":
    main()
