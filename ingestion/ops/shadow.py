"""`ingest shadow`: re-ingest the offsets some live table versions hold, under another config, into a shadow table
beside the live one; show it, compare it (`ops/shadow_diff.py`), promote it in one commit per table, or drop it
(docs/reprocessing.md).

A shadow is named (`shadow` by default); its tables are `<table>__<name>` and `<quarantine>__<name>`, written as
a replay writes (`ops/replay.py`: each commit with its txn action and a `replay` ledger record), and its facts
(the other config file, the live versions and their offset spans, its state) are kept in one small JSON file
beside the pipeline's checkpoint, `<checkpoint>.shadows.json` (`state_files`: a local folder or object storage).

States: `starting` (written before the first commit; a rerun of `start` completes it), `ready`, `promoting` (the
promote's txn version recorded before its first commit: a rerun repeats the same commits, which Delta skips where
they were made), `promoted`. A pipeline's silver table is rebuilt from the promoted bronze by the promote.

A routed pipeline's shadow (`routing:`) covers the stream batches committed between two times (its tables have
versions of their own, so a version number is refused): their offsets across the route tables and quarantine. Each
route table gets its shadow `<table>__<name>` and the quarantine `<quarantine>__<name>`, written by the routed
replay under the other config (whose routing may name other tables); promote replaces each live table's rows of
those offsets, makes the tables only the shadow has, and leaves a table that empties out in place.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion import kafka
from ingestion.columns import METADATA_COLUMNS
from ingestion.config import PipelineConfig
from ingestion.decode import bronze
from ingestion.decode.resolver import evolution
from ingestion.delta import ledger, reads, routed, rs_reads, rs_tables, shadow_tables, whole_batches
from ingestion.delta.ledger import BatchKind, BatchRecord
from ingestion.errors import ConfigError
from ingestion.ops import replay
from ingestion.ops.shadow_promote import Promoted, check_still_current, promote, promote_undone, switch_config
from ingestion.ops.shadow_state import (
    DEFAULT_NAME,
    PROMOTED,
    PROMOTING,
    READY,
    STARTING,
    Shadow,
    ShadowError,
    Span,
    digest,
    get,
    load_shadows,
    save_shadow,
    state_location,
)
from ingestion.stream import context, setup
from ingestion.stream.batch import decode_range
from ingestion.stream.source import kafka_options
from ingestion.units import version_or_time

__all__ = ["DEFAULT_NAME", "READY", "Promoted", "Shadow", "ShadowError", "Span", "check_kafka_holds",
           "check_still_current", "drop", "get",
           "live_ledgers", "load_shadows", "plan_start", "promote", "render_status", "routed_spans", "save_shadow",
           "shadow_config", "shadow_paths", "spans_of", "start", "state_location", "status", "switch_config",
           "version_range"]

log = logging.getLogger(__name__)

DATA_KINDS = (BatchKind.STREAM, BatchKind.REPLAY)  # commits that consumed Kafka offsets of their own

# --- what a shadow covers (pure) --------------------------------------------------------------------------------

def _at(text: str) -> int | dt.datetime:
    """A version number, or a time (naive UTC, as the ledger's commit times) as every command reads one."""
    try:
        at = version_or_time(text)
    except ValueError as exc:
        raise ShadowError(str(exc)) from None
    return at if isinstance(at, int) else at.replace(tzinfo=None)


def _as_time(text: str) -> dt.datetime:
    at = _at(text)
    if isinstance(at, int):
        raise ShadowError(f"{text} is a version number, not a time")
    return at


def version_range(records: Sequence[BatchRecord], start: str, end: str | None) -> tuple[int, int]:
    """The live versions `--from`/`--to` name: a version number, or a time as every command reads one
    (`units.version_or_time`; `--from` a time: the oldest version committed at or after it; `--to` a time: the
    newest at or before it); `--to` left out: the newest version. Only versions that record offsets count."""
    times = {r.version: r.committed_at for r in records if r.version is not None}
    if not times:
        raise ShadowError("the live table records no offsets yet: nothing to re-ingest")
    first, last = _at(start), (None if end is None else _at(end))
    if isinstance(first, int):
        low = first
    else:
        when = first
        after = [v for v, t in times.items() if t is not None and t >= when]
        if not after:
            raise ShadowError(f"no table version committed at or after {start} (newest: {max(times)})")
        low = min(after)
    if last is None:
        high = max(times)
    elif isinstance(last, int):
        high = last
    else:
        when = last
        before = [v for v, t in times.items() if t is not None and t <= when]
        if not before:
            raise ShadowError(f"no table version committed at or before {end} (oldest: {min(times)})")
        high = max(before)
    if low > high:
        raise ShadowError(f"--from names version {low}, after --to's {high}")
    return low, high


def spans_of(records: Sequence[BatchRecord], low: int, high: int) -> tuple[Span, ...]:
    """Per partition, the offsets the data commits of versions `low`..`high` hold (one span each: the stream reads
    a partition's offsets in order). Refused: a range with no data commit, one holding a commit of another kind
    (a rewind, a promote, a quarantine re-decode: not yet), and one whose spans other versions' offsets
    interleave (a replay that filled a gap inside it: not yet)."""
    inside = [r for r in records if r.version is not None and low <= r.version <= high]
    odd = [r for r in inside if r.kind not in DATA_KINDS and r.kind not in ledger.MAINTENANCE]
    if odd:
        raise ShadowError(f"version {odd[0].version} in {low}-{high} is a {odd[0].kind} commit: a shadow over "
                          "rewinds, promotes or quarantine re-decodes is not supported yet; choose versions "
                          "after it")
    data = [r for r in inside if r.kind in DATA_KINDS and r.ranges]
    if not data:
        raise ShadowError(f"versions {low}-{high} hold no Kafka offsets (maintenance or table creation only)")
    found = _union(data)
    outside = [r for r in ledger.in_effect(records)  # a rewind's undone versions hold nothing any more
               if r.version is not None and not low <= r.version <= high and r.kind in DATA_KINDS]
    for record in outside:
        for r in record.ranges:
            span = found.get((r.topic, r.partition))
            if span is not None and r.first <= span.last and r.last >= span.first:
                raise ShadowError(f"version {record.version} ({record.kind}) holds offsets {r.first}-{r.last} of "
                                  f"{r.topic}/{r.partition}, inside the range's {span.first}-{span.last}: a shadow "
                                  "over interleaved versions is not supported yet")
    return tuple(found[k] for k in sorted(found))


def routed_spans(ledgers: Mapping[str, Sequence[BatchRecord]], start: str, end: str | None,
                 file: str = "") -> tuple[Span, ...]:
    """A routed pipeline's range: per partition, the offsets its tables' (route tables' and quarantine's: `ledgers`,
    by table name) data commits of the stream batches committed from `start` to `end` hold. A stream batch is one
    commit per table, made one after another, so a batch is inside when its first commit is (whole: all its
    tables' commits, or none); another commit (a replay) counts by its own time. Times only: each table has
    versions of its own, so a version number is refused in one line. Refused as `spans_of` refuses: a rewind,
    promote or re-decode inside, offsets other commits interleave."""
    times_only(sorted(ledgers), start, end, file)
    low, high = _as_time(start), (None if end is None else _as_time(end))
    groups: dict[object, list[tuple[str, BatchRecord]]] = {}
    for table, records in ledgers.items():
        for r in records:
            if r.version is None or r.kind in ledger.MAINTENANCE:
                continue
            batch = whole_batches.stream_batch(r)
            groups.setdefault(batch if batch is not None else (table, r.version), []).append((table, r))

    def inside(group: list[tuple[str, BatchRecord]]) -> bool:
        times = [r.committed_at for _, r in group if r.committed_at is not None]
        return bool(times) and min(times) >= low and (high is None or min(times) <= high)

    chosen = [(t, r) for g in groups.values() if inside(g) for t, r in g]
    odd = [(t, r) for t, r in chosen if r.kind not in DATA_KINDS]
    if odd:
        table, record = odd[0]
        raise ShadowError(f"{table} version {record.version} ({record.committed_at}) is a {record.kind} commit: a "
                          "shadow over rewinds, promotes or quarantine re-decodes is not supported yet; choose a "
                          "--from after it")
    data = [r for _, r in chosen if r.ranges]
    if not data:
        raise ShadowError(f"no commit of the tables ({', '.join(sorted(ledgers))}) holds Kafka offsets from {start}"
                          + (f" to {end}" if end else "") + ": nothing to re-ingest")
    found = _union(data)
    for g in groups.values():
        if inside(g):
            continue
        for table, record in g:
            for held in record.ranges if record.kind in DATA_KINDS else ():
                span = found.get((held.topic, held.partition))
                if span is not None and held.first <= span.last and held.last >= span.first:
                    raise ShadowError(f"{table} version {record.version} ({record.kind}, {record.committed_at}) "
                                      f"holds offsets {held.first}-{held.last} of {held.topic}/{held.partition}, "
                                      f"inside the range's {span.first}-{span.last}: a shadow over interleaved "
                                      "commits is not supported yet; choose other times")
    return tuple(found[k] for k in sorted(found))


def times_only(tables: Sequence[str], start: str, end: str | None, file: str) -> None:
    """A routed pipeline's `--from`/`--to` are times: a version number is refused in one line naming the value."""
    for key, text in (("--from", start), ("--to", end)):
        if text is not None and isinstance(_at(text), int):
            raise ShadowError(f"{file}: {key} {text}: a routed pipeline's tables ({', '.join(tables)}) each have "
                              "versions of their own, so a version names no range; give an ISO time "
                              "(2026-01-01T10:00:00) or epoch milliseconds instead (`ingest history` shows each "
                              "commit's time)")


def _union(records: Sequence[BatchRecord]) -> dict[tuple[str, int], Span]:
    found: dict[tuple[str, int], Span] = {}
    for record in records:
        for r in record.ranges:
            old = found.get((r.topic, r.partition))
            found[(r.topic, r.partition)] = Span(r.topic, r.partition, r.first, r.last) if old is None else Span(
                r.topic, r.partition, min(old.first, r.first), max(old.last, r.last))
    return found


def check_kafka_holds(spans: Sequence[Span], marks: Mapping[str, Mapping[int, tuple[int, int]]]) -> None:
    """Refuse, naming the first missing partition and offset, when Kafka no longer holds (log start after `first`)
    or does not yet hold (end at or before `last`) the spans' records. `marks`: topic -> partition -> (log start,
    end)."""
    for span in sorted(spans, key=lambda s: (s.topic, s.partition)):
        low, high = marks.get(span.topic, {}).get(span.partition, (None, None))
        if low is None or high is None:
            raise ShadowError(f"Kafka has no partition {span.partition} of topic {span.topic!r}: its offsets "
                              f"{span.first}-{span.last} cannot be read again")
        if low > span.first:
            raise ShadowError(f"Kafka no longer holds offset {span.first} of {span.topic}/{span.partition} (the "
                              f"partition's log starts at {low}, retention or deletion): the range cannot be "
                              "re-ingested; choose later versions")
        if high <= span.last:
            raise ShadowError(f"Kafka holds offsets of {span.topic}/{span.partition} up to {high - 1}, the range "
                              f"reaches {span.last}")


def shadow_config(config: PipelineConfig, other: PipelineConfig, name: str) -> PipelineConfig:
    """`other` as the shadow writes it: its decoding, expectations and schemas, the shadow's tables (no catalog
    names, no silver table: the live silver follows the promote). Refused: another pipeline, other tables or
    topics, another partitioning, routing (not yet)."""
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ShadowError(f"shadow name {name!r}: letters, digits, '_' and '-' only")
    if (config.routing is None) != (other.routing is None):
        shape = "routed" if config.routing is not None else "not routed"
        raise ConfigError(f"{other.file}: key 'routing': {'absent' if other.routing is None else 'present'}, and "
                          f"the live pipeline is {shape}: a shadow keeps the pipeline's shape (one table, or a table "
                          "per route)")
    same: dict[str, tuple[object, object]] = {
            "name": (config.name, other.name), "topic": (config.subscription, other.subscription),
            "sink.table": (config.table_path, other.table_path),
            "sink.quarantineTable": (config.quarantine_path, other.quarantine_path),
            "sink.checkpointLocation": (config.checkpoint_path, other.checkpoint_path),
            "sink.partitionBy": (list(config.sink.partition_by), list(other.sink.partition_by))}
    if config.routing is not None:  # its route tables live under the root
        same["sink.root"] = (config.sink.root, other.sink.root)
    for key, (live, changed) in same.items():
        if live != changed:
            why = " (a new partitioning: not yet)" if key == "sink.partitionBy" else ""
            raise ConfigError(f"{other.file}: key {key!r}: {changed!r}, and the live pipeline's is {live!r}: the "
                              f"other config must be the same pipeline{why}")
    if other.routing is not None:
        return _routed_shadow_config(config, other, name)
    sink = dataclasses.replace(other.sink, table=shadow_path(config.table_path, name),
                               quarantine_table=shadow_path(config.quarantine_path, name),
                               catalog_table="", quarantine_catalog_table="")
    return dataclasses.replace(other, sink=sink, silver=None)


def check_followable(config: PipelineConfig, other: PipelineConfig, payload: T.StructType) -> None:
    """The live stream, switched to `other` by a promote, must follow the live table, which keeps its columns: the
    other config's reader schema (`payload`) must hold each of them, in a type the table can take (as the stream's
    own schema check asks at every start). ShadowError in one line naming the file, the key and the columns."""
    live = rs_tables.state(config.table_path, config.storage_options() or None).schema
    if live is None:
        return
    columns = T.StructType([f for f in live.fields if f.name not in METADATA_COLUMNS])
    if evolution(columns, payload, widen=other.sink.type_widening) is not None:
        return
    key = "value.schemaFile" if other.value.schema_file else "value.subject"
    missing = [f.name for f in columns.fields if f.name not in payload.fieldNames()]
    what = (f"it lacks the live table's column(s) {', '.join(missing)}" if missing else
            "it changes a live column's type in a way the table cannot take")
    raise ShadowError(f"{other.file}: key {key!r}: {what}, so the stream could not continue after a promote (a "
                      "Delta table keeps its columns); keep them in the schema as nullable fields")


def shadow_path(path: str, name: str) -> str:
    return f"{path.rstrip('/')}__{name}"


def _routed_shadow_config(config: PipelineConfig, other: PipelineConfig, name: str) -> PipelineConfig:
    """A routed `other` as its shadow writes it: each route's table named as `other` names it, with `__<name>`
    (`routing.table`'s `{pipeline}` spelled out), the quarantine `<quarantine>__<name>`, the checkpoint kept, and
    the pipeline's name `<pipeline>__<name>` in the shadow's ledgers: the live pipeline's tables are the folders
    whose ledger names the pipeline (`delta/routed.py`), so the live commands never take a shadow's table for a
    route table, and the shadow's own are found the same way."""
    assert other.routing is not None
    routing = dataclasses.replace(
        other.routing, table=other.routing.table.replace("{pipeline}", other.name) + f"__{name}",
        tables={k: f"{v}__{name}" for k, v in other.routing.tables.items()}, silver={})
    sink = dataclasses.replace(other.sink, quarantine_table=shadow_path(config.quarantine_path, name),
                               checkpoint_location=config.checkpoint_path, catalog_table="",
                               quarantine_catalog_table="")
    return dataclasses.replace(other, name=f"{config.name}__{name}", sink=sink, routing=routing, silver=None)


def live_name(table: str, name: str) -> str:
    """The live table a shadow's route table `<table>__<name>` stands for."""
    return table[: -len(f"__{name}")] if table.endswith(f"__{name}") else table


def live_ledgers(config: PipelineConfig) -> dict[str, list[BatchRecord]]:
    """A routed pipeline's tables' ledgers by table name (route tables, `quarantine`), read with delta-rs."""
    options = config.storage_options() or None
    return {table: rs_reads.history(path, options) or [] for table, path in routed.named_paths(config)}


# --- start ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What `start` will re-ingest, found before a JVM: the live versions and their spans, Kafka checked."""

    shadow: Shadow
    target: PipelineConfig  # the other config with the shadow's tables
    resumed: bool = False


def plan_start(config: PipelineConfig, other: PipelineConfig, *, start: str, end: str | None,
               name: str = DEFAULT_NAME) -> Plan:
    """The shadow `start` makes (or completes, when one of that name was started over the same range and config),
    with every refusal said before a JVM: the ledger read with delta-rs, Kafka's bounds asked."""
    target = shadow_config(config, other, name)
    times: tuple[str, str] | None = None
    if config.routing is not None:
        ledgers = live_ledgers(config)
        times_only(sorted(ledgers) or ["quarantine"], start, end, str(config.file))
        if not any(ledgers.values()):
            raise ShadowError(f"{config.name}: its tables ({', '.join(sorted(ledgers)) or 'none yet'}) record no "
                              "offsets yet: nothing to re-ingest")
        low, high, live_version = -1, -1, None
        spans = routed_spans(ledgers, start, end, str(config.file))
        times = (start, end or "")
    else:
        records = rs_reads.history(config.table_path, config.storage_options() or None)
        if records is None:
            raise ShadowError(f"{config.name}: no table at {config.table_path}")
        low, high = version_range(records, start, end)
        spans = spans_of(records, low, high)
        live_version = max(r.version for r in records if r.version is not None)
    existing = load_shadows(config).get(name)
    if existing is not None:
        if existing.state in (PROMOTING, PROMOTED):
            raise ShadowError(f"shadow {name!r} of {config.name} is {existing.state}; a new one needs another "
                              "--name")
        if (existing.versions, existing.spans) != ((low, high), spans) or \
                existing.config_file != str(Path(other.file).resolve()) or \
                (existing.config_digest and existing.config_digest != digest(other.file)):
            raise ShadowError(f"shadow {name!r} of {config.name} exists over {existing.covers} "
                              f"({', '.join(map(str, existing.spans))}) with {existing.config_file} as it was then: "
                              f"drop it first "
                              f"(`ingest shadow drop {config.name} --name {name}`) or choose another --name")
    ctx = context.resolve(config)
    topics = {s.topic for s in spans}
    marks = kafka.watermarks_of(ctx.kafka.client, {t: ctx.partitions.get(t) or kafka.partitions(
        ctx.kafka.client, t, ctx.kafka.timeout) for t in topics})
    check_kafka_holds(spans, marks)
    shadow = existing if existing is not None else Shadow(
        name=name, config_file=str(Path(other.file).resolve()), table="" if times else target.table_path,
        quarantine=target.quarantine_path, versions=(low, high), spans=spans, state=STARTING,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), times=times,
        live_version=live_version,
        config_digest=digest(other.file))
    return Plan(shadow, target, resumed=existing is not None)


