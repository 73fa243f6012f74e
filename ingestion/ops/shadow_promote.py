"""`ingest shadow promote`: a shadow's rows put in place of the live rows of its offsets, one commit per table,
then the pipeline switched to the shadow's config (docs/reprocessing.md).

A routed pipeline's: quarantine's commit first, then each route table's (sorted by name; the fault point
`between_tables` between two), every table that holds rows of the spans or has rows of them in the shadow, each
carrying its own txn action (`promote.<name>.<table>`, one txnVersion for all, recorded before the first commit) and
a `promote` ledger record; a route table only the shadow has is made (its schema, partitioning and properties the
shadow table's), one that empties out keeps its table."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from ingestion import faults
from ingestion.config import PipelineConfig
from ingestion.delta import commit, ledger, reads, routed, rs_reads, shadow_tables
from ingestion.delta.ledger import PROMOTE_BATCH_ID, BatchKind, BatchRecord, PartitionRange
from ingestion.ops.shadow_state import (
    PROMOTED,
    PROMOTING,
    STARTING,
    Shadow,
    ShadowError,
    digest,
    get,
    promote_app_id,
    save_shadow,
)
from ingestion.stream import stages
from ingestion.stream.lock import WriterLock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Promoted:
    shadow: Shadow
    bronze_version: int | None
    quarantine_version: int | None
    config_file: str
    backup: str
    replaced: Mapping[str, int] = field(default_factory=dict)
    silver: int | None = None  # the bronze version the pipeline's silver table holds after the promote
    tables: Mapping[str, int] = field(default_factory=dict)  # a routed pipeline's: the version each promote made
    silvers: Mapping[str, int | None] = field(default_factory=dict)  # route table -> the version its silver holds


def promote(spark: SparkSession, config: PipelineConfig, name: str) -> Promoted:
    """Under the pipeline's writer lock: the live quarantine's rows of the shadow's spans replaced by the shadow's
    quarantine rows, then bronze's by the shadow's bronze rows, each in one commit carrying the txn action
    (`promote.<name>`, a version recorded before the first commit) and a `promote` ledger record; then the
    pipeline's file replaced by the other config (the old one kept as `<file>.before-<name>`) and the shadow
    marked promoted. A rerun after a crash makes the same commits (Delta skips those made) and completes."""
    shadow = get(config, name)
    if shadow.state == PROMOTED:
        raise ShadowError(f"shadow {name!r} of {config.name} was promoted already (live version "
                          f"{shadow.promoted_version})")
    if shadow.state == STARTING:
        raise ShadowError(f"shadow {name!r} of {config.name} is not complete: rerun `ingest shadow start` first")
    if shadow.promote_txn is None:  # a promote's rerun finds its own first commits
        check_still_current(config, shadow)
    if shadow.routed:
        return _promote_routed(spark, config, shadow)
    lock = WriterLock(config.name, config.checkpoint_path, spark, config.spark)
    lock.acquire()  # PipelineRunning, one line naming the holder, when the pipeline runs
    try:
        app_id = promote_app_id(name)
        if shadow.promote_txn is None:
            shadow = dataclasses.replace(shadow, state=PROMOTING, promote_txn=commit.next_version(
                spark, [config.table_path, config.quarantine_path], app_id))
            save_shadow(config, shadow, name)
        assert shadow.promote_txn is not None
        txn = commit.Txn(app_id, shadow.promote_txn)
        spans = [s.as_tuple() for s in shadow.spans]
        shadow_rows = reads.read_table(spark, shadow.table)
        shadow_failed = reads.read_table(spark, shadow.quarantine)
        if shadow_rows is None:
            raise ShadowError(f"shadow {name!r}: its table {shadow.table} is gone; drop it and start again")
        per_partition = _records_per_partition(shadow_rows, shadow_failed)
        ranges = tuple(PartitionRange(s.topic, s.partition, s.first, s.last,
                                      per_partition.get((s.topic, s.partition), 0)) for s in shadow.spans)
        rows, failed = shadow_rows.count(), 0 if shadow_failed is None else shadow_failed.count()
        record = BatchRecord(pipeline=config.name, app_id=app_id, batch_id=PROMOTE_BATCH_ID, kind=BatchKind.PROMOTE,
                             rows=rows, schema_ids=_schema_ids(shadow_rows), ranges=ranges, quarantined=failed)
        q_record = dataclasses.replace(record, rows=failed)
        quarantine = None
        if shadow_failed is not None and ledger.is_table(spark, config.quarantine_path):
            def quarantine() -> None:
                assert shadow_failed is not None
                shadow_tables.replace_spans(shadow_failed, config.quarantine_path, spans, txn,
                                            q_record.to_user_metadata())
        elif shadow_failed is not None and failed:
            def quarantine() -> None:
                assert shadow_failed is not None
                commit.append(shadow_failed, config.quarantine_path, txn, q_record.to_user_metadata())
        # Quarantine first, as every batch's commits (and their fault points: the crash tests kill between them)
        stages.commit(PROMOTE_BATCH_ID, quarantine, lambda: shadow_tables.replace_spans(
            shadow_rows, config.table_path, spans, txn, record.to_user_metadata()))
        bronze_version = ledger.table_version(spark, config.table_path)
        quarantine_version = ledger.table_version(spark, config.quarantine_path)
        backup = switch_config(config.file, Path(shadow.config_file), name)
        shadow = dataclasses.replace(shadow, state=PROMOTED, promoted_version=_promote_version(
            spark, config.table_path, txn), config_backup=str(backup))
        save_shadow(config, shadow, name)
    finally:
        lock.release()
    log.info("%s: shadow %s promoted: bronze version %s, quarantine version %s; %s now holds %s (the old one is %s)",
             config.name, name, bronze_version, quarantine_version, config.file, shadow.config_file, backup)
    silver_version = follow_promote(spark, Path(config.file))
    return Promoted(shadow, bronze_version, quarantine_version, str(config.file), str(backup), silver=silver_version)


def check_still_current(config: PipelineConfig, shadow: Shadow) -> None:
    """Refuse a shadow that no longer stands for what it would replace, before a JVM: its config file's text changed
    since it was made (its rows were decoded under the old one, and the promote would switch the pipeline to the
    new), or the live table changed its rows after (a rewind to before the shadow's last version; a promote, replay
    or reprocess of its offsets): the promote would put back rows made from the live table as it was."""
    again = (f"drop it and start it again (`ingest shadow drop {config.name} --name {shadow.name}`, then `ingest "
             "shadow start`)")
    if shadow.config_digest and digest(shadow.config_file) != shadow.config_digest:
        raise ShadowError(f"{shadow.config_file} changed (or is gone) since shadow {shadow.name!r} was made from it: "
                          f"its rows were decoded under the old text; {again}")
    if shadow.live_version is None:
        return
    for r in rs_reads.history(config.table_path, config.storage_options() or None) or []:
        if r.version is not None and r.version > shadow.live_version and changes_rows(r, shadow):
            raise ShadowError(f"live version {r.version} ({r.kind}) changed {config.name}'s rows after shadow "
                              f"{shadow.name!r} was made from {shadow.covers}: promoting it would put back rows made "
                              f"from the table as it was; {again}")


def changes_rows(record: BatchRecord, shadow: Shadow) -> bool:
    """Whether a live commit changed rows of the shadow's offsets: a rewind to before the shadow's last version (a
    rewind's batch id is the version it restored), or a commit holding offsets of its spans (maintenance holds
    none)."""
    if record.kind in ledger.MAINTENANCE:
        return False
    if record.kind == BatchKind.REWIND:
        return record.batch_id < shadow.versions[1]
    spans = {(s.topic, s.partition): s for s in shadow.spans}
    return any((s := spans.get((x.topic, x.partition))) is not None and x.first <= s.last and x.last >= s.first
               for x in record.ranges)


def promote_undone(config: PipelineConfig, shadow: Shadow) -> bool:
    """Whether a rewind after the shadow's promote went back to before it: its rows are not the live table's any
    more, and the shadow may be dropped."""
    if shadow.state != PROMOTED or shadow.promoted_version is None or shadow.routed:
        return False
    promoted = shadow.promoted_version
    return any(r.kind == BatchKind.REWIND and (r.version or 0) > promoted and r.batch_id < promoted
               for r in rs_reads.history(config.table_path, config.storage_options() or None) or [])


def _promote_routed(spark: SparkSession, config: PipelineConfig, shadow: Shadow) -> Promoted:
    """`promote` of a routed pipeline's shadow: quarantine's rows of the spans replaced by the shadow quarantine's,
    then each route table's by its shadow table's (none: the table's rows of the spans removed), each in one commit
    with its txn action and `promote` record; then the file switched and the route silvers brought along."""
    name = shadow.name
    lock = WriterLock(config.name, config.checkpoint_path, spark, config.spark)
    lock.acquire()  # PipelineRunning, one line naming the holder, when the pipeline runs
    try:
        live = routed.route_tables(config)
        names = sorted(set(live) | set(shadow.routes))
        paths = {table: live.get(table) or config.route_path(table) for table in names}
        apps = {table: promote_app_id(name, table) for table in names}
        if shadow.promote_txn is None:
            version = max([commit.next_version(spark, [config.quarantine_path], promote_app_id(name)),
                           *(commit.next_version(spark, [paths[t]], apps[t]) for t in names)])
            shadow = dataclasses.replace(shadow, state=PROMOTING, promote_txn=version)
            save_shadow(config, shadow, name)
        assert shadow.promote_txn is not None
        version = shadow.promote_txn
        spans = [s.as_tuple() for s in shadow.spans]
        where = shadow_tables.condition(spans)
        failed = reads.read_table(spark, shadow.quarantine)
        quarantine = None
        if failed is not None:
            failed_count = failed.count()
            q_record = _promote_record(config, promote_app_id(name), shadow, failed, failed_count)
            if ledger.is_table(spark, config.quarantine_path):
                def quarantine() -> None:
                    assert failed is not None
                    shadow_tables.replace_spans(failed, config.quarantine_path, spans,
                                                commit.Txn(promote_app_id(name), version), q_record.to_user_metadata())
            elif failed_count:
                def quarantine() -> None:
                    assert failed is not None
                    commit.append(failed, config.quarantine_path, commit.Txn(promote_app_id(name), version),
                                  q_record.to_user_metadata())
        work: list[tuple[str, DataFrame, DataFrame | None]] = []  # table, its new rows of the spans, shadow table
        for table in names:
            rows = reads.read_table(spark, shadow.routes[table]) if table in shadow.routes else None
            current = reads.read_table(spark, paths[table])
            if rows is None and (current is None or not current.where(where).limit(1).count()):
                continue  # neither side holds rows of the spans
            if rows is not None and current is None and not rows.limit(1).count():
                continue  # a route only the shadow has, all of whose records are quarantined
            if rows is None:
                assert current is not None
                rows = spark.createDataFrame([], current.schema)  # the table's rows of the spans removed
                work.append((table, rows, None))
            else:
                work.append((table, rows, rows))

        def route_tables() -> None:
            for n, (table, rows, made_from) in enumerate(work):
                if n:
                    faults.reached(faults.FaultPoint.BETWEEN_TABLES, PROMOTE_BATCH_ID)
                if made_from is not None and not ledger.is_table(spark, paths[table]):
                    shadow_tables.create_like(spark, shadow.routes[table], paths[table])  # a route only it has
                record = _promote_record(config, apps[table], shadow, rows, rows.count(), quarantined=0)
                shadow_tables.replace_spans(rows, paths[table], spans, commit.Txn(apps[table], version),
                                            record.to_user_metadata())

        stages.commit(PROMOTE_BATCH_ID, quarantine, route_tables)
        versions = {t: v for t in names if ledger.is_table(spark, paths[t])
                    and (v := _promote_version(spark, paths[t], commit.Txn(apps[t], version))) is not None}
        quarantine_version = _promote_version(spark, config.quarantine_path, commit.Txn(promote_app_id(name), version))
        backup = switch_config(config.file, Path(shadow.config_file), name)
        shadow = dataclasses.replace(shadow, state=PROMOTED, promoted_versions=versions, config_backup=str(backup))
        save_shadow(config, shadow, name)
    finally:
        lock.release()
    log.info("%s: shadow %s promoted: %s, quarantine version %s; %s now holds %s (the old one is %s)", config.name,
             name, ", ".join(f"{t} version {v}" for t, v in sorted(versions.items())) or "no route table",
             quarantine_version, config.file, shadow.config_file, backup)
    silvers = follow_routed_promote(spark, Path(config.file), set(versions))
    return Promoted(shadow, None, quarantine_version, str(config.file), str(backup), tables=versions,
                    silvers=silvers)


def _promote_record(config: PipelineConfig, app_id: str, shadow: Shadow, rows: DataFrame, count: int,
                    quarantined: int | None = None) -> BatchRecord:
    """A table's `promote` ledger record: the shadow's spans, each with the count of `rows` in it."""
    per_partition = _records_per_partition(rows, None)
    return BatchRecord(pipeline=config.name, app_id=app_id, batch_id=PROMOTE_BATCH_ID, kind=BatchKind.PROMOTE,
                       rows=count, schema_ids=_schema_ids(rows), quarantined=count if quarantined is None else 0,
                       ranges=tuple(PartitionRange(s.topic, s.partition, s.first, s.last,
                                                   per_partition.get((s.topic, s.partition), 0))
                                    for s in shadow.spans))


def follow_routed_promote(spark: SparkSession, file: Path, changed: set[str]) -> dict[str, int | None]:
    """Each route silver (as the switched file says) over a route table the promote changed, brought to it: its
    step rebuilds from the table's fold, as `follow_promote` does a pipeline's silver."""
    from ingestion.config import load_pipeline
    from ingestion.silver.follower import SilverFollower

    out: dict[str, int | None] = {}
    for table, route in load_pipeline(file).route_silvers().items():
        if table in changed:
            record = SilverFollower(spark, route).step()
            out[table] = record.bronze_version if record is not None else None
    return out


def follow_promote(spark: SparkSession, file: Path) -> int | None:
    """The pipeline's silver table (as its switched file says), brought to the promoted bronze: the promote's
    bronze commit replaced rows, so the step rebuilds silver from bronze's fold, exactly (as after a rewind);
    the bronze version silver holds now, None without a silver table. A crash here leaves it to the next
    `ingest run` or `ingest silver run`, whose first step rebuilds the same way."""
    from ingestion.config import load_pipeline
    from ingestion.silver.follower import SilverFollower

    switched = load_pipeline(file)
    if switched.silver is None:
        return None
    record = SilverFollower(spark, switched).step()
    return record.bronze_version if record is not None else None


def _records_per_partition(rows: DataFrame, failed: DataFrame | None) -> dict[tuple[str, int], int]:
    keys = rows.select("_kafka_topic", "_kafka_partition")
    if failed is not None:
        keys = keys.unionByName(failed.select("_kafka_topic", "_kafka_partition"))
    return {(r["_kafka_topic"], int(r["_kafka_partition"])): int(r["count"])
            for r in keys.groupBy("_kafka_topic", "_kafka_partition").count().collect()}


def _schema_ids(rows: DataFrame) -> tuple[int, ...]:
    if "_schema_id" not in rows.columns:
        return ()
    return tuple(sorted(int(r[0]) for r in rows.select("_schema_id").distinct().collect() if r[0] is not None))


def _promote_version(spark: SparkSession, path: str, txn: commit.Txn) -> int | None:
    """The live bronze version whose commit is the promote (its ledger record carries the txn's app id)."""
    found = [r.version for r in ledger.history(spark, path) if r.kind == BatchKind.PROMOTE and r.app_id == txn.app_id]
    return max((v for v in found if v is not None), default=None)


def switch_config(live: Path, other: Path, name: str) -> Path:
    """The pipeline's file replaced by `other`'s content, the old one kept beside it as `<file>.before-<name>`
    (kept once: a rerun does not overwrite it with the new content); the backup's path."""
    backup = live.with_name(f"{live.name}.before-{name}")
    if not backup.exists():
        temporary = backup.with_name(f".{backup.name}.tmp")
        temporary.write_bytes(live.read_bytes())
        os.replace(temporary, backup)
    if live.resolve() != other.resolve():
        temporary = live.with_name(f".{live.name}.tmp")
        temporary.write_bytes(other.read_bytes())
        os.replace(temporary, live)
    return backup
