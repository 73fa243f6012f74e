"""Spark jobs a user would write by hand, run as their own process by bench.py.

`baseline`: Spark Kafka source, strip the 5-byte Confluent header, Spark's `from_avro` (spark-avro jar), Delta
append with a checkpoint, availableNow, nothing else.
`noop`: limit (b), the Spark Kafka source into the no-op sink.

Both use the project's session factory (same Spark defaults as `ingest run`; bench.py turns its class archive
off, which a job written by hand would not have) and print one
`BENCH_RESULT {json}` line: rows read and the processing window (first batch start to last batch end, from
Spark's own progress reports).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any


def _session() -> Any:
    from ingestion.runtime.session import get_session

    # The project's jar set includes spark-avro (ours uses from_avro too).
    return get_session("bench-baseline", conf={"spark.sql.streaming.numRecentProgressUpdates": "100000"})


def _progress(query: Any) -> list[dict[str, Any]]:
    out = []
    for p in query.recentProgress:
        out.append(p if isinstance(p, dict) else json.loads(p.json))
    return out


def _window(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows and the processing window of the batches that read something."""
    batches = [p for p in progress if p.get("numInputRows", 0) > 0]
    if not batches:
        return {"rows_read": 0, "processing_s": 0.0, "batches": []}

    def start(p: dict[str, Any]) -> float:
        return dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

    rows = [(start(p), p["durationMs"].get("triggerExecution", 0) / 1000, int(p["numInputRows"])) for p in batches]
    first = min(s for s, _, _ in rows)
    last = max(s + d for s, d, _ in rows)
    return {"rows_read": sum(n for _, _, n in rows), "processing_s": last - first,
            "batches": [{"start": s - first, "seconds": d, "rows": n} for s, d, n in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=("baseline", "noop"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--schema", type=Path, help="Avro schema file (baseline)")
    parser.add_argument("--table", help="Delta table path (baseline)")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets", type=int, default=500_000)
    args = parser.parse_args()

    started = time.monotonic()
    spark = _session()
    session_s = time.monotonic() - started
    kafka = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribe", args.topic)
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(args.max_offsets))
             .load())
    if args.mode == "baseline":
        from pyspark.sql.avro.functions import from_avro
        from pyspark.sql.functions import expr

        schema = args.schema.read_text()
        rows = kafka.select(from_avro(expr("substring(value, 6)"), schema).alias("r")).select("r.*")
        query = (rows.writeStream.format("delta").outputMode("append")
                 .option("checkpointLocation", args.checkpoint)
                 .trigger(availableNow=True).start(args.table))
    else:
        query = (kafka.writeStream.format("noop")
                 .option("checkpointLocation", args.checkpoint)
                 .trigger(availableNow=True).start())
    query.awaitTermination()
    result = _window(_progress(query))
    result["session_s"] = session_s
    spark.stop()
    print("BENCH_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
