"""The one SparkSession factory: Delta and the Kafka connector by jar path, quiet logs, small-machine defaults."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from html import escape
from pathlib import Path

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from ingestion import storage
from ingestion.config import PipelineConfig
from ingestion.errors import JvmError
from ingestion.limits import AVRO_JAVA_LIMITS
from ingestion.paths import jar_cache, jvm_error_file
from ingestion.runtime import class_archive, data_files, jars, jvm_output, metastore
from ingestion.units import size_bytes

NO_FORK_FS_CLASS = "ingest.NoForkLocalFileSystem"  # data/NoForkLocalFileSystem.java, in the helper jar
LOG4J_CONFIG = data_files.path("log4j2.properties")
FAIR_POOLS = data_files.path("fairscheduler.xml")

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
    # spark.driver.memory: `driver_memory`, by the number of pipelines.
    # A micro-batch is cached once, read twice and dropped (bounded by maxOffsetsPerTrigger): compressing the cache
    # costs more CPU than it saves (docs/performance.md#uncompressed-batch-cache).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Timestamps as Parquet's standard INT64 microseconds, not Spark's legacy INT96 default: every Delta reader
    # (delta-rs, Polars, DuckDB, Trino) reads them without a legacy flag, and the writer compares 8 bytes instead
    # of 12 in its dictionaries (docs/performance.md#parquet-timestamps). Files of either kind read alike.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
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


# The local JVM's garbage collector, unless the pipeline's spark.driver.extraJavaOptions chooses one (two would stop
# the JVM from starting). On a local master one JVM runs everything with a heap of about a gigabyte, on few cores:
# the serial collector keeps the committed heap near the live data and needs no collector threads or remembered
# sets, where G1 grew the heap to its cap and held ~40% more RSS for the same throughput
# (docs/performance.md#memory-floor).
LOCAL_GC = "-XX:+UseSerialGC"
_GC_CHOICE = re.compile(r"-XX:\+Use\w*GC\b")
# Its generations in a session of one pipeline: half the heap young up to 3/16 of the heap's cap (192 MB of 1
# GiB), survivor spaces of a quarter of that each, filled to 90% before anything is promoted early. What a batch's
# tasks hold while they run (Parquet's pages and dictionaries, fetched records) lives through a few young
# collections; in the JVM's own survivor spaces (a tenth of a third of the heap, promoting early past half full)
# it reached the old generation at the second, filled it in seconds and made a full collection of 170 to 320 ms
# every seventh batch of a 1 s trigger. Now it dies young. Measured for a session of one pipeline (and its silver
# query); a session of 100 pipelines at a 10 s trigger did worse with it (quiet tables' p99 34 to 35 s against 24
# s), so a session of more queries keeps the JVM's sizes (docs/performance.md#generations-for-a-batchs-tasks). A
# pipeline's own sizes come later and win.
LOCAL_GENERATIONS = "-XX:NewRatio=1 -XX:MaxNewSize={young}m -XX:SurvivorRatio=2 -XX:TargetSurvivorRatio=90"
YOUNG_SHARE = 3 / 16
GENERATIONS_MAX_QUERIES = 2


def local_generations(driver_memory: str) -> str:
    """LOCAL_GENERATIONS for a heap of `driver_memory` (Spark's form: 1g, 1536m, a bare number in MiB)."""
    size = driver_memory.strip()
    heap_mb = int(size) if size.isdigit() else (size_bytes(size) or 0) // 1024 ** 2
    return LOCAL_GENERATIONS.format(young=max(int(heap_mb * YOUNG_SHARE), 64))


# The class metadata a local JVM may load before its first collection for metadata: the JVM's default (about
# 21 MB) made two full collections (0.3 s) before a new pipeline's first batch ended, while Spark, Delta and Kafka
# loaded their classes (docs/performance.md#a-heap-for-many-pipelines). A pipeline's own option comes later and wins.
LOCAL_METASPACE = "-XX:MetaspaceSize=256m"


# When the local JVM's JIT compiles a method: ten times later than Java's defaults for C2 (level 4), and C1's
# profiled code (level 3) at 2,000 calls instead of 200. A run's per-record methods (the Kafka fetch, from_avro,
# Parquet's encoders, Delta's statistics) pass those counts in the first few thousand records of a batch, so they
# are compiled as soon as before; what no longer is are the methods called a few thousand times per run (Spark's SQL
# parser, the analyser, class loading, task serialization), which a JVM on 2 cores compiled in the first batch
# beside its tasks: with Java's thresholds a 1,000,000-record run spent 13.2 of its 32.8 JVM CPU seconds in the
# compiler threads, about half that with these; the JVM's CPU fell 8 to 15%, its wall time did not move
# (docs/performance.md#a-runs-fixed-cost). A pipeline's own -XX:Tier... options come later and win.
LOCAL_JIT = ("-XX:Tier3InvocationThreshold=2000 -XX:Tier3MinInvocationThreshold=1000 "
             "-XX:Tier3CompileThreshold=20000 -XX:Tier3BackEdgeThreshold=600000 "
             "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
             "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000")


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


def pool_file(pools: Iterable[str]) -> Path:
    """The FAIR allocation file of data/fairscheduler.xml with a pool per name added, each like `default` (a
    minShare above any core count: batches before background checkpoints, and among batches the pool with the
    fewest running tasks first). Written once per set of names into the jar cache."""
    names = sorted(set(pools))
    if not names:
        return FAIR_POOLS
    base = FAIR_POOLS.read_text()
    added = "".join(f'  <pool name="{escape(name, quote=True)}">\n    <schedulingMode>FIFO</schedulingMode>\n'
                    f'    <weight>1</weight>\n    <minShare>1000</minShare>\n  </pool>\n' for name in names)
    text = base.replace("</allocations>", added + "</allocations>")
    target = jar_cache() / "data" / f"fairscheduler-{hashlib.sha1(text.encode()).hexdigest()[:12]}.xml"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.{os.getpid()}")
        staging.write_text(text)
        os.replace(staging, target)
    return target


# The heap of the driver, which is also the executor on a local master. At least 1 GiB: with the serial collector
# `ingest run` of one pipeline peaks at about 1.2 GiB for the JVM and its Python process together
# (docs/performance.md#memory-floor). More for many pipelines: what a streaming pipeline keeps on the heap (its
# query, its tables' Delta logs and snapshots) and what the session keeps whatever the number, measured with 100
# pipelines at a 10 s trigger (docs/performance.md#a-heap-for-many-pipelines); the serial collector wants half
# again as much room as it keeps.
HEAP_FLOOR_MB = 1024
HEAP_BASE_MB = 320
HEAP_PER_PIPELINE_MB = 10
HEAP_STEP_MB = 512


def driver_memory(pipelines: int) -> str:
    """The default heap of a session that runs `pipelines` streaming queries: half again what they keep, in steps
    of 512 MiB (a class archive is recorded per heap size: class_archive.py) and never below 1g: 1g up to 36
    pipelines, 2g for 100."""
    needed = 1.5 * (HEAP_BASE_MB + HEAP_PER_PIPELINE_MB * max(pipelines, 1))
    steps = -(-int(needed) // HEAP_STEP_MB)
    megabytes = max(HEAP_FLOOR_MB, steps * HEAP_STEP_MB)
    return f"{megabytes // 1024}g" if megabytes % 1024 == 0 else f"{megabytes}m"


def builder(app_name: str = "ingest", master: str | None = None, conf: Mapping[str, str] | None = None,
            locations: Iterable[str] = (), pools: Iterable[str] = (),
            catalog: bool = False, pipelines: int = 1) -> SparkSession.Builder:
    """A session builder with Delta, the Kafka source and quiet logging; compose more `.config()` on it.
    `locations`: the tables and checkpoints the session will use; an object store among them brings its file
    system's jars (S3A for `s3a://`). `pools`: FAIR scheduler pools to declare beside the defaults on a local
    master (`run --all` gives each pipeline its own). `catalog`: the persistent Hive catalog, tables by name
    across sessions (`metastore.py`: the local Derby-backed one, unless `conf` names a metastore of its own).
    `pipelines`: how many streaming queries the session will run, which sizes its default heap."""
    # Bind the driver to loopback unless told otherwise: this project only ever talks to local addresses by default.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must see the same packages (fastavro, pyarrow) as the driver: the same interpreter by default.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    b = SparkSession.builder.appName(app_name)
    # spark-submit (or a SPARK_HOME's configuration) chooses the master unless INGEST_SPARK_MASTER does.
    master = master or os.environ.get("INGEST_SPARK_MASTER") or (
        None if submitted() or "SPARK_HOME" in os.environ else "local[*]")
    if master:
        b = b.master(master)
    settings = {**DEFAULTS, "spark.driver.memory": driver_memory(pipelines)}
    local = bool(master and master.startswith("local"))
    if local:
        settings.update(LOCAL_DEFAULTS)
        settings["spark.scheduler.allocation.file"] = str(pool_file(pools))
        settings[SNAPSHOT_PARTITIONS] = str(snapshot_partitions(master or "local"))
    locations = list(locations)
    if not submitted() and not local:
        # Under spark-submit the JVM runs already: its --jars are on the driver's classpath and shipped to the
        # executors; a list set here would replace theirs (docs/cluster.md). On a local master they go on the
        # driver's classpath instead (below).
        settings["spark.jars"] = ",".join(str(jar) for jar in jars.spark_jars(locations))
    caller = dict(conf or {})
    if catalog:
        settings.update(metastore.session_settings(caller))
    settings.update(caller)
    # Settings that both sides add to: ingest's part first, then the caller's (of two -X options, the JVM takes
    # the last; on a local master the helper jar, with the file system class above, leads the classpath).
    limits = " ".join(f"-D{key}={value}" for key, value in AVRO_JAVA_LIMITS.items())
    java_opts = f"-Dlog4j2.configurationFile={LOG4J_CONFIG} {limits}"
    driver_opts = f"{java_opts} {jvm_error_file()}"  # the driver's JVM is this machine's
    if local:
        driver_opts += f" {LOCAL_METASPACE} {LOCAL_JIT}"
    if local and not _GC_CHOICE.search(caller.get("spark.driver.extraJavaOptions", "")):
        driver_opts += f" {LOCAL_GC}"
        if pipelines <= GENERATIONS_MAX_QUERIES:
            driver_opts += f" {local_generations(settings['spark.driver.memory'])}"
    # Executors elsewhere than this machine keep their cluster's log settings: the file is here only.
    ahead = {"spark.driver.extraJavaOptions": (driver_opts, " "),
             "spark.executor.extraJavaOptions": (java_opts if local else limits, " ")}
    if local and not submitted():
        # On a local master the executors run in the driver's JVM, so every jar goes on its classpath, not in
        # spark.jars: Spark would copy each into a temporary folder of its own at every start (20 MB, 680 MB with
        # S3A's SDK bundle), left behind by a JVM that is killed, and their classes could not be in the class
        # archive (class_archive.py). The helper jar (its local file system class) and the object stores' file
        # systems lead: Hadoop loads a file system class from there. (spark-submit's JVM runs already, with its
        # --jars on that classpath.)
        leading = [jars.helper_jar(), *jars.helper_dependencies(), *jars.object_store_jars(locations)]
        ahead["spark.driver.extraClassPath"] = (os.pathsep.join(
            str(jar) for jar in dict.fromkeys([*leading, *jars.spark_jars(locations)])), os.pathsep)
    if catalog:  # the driver alone talks to the metastore
        classpath, separator = ahead.get("spark.driver.extraClassPath", ("", os.pathsep))
        ahead["spark.driver.extraClassPath"] = (separator.join(filter(None, [
            classpath, *map(str, metastore.client_classpath(caller))])), separator)
    for key, (ours, separator) in ahead.items():
        if separator == os.pathsep:  # a classpath: an entry once, where it first comes (the SQL server adds ours)
            entries = [*ours.split(separator), *caller.get(key, "").split(separator)]
            settings[key] = separator.join(dict.fromkeys(filter(None, entries)))
        else:
            settings[key] = separator.join(filter(None, [ours, caller.get(key)]))
    for key, value in settings.items():
        b = b.config(key, value)
    return b


def get_session(app_name: str = "ingest", master: str | None = None, conf: Mapping[str, str] | None = None,
                locations: Iterable[str] = (), pools: Iterable[str] = (),
                catalog: bool = False, record_classes: bool = False, pipelines: int = 1) -> SparkSession:
    """The session (`builder`'s settings), its JVM started here unless spark-submit started it. A local JVM
    starts with the class archive of its classpath when there is one; `record_classes`: else have this JVM
    record it at exit (`ingest run` does: class_archive.py)."""
    with _jvm_keeps_out_of_signals():
        session_builder = builder(app_name, master, conf, locations, pools, catalog, pipelines)
        if not submitted():  # spark-submit's JVM runs already, with its own output
            _launch_jvm(dict(session_builder._options), record_classes)
        else:  # a job packaged for another line, refused before its context starts (seconds, not half a minute)
            SparkContext._ensure_initialized()  # spark-submit's gateway: its settings, no context yet
            _check_submitted_line(pyspark.__version__, SparkConf().get("spark.jars", ""))
        spark = session_builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if submitted():
        _check_submitted_classpath(spark)
        if catalog:
            metastore.load_client_driver(spark, dict(conf or {}))
    return spark


def _launch_jvm(options: dict[str, str], record_classes: bool) -> None:
    """Start the local JVM, with the class archive of its classpath on a local master (class_archive.py)."""
    local = options.get("spark.master", "").startswith("local")
    step = class_archive.plan(options, record_classes) if local else None
    try:
        gateway = jvm_output.launch_gateway(class_archive.with_option(options, step))
    except PySparkRuntimeError:
        if step is None or not step.use:
            raise
        class_archive.discard(step)
        gateway, step = jvm_output.launch_gateway(options), None
    if gateway is not None:
        class_archive.started(step, gateway.proc.pid, gateway.jvm)


# Spark writes a streaming checkpoint's files (offsets, commits, metadata) to a temporary name and renames it; on S3A a
# rename is a copy and a delete, and the requests around them (HEAD, LIST) cost about 0.3 s a batch on a local S3
# server. Where every checkpoint of the session is in S3, the files are written in place with S3A's abortable
# streams instead (spark-hadoop-cloud's manager: an object appears whole when its stream closes, or not at all).
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
ABORTABLE_CHECKPOINTS = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"


def checkpoint_settings(configs: Sequence[PipelineConfig]) -> dict[str, str]:
    """The checkpoint file manager of a session whose checkpoints are all in S3 (unless a pipeline's `spark:`
    section chooses one)."""
    if not configs or any(CHECKPOINT_MANAGER in c.spark for c in configs):
        return {}
    if all(storage.scheme(c.checkpoint_path) in storage.S3_SCHEMES for c in configs):
        return {CHECKPOINT_MANAGER: ABORTABLE_CHECKPOINTS}
    return {}


def pipelines_session(app_name: str, configs: Sequence[PipelineConfig], pools: Iterable[str] = (),
                      catalog: bool | None = None, record_classes: bool = False, streams: int = 1) -> SparkSession:
    """The session of a command over these pipelines: their `spark:` settings, the jars their tables' and
    checkpoints' stores need, the persistent catalog when one of them names its tables (`sink.catalogTable`, a
    silver `catalogTable`) or `catalog` says so, and the FAIR `pools` to declare. `record_classes`: a run's JVM
    records its classpath's class archive when there is none (class_archive.py). `streams`: the streaming queries
    it will run, which size its default heap."""
    if catalog is None:
        catalog = any(c.catalog_names is not None or (c.silver is not None and c.silver.catalog_table)
                      for c in configs)
    _quiet_query_context_logs()
    return get_session(app_name, conf={**checkpoint_settings(configs), **{k: v for c in configs
                                                                          for k, v in c.spark.items()}},
                       locations=[location for c in configs for location in c.locations], pools=pools,
                       catalog=catalog, record_classes=record_classes, pipelines=streams)


def _quiet_query_context_logs() -> None:
    """PySpark logs every AnalysisException it raises, with its query context and the Java stack trace, as a JSON
    line of about 10 KB on stderr (`SQLQueryContextLogger`), before the exception reaches the command, which says
    it in one line. Off for the commands' sessions, unless the root logger is at DEBUG (`ingest -v`)."""
    from pyspark.logger import PySparkLogger

    level = logging.NOTSET if logging.getLogger().isEnabledFor(logging.DEBUG) else logging.CRITICAL + 1
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(level)


def get_catalog_session(app_name: str = "ingest", master: str | None = None, conf: Mapping[str, str] | None = None,
                        locations: Iterable[str] = (), catalog: bool = True) -> SparkSession:
    """`ingestion.get_session`: a session for analysts and jobs, with the persistent catalog on by default, so
    `spark.table("bronze.orders")` finds what `ingest onboard` or `ingest run` registered (docs/catalog.md)."""
    return get_session(app_name, master, conf, locations, catalog=catalog)


def submitted() -> bool:
    """Whether spark-submit started this process (and its JVM, with the classpath it was given)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


# A class of each jar a submitted job must be given with --jars (`ingest package` prints the list).
_SUBMITTED_CLASSES = {
    "Delta Lake (delta-spark)": "io.delta.tables.DeltaTable",
    "Spark's Kafka source (spark-sql-kafka-0-10)": "org.apache.spark.sql.kafka010.KafkaSourceProvider",
    "the ingest helper jar": "ingest.AvroBodyCheck",
}


def _check_submitted_classpath(spark: SparkSession) -> None:
    loader = spark._jvm.java.lang.Thread.currentThread().getContextClassLoader()  # type: ignore[union-attr]
    missing = []
    for jar, name in _SUBMITTED_CLASSES.items():
        try:
            spark._jvm.java.lang.Class.forName(name, False, loader)  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - py4j raises its own error type for a ClassNotFoundException
            missing.append(jar)
    if missing:
        raise JvmError(f"the spark-submit classpath lacks {', '.join(missing)}: pass the jars `ingest package` "
                       "lists with --jars (docs/cluster.md)")
    built_for = _delta_jar_line(spark, loader)
    running = ".".join(spark.version.split(".")[:2])
    if built_for is not None and built_for != running:
        raise JvmError(f"the job's Delta jar is built for Spark {built_for}, the cluster runs Spark {spark.version}: "
                       f"package the job with `ingest package --spark-version {running}` (docs/cluster.md#which-spark)")


def _check_submitted_line(running: str, submitted_jars: str) -> None:
    """Refuse a job whose Delta jar, as spark-submit's `--jars` name it, is built for another Spark line than the
    one running (`pyspark.__version__` is the cluster's own under spark-submit)."""
    match = re.search(r"delta-spark_(\d+\.\d+)_", submitted_jars)
    line = ".".join(running.split(".")[:2])
    if match and match.group(1) != line:
        raise JvmError(f"the job's Delta jar is built for Spark {match.group(1)}, the cluster runs Spark {running}: "
                       f"package the job with `ingest package --spark-version {line}` (docs/cluster.md#which-spark)")


def _delta_jar_line(spark: SparkSession, loader: object) -> str | None:
    """The Spark line of the delta-spark jar the driver loaded Delta from (`delta-spark_4.2_2.13-4.4.0.jar`), None
    where its name does not say (a cluster's own build of Delta)."""
    try:
        found = spark._jvm.java.lang.Class.forName(  # type: ignore[union-attr]
            "io.delta.tables.DeltaTable", False, loader).getProtectionDomain().getCodeSource().getLocation()
        match = re.search(r"delta-spark_(\d+\.\d+)_", str(found.toString()))
    except Exception:  # noqa: BLE001 - no code source (a class loader that keeps none): nothing to compare
        return None
    return match.group(1) if match else None


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
