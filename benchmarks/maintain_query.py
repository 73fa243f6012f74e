"""The maintain benchmark's measurement, in one process (one JVM): an analyst's query (rows per Kafka partition
and hour of `_kafka_timestamp`) on a table of many small commits, `--runs` times; `ingest maintain` (OPTIMIZE,
VACUUM, checkpoint) through its Python API; the same query again. Prints one JSON line: the medians, their ratio,
the files and bytes before and after, and whether both answers were equal. Run by bench.py (stage `maintain`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from ingestion.config import load_pipeline
from ingestion.ops.maintain import maintain
from ingestion.runtime.session import get_session

QUERY = ("SELECT _kafka_partition, date_trunc('hour', _kafka_timestamp) AS hour, count(*) AS n "
         "FROM delta.`{path}` GROUP BY 1, 2 ORDER BY 1, 2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    config = load_pipeline(args.pipeline)
    spark = get_session("bench-maintain", conf=dict(config.spark))
    query = QUERY.format(path=config.table_path.replace("`", "``"))

    def timed() -> tuple[float, list[tuple[int, str, int]]]:
        seconds, answer = [], []
        spark.sql(query).collect()  # warm: plan caches, the Delta log read once
        for _ in range(args.runs):
            t0 = time.monotonic()
            answer = [(int(r[0]), str(r[1]), int(r[2])) for r in spark.sql(query).collect()]
            seconds.append(time.monotonic() - t0)
        return statistics.median(seconds), answer

    before_s, before = timed()
    t0 = time.monotonic()
    report = maintain(spark, config)
    maintain_s = time.monotonic() - t0
    after_s, after = timed()
    bronze = report.tables[0]
    print(json.dumps({
        "query": QUERY.format(path="<bronze>"), "runs": args.runs,
        "before_s": round(before_s, 3), "after_s": round(after_s, 3), "ratio": round(before_s / after_s, 2),
        "maintain_s": round(maintain_s, 1), "files_before": bronze.before.count, "files_after": bronze.after.count,
        "bytes_before": bronze.before.bytes, "bytes_after": bronze.after.bytes, "same_answer": before == after,
        "groups": len(after)}))


if __name__ == "__main__":
    main()
