"""Sample `orders` records in the Confluent wire format, for the demo, the tests and the benchmark."""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from fastavro import parse_schema, schemaless_writer

from ingestion.decode.wire import encode
from ingestion.kafka.clients import LIBRDKAFKA_LOG

STATUSES = ("PLACED", "PAID", "SHIPPED", "CANCELLED")


def order(seq: int, rng: random.Random) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"sku": f"SKU-{rng.randrange(10_000):05d}", "quantity": rng.randint(1, 5),
              "unit_price": round(rng.uniform(1, 200), 2)} for _ in range(rng.randint(1, 3))]
    amount = sum((Decimal(str(i["unit_price"])) * int(i["quantity"]) for i in items), Decimal(0))
    amount = amount.quantize(Decimal("0.01"))
    placed = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seq * 7, milliseconds=seq % 1000)
    return {
        "order_id": f"o-{seq:08d}", "customer_id": rng.randrange(1, 50_000), "status": rng.choice(STATUSES),
        "amount": amount, "currency": "EUR", "items": items, "placed_at": placed,
        "note": None if seq % 3 else f"note {seq}",
    }


def avro_body(schema: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, record)
    return out.getvalue()


@dataclass(frozen=True)
class Produced:
    """A record as it landed in Kafka."""

    partition: int
    offset: int
    key: str
    record: dict[str, Any]


def produce_orders(servers: str, topic: str, count: int, *, schema_id: int, schema: dict[str, Any],
                   first_seq: int = 0, seed: int = 7, extra: dict[str, str] | None = None) -> list[Produced]:
    """Produce `count` orders keyed by customer; return where each one landed."""
    from confluent_kafka import Producer

    parsed = parse_schema(schema)
    rng = random.Random(seed + first_seq)
    # librdkafka's own lines (a broker's transaction coordinator still loading: "Failed to acquire idempotence PID
    # ... retrying") go to the logger `-v` shows, as every client of the project's does, not to the screen.
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 20, "enable.idempotence": True,
                         "logger": LIBRDKAFKA_LOG, **(extra or {})})
    landed: list[Produced] = []
    failures: list[str] = []

    def report(err: Any, msg: Any, key: str, record: dict[str, Any]) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            landed.append(Produced(msg.partition(), msg.offset(), key, record))

    for seq in range(first_seq, first_seq + count):
        record = order(seq, rng)
        key = f"customer-{record['customer_id']}"
        value = encode(schema_id, avro_body(parsed, record))
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=value,
                                 headers=[("source", b"samples"), ("seq", str(seq).encode())],
                                 on_delivery=_reporter(report, key, record))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    producer.flush(60)
    if failures or len(landed) != count:
        raise RuntimeError(f"produced {len(landed)} of {count} records to {topic}: {failures[:3]}")
    return sorted(landed, key=lambda p: (p.partition, p.offset))


def _reporter(report: Callable[[Any, Any, str, dict[str, Any]], None], key: str,
              record: dict[str, Any]) -> Callable[[Any, Any], None]:
    return lambda err, msg: report(err, msg, key, record)


def load_schema(path: str) -> dict[str, Any]:
    with open(path) as f:
        return dict(json.load(f))