def start(spark: SparkSession, config: PipelineConfig, plan: Plan) -> Shadow:
    """Re-ingest the plan's spans from Kafka under the other config into the shadow's tables, as a replay writes:
    only what the shadow's tables do not hold yet (a rerun after a crash completes the shadow), each commit with
    its txn action and ledger record."""
    shadow, target = plan.shadow, plan.target
    if shadow.state == READY:
        return shadow
    ctx = context.resolve(target)
    spans = [s.as_tuple() for s in shadow.spans]
    schemas = None
    if not shadow.routed:
        schemas = setup.resolver(spark, ctx, also=sorted({topic for topic, _, _, _ in spans}))
        check_followable(config, target, schemas.spec.payload_type)
    save_shadow(config, shadow, shadow.name)  # `starting`: known before the first commit
    options = {k: v for k, v in kafka_options(ctx).items() if k not in (
        "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
        "maxOffsetsPerTrigger", "minPartitions", "subscribe", "subscribePattern")}
    by_topic: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for topic, partition, first, last in spans:
        by_topic.setdefault(topic, {})[str(partition)] = first
        ends.setdefault(topic, {})[str(partition)] = last + 1
    options.update({"assign": json.dumps({t: sorted(int(p) for p in parts) for t, parts in by_topic.items()}),
                    "startingOffsets": json.dumps(by_topic), "endingOffsets": json.dumps(ends)})
    reader = spark.read.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    wanted = F.lit(False)
    for topic, partition, first, last in spans:
        wanted = wanted | ((F.col("topic") == topic) & (F.col("partition") == partition)
                           & F.col("offset").between(first, last))
    kafka_rows = reader.load().where(wanted)
    if schemas is None:
        return _start_routed(spark, config, plan, ctx, kafka_rows)
    setup.make_tables(spark, target, schemas.spec)
    decoded = decode_range(spark, target, schemas, kafka_rows, with_rules=True)
    try:
        present = reads.held_coordinates(spark, target)
        new = decoded if present is None else decoded.join(present, list(replay.KEYS), "left_anti")
        new = new.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if new.limit(1).count():
                stats = bronze.batch_stats(new)
                run = replay.replay_run(spark, [(target.table_path, "replay"), (target.quarantine_path, "replay")])
                replay._write_replay(spark, target, new, stats, run)
        finally:
            new.unpersist()
    finally:
        decoded.unpersist()
    shadow = dataclasses.replace(shadow, state=READY, rows=_count(spark, target.table_path),
                                 quarantined=_count(spark, target.quarantine_path))
    save_shadow(config, shadow, shadow.name)
    log.info("%s: shadow %s over versions %d-%d (%s): %d rows, %d quarantined", config.name, shadow.name,
             shadow.versions[0], shadow.versions[1], ", ".join(map(str, shadow.spans)), shadow.rows,
             shadow.quarantined)
    return shadow


