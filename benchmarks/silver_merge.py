"""Silver's merge throughput against a hand-written foreachBatch-style MERGE job, on the same bronze.

Bronze is written here (no Kafka): `changes` Debezium-shaped envelopes (the columns bronze has for the
customers-cdc schema) over `keys` ids, in `versions` appends. After each append, ours merges it with
`SilverFollower.step()` (dedupe per key by sequence, delete markers, txn ids, ledger), the hand-written job reads
the same version's rows and MERGEs them (upsert: dedupe per key by lsn, update/insert/delete, nothing else;
history: each change a row valid until the key's next, the key's current row closed, in order only). Reported:
changes merged per second for each, and their ratio.

    .venv/bin/python benchmarks/silver_merge.py --changes 1000000 --keys 100000 --versions 10 --mode upsert

`--phases` adds where ours spends a step: seconds per part (wall time summed over the steps), each part timed
around the method that does it (nested parts are subtracted from the part around them). `--rounds N` runs the
whole comparison N times on new tables and reports each round and the median ratio (the machine's load moves
both sides of a round alike, not two rounds).

`--freshness N` measures instead how far silver trails bronze in a streaming run: bronze gains one version of
`changes / N` changes every `--trigger` seconds (a pipeline at that trigger) while silver's thread follows it as
`ingest run` does (woken after each bronze commit, at least every trigger); reported: seconds from each bronze
commit to the end of the silver step that holds it (median, p99, max).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ingestion.config import load_pipeline
from ingestion.runtime.session import get_session
from ingestion.silver import rs_step
from ingestion.silver import table as table_module
from ingestion.silver.follower import SilverFollower

# What a silver step does, by the method doing it (class, method, part); the parts of a method called inside
# another are subtracted from the outer one's.
PARTS = [(SilverFollower, "step", "bronze's version, silver's position"),
         (SilverFollower, "_not_appends", "bronze's new versions: appends only?"),
         (SilverFollower, "_order_changed", "order check (first step)"),
         (SilverFollower, "_merge", "truncate check of the new rows"),
         (rs_step, "merge", "driver: truncate check, counts"),
         (rs_step, "_new_rows", "driver: new rows read (delta-rs change feed)"),
         (rs_step, "_table", "driver: silver's schema"),
         (rs_step, "_latest", "driver: fold (DuckDB)"),
         (rs_step, "_mark", "driver: markers read and checked"),
         (rs_step, "_source", "driver: MERGE source"),
         (rs_step, "_append_markers", "driver: markers append (delta-rs)"),
         (rs_step, "_merge_rows", "driver: rows MERGE (delta-rs)"),
         (rs_step, "_history_step", "driver: history rows, intervals (DuckDB), MERGE (delta-rs)"),
         (SilverFollower, "lag", "lag after the step"),
         (table_module.SilverTable, "merge", "new rows read, folded, counted"),
         (table_module.SilverTable, "_evolve", "schema check"),
         (table_module.SilverTable, "_markers_in_use", "markers lookup"),
         (table_module.SilverTable, "_append_markers", "markers append"),
         (table_module.SilverTable, "_merge_history", "history: rows, intervals, MERGE"),
         (table_module.SilverTable, "_merge_rows", "rows MERGE"),
         (table_module.SilverTable, "_with_outcome", "MERGE's counts")]


class Phases:
    """Wall time per part of ours, exclusive of the parts called inside it."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._stack: list[float] = []  # time spent in nested parts, per open part
        self._saved: list[tuple[type, str, Any]] = []

    def install(self) -> None:
        for cls, name, part in PARTS:  # a class's method, or a module's function
            if name not in cls.__dict__:
                continue
            original = cls.__dict__[name]
            self._saved.append((cls, name, original))
            setattr(cls, name, self._timed(original, part))

    def uninstall(self) -> None:
        for cls, name, original in reversed(self._saved):
            setattr(cls, name, original)

    def _timed(self, method: Any, part: str) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            self._stack.append(0.0)
            try:
                return method(*args, **kwargs)
            finally:
                took = time.perf_counter() - started
                inner = self._stack.pop()
                self.spent[part] = self.spent.get(part, 0.0) + took - inner
                if self._stack:
                    self._stack[-1] += took
        return timed


