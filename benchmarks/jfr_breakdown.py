"""Where a run's JVM CPU went, from a Java Flight Recording: execution samples grouped by the step of the data path
they belong to (Kafka fetch, the Avro check, decoding, building bronze rows, Parquet, Delta statistics, ...).
With --allocations: where its heap allocations went instead (allocation samples, weighted by the bytes each
stands for), by step and by the allocating frame.

Record with the pipeline's Spark setting (bench.py: --ours-spark), then read the file:

  spark.driver.extraJavaOptions=-XX:StartFlightRecording=filename=/tmp/ours.jfr,settings=profile,dumponexit=true
  python benchmarks/jfr_breakdown.py /tmp/ours.jfr [--from-s 20] [--allocations]

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


def samples(path: str, from_s: float, allocations: bool = False) -> list[tuple[str, list[str], float]]:
    """(thread name, frames innermost first, weight) of every execution sample (weight 1) or allocation sample
    (weight: the bytes it stands for) after `from_s` seconds into the recording."""
    kind = "jdk.ObjectAllocationSample" if allocations else "jdk.ExecutionSample"
    text = subprocess.run(["jfr", "print", "--json", "--stack-depth", "128", "--events", kind, path],
                          capture_output=True, text=True, check=True).stdout
    events = json.loads(text)["recording"]["events"]
    start = min((e["values"]["startTime"] for e in events), default="")
    out = []
    for event in events:
        values: dict[str, Any] = event["values"]
        if _seconds(values["startTime"], start) < from_s:
            continue
        frames = [f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}"
                  for f in (values.get("stackTrace") or {}).get("frames", [])]
        thread = (values.get("eventThread" if allocations else "sampledThread") or {}).get("javaName") or "?"
        out.append((thread, frames, float(values.get("weight", 1)) if allocations else 1.0))
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


def breakdown(found: list[tuple[str, list[str], float]]) -> dict[str, collections.Counter[str]]:
    out: dict[str, collections.Counter[str]] = {"task threads": collections.Counter(),
                                                 "other threads": collections.Counter()}
    for thread, frames, weight in found:
        out["task threads" if thread.startswith(TASK_THREAD) else "other threads"][step_of(frames)] += weight
    return out


def top_frames(found: list[tuple[str, list[str], float]], count: int) -> list[tuple[str, float]]:
    """The allocating frames outside the shared helpers (see HELPERS) with the most weight."""
    frames: collections.Counter[str] = collections.Counter()
    for _, stack, weight in found:
        frames[next((f for f in stack if not f.startswith(HELPERS)), stack[0] if stack else "?")] += weight
    return frames.most_common(count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recording")
    parser.add_argument("--from-s", type=float, default=0.0, help="skip the recording's first seconds (JVM start)")
    parser.add_argument("--allocations", action="store_true",
                        help="heap allocations (bytes) instead of CPU samples, with the top allocating frames")
    args = parser.parse_args()
    found = samples(args.recording, args.from_s, args.allocations)
    groups = breakdown(found)
    total = sum(sum(c.values()) for c in groups.values())
    unit = "MB allocated" if args.allocations else "samples"
    for name, counts in groups.items():
        n = sum(counts.values())
        amount = n / 1e6 if args.allocations else n
        print(f"{name}: {amount:,.0f} {unit} ({n / total:.0%} of all)" if total else f"{name}: none")
        for step, weight in counts.most_common():
            print(f"  {weight / n:6.1%}  {step}")
    if args.allocations and total:
        print("top allocating frames:")
        for frame, weight in top_frames(found, 15):
            print(f"  {weight / total:6.1%}  {frame}")


if __name__ == "__main__":
    main()