def _start_routed(spark: SparkSession, config: PipelineConfig, plan: Plan, ctx: context.PipelineContext,
                  kafka_rows: DataFrame) -> Shadow:
    """A routed pipeline's start: the spans' records that none of the shadow's tables holds yet, split by route
    under the other config's routing, each route's written to its shadow table (made as its first records come)
    with the expectations applied, the records without a route to the shadow's quarantine; as `ingest replay`
    writes a routed pipeline's (each table's commit its txn action and ledger record)."""
    shadow, target = plan.shadow, plan.target
    replay._replay_routed(spark, ctx, kafka_rows, f"shadow {shadow.name} ({', '.join(map(str, shadow.spans))})",
                          with_rules=True)
    made = {live_name(t, shadow.name): path for t, path in routed.route_tables(target).items()}
    shadow = dataclasses.replace(shadow, state=READY, routes=made,
                                 rows=sum(_count(spark, path) for path in made.values()),
                                 quarantined=_count(spark, target.quarantine_path))
    save_shadow(config, shadow, shadow.name)
    log.info("%s: shadow %s over %s (%s): %d rows in %s, %d quarantined", config.name, shadow.name, shadow.covers,
             ", ".join(map(str, shadow.spans)), shadow.rows, ", ".join(sorted(made)) or "no table", shadow.quarantined)
    return shadow


