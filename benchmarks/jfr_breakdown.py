"""Where a run's JVM CPU went, from a Java Flight Recording: execution samples grouped by the step of the data path
they belong to (Kafka fetch, the Avro check, decoding, building bronze rows, Parquet, Delta statistics, ...).

Record with the pipeline's Spark setting (bench.py: --ours-spark), then read the file:

  spark.driver.extraJavaOptions=-XX:StartFlightRecording=filename=/tmp/ours.jfr,settings=profile,dumponexit=true
  python benchmarks/jfr_breakdown.py /tmp/ours.jfr [--from-s 20]

A sample belongs to the first step, from the innermost frame outwards, whose classes it is in; task threads
("Executor task launch worker") and the rest (the driver: planning, Delta commits, the listener) are counted
apart. GC time is not in execution samples: the GC phase events give it.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
from typing import Any

# (step, class name prefixes), matched from the innermost frame outwards: the first frame that matches decides.
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Avro body check (AvroBodyCheck)", ("ingest.AvroBodyCheck",)),
    ("offset summary (PartitionSummary)", ("ingest.PartitionSummary",)),
    ("Parquet encode and compress", ("org.apache.parquet.", "shaded.parquet.", "org.xerial.snappy.",
                                     "com.github.luben.zstd.", "io.airlift.compress.",
                                     "org.apache.spark.sql.execution.datasources.parquet.")),
    ("Delta statistics", ("org.apache.spark.sql.delta.stats.",)),
    ("Avro decode (from_avro)", ("org.apache.spark.sql.avro.", "org.apache.avro.")),
    ("Kafka fetch", ("org.apache.kafka.", "org.apache.spark.sql.kafka010.")),
    ("Delta write and commit", ("org.apache.spark.sql.delta.", "io.delta.")),
    ("file system", ("org.apache.hadoop.", "ingest.NoForkLocalFileSystem")),
    ("Spark generated code (bronze rows, filters, projections)", ("org.apache.spark.sql.catalyst.expressions.",
                                                                  "org.apache.spark.sql.catalyst.",
                                                                  "org.apache.spark.unsafe.",
                                                                  "org.apache.spark.sql.execution.")),
    ("Spark scheduler and RPC", ("org.apache.spark.", "io.netty.", "org.sparkproject.")),
    ("Python bridge (py4j)", ("py4j.",)),
)
GENERIC = ("JDK and Scala", ("java.", "jdk.", "sun.", "scala."))  # only when no frame of the stack says more
# Frames of helpers that every step calls (string and row buffers, generated projections, the JDK): the step is
# the first frame outside them (a UTF8String copy inside Parquet's write support is Parquet's work).
HELPERS = ("org.apache.spark.unsafe.", "org.apache.spark.sql.catalyst.expressions.UnsafeRow",
           "org.apache.spark.sql.catalyst.expressions.codegen.", "org.apache.spark.sql.catalyst.InternalRow",
           "org.apache.spark.sql.catalyst.expressions.GeneratedClass$SpecificMutableProjection",
           "org.apache.spark.sql.catalyst.expressions.GeneratedClass$SpecificUnsafeProjection",
           "org.apache.spark.sql.catalyst.util.", "java.", "jdk.", "sun.", "scala.")
TASK_THREAD = "Executor task launch worker"


def samples(path: str, from_s: float) -> list[tuple[str, list[str]]]:
    """(thread name, frames innermost first) of every execution sample after `from_s` seconds into the recording."""
    text = subprocess.run(["jfr", "print", "--json", "--stack-depth", "128", "--events", "jdk.ExecutionSample", path],
                          capture_output=True, text=True, check=True).stdout
    events = json.loads(text)["recording"]["events"]
    start = min((e["values"]["startTime"] for e in events), default="")
    out = []
    for event in events:
        values: dict[str, Any] = event["values"]
        if _seconds(values["startTime"], start) < from_s:
            continue
        frames = [f["method"]["type"]["name"].replace("/", ".")
                  for f in (values.get("stackTrace") or {}).get("frames", [])]
        out.append(((values.get("sampledThread") or {}).get("javaName") or "?", frames))
    return out


def _seconds(at: str, start: str) -> float:
    import datetime as dt

    def parse(text: str) -> dt.datetime:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")[:26] + text[-6:] if "+" in text[-6:] else
                                         text.replace("Z", "+00:00"))

    try:
        return (parse(at) - parse(start)).total_seconds()
    except ValueError:
        return 0.0


def step_of(frames: list[str]) -> str:
    for frame in frames:
        if frame.startswith(HELPERS):
            continue
        for step, prefixes in STEPS:
            if frame.startswith(prefixes):
                return step
    return GENERIC[0] if any(frame.startswith(GENERIC[1]) for frame in frames) else "other"


def breakdown(found: list[tuple[str, list[str]]]) -> dict[str, collections.Counter[str]]:
    out: dict[str, collections.Counter[str]] = {"task threads": collections.Counter(),
                                                 "other threads": collections.Counter()}
    for thread, frames in found:
        out["task threads" if thread.startswith(TASK_THREAD) else "other threads"][step_of(frames)] += 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recording")
    parser.add_argument("--from-s", type=float, default=0.0, help="skip the recording's first seconds (JVM start)")
    args = parser.parse_args()
    groups = breakdown(samples(args.recording, args.from_s))
    total = sum(sum(c.values()) for c in groups.values())
    for name, counts in groups.items():
        n = sum(counts.values())
        print(f"{name}: {n} samples ({n / total:.0%} of all)" if total else f"{name}: none")
        for step, count in counts.most_common():
            print(f"  {count / n:6.1%}  {step}")


if __name__ == "__main__":
    main()
