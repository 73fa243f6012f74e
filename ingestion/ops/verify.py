"""`ingest verify`: audit bronze + quarantine against Kafka, per partition.

For every partition the ledger says the pipeline consumed (from its first recorded offset to its last), the
two tables together must hold every offset exactly once. Duplicates are violations. A missing offset is a
violation only when Kafka can still return that record; offsets Kafka no longer has (below the log start:
retention), never returns (transaction markers, aborted records under read_committed) or has compacted away are
explained gaps. Kafka is read with `read_committed` whatever the pipeline's settings, so an offset the tables
hold but a read_committed consumer never returns (a record of an aborted transaction, which a pipeline set to
`read_uncommitted` ingests) is a violation of its own: `not_committed`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ingestion import kafka
from ingestion.config import PipelineConfig
from ingestion.decode.expectations import BLOCKING, TableViolations, compile_rules, violations_in_table
from ingestion.decode.routes import RouteNames
from ingestion.delta import ledger, routed, rs_reads, rs_tables
from ingestion.delta.reader import HeldPartition, TableReader
from ingestion.delta.routed import route_keys_in_table
from ingestion.ops.readers import Source, as_reader
from ingestion.stream import context
from ingestion.stream.context import PipelineContext

MAX_SHOWN = 100  # offsets or ranges listed per partition and kind
MAX_GAP_READ = 1_000_000  # offsets read back from Kafka per partition to classify gaps


@dataclass
class PartitionAudit:
    topic: str
    partition: int
    kafka_low: int
    kafka_high: int
    first: int | None  # first offset the ledger records
    last: int | None  # last offset the ledger records
    rows: int = 0  # distinct offsets held by bronze + quarantine
    duplicates: list[int] = field(default_factory=list)  # offsets held more than once
    lost: list[list[int]] = field(default_factory=list)  # [first, last] ranges Kafka still has but the tables do not
    explained: dict[str, list[list[int]]] = field(default_factory=dict)  # reason -> [first, last] ranges
    unverified: list[list[int]] = field(default_factory=list)  # gaps too large to read back
    not_committed: list[list[int]] = field(default_factory=list)  # held, but not committed in Kafka (aborted)
    commits_unchecked: list[list[int]] = field(default_factory=list)  # spans too large to read back for that

    @property
    def ok(self) -> bool:
        return not self.duplicates and not self.lost and not self.unverified and not self.not_committed


@dataclass
class MisroutedRows:
    """Rows of a route table whose route names another table (or none: quarantine)."""

    table: str
    rows: int
    first: list[list[Any]]  # [topic, partition, offset, the table the route names], the first MAX_SHOWN


@dataclass
class Audit:
    pipeline: str
    topic: str  # the config's topic, list or pattern
    partitions: list[PartitionAudit]
    topics: list[str] = field(default_factory=list)  # the topics audited
    gone_topics: list[str] = field(default_factory=list)  # in the ledger, matched once, deleted since: not audited
    # per `quarantine`/`fail` expectation, the bronze rows that break it (none should: they belong in quarantine)
    expectations: list[TableViolations] = field(default_factory=list)
    # a routed pipeline's rows in a table their route does not name, per route table
    misrouted: list[MisroutedRows] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.partitions) and not any(v.rows for v in self.expectations) \
            and not self.misrouted

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "topic": self.topic, "topics": self.topics,
                "gone_topics": self.gone_topics, "ok": self.ok,
                "partitions": [{**asdict(p), "ok": p.ok} for p in self.partitions],
                "expectations": [{"rule": v.rule, "bronze_rows": v.rows, "first": [list(c) for c in v.first]}
                                 for v in self.expectations],
                "misrouted": [asdict(m) for m in self.misrouted]}


def audit(source: Source, target: PipelineConfig | PipelineContext) -> Audit:
    """Bronze and quarantine (read through `source`: a TableReader, or a SparkSession to read with Spark) against
    Kafka, per partition of each topic the pipeline reads (now, or by its ledger). The steps, in order: what the
    ledger and the tables hold; what Kafka returns over the recorded spans (one read for every partition); then,
    per partition, pure findings from those inputs (gaps classified, records held that Kafka never committed)."""
    ctx = context.of(target)
    config = ctx.config
    reader = as_reader(source)
    settings = ctx.kafka.client
    coverage = _coverage([ledger.coverage(reader.history(path)) for path in routed.ledger_paths(config)])
    tables = tuple(routed.data_paths(config))
    topics, gone = ctx.audited({r.topic for r in coverage})
    marks = kafka.watermarks_of(settings, {t: ctx.partitions[t] for t in topics})
    parts: list[tuple[PartitionAudit, HeldPartition | None]] = []
    for topic in topics:
        spans = {r.partition: r for r in coverage if r.topic == topic}
        parts.extend(_partitions(reader, tables, topic, marks[topic], spans))
    # What Kafka returns over every recorded span, read back by one consumer for all partitions of all topics.
    read = _offsets_in_kafka_many(settings, {(p.topic, p.partition): span for p, _ in parts
                                             if (span := _commit_span(p)) is not None})
    for part, found in parts:
        committed = _committed(part, read)
        part.commits_unchecked = _too_large_to_read(part)
        gaps = classify_gaps(part, list(found.gaps) if found else [], committed,
                             functools.partial(_offsets_in_kafka, settings, part.topic, part.partition))
        part.lost, part.explained, part.unverified = gaps.lost, gaps.explained, gaps.unverified
        group = config.source.start_from_group
        if group and part.first is not None and part.first > part.kafka_low:
            part.explained[f"before the start taken over from consumer group {group!r} (not ingested by design)"] = [
                [part.kafka_low, part.first - 1]]
        span = _kafka_span(part)
        if committed is not None and span is not None and span[0] <= span[1]:
            held = reader.held_between(tables, part.topic, part.partition, span[0], span[1])
            part.not_committed = [list(run) for run in _runs(sorted(held - committed))][:MAX_SHOWN]
    return Audit(config.name, config.subscription, [p for p, _ in parts], topics, gone, _expectations(config),
                 _misrouted(ctx))


def _coverage(per_table: list[tuple[ledger.PartitionRange, ...]]) -> tuple[ledger.PartitionRange, ...]:
    """Per partition, the span the tables' ledgers cover together (a routed pipeline's route tables and
    quarantine; bronze's alone otherwise)."""
    spans: dict[tuple[str, int], ledger.PartitionRange] = {}
    for ranges in per_table:
        for r in ranges:
            old = spans.get((r.topic, r.partition))
            spans[(r.topic, r.partition)] = r if old is None else ledger.PartitionRange(
                r.topic, r.partition, min(old.first, r.first), max(old.last, r.last), old.count + r.count)
    return tuple(spans[k] for k in sorted(spans))