def _count(spark: SparkSession, path: str) -> int:
    table = reads.read_table(spark, path)
    return 0 if table is None else table.count()


# --- status -----------------------------------------------------------------------------------------------------

def status(config: PipelineConfig) -> list[dict[str, Any]]:
    """Every shadow of the pipeline with its range, rows and quarantined records (read with delta-rs where the
    table exists, else the counts `start` recorded), state and config file. No JVM."""
    reader = rs_reads.DeltaRsReader(config.storage_options() or None)
    out = []
    for name, s in sorted(load_shadows(config).items()):
        if s.routed:
            counts = [reader.rows(path) for path in shadow_paths(config, s)] if s.state != PROMOTED else [None]
            rows = None if None in counts else sum(c or 0 for c in counts)
        else:
            rows = reader.rows(s.table) if s.state != PROMOTED else None
        quarantined = reader.rows(s.quarantine) if s.state != PROMOTED else None
        out.append({"name": name, "state": s.state, "versions": list(s.versions),
                    "spans": [asdict(x) for x in s.spans], "records": sum(x.last - x.first + 1 for x in s.spans),
                    "rows": s.rows if rows is None else rows,
                    "quarantined": s.quarantined if quarantined is None else quarantined,
                    "config": s.config_file, "table": s.table, "quarantine_table": s.quarantine,
                    "created_at": s.created_at, "promoted_version": s.promoted_version,
                    "config_backup": s.config_backup, "times": None if s.times is None else list(s.times),
                    "routes": dict(s.routes), "promoted_versions": dict(s.promoted_versions)})
    return out


