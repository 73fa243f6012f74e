"""Debezium-shaped change streams for tests, the demo and the benchmark: a table's random history of snapshot
reads, inserts, updates and deletes (each delete followed by its tombstone), written as Confluent's AvroConverter
writes them (keys as Avro records, envelopes with before/after/source/op/ts_ms), and the state it leaves.

The schemas are `schemas/customers-cdc-value/21.avsc` and `schemas/customers-cdc-key/22.avsc`.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastavro import parse_schema

from ingestion.decode.wire import encode
from ingestion.dev.samples import avro_body
from ingestion.paths import schemas_dir

VALUE_SUBJECT, VALUE_ID = "customers-cdc-value", 21
KEY_SUBJECT, KEY_ID = "customers-cdc-key", 22
_TIERS = ("bronze", "silver", "gold")


def schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """The value (envelope) and key schemas."""
    root = schemas_dir()
    return (json.loads((root / VALUE_SUBJECT / f"{VALUE_ID}.avsc").read_text()),
            json.loads((root / KEY_SUBJECT / f"{KEY_ID}.avsc").read_text()))


@dataclass(frozen=True)
class Change:
    key: int | None  # None: a truncate, which has no key
    op: str  # r, c, u, d, t
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    lsn: int
    ts_ms: int  # the database's commit time (source.ts_ms)

    def envelope(self) -> dict[str, Any]:
        source = {"version": "2.7.0.Final", "connector": "postgresql", "name": "shop", "ts_ms": self.ts_ms,
                  "snapshot": "true" if self.op == "r" else "false", "db": "shop", "schema": "public",
                  "table": "customers", "txId": self.lsn // 10, "lsn": self.lsn}
        return {"before": self.before, "after": self.after, "source": source, "op": self.op,
                "ts_ms": self.ts_ms + 7, "transaction": None}


@dataclass
class History:
    """A table's changes in commit order, and the state they leave."""

    changes: list[Change] = field(default_factory=list)

    def state(self) -> dict[int, dict[str, Any]]:
        rows: dict[int, dict[str, Any]] = {}
        for change in sorted(self.changes, key=lambda c: c.lsn):
            if change.key is None:  # a truncate
                rows.clear()
            elif change.op == "d":
                rows.pop(change.key, None)
            else:
                assert change.after is not None
                rows[change.key] = change.after
        return rows

    def by_key(self) -> dict[int, list[Change]]:
        out: dict[int, list[Change]] = {}
        for change in sorted(self.changes, key=lambda c: c.lsn):
            if change.key is not None:
                out.setdefault(change.key, []).append(change)
        return out


def history(operations: int, keys: int, *, seed: int = 11, snapshot: int | None = None,
            start_ms: int = 1_760_000_000_000, start_lsn: int = 1000) -> History:
    """A random history: a snapshot (`r`) of `snapshot` rows (default keys // 2), then `operations` changes on
    `keys` ids: an insert of an absent id, or an update or a delete (one in five) of a present one."""
    rng = random.Random(seed)
    rows: dict[int, dict[str, Any]] = {}
    out = History()
    lsn, ts = start_lsn, start_ms

    def add(key: int, op: str, after: dict[str, Any] | None) -> None:
        nonlocal lsn, ts
        lsn += rng.randint(1, 20)
        ts += rng.randint(1, 500)
        out.changes.append(Change(key, op, rows.get(key), after, lsn, ts))
        if after is None:
            rows.pop(key, None)
        else:
            rows[key] = after

    for key in rng.sample(range(1, keys + 1), snapshot if snapshot is not None else keys // 2):
        add(key, "r", _row(key, rng))
    for _ in range(operations):
        key = rng.randint(1, keys)
        if key not in rows:
            add(key, "c", _row(key, rng))
        elif rng.random() < 0.2:
            add(key, "d", None)
        else:
            add(key, "u", {**rows[key], "tier": rng.choice(_TIERS), "balance_cents": rng.randint(0, 10**9),
                           "email": None if rng.random() < 0.1 else f"c{key}-{rng.randint(0, 99)}@example.com"})
    return out


def _row(key: int, rng: random.Random) -> dict[str, Any]:
    return {"id": key, "name": f"customer {key}", "email": f"c{key}@example.com", "tier": rng.choice(_TIERS),
            "balance_cents": rng.randint(0, 10**6)}


def truncate(after: Change) -> Change:
    """Debezium's record of a `TRUNCATE` committed just after `after`: op t, no key, no before or after."""
    return Change(None, "t", None, None, after.lsn + 5, after.ts_ms + 5)


def partition_of(key: int | None, partitions: int) -> int:
    """The partition a key's changes go to (Debezium keys a table's changes by primary key; a truncate, without
    a key, to the first)."""
    if key is None:
        return 0
    return zlib.crc32(str(key).encode()) % partitions


def records(changes: list[Change]) -> Iterator[tuple[int | None, bytes | None, bytes | None]]:
    """(key id, key bytes, value bytes or None) as the AvroConverter writes them: each delete is followed by a
    tombstone of its key."""
    value_schema, key_schema = (parse_schema(s) for s in schemas())
    for change in changes:
        key = None if change.key is None else encode(KEY_ID, avro_body(key_schema, {"id": change.key}))
        yield change.key, key, encode(VALUE_ID, avro_body(value_schema, change.envelope()))
        if change.op == "d":
            yield change.key, key, None


def produce(servers: str, topic: str, changes: list[Change], *, partitions: int = 3,
            partition: Any = None) -> int:
    """Produce the changes (and tombstones) to `topic`, each key to `partition_of` its id unless `partition`
    (a function of the change's position in `changes` and its key) says otherwise; the records written."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 20, "enable.idempotence": True})
    failures: list[str] = []
    written = 0

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for i, (key, key_bytes, value) in enumerate(records(changes)):
        where = partition(i, key) if partition is not None else partition_of(key, partitions)
        while True:
            try:
                producer.produce(topic, key=key_bytes, value=value, partition=where, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        written += 1
        producer.poll(0)
    producer.flush(60)
    if failures:
        raise RuntimeError(f"producing to {topic} failed: {failures[:3]}")
    return written


def pipeline_yaml(path: Path, *, name: str, topic: str, servers: str, root: Path, silver: str) -> Path:
    """A pipeline config of a Debezium topic with a `silver:` section (indented YAML lines in `silver`)."""
    path.write_text(f"""name: {name}
topic: {topic}
kafka:
  bootstrap.servers: "{servers}"
value:
  subject: {VALUE_SUBJECT}
key:
  format: avro
  subject: {KEY_SUBJECT}
sink:
  root: {root}
silver:
{silver}
""")
    return path
