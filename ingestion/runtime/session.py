"""The one SparkSession factory: Delta and the Kafka connector by jar path, quiet logs, small-machine defaults."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from ingestion.errors import ConfigError
from ingestion.limits import AVRO_JAVA_LIMITS
from ingestion.runtime import jars

NO_FORK_FS_CLASS = "ingest.NoForkLocalFileSystem"  # data/NoForkLocalFileSystem.java, in the helper jar
LOG4J_CONFIG = Path(__file__).parent / "data" / "log4j2.properties"
FAIR_POOLS = Path(__file__).parent / "data" / "fairscheduler.xml"

# Defaults sized for one machine; every key can be overridden by the pipeline config's `spark:` section or by
# spark-submit, which wins because it starts the JVM before this code runs.
DEFAULTS: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.databricks.delta.optimizeWrite.enabled": "false",
    "spark.driver.memory": "2g",
    # A micro-batch is cached once, read twice and dropped (bounded by maxOffsetsPerTrigger): compressing the cache
    # costs more CPU than it saves (docs/performance.md#uncompressed-batch-cache).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Streaming queries read their source options on every restart; keep the log of batches small.
    "spark.sql.streaming.minBatchesToRetain": "100",
    # PySpark 4 records the Python call site of every DataFrame and Column function for error messages: four
    # more py4j round trips per call, most of those a micro-batch's plan takes (docs/performance.md#py4j-round-trips).
    # The call sites would name ingest's own code, not the user's.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # What Spark shows as '*** (redacted)' in plans, its UI and event logs: its defaults plus the Kafka source's
    # secrets (a JAAS line, a client key given as `kafka.ssl.keystore.key`; docs/security.md).
    "spark.redaction.regex": "(?i)secret|password|token|access[.]key|jaas|keystore[.]key|credentials",
    "spark.sql.redaction.options.regex": "(?i)url|secret|password|token|jaas|keystore[.]key",
}


LOCAL_DEFAULTS: dict[str, str] = {
    # Local files without a `chmod` or `readlink` child process per file (data/NoForkLocalFileSystem.java,
    # docs/performance.md#no-fork-local-file-system). The class is on the driver's classpath from the start (see
    # builder), as Spark resolves its jars through this file system.
    "spark.hadoop.fs.file.impl": NO_FORK_FS_CLASS,
    "spark.hadoop.fs.AbstractFileSystem.file.impl": f"{NO_FORK_FS_CLASS}$Fs",
    # Batches before background work: the pool of the Delta checkpoints written beside the batches
    # (log_checkpoints.py) gets a core only when no batch task waits for one (data/fairscheduler.xml).
    "spark.scheduler.mode": "FAIR",
    "spark.scheduler.allocation.file": str(FAIR_POOLS),
}


# Delta rebuilds a table's state from its log (for a checkpoint, a reader, and the txnAppId check when the
# checksum cannot answer) with 50 tasks by default: seconds of task overhead on a small machine. Local masters use
# half their cores: a checkpoint written beside the batches (log_checkpoints) then leaves the other half to them
# (docs/performance.md#snapshot-partitions).
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


def snapshot_partitions(master: str) -> int:
    """Half the cores of a local master (`local`, `local[N]`, `local[*]`, `local[N,F]`), at least 1."""
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    count = inside.split(",")[0].strip()
    cores = (os.cpu_count() or 1) if count == "*" else int(count)
    return max(1, cores // 2)


# A local JVM that runs pipelines holds its whole heap from the start (`fixed_heap`): its memory is then what it
# will be, whatever the topic's size or the run's length. With the JVM's own sizing, G1 grows the heap towards
# spark.driver.memory as the run goes on, further on a busy machine (docs/performance.md#fixed-heap-on-local-masters).
# A pipeline's own -Xms or -XX:-AlwaysPreTouch in spark.driver.extraJavaOptions comes later and wins.
FIXED_HEAP_OPTIONS = "-Xms{mib}m -XX:+AlwaysPreTouch"
_SIZE = re.compile(r"(\d+)\s*(b|[kmgt]b?)?", re.IGNORECASE)
_MIB = {"b": 1 / 1024 / 1024, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def memory_mib(size: str) -> int:
    """Mebibytes of a Spark memory setting ('2g', '1536m', '2gb'; a plain number is MiB, as spark.driver.memory
    reads it)."""
    found = _SIZE.fullmatch(size.strip())
    if found is None:
        raise ConfigError(f"key 'spark.driver.memory' must be a size such as 2g or 1536m, got {size!r}")
    unit = (found[2] or "m")[0].lower()
    return max(1, int(int(found[1]) * _MIB[unit]))


def builder(app_name: str = "ingest", master: str | None = None, conf: Mapping[str, str] | None = None, *,
            fixed_heap: bool = False) -> SparkSession.Builder:
    """A session builder with Delta, the Kafka source and quiet logging; compose more `.config()` on it.
    `fixed_heap`: a local JVM that runs pipelines, whose heap is spark.driver.memory from the start (see
    FIXED_HEAP_OPTIONS)."""
    # Bind the driver to loopback unless told otherwise: this project only ever talks to local addresses by default.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must see the same packages (fastavro, pyarrow) as the driver: the same interpreter by default.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    b = SparkSession.builder.appName(app_name)
    master = master or os.environ.get("INGEST_SPARK_MASTER") or ("local[*]" if "SPARK_HOME" not in os.environ else None)
    if master:
        b = b.master(master)
    settings = dict(DEFAULTS)
    local = bool(master and master.startswith("local"))
    if local:
        settings.update(LOCAL_DEFAULTS)
        settings[SNAPSHOT_PARTITIONS] = str(snapshot_partitions(master or "local"))
    settings["spark.jars"] = ",".join(str(jar) for jar in jars.spark_jars())
    caller = dict(conf or {})
    settings.update(caller)
    # Settings that both sides add to: ingest's part first, then the caller's (of two -X options, the JVM takes
    # the last; on a local master the helper jar, with the file system class above, leads the classpath).
    java_opts = " ".join([f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
                          *(f"-D{key}={value}" for key, value in AVRO_JAVA_LIMITS.items())])
    driver_opts = java_opts
    if local and fixed_heap:
        driver_opts += " " + FIXED_HEAP_OPTIONS.format(mib=memory_mib(settings["spark.driver.memory"]))
    ahead = {"spark.driver.extraJavaOptions": (driver_opts, " "),
             "spark.executor.extraJavaOptions": (java_opts, " ")}
    if local:
        ahead["spark.driver.extraClassPath"] = (str(jars.helper_jar()), os.pathsep)
    for key, (ours, separator) in ahead.items():
        settings[key] = separator.join(filter(None, [ours, caller.get(key)]))
    for key, value in settings.items():
        b = b.config(key, value)
    return b


def get_session(app_name: str = "ingest", master: str | None = None, conf: Mapping[str, str] | None = None, *,
                fixed_heap: bool = False) -> SparkSession:
    with _jvm_keeps_out_of_signals():
        spark = builder(app_name, master, conf, fixed_heap=fixed_heap).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


@contextlib.contextmanager
def _jvm_keeps_out_of_signals() -> Iterator[None]:
    """Start the JVM with SIGINT, SIGTERM and SIGHUP ignored, which it keeps (a JVM does not handle a signal that
    was ignored when it started): Ctrl-C, `timeout` or a container stop signal the whole process group, and the
    Python side then stops the pipeline between batches while the JVM stays up to finish it. The JVM still ends
    with its Python process (PySpark's gateway exits when its stdin closes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