def _misrouted(ctx: PipelineContext) -> list[MisroutedRows]:
    """A routed pipeline's rows that are not in the table their route names: each route table's rows, their route
    read again from their own columns (`decode.routes`), per table."""
    config = ctx.config
    if config.routing is None:
        return []
    names = RouteNames(config, ctx.schemas)
    found = []
    for table, path in routed.route_tables(config).items():
        wrong: list[tuple[str, int, int, str]] = []
        for topic, partition, offset, key in route_keys_in_table(config, path):
            belongs = names.tables_of_row(key)
            if table not in belongs:
                wrong.append((topic, partition, offset, " or ".join(belongs) or f"quarantine ({names.reason(key)})"))
        if wrong:
            found.append(MisroutedRows(table, len(wrong), [list(w) for w in wrong[:MAX_SHOWN]]))
    return found


def _expectations(config: PipelineConfig) -> list[TableViolations]:
    """Bronze's rows (a routed pipeline's: each route table's, the rule named `<table>.<rule>`) checked against the
    pipeline's `quarantine` and `fail` rules as they are now, on the table itself (DuckDB over delta-rs, no JVM): a
    row that breaks one should be in quarantine, not in bronze."""
    if not any(e.on_violation in BLOCKING for e in config.expectations):
        return []
    if config.routing is None:
        return _violations(config, config.table_path)
    return [dataclasses.replace(v, rule=f"{table}.{v.rule}")
            for table, path in routed.route_tables(config).items() for v in _violations(config, path)]


def _violations(config: PipelineConfig, path: str) -> list[TableViolations]:
    state = rs_tables.state(path, config.storage_options())
    if state.schema is None:
        return []
    rules = compile_rules(config, state.schema)
    return violations_in_table(rules, rs_reads.dataset(path, config.storage_options() or None))