def render_status(config: PipelineConfig, found: list[dict[str, Any]]) -> str:
    if not found:
        return f"{config.name}: no shadows (`ingest shadow start {config.name} --config <file> --from <version>`)"
    lines = [f"{'shadow':12} {'state':9} {'versions':>11} {'rows':>8} {'quar.':>6}  offsets  config"]
    for s in found:
        spans = ", ".join(f"{x['topic']}/{x['partition']}:{x['first']}-{x['last']}" for x in s["spans"])
        versions = "times" if s["times"] else f"{s['versions'][0]}-{s['versions'][1]}"
        promoted = (f" (promoted at version {s['promoted_version']})" if s["promoted_version"] is not None else
                    " (promoted: " + ", ".join(f"{t} version {v}" for t, v in sorted(s["promoted_versions"].items()))
                    + ")" if s["promoted_versions"] else "")
        routes = f"; tables {', '.join(sorted(s['routes']))}" if s["routes"] else ""
        times = f" from {s['times'][0]}" + (f" to {s['times'][1]}" if s["times"][1] else "") if s["times"] else ""
        lines.append(f"{s['name']:12} {s['state']:9} {versions:>11} {s['rows']:>8} {s['quarantined']:>6}  {spans}  "
                     f"{s['config']}{times}{routes}{promoted}")
    return "\n".join(lines)