def bronze_rows(spark: SparkSession, first: int, count: int, keys: int) -> DataFrame:
    """Envelopes for change numbers first..first+count: key = a hash of the number, one in five a delete."""
    n = F.col("id")
    key = (F.abs(F.hash(n)) % keys + 1).cast("int")
    op = F.when(n % 5 == 4, "d").when(n < keys, "c").otherwise("u")
    image = F.struct(key.alias("id"), F.concat(F.lit("customer "), key.cast("string")).alias("name"),
                     F.lit(None).cast("string").alias("email"), F.lit("gold").alias("tier"),
                     (n * 7 % 1_000_000).alias("balance_cents"))
    source = F.struct(F.lit("2.7").alias("version"), F.lit("postgresql").alias("connector"),
                      F.lit("shop").alias("name"), (F.lit(1_760_000_000_000) + n).alias("ts_ms"),
                      F.lit("false").alias("snapshot"), F.lit("shop").alias("db"), F.lit("public").alias("schema"),
                      F.lit("customers").alias("table"), F.floor(n / 10).cast("long").alias("txId"),
                      (n * 10).alias("lsn"))
    return (spark.range(first, first + count)
            .select(F.when(op != "c", image).alias("before"), F.when(op != "d", image).alias("after"),
                    source.alias("source"), op.alias("op"), (F.lit(1_760_000_000_007) + n).alias("ts_ms"),
                    F.lit(None).cast("struct<id:string,total_order:bigint,data_collection_order:bigint>")
                    .alias("transaction"),
                    F.lit("customers").alias("_kafka_topic"), (key % 3).cast("int").alias("_kafka_partition"),
                    n.alias("_kafka_offset"), F.timestamp_millis(F.lit(1_760_000_000_000) + n)
                    .alias("_kafka_timestamp"), F.lit(0).alias("_kafka_timestamp_type"),
                    F.struct(key.alias("id")).alias("_kafka_key"),
                    F.array().cast("array<struct<key:string,value:binary>>").alias("_kafka_headers"),
                    F.lit(False).alias("_kafka_tombstone"), F.lit(21).alias("_schema_id"),
                    F.lit(0).cast("long").alias("_batch_id"), F.current_timestamp().alias("_ingested_at")))


def hand_written(spark: SparkSession, bronze: str, table: str, version: int) -> None:
    """What a data engineer writes: the version's new rows, the newest per key, one MERGE."""
    from delta.tables import DeltaTable

    rows = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version)
            .option("endingVersion", version).load(bronze).where("_change_type = 'insert'"))
    latest = (rows.withColumn("k", F.coalesce("after.id", "before.id"))
              .withColumn("r", F.row_number().over(Window.partitionBy("k").orderBy(F.col("source.lsn").desc())))
              .where("r = 1").select("k", "op", "after.*", F.col("source.lsn").alias("lsn")))
    if not DeltaTable.isDeltaTable(spark, table):
        latest.where("op <> 'd'").drop("op").write.format("delta").save(table)
        return
    (DeltaTable.forPath(spark, table).alias("t").merge(latest.alias("s"), "t.k = s.k")
     .whenMatchedDelete("s.op = 'd' AND s.lsn > t.lsn")
     .whenMatchedUpdateAll("s.op <> 'd' AND s.lsn > t.lsn")
     .whenNotMatchedInsertAll("s.op <> 'd'").execute())


def hand_written_history(spark: SparkSession, bronze: str, table: str, version: int) -> None:
    """History mode (SCD type 2) as a data engineer writes it: the version's new rows with their intervals (each
    valid until the key's next change, a delete for no time), the key's current row closed at the first new
    change's time, one MERGE (in order only: a late change is not put in its place)."""
    from delta.tables import DeltaTable

    rows = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version)
            .option("endingVersion", version).load(bronze).where("_change_type = 'insert'"))
    by_key = Window.partitionBy("k").orderBy("lsn")
    deleted = F.col("op") == "d"
    changes = (rows.select(F.coalesce("after.id", "before.id").alias("k"), "op",
                           F.when(deleted, F.col("before")).otherwise(F.col("after")).alias("row"),
                           F.col("source.lsn").alias("lsn"), F.timestamp_millis("source.ts_ms").alias("valid_from"))
               .select("k", "op", "row.*", "lsn", "valid_from")
               .withColumn("valid_to", F.when(deleted, F.col("valid_from")).otherwise(F.lead("valid_from")
                                                                                       .over(by_key)))
               .withColumn("is_current", ~deleted & F.lead(F.lit(1)).over(by_key).isNull()))
    if not DeltaTable.isDeltaTable(spark, table):
        changes.write.format("delta").save(table)
        return
    closers = changes.groupBy("k").agg(F.min_by("valid_from", "lsn").alias("valid_from")).withColumnRenamed("k", "mk")
    source = closers.unionByName(changes.withColumn("mk", F.lit(None).cast("int")), allowMissingColumns=True)
    (DeltaTable.forPath(spark, table).alias("t").merge(source.alias("s"), "t.k = s.mk AND t.is_current")
     .whenMatchedUpdate(set={"is_current": "false", "valid_to": "s.valid_from"})
     .whenNotMatchedInsert("s.mk IS NULL", values={c: f"s.{c}" for c in changes.columns}).execute())


def _setup(spark: SparkSession, work: Path, keys: int, silver: str) -> tuple[str, Path]:
    """Bronze's first version and a pipeline file over it with a Debezium silver section (`silver`: more keys)."""
    bronze = str(work / "bronze")
    bronze_rows(spark, 0, 1, keys).write.format("delta").option("delta.enableChangeDataFeed", "true").save(bronze)
    file = work / "p.yaml"
    file.write_text(f"name: bench\ntopic: customers\nkey:\n  format: avro\nsink:\n  table: {bronze}\n"
                    f"silver:\n  key: [id]\n  envelope: debezium\n  sequenceBy: source.lsn\n{silver}")
    return bronze, file