def _partitions(reader: TableReader, tables: tuple[str, ...], topic: str, marks: dict[int, tuple[int, int]],
                coverage: dict[int, ledger.PartitionRange]) -> list[tuple[PartitionAudit, HeldPartition | None]]:
    """Each partition of `topic`: what the ledger records, what the tables hold (rows, duplicates) and Kafka's
    bounds, with what the tables hold of it (its gaps are classified later)."""
    held = reader.held(tables, topic, {p: (c.first, c.last) for p, c in coverage.items()}, MAX_SHOWN)
    out = []
    for p, (low, high) in sorted(marks.items()):
        span = coverage.get(p)
        found = held.get(p)
        out.append((PartitionAudit(topic, p, low, high, span.first if span else None, span.last if span else None,
                                   found.rows if found else 0, list(found.duplicates) if found else []), found))
    return out


def _kafka_span(part: PartitionAudit) -> tuple[int, int] | None:
    """(first, last) of the span the ledger records, cut to what Kafka still has (empty when first > last); None
    when the ledger records nothing of the partition."""
    if part.first is None or part.last is None:
        return None
    return max(part.first, part.kafka_low), min(part.last, part.kafka_high - 1)


def _commit_span(part: PartitionAudit) -> tuple[int, int] | None:
    """The offsets to read back to tell committed records: `_kafka_span`, None when it is empty or larger than
    MAX_GAP_READ."""
    span = _kafka_span(part)
    return span if span is not None and span[0] <= span[1] and span[1] - span[0] + 1 <= MAX_GAP_READ else None


def _committed(part: PartitionAudit, read: dict[tuple[str, int], set[int]]) -> set[int] | None:
    """The offsets a read_committed consumer returned over the span the ledger records (what Kafka still has of
    it), from `read`; None when the ledger records nothing of the partition or the span is too large to read."""
    span = _kafka_span(part)
    if span is None or span[1] - span[0] + 1 > MAX_GAP_READ:
        return None
    if span[1] < span[0]:
        return set()
    return read.get((part.topic, part.partition), set())


def _too_large_to_read(part: PartitionAudit) -> list[list[int]]:
    """The recorded span, when it is too large to read back for aborted records (`commits_unchecked`)."""
    span = _kafka_span(part)
    return [list(span)] if span is not None and span[1] - span[0] + 1 > MAX_GAP_READ else []


@dataclass(frozen=True)
class GapFindings:
    """What the gaps of one partition are: lost (Kafka has them), explained (by reason), or too large to check."""

    lost: list[list[int]]
    explained: dict[str, list[list[int]]]
    unverified: list[list[int]]


def classify_gaps(part: PartitionAudit, ranges: list[tuple[int, int]], committed: set[int] | None,
                  read_back: Callable[[int, int], set[int]]) -> GapFindings:
    """The findings of the gaps `ranges` of a partition whose Kafka log starts at `part.kafka_low`: below it,
    retention; within it, the offsets Kafka returns as committed (`committed`, else asked with `read_back(first,
    last)` up to MAX_GAP_READ offsets) are lost, the others transaction markers, aborted or compacted records."""
    lost: list[list[int]] = []
    explained: dict[str, list[list[int]]] = {}
    unverified: list[list[int]] = []
    budget = MAX_GAP_READ
    for a, b in ranges:
        if b < part.kafka_low:
            explained.setdefault("retention", []).append([a, b])
            continue
        if a < part.kafka_low:
            explained.setdefault("retention", []).append([a, part.kafka_low - 1])
            a = part.kafka_low
        if b - a + 1 > budget:
            unverified.append([a, b])
            continue
        if committed is not None:
            in_kafka = {o for o in committed if a <= o <= b}
        else:
            budget -= b - a + 1
            in_kafka = read_back(a, b)
        lost.extend([lo, hi] for lo, hi in _runs(sorted(in_kafka)))
        for lo, hi in _runs(sorted(set(range(a, b + 1)) - in_kafka)):
            explained.setdefault("not in Kafka (transaction marker, aborted or compacted)", []).append([lo, hi])
    return GapFindings(lost[:MAX_SHOWN], explained, unverified)


def _offsets_in_kafka(settings: Mapping[str, Any], topic: str, partition: int, first: int, last: int) -> set[int]:
    """Offsets in [first, last] that a read_committed consumer with the pipeline's settings gets back from Kafka."""
    return _offsets_in_kafka_many(settings, {(topic, partition): (first, last)}).get((topic, partition), set())