# --- drop -------------------------------------------------------------------------------------------------------

def drop(config: PipelineConfig, name: str) -> Shadow:
    """Remove a shadow that was not promoted: its two tables and its entry in the state file."""
    shadow = get(config, name)
    if shadow.state in (PROMOTING, PROMOTED) and not promote_undone(config, shadow):
        each = ", ".join(f"{t} {v - 1}" for t, v in sorted(shadow.promoted_versions.items()))
        before = (f"version {(shadow.promoted_version or 1) - 1}" if not shadow.routed else
                  f"each table's version before it: {each}")
        raise ShadowError(f"shadow {name!r} of {config.name} is {shadow.state}: its rows are the live table's now "
                          f"(undo by time travel or a rewind to the version before the promote, {before})")
    for path in [*shadow_paths(config, shadow), shadow.quarantine]:
        shadow_tables.remove_table(path, config.spark)
    save_shadow(config, None, name)
    return shadow


def shadow_paths(config: PipelineConfig, shadow: Shadow) -> list[str]:
    """The shadow's bronze tables: its table, or a routed pipeline's route tables (those `start` recorded, and those
    an interrupted start made: found by the shadow's ledgers under its config, when the file is still there)."""
    if not shadow.routed:
        return [shadow.table]
    found = dict(shadow.routes)
    if Path(shadow.config_file).is_file():
        from ingestion.config import load_pipeline

        target = shadow_config(config, load_pipeline(Path(shadow.config_file)), shadow.name)
        found.update({live_name(t, shadow.name): p for t, p in routed.route_tables(target).items()})
    return sorted(found.values())
