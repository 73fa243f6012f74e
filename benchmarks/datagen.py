"""The benchmark's data: a ~20-field payment event (~250 bytes in Avro), produced in the Confluent wire format.

Topics are produced once per size and reused: a marker file in the benchmark home records topic, count and value
bytes, and is trusted only while the broker still holds exactly that many records.
"""

from __future__ import annotations

import io
import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer

from ingestion.decode.wire import encode
from ingestion.kafka.clients import create_topic, watermarks

SUBJECT = "payments-value"
SCHEMA_ID = 1
SCHEMAS_DIR = Path(__file__).parent / "schemas"
SCHEMA_FILE = SCHEMAS_DIR / SUBJECT / f"{SCHEMA_ID}.avsc"
PARTITIONS = 6

EVENT_TYPES = ("AUTHORIZED", "CAPTURED", "REFUNDED", "DECLINED", "CHARGEBACK")
BRANDS = ("VISA", "MASTERCARD", "AMEX", "DISCOVER", "OTHER")
CURRENCIES = (("EUR", 1.0), ("USD", 0.92), ("GBP", 1.17), ("CHF", 1.04), ("SEK", 0.087))
COUNTRIES = ("DE", "FR", "NL", "US", "GB", "SE", "CH", "IT", "ES", "PL")
MERCHANTS = tuple(f"{a} {b}" for a in ("Nordic", "Urban", "Blue", "Green", "Prime", "Metro", "Alpine", "Sunny")
                  for b in ("Outfitters", "Grocers", "Electronics", "Books & Co", "Travel GmbH", "Pharmacy"))
AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/126.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) Safari/604.1",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Firefox/127.0",
    "okhttp/4.12.0 shop-android/7.3.1",
)
CHANNELS = ("web", "ios", "android", "pos", "moto")


def schema() -> dict[str, Any]:
    return dict(json.loads(SCHEMA_FILE.read_text()))


def event(seq: int, rng: random.Random, now_ms: int) -> dict[str, Any]:
    currency, rate = rng.choice(CURRENCIES)
    amount = round(rng.lognormvariate(3.5, 1.0), 2)
    customer = rng.randrange(1, 2_000_000)
    attributes = {"channel": rng.choice(CHANNELS)}
    if seq % 2:
        attributes["campaign"] = f"spring-{rng.randrange(40):02d}"
    if seq % 5 == 0:
        attributes["retry"] = str(rng.randrange(1, 4))
    return {
        "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "event_time": now_ms - rng.randrange(0, 5000),
        "event_type": rng.choice(EVENT_TYPES),
        "payment_id": f"pay_{seq:012d}{rng.randrange(16**6):06x}",
        "merchant_id": rng.randrange(10_000, 99_999),
        "merchant_name": rng.choice(MERCHANTS),
        "customer_id": customer,
        "customer_email": None if seq % 7 == 0 else f"customer{customer}@example.com",
        "amount": amount,
        "currency": currency,
        "amount_eur": round(amount * rate, 2),
        "card_brand": rng.choice(BRANDS),
        "card_last4": f"{rng.randrange(10_000):04d}",
        "card_country": rng.choice(COUNTRIES),
        "ip_address": f"{rng.randrange(1, 224)}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
        "user_agent": None if seq % 4 == 0 else rng.choice(AGENTS),
        "risk_score": rng.random(),
        "three_ds": rng.random() < 0.7,
        "installments": rng.choice((1, 1, 1, 3, 6)),
        "attributes": attributes,
    }


def encoded_events(first_seq: int, count: int, seed: int = 11) -> Iterator[tuple[bytes, bytes]]:
    """(key, wire-format value) pairs for events first_seq .. first_seq + count - 1."""
    parsed = parse_schema(schema())
    rng = random.Random(seed + first_seq)
    now_ms = int(time.time() * 1000)
    out = io.BytesIO()
    for seq in range(first_seq, first_seq + count):
        record = event(seq, rng, now_ms)
        out.seek(0)
        out.truncate()
        schemaless_writer(out, parsed, record)
        yield f"customer-{record['customer_id']}".encode(), encode(SCHEMA_ID, out.getvalue())


def producer_settings(servers: str, low_latency: bool = False) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": servers, "compression.type": "lz4",
                                "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}
    if low_latency:
        settings.update({"linger.ms": 5, "batch.size": 262_144})
    else:
        settings.update({"linger.ms": 50, "batch.size": 1_000_000, "batch.num.messages": 100_000})
    return settings


@dataclass(frozen=True)
class TopicData:
    topic: str
    records: int
    value_bytes: int
    key_bytes: int
    partitions: int
    produce_seconds: float
    bad: int = 0  # records whose Avro body is cut short (the dirty topic's): quarantined, never in bronze

    @property
    def avg_value_bytes(self) -> float:
        return self.value_bytes / max(self.records, 1)