def _offsets_in_kafka_many(settings: Mapping[str, Any],
                           spans: dict[tuple[str, int], tuple[int, int]]) -> dict[tuple[str, int], set[int]]:
    """Per (topic, partition), the offsets in its [first, last] that a read_committed consumer with the pipeline's
    settings gets back from Kafka; one consumer assigned every partition at once (one per partition cost 0.6 s
    each: forty topics took 25 s)."""
    from confluent_kafka import KafkaError, TopicPartition

    found: dict[tuple[str, int], set[int]] = {key: set() for key in spans}
    if not spans:
        return found
    consumer = kafka.consumer(settings, "ingest-verify", **{"enable.partition.eof": True,
                                                            "auto.offset.reset": "earliest",
                                                            kafka.ISOLATION: kafka.READ_COMMITTED})
    done: set[tuple[str, int]] = set()
    try:
        consumer.assign([TopicPartition(t, p, first) for (t, p), (first, _) in sorted(spans.items())])
        # librdkafka's consume() waits its whole timeout unless the batch fills, even past the end of a
        # partition: short calls, until every partition ended (its end or `last`) or 5 s without anything.
        idle_until = time.monotonic() + 5.0
        while len(done) < len(spans):
            messages = consumer.consume(10_000, timeout=0.2)
            if not messages:
                if time.monotonic() >= idle_until:
                    break
                continue
            idle_until = time.monotonic() + 5.0
            ended = []
            for msg in messages:
                key = (msg.topic(), msg.partition())
                error = msg.error()
                if error is not None:
                    if kafka.raise_refusal(error, settings, key[0] or next(iter(spans))[0]):
                        continue  # the group coordinator's refusal: this consumer uses no group
                    if error.code() == KafkaError._PARTITION_EOF and key in spans:
                        ended.append(key)
                        continue
                    return found  # another error ends the read, as it ended the one-partition read
                if key in done or key not in spans:
                    continue
                offset = msg.offset()
                if offset is None or offset > spans[key][1]:
                    ended.append(key)
                    continue
                found[key].add(offset)
                if offset == spans[key][1]:
                    ended.append(key)
            fresh = [k for k in ended if k not in done]
            done.update(fresh)
            if fresh:
                consumer.pause([TopicPartition(t, p) for t, p in fresh])
    finally:
        consumer.close()
    return found


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs of sorted offsets as [first, last] pairs."""
    runs: list[tuple[int, int]] = []
    for o in offsets:
        if runs and runs[-1][1] == o - 1:
            runs[-1] = (runs[-1][0], o)
        else:
            runs.append((o, o))
    return runs


def render(result: Audit) -> str:
    several = result.topics != [result.topic]
    what = f"topics {result.topic} ({len(result.topics)})" if several else f"topic {result.topic}"
    lines = [f"{result.pipeline}: {what}: {'OK' if result.ok else 'VIOLATIONS FOUND'}"]
    if result.gone_topics:
        lines.append(f"  not audited, deleted from Kafka since: {', '.join(result.gone_topics)}")
    for p in result.partitions:
        # Every range inclusive: Kafka's high watermark is the offset after its last record.
        recorded = "no offsets recorded" if p.first is None else f"offsets {p.first}-{p.last} recorded"
        kafka = (f"Kafka {p.kafka_low}-{p.kafka_high - 1}" if p.kafka_high > p.kafka_low
                 else f"Kafka holds none (next offset {p.kafka_high})")
        lines.append(f"  {p.topic}/{p.partition}: {recorded}, {p.rows} held, {kafka}: "
                     f"{'ok' if p.ok else 'VIOLATION'}")
        if p.duplicates:
            lines.append(f"    duplicated offsets: {p.duplicates}")
        if p.lost:
            lines.append(f"    missing although Kafka has them: {p.lost}")
        if p.unverified:
            lines.append(f"    gaps too large to check against Kafka: {p.unverified}")
        if p.not_committed:
            lines.append(f"    held but not committed in Kafka (records of aborted transactions): {p.not_committed}")
        if p.commits_unchecked:
            lines.append(f"    not checked for aborted records (too large to read back): {p.commits_unchecked}")
        for reason, spans in p.explained.items():
            lines.append(f"    explained gaps ({reason}): {spans}")
    for v in result.expectations:
        shown = ", ".join(f"{t}/{p}@{o}" for t, p, o in v.first)
        lines.append(f"  expectation {v.rule!r}: " + (f"{v.rows} bronze row(s) break it: VIOLATION (first: {shown})"
                                                     if v.rows else "no bronze row breaks it: ok"))
    for m in result.misrouted:
        shown = ", ".join(f"{t}/{p}@{o} belongs in {where}" for t, p, o, where in m.first[:5])
        lines.append(f"  route table {m.table}: {m.rows} row(s) not in the table their route names: VIOLATION "
                     f"({shown})")
    return "\n".join(lines)