def run(changes: int, keys: int, versions: int, mode: str, phases: bool = False) -> dict[str, Any]:
    spark = get_session("bench-silver", conf={"spark.sql.shuffle.partitions": "4"})
    work = Path(tempfile.mkdtemp(prefix="bench-silver-"))
    try:
        bronze, file = _setup(spark, work, keys, f"  mode: {mode}\n")
        follower = SilverFollower(spark, load_pipeline(file))
        follower.drain()  # silver created from bronze's first version
        job = hand_written if mode == "upsert" else hand_written_history
        job(spark, bronze, str(work / "hand"), 0)
        per = changes // versions
        ours = theirs = 0.0
        parts = Phases()
        if phases:
            parts.install()
        for v in range(versions):
            bronze_rows(spark, 1 + v * per, per, keys).write.format("delta").mode("append").save(bronze)
            started = time.perf_counter()
            follower.step()
            ours += time.perf_counter() - started
            started = time.perf_counter()
            job(spark, bronze, str(work / "hand"), v + 1)
            theirs += time.perf_counter() - started
        # Both jobs' tables hold the same rows (the generated changes arrive in order: no marker or late change
        # sets them apart), or the comparison is void.
        mine = spark.read.format("delta").load(follower.spec.path).select("id", "name", "balance_cents")
        hand = spark.read.format("delta").load(str(work / "hand")).select("id", "name", "balance_cents")
        same = mine.exceptAll(hand).isEmpty() and hand.exceptAll(mine).isEmpty()
        out: dict[str, Any] = {"load_average": [round(x, 2) for x in os.getloadavg()], "same_rows": same,
                               "changes": per * versions, "keys": keys, "versions": versions, "mode": mode,
                               "ours_s": round(ours, 1), "ours_changes_per_s": round(per * versions / ours)}
        if theirs:
            out |= {"hand_written_s": round(theirs, 1), "hand_written_changes_per_s": round(per * versions / theirs),
                    "ratio": round(theirs / ours, 2)}
        if phases:
            parts.uninstall()
            out["phases_s"] = {k: round(v, 2) for k, v in sorted(parts.spent.items(), key=lambda kv: -kv[1])}
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def freshness(changes: int, keys: int, versions: int, trigger: float) -> dict[str, Any]:
    """Seconds from each bronze commit to the end of the silver step that holds it, bronze committing every
    `trigger` seconds."""
    import statistics

    spark = get_session("bench-silver", conf={"spark.sql.shuffle.partitions": "4"})
    work = Path(tempfile.mkdtemp(prefix="bench-silver-"))
    steps: list[tuple[int, float]] = []  # (bronze version held, when the step ended)
    try:
        bronze, file = _setup(spark, work, keys, f"  trigger: {trigger:g} seconds\n")
        follower = SilverFollower(spark, load_pipeline(file),
                                  on_step=lambda record, _lag: steps.append((record.bronze_version, time.time())))
        follower.drain()
        follower.start()
        per = changes // versions
        committed: list[tuple[int, float]] = []
        for v in range(versions):
            due = time.monotonic() + trigger
            bronze_rows(spark, 1 + v * per, per, keys).write.format("delta").mode("append").save(bronze)
            committed.append((v + 1, time.time()))
            follower.notify()
            time.sleep(max(0.0, due - time.monotonic()))
        while not steps or steps[-1][0] < versions:
            if follower.error is not None:
                raise follower.error
            time.sleep(0.2)
        follower.stop()
        behind = [next(at for held, at in steps if held >= version) - when for version, when in committed]
        return {"changes": per * versions, "keys": keys, "versions": versions, "trigger_s": trigger,
                "freshness_median_s": round(statistics.median(behind), 1),
                "freshness_p99_s": round(statistics.quantiles(behind, n=100, method="inclusive")[98], 1),
                "freshness_max_s": round(max(behind), 1), "steps": len(steps),
                "load_average": [round(x, 2) for x in os.getloadavg()]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--mode", choices=["upsert", "history"], default="upsert")
    parser.add_argument("--freshness", type=int, default=0, metavar="N",
                        help="measure silver's freshness over N bronze versions, one every --trigger seconds")
    parser.add_argument("--trigger", type=float, default=10.0)
    parser.add_argument("--phases", action="store_true", help="also report where ours spends its steps")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the comparison; report the median ratio")
    args = parser.parse_args()
    if args.freshness:
        print(json.dumps(freshness(args.changes, args.keys, args.freshness, args.trigger)))
        return
    rounds = [run(args.changes, args.keys, args.versions, args.mode, args.phases) for _ in range(args.rounds)]
    for result in rounds:
        print(json.dumps(result))
    if len(rounds) > 1 and all("ratio" in r for r in rounds):
        import statistics

        print(json.dumps({"rounds": len(rounds), "median_ratio": statistics.median(r["ratio"] for r in rounds),
                          "median_ours_s": statistics.median(r["ours_s"] for r in rounds),
                          "median_hand_written_s": statistics.median(r["hand_written_s"] for r in rounds)}))


if __name__ == "__main__":
    main()