def ensure_topic(servers: str, home: Path, records: int, log: Callable[[str], None] = print,
                 bad_every: int = 0) -> TopicData:
    """The benchmark topic of `records` events: reused when the marker and the broker agree, else produced.
    `bad_every`: the same events with every `bad_every`-th body cut short by 3 bytes (a dirty topic of its own)."""
    topic = f"bench-payments-{records}" + (f"-bad{bad_every}" if bad_every else "")
    marker = home / "topics" / f"{topic}.json"
    settings = {"bootstrap.servers": servers}
    if marker.is_file():
        data = TopicData(**json.loads(marker.read_text()))
        try:
            marks = watermarks(settings, topic)
        except Exception as exc:  # noqa: BLE001 - topic gone (broker data deleted): produce again
            log(f"marker {marker} found but topic is unusable ({exc}); producing again")
        else:
            held = sum(high - low for low, high in marks.values())
            if held == data.records and len(marks) == data.partitions:
                log(f"reusing topic {topic}: {held:,} records in {len(marks)} partitions")
                return data
            log(f"topic {topic} holds {held:,} records, marker says {data.records:,}; producing again")
        _delete_topic(settings, topic)
    create_topic(settings, topic, PARTITIONS)
    data = _produce_all(servers, topic, records, log, bad_every)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(asdict(data)))
    return data


def _delete_topic(settings: dict[str, Any], topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings)
    try:
        admin.delete_topics([topic])[topic].result(30)
    except Exception:  # noqa: BLE001 - did not exist
        return
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(1.0)  # the controller needs a moment before the name can be created again


def _produce_all(servers: str, topic: str, records: int, log: Callable[[str], None],
                 bad_every: int = 0) -> TopicData:
    from confluent_kafka import Producer

    producer = Producer(producer_settings(servers))
    failures: list[str] = []
    delivered = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            delivered[0] += 1

    started = time.monotonic()
    value_bytes = key_bytes = 0
    step = max(records // 20, 1)
    bad = 0
    for i, (key, value) in enumerate(encoded_events(0, records)):
        if bad_every and i % bad_every == bad_every - 1:
            value, bad = value[:-3], bad + 1  # a truncated body: MalformedAvroError, quarantined
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        value_bytes += len(value)
        key_bytes += len(key)
        if i % 1000 == 0:
            producer.poll(0)
        if (i + 1) % step == 0:
            rate = (i + 1) / (time.monotonic() - started)
            log(f"  produced {i + 1:,} of {records:,} to {topic} ({rate:,.0f} records/s)")
    producer.flush(120)
    seconds = time.monotonic() - started
    if failures or delivered[0] != records:
        raise RuntimeError(f"produced {delivered[0]} of {records} records to {topic}: {failures[:3]}")
    log(f"produced {records:,} records ({value_bytes / records:.0f} value bytes each) to {topic} in {seconds:.1f}s")
    return TopicData(topic, records, value_bytes, key_bytes, PARTITIONS, round(seconds, 2), bad)


def produce_at_rate(servers: str, topic: str, rate: float, seconds: float, pool_size: int = 20_000) -> dict[str, Any]:
    """Produce to `topic` at `rate` records/s for `seconds`, from a pool of pre-encoded events (so the producer
    itself costs little CPU). The Kafka timestamp (CreateTime) is set when produce() is called."""
    from confluent_kafka import Producer

    pool = list(encoded_events(10**9, pool_size, seed=23))
    producer = Producer(producer_settings(servers, low_latency=True))
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    started = time.monotonic()
    started_wall = time.time()
    sent = 0
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= seconds:
            break
        due = min(int(rate * elapsed), int(rate * seconds))
        while sent < due:
            key, value = pool[sent % pool_size]
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(60)
    elapsed = time.monotonic() - started
    if failures:
        raise RuntimeError(f"rate producer: {len(failures)} delivery failures, e.g. {failures[0]}")
    return {"records": sent, "seconds": round(elapsed, 2), "rate": round(sent / elapsed, 1),
            "target_rate": rate, "started_at": started_wall}


def produce_many_at_rate(servers: str, rates: dict[str, float], seconds: float,
                         pool_size: int = 20_000) -> dict[str, Any]:
    """`produce_at_rate` for several topics at once, each at its own rate, from one producer."""
    from confluent_kafka import Producer

    pool = list(encoded_events(10**9, pool_size, seed=29))
    producer = Producer(producer_settings(servers, low_latency=True))
    failures: list[str] = []
    sent = dict.fromkeys(rates, 0)
    started, started_wall = time.monotonic(), time.time()
    while (elapsed := time.monotonic() - started) < seconds:
        for topic, rate in rates.items():
            while sent[topic] < int(rate * elapsed):
                key, value = pool[sent[topic] % pool_size]
                try:
                    producer.produce(topic, key=key, value=value,
                                     on_delivery=lambda err, _: failures.append(str(err)) if err else None)
                except BufferError:
                    producer.poll(0.01)
                    continue
                sent[topic] += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(60)
    if failures:
        raise RuntimeError(f"rate producer: {len(failures)} delivery failures, e.g. {failures[0]}")
    return {"records": sent, "seconds": round(time.monotonic() - started, 2), "started_at": started_wall}
