"""The `ingest` command. Thin: parses arguments, calls the modules, prints. Exit 0 ok, 1 failure, 2 usage."""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingestion.errors import IngestionError, UsageError, one_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingestion.config import PipelineConfig

log = logging.getLogger("ingestion")

DESCRIPTION = """Land Kafka topics (Avro, Protobuf, JSON) in bronze Delta tables, exactly once; current-state
(silver) tables of CDC topics beside them.

Pipelines are YAML files in conf/pipelines/ (name them by file stem or path). Local state (the dev broker,
tables, checkpoints, the MLflow store, the JVM jars) lives in .ingest/ or $INGEST_HOME."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _logging(verbose=args.verbose)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        _failed(str(exc), exc, args.verbose)
        return 2
    except IngestionError as exc:
        return _failed(str(exc), exc, args.verbose)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - every failure ends in one line; the trace only with -v
        return _failed(f"{type(exc).__name__}: {one_line(exc)} (run with -v for the trace)", exc, args.verbose)


def _logging(*, verbose: bool) -> None:
    """Progress lines (INFO) on stdout, warnings and errors on stderr; debug and librdkafka's own lines with -v."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    formatter = logging.Formatter("%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    progress = logging.StreamHandler(sys.stdout)
    progress.addFilter(lambda record: record.levelno < logging.WARNING)
    problems = logging.StreamHandler(sys.stderr)
    problems.setLevel(logging.WARNING)
    for handler in (progress, problems):
        handler.setFormatter(formatter)
        handler.addFilter(_masked)
        root.addHandler(handler)
    for noisy in ("alembic", "mlflow", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # py4j logs, with a trace, every exception raised in a Python callback (foreachBatch, the listener); the
    # pipeline reports the cause itself in one line. Its DEBUG lines (every command sent to the JVM) drown -v.
    logging.getLogger("py4j").setLevel(logging.WARNING if verbose else logging.CRITICAL + 1)
    logging.getLogger("ingestion.librdkafka").setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)


def _masked(record: logging.LogRecord) -> bool:
    """A log record with every secret value of the loaded configs replaced by '***' (`security.mask`): no setting
    is logged on purpose, this is the last guard for what clients put in their messages."""
    from ingestion import security

    text = record.getMessage()
    shown = security.mask(text)
    if shown != text:
        record.msg, record.args = shown, None
    if record.exc_info and record.exc_info[1] is not None:
        import traceback

        record.exc_text = security.mask("".join(traceback.format_exception(*record.exc_info)).rstrip())
    return True


def _failed(message: str, exc: BaseException, verbose: bool) -> int:
    from ingestion import security

    if verbose:
        import traceback

        print(security.mask("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
    print(f"error: {security.mask(message)}", file=sys.stderr)
    return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingest", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    kafka = commands.add_parser("kafka", help="the local development Kafka broker (KRaft, 127.0.0.1)")
    kafka_cmds = kafka.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = kafka_cmds.add_parser("start", help="start it (or find it running); prints the bootstrap address")
    start.add_argument("--port", type=int, help="listener port (default: the previous one, else a free one)")
    secure_help = ("the secured broker (.ingest/kafka-secure/): SASL_SSL, SASL_PLAINTEXT and SSL (client "
                   "certificates) listeners, SCRAM and PLAIN users, ACLs")
    start.add_argument("--secure", action="store_true", help=secure_help)
    start.set_defaults(func=_kafka_start)
    stop = kafka_cmds.add_parser("stop", help="stop it by its pid")
    stop.add_argument("--secure", action="store_true", help=secure_help)
    stop.set_defaults(func=_kafka_stop)
    status = kafka_cmds.add_parser("status", help="pid, address and topics; exit 1 when not running")
    status.add_argument("--secure", action="store_true", help=secure_help)
    status.set_defaults(func=_kafka_status)

    run = commands.add_parser("run", help="run a pipeline (streams until stopped, or --available-now)")
    run.add_argument("pipeline", nargs="?",
                     help="pipeline name (conf/pipelines/<name>.yaml) or path to a YAML file")
    run.add_argument("--all", action="store_true",
                     help="run every pipeline in conf/pipelines/ in one Spark application, a query each")
    run.add_argument("--available-now", action="store_true",
                     help="process everything up to the latest offsets, in batches of maxOffsetsPerTrigger, "
                          "then exit 0")
    run.add_argument("--metrics-port", type=int, metavar="N",
                     help="serve Prometheus metrics on port N (over metrics.prometheus.port; 0: off)")
    run.set_defaults(func=_run)

    history = commands.add_parser("history", help="table versions with the Kafka offsets each one holds")
    history.add_argument("pipeline")
    history.add_argument("--json", action="store_true", help="one JSON document for scripts")
    _reader_option(history)
    history.set_defaults(func=_history)

    onboard = commands.add_parser("onboard", help="validate a pipeline config, check (or create) its topic, "
                                  "resolve its schema, print the bronze schema and create its tables; idempotent")
    onboard.add_argument("pipeline", nargs="?", help="pipeline name or path to its YAML file")
    onboard.add_argument("--all", action="store_true", help="every pipeline in conf/pipelines/ (every bad file is "
                         "reported, one line each, and then none is onboarded)")
    onboard.add_argument("--dry-run", action="store_true", help="check and print, change nothing")
    onboard.add_argument("--create-topic", action="store_true",
                         help="create the topic when missing (topicSettings: partitions, replicationFactor)")
    onboard.add_argument("--register-schemas", action="store_true",
                         help="register schemas/<subject>/*.avsc in value.registry, oldest first")
    onboard.set_defaults(func=_onboard)

    status = commands.add_parser("status", help="per partition: Kafka's end offset, the table's, lag in records "
                                 "and seconds, quarantined records; all pipelines when none is named")
    status.add_argument("pipeline", nargs="?")
    status.add_argument("--json", action="store_true", help="one JSON document for scripts")
    _reader_option(status)
    status.set_defaults(func=_status)

    report = commands.add_parser("report", help="plot lag and throughput per batch from the MLflow run to a PNG")
    report.add_argument("pipeline")
    report.add_argument("--run", help="MLflow run id (default: the pipeline's newest run)")
    report.add_argument("--output", help="PNG path (default: .ingest/reports/<pipeline>.png)")
    report.set_defaults(func=_report)

    sql = commands.add_parser(
        "sql", help="SQL over every pipeline's tables by name (sink.catalogTable, else <name>, <name>_quarantine); "
        "a SELECT / WITH query on them (VERSION AS OF n included) is answered by DuckDB without a JVM, in about a "
        "second; Spark SQL answers the rest (TIMESTAMP AS OF, other statements and tables, what DuckDB refuses)")
    sql.add_argument("query")
    sql.add_argument("--engine", choices=("auto", "duckdb", "spark"), default="auto",
                     help="auto (default): DuckDB where it can answer, else Spark; spark: Spark SQL's dialect and "
                          "semantics for every query; duckdb: fail rather than start a JVM")
    sql.add_argument("--output", help="write the result to a .parquet file (nested types intact) or a .csv file "
                                      "(nested values as JSON text) instead of printing it")
    sql.add_argument("--limit", type=int, default=100, help="rows to print (default 100)")
    sql.set_defaults(func=_sql)

    server = commands.add_parser("sql-server", help="Spark's Thrift JDBC/ODBC server on 127.0.0.1 over the catalog "
                                 "(beeline, PyHive, JDBC/ODBC clients); start (default), stop or status")
    server.add_argument("action", nargs="?", choices=("start", "stop", "status", "serve"), default="start",
                        help="start it in the background (default), stop it by its pid, show it, or serve in the "
                             "foreground")
    server.add_argument("--port", type=int, help="port (default: the previous one, else 10000 when free, else a "
                        "free one)")
    server.add_argument("--home", help=argparse.SUPPRESS)
    server.set_defaults(func=_sql_server)

    meta = commands.add_parser("metastore", help="the local persistent catalog's Derby server (127.0.0.1); it "
                               "starts by itself when a session needs it")
    meta.add_argument("action", choices=("start", "stop", "status"))
    meta.set_defaults(func=_metastore)

    replay = commands.add_parser("replay", help="read a Kafka range again and write only the records neither "
                                 "bronze nor quarantine holds (fills gaps; a no-op over ingested ranges)")
    replay.add_argument("pipeline")
    replay.add_argument("--from", dest="start", required=True,
                        help="earliest | partition:offset pairs like 0:100,1:250 | Spark's JSON form "
                        "'{\"orders\": {\"0\": 100}}' (replays the topics it names) | ISO time | epoch millis")
    replay.add_argument("--to", dest="end", default="latest",
                        help="same forms; offsets are exclusive ends as in Spark's endingOffsets (default latest)")
    replay.add_argument("--topic", help="replay this topic only, of a pipeline that reads several (needed for "
                        "partition:offset positions there)")
    replay.set_defaults(func=_replay)

    rewind = commands.add_parser("rewind", help="restore bronze and quarantine to an earlier version; the next "
                                 "`ingest run` resumes from that version's offsets with a new checkpoint")
    rewind.add_argument("pipeline")
    target = rewind.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-version", type=int)
    target.add_argument("--to-timestamp", help="ISO time; the newest version committed at or before it")
    rewind.set_defaults(func=_rewind)

    maintain = commands.add_parser("maintain", help="compact (OPTIMIZE), VACUUM and checkpoint a pipeline's tables; "
                                   "neither --optimize nor --vacuum: both")
    maintain.add_argument("pipeline", nargs="?", help="pipeline name or path to its YAML file")
    maintain.add_argument("--all", action="store_true", help="every pipeline in conf/pipelines/")
    maintain.add_argument("--optimize", action="store_true", help="bin-pack small files (maintenance.targetFileSize, "
                          "maintenance.zOrderBy)")
    maintain.add_argument("--vacuum", action="store_true", help="delete files no version inside "
                          "maintenance.vacuumRetention needs")
    maintain.add_argument("--dry-run", action="store_true", help="print files and bytes now and after, and the files "
                          "VACUUM would delete; write nothing")
    maintain.set_defaults(func=_maintain)

    verify = commands.add_parser("verify", help="audit bronze + quarantine against Kafka: duplicates, gaps, and "
                                 "which gaps Kafka explains; silver (if any) against bronze's fold, key by key; "
                                 "exit 1 on a real violation")
    verify.add_argument("pipeline")
    verify.add_argument("--json", action="store_true", help="one JSON document for scripts")
    _reader_option(verify)
    verify.set_defaults(func=_verify)

    silver = commands.add_parser("silver", help="the current-state table kept from bronze (the pipeline's silver: "
                                 "section): merge what bronze holds, rebuild it, show where it stands")
    s_cmds = silver.add_subparsers(dest="action", required=True, metavar="ACTION")
    s_run = s_cmds.add_parser("run", help="merge every bronze version silver does not hold yet, then exit (ingest "
                              "run does this itself; this runs silver alone)")
    s_run.add_argument("pipeline")
    s_run.set_defaults(func=_silver_run)
    s_rebuild = s_cmds.add_parser("rebuild", help="recompute silver from bronze's rows (whole), or put back its "
                                  "state at a bronze version and merge what bronze committed after it")
    s_rebuild.add_argument("pipeline")
    s_rebuild.add_argument("--from-version", type=int, metavar="N", help="start from silver's state at bronze "
                           "version N (its newest commit at or before N) instead of from nothing")
    s_rebuild.set_defaults(func=_silver_rebuild)
    s_status = s_cmds.add_parser("status", help="silver's bronze version, lag, rows and its last steps")
    s_status.add_argument("pipeline")
    s_status.add_argument("--json", action="store_true", help="one JSON document for scripts")
    s_status.set_defaults(func=_silver_status)

    quarantine = commands.add_parser("quarantine", help="records that could not be decoded: list, show, re-decode")
    q_cmds = quarantine.add_subparsers(dest="action", required=True, metavar="ACTION")
    q_list = q_cmds.add_parser("list", help="counts per error class and partition")
    q_list.add_argument("pipeline")
    _reader_option(q_list)
    q_list.set_defaults(func=_quarantine_list)
    q_show = q_cmds.add_parser("show", help="the quarantined records themselves")
    q_show.add_argument("pipeline")
    q_show.add_argument("--limit", type=int, default=20, help="at most this many records (default 20)")
    q_show.add_argument("--error-class", help="only records that failed with this error class")
    _reader_option(q_show)
    q_show.set_defaults(func=_quarantine_show)
    q_redo = q_cmds.add_parser("reprocess", help="re-decode with the current schemas; what decodes moves to "
                               "bronze exactly once, what still fails stays with its new error")
    q_redo.add_argument("pipeline")
    q_redo.set_defaults(func=_quarantine_reprocess)

    demo = commands.add_parser("demo", help="broker + sample topic + sample records + one ingestion + summary; "
                               "works in any folder (without conf/pipelines/orders.yaml, the pipeline and schema "
                               "come with the package)")
    demo.add_argument("--records", type=int, default=10_000, help="sample records to produce (default 10000)")
    demo.add_argument("--keep-servers", "--keep-broker", dest="keep_servers", action="store_true",
                      help="leave the servers it started (the broker, the catalog's Derby server) running afterwards; "
                      "by default it stops them and leaves running only what it found running")
    demo.set_defaults(func=lambda a: _lazy("ingestion.dev.demo", "run_demo")(records=a.records,
                                                                           keep_servers=a.keep_servers))

    jars = commands.add_parser("jars", help="resolve the JVM jars (Delta, Spark Kafka source, broker) via Maven; "
                          "build the helper jar")
    jars.set_defaults(func=_jars)

    laid_out = ("lay out a new project folder: conf/defaults.yaml (shared settings), conf/pipelines/, schemas/ and "
                "a .gitignore for the state folder .ingest/; an existing file is never overwritten")
    new = commands.add_parser("new", help=laid_out, description=laid_out + ". Then: ingest init <topic> writes "
                              "conf/pipelines/<name>.yaml (docs/operations.md#a-new-project).")
    new.add_argument("folder", nargs="?", default=".", help="the project folder, made if missing (default: here)")
    new.set_defaults(func=_new)

    init = commands.add_parser(
        "init", help="write conf/pipelines/<name>.yaml for each topic from what the broker and the registry (or "
        "schemas/) know: partitions, the <topic>-value subject, an Avro key when <topic>-key exists; files "
        "inherit conf/defaults.yaml; an existing file is never overwritten")
    init.add_argument("topic", nargs="+", help="Kafka topics to write pipeline files for")
    init.add_argument("--dry-run", action="store_true", help="print the files, write nothing")
    init.set_defaults(func=_init)

    package = commands.add_parser(
        "package", help="a job for a Spark cluster: the package zip, the spark-submit entry script and the jars in "
        "one folder, and the spark-submit line that runs a command with them (docs/cluster.md)")
    package.add_argument("pipeline", nargs="*", help="pipelines the job will run: their tables' stores choose the "
                         "file system jars (S3A for s3a://); default: every pipeline in conf/pipelines/, if any")
    package.add_argument("--out", default="dist", help="the folder to write (default: dist)")
    package.add_argument("--master", default="spark://HOST:7077", help="the master in the printed spark-submit line")
    package.set_defaults(func=_package)
    return parser


def _reader_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--reader", choices=("delta-rs", "spark"), default="delta-rs",
                         help="how the tables are read: delta-rs, without a JVM (default; Spark is used anyway, "
                              "with a warning, for a table delta-rs cannot read), or a Spark session")


def _lazy(module: str, name: str) -> Callable[..., int]:
    import importlib

    return getattr(importlib.import_module(module), name)


def _kafka_start(args: argparse.Namespace) -> int:
    from ingestion.dev.broker import Broker

    broker = Broker.default(secure=args.secure)
    print(broker.start(port=args.port))
    if args.secure:
        from ingestion.dev.secure import describe

        print(describe(broker.security))
    return 0


def _kafka_stop(args: argparse.Namespace) -> int:
    from ingestion.dev.broker import Broker

    print("stopped" if Broker.default(secure=args.secure).stop() else "not running")
    return 0


def _kafka_status(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    from ingestion.dev.broker import Broker

    broker = Broker.default(secure=args.secure)
    pid = broker.pid()
    if pid is None:
        print(f"not running (folder {broker.home})")
        return 1
    servers = broker.bootstrap_servers() or ""
    settings: dict[str, Any] = {**broker.admin_settings(), "logger": log}
    topics = AdminClient(settings).list_topics(timeout=10).topics
    print(f"running: pid {pid}, bootstrap {servers}, folder {broker.home}")
    for name, meta in sorted(topics.items()):
        if not name.startswith("__"):
            print(f"  topic {name}: {len(meta.partitions)} partitions")
    return 0


def _run(args: argparse.Namespace) -> int:
    from ingestion.stream import prometheus

    if args.all == bool(args.pipeline):
        raise UsageError("name one pipeline, or pass --all")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise IngestionError(f"--metrics-port must be a TCP port (0: off), got {args.metrics_port}")
    configs = _all_valid() if args.all else [_load(args.pipeline)]
    exporter = prometheus.exporter_for(configs, port=args.metrics_port, available_now=args.available_now)
    try:
        code = _run_pipelines(args, configs, exporter)
        gateway = configs[0].metrics.prometheus.pushgateway
        if exporter is not None and args.available_now and gateway:
            exporter.push(gateway, prometheus.push_instance(configs))
        return code
    finally:
        if exporter is not None:
            exporter.close()


def _run_pipelines(args: argparse.Namespace, configs: list[PipelineConfig], exporter: Any) -> int:
    from ingestion.stream import early, metrics, pipeline

    if args.all:
        contexts = pipeline.check_all_can_start(configs)
        if args.available_now:
            positions = pipeline.all_caught_up(contexts)
            done = [c for c, at in zip(contexts, positions, strict=True) if at is not None]
            for ctx in done:
                print(f"{ctx.name}: caught up, nothing to do")
            contexts = [c for c in contexts if c not in done]
            if not contexts:
                return 0
            if all(early.fits(c) for c in contexts):  # start batches read it all: perhaps no JVM at all
                metrics.open_store_early()
                contexts = _finished_without_jvm(contexts, exporter, write=True)
                if not contexts:
                    return 0
        metrics.open_store_early()  # while the JVM boots
        configs = [c.config for c in contexts]
        session_ready = threading.Event()
        with _meanwhile(lambda: early.prepare_all(contexts, session_ready)) as prepared:
            spark = _session("ingest-all", configs, pools=[pipeline.pool_name(c) for c in configs],
                             record_classes=True,
                             streams=sum(1 + (c.silver is not None) for c in configs))
            session_ready.set()
            prepared.result()
        if args.available_now:
            contexts = _finished_without_jvm(contexts, exporter, write=False)
        outcome = pipeline.run_all(spark, contexts, available_now=args.available_now, exporter=exporter) \
            if contexts else {}
        for name, ended in outcome.items():
            print(f"{name}: {ended}")
        return 1 if any(o.status is pipeline.RunStatus.FAILED for o in outcome.values()) else 0
    (config,) = configs
    ctx = pipeline.check_can_start(config)  # before anything is created or a JVM boots: Kafka, the topics, the lock
    if args.available_now and (reached := pipeline.caught_up(ctx)) is not None:
        where = ", ".join(f"{t}/{p}:{o}" for t, parts in sorted(reached.items()) for p, o in sorted(parts.items()))
        log.info("%s: caught up, nothing to do (the table holds every committed record before %s); no Spark "
                 "session started", config.name, where)
        return 0
    if args.available_now and early.fits(ctx):  # one start batch reads it all: perhaps no JVM at all
        metrics.open_store_early()  # while the batch is written
        early.prepare(ctx)
        if (batch := pipeline.finish_without_jvm(ctx, exporter)) is not None:
            log.info("%s: done, 1 batch, %d rows written; no Spark session started", config.name, batch.rows)
            return 0
    metrics.open_store_early()  # while the JVM boots
    with _meanwhile(lambda: early.prepare(ctx)) as prepared:  # schemas, tables and the start batch, without a JVM
        spark = _session(f"ingest-{config.name}", [config], record_classes=True)
        prepared.result()
    running = pipeline.run(spark, ctx, available_now=args.available_now, exporter=exporter)
    rows = sum(b.rows for b in running.batches if b.committed)
    how = "stopped on request" if running.stopped_on_request else "done"
    log.info("%s: %s, %d batches, %d rows written", config.name, how, len(running.batches), rows)
    return 0


def _finished_without_jvm(contexts: list[Any], exporter: Any, *, write: bool) -> list[Any]:
    """Of an available-now `run --all`'s pipelines, those whose start batch (written here first with `write`)
    has not caught them up; the others are reported done."""
    from ingestion.stream import pipeline

    left = []
    for ctx, batch in zip(contexts, pipeline.finish_all_without_jvm(contexts, exporter, write=write), strict=True):
        if batch is None:
            left.append(ctx)
        else:
            print(f"{ctx.name}: finished, {batch.rows} rows, no Spark session needed")
    return left


@contextlib.contextmanager
def _meanwhile(work: Callable[[], Any]) -> Iterator[concurrent.futures.Future[Any]]:
    """`work` on a thread while the caller's block runs (a JVM boots in the main thread, which alone may set the
    signal dispositions the JVM keeps); its result, or its error, from the future the block waits on."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="meanwhile") as pool:
        yield pool.submit(work)


def _all_valid() -> list[PipelineConfig]:
    """Every pipeline file of conf/pipelines/; when any is bad, one line per bad file and an IngestionError (no
    pipeline runs: a typo must not leave a pipeline silently stopped)."""
    from ingestion.config import load_all

    configs, errors = load_all()
    for config in configs:
        _remember_secrets(config)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if errors:
        raise IngestionError(f"{len(errors)} pipeline file(s) are wrong (listed above); nothing was started")
    if not configs:
        raise IngestionError("no pipeline files in conf/pipelines/")
    return configs


def _load(name: str | Path) -> PipelineConfig:
    """The pipeline config by name or path, its secrets registered for masking before anything prints."""
    from ingestion.config import load_pipeline

    return _remember_secrets(load_pipeline(name))


def _remember_secrets(config: PipelineConfig) -> PipelineConfig:
    from ingestion import security

    security.remember(config.secret_values())
    return config


def _history(args: argparse.Namespace) -> int:
    from ingestion.ops import history

    config = _load(args.pipeline)
    if args.json:
        print(history.to_json(_read_only(args, lambda reader: history.history(reader, config), config)))
        return 0
    records, restorable = _read_only(args, lambda reader: (history.history(reader, config),
                                                            history.restorable(reader, config)), config)
    print(history.render(records))
    print(restorable)
    return 0


def _read_only(args: argparse.Namespace, answer: Callable[[Any], Any], config: PipelineConfig) -> Any:
    """A read-only command's answer through delta-rs (or through Spark when delta-rs cannot read a table), or
    through Spark with `--reader spark`."""
    from ingestion.delta.reads import SparkReader
    from ingestion.ops.readers import without_jvm

    def session() -> SparkSession:
        return _session(f"ingest-{config.name}", [config])

    if args.reader == "spark":
        return answer(SparkReader(session()))
    return without_jvm(answer, session, config.storage_options())


def _session(app_name: str, configs: Sequence[PipelineConfig], pools: Sequence[str] = (),
             catalog: bool | None = None, record_classes: bool = False, streams: int = 1) -> SparkSession:
    """The Spark session of a command over these pipelines: their `spark:` settings, the jars their tables'
    and checkpoints' stores need, the persistent catalog when one of them names its tables
    (`sink.catalogTable`) or `catalog` says so, and the FAIR `pools` to declare. `record_classes`: a run's JVM
    records its classpath's class archive when there is none (runtime/class_archive.py). `streams`: the
    streaming queries it will run, which size its default heap."""
    from ingestion.runtime.session import get_session

    if catalog is None:
        catalog = any(c.catalog_names is not None or (c.silver is not None and c.silver.catalog_table)
                      for c in configs)
    return get_session(app_name, conf={k: v for c in configs for k, v in c.spark.items()},
                       locations=[location for c in configs for location in c.locations], pools=pools,
                       catalog=catalog, record_classes=record_classes, pipelines=streams)


def _pipeline_session(name: str) -> tuple[PipelineConfig, SparkSession]:

    config = _load(name)
    return config, _session(f"ingest-{config.name}", [config])


def _onboard(args: argparse.Namespace) -> int:
    from ingestion.ops.onboard import check_kafka, onboard
    from ingestion.runtime import metastore
    from ingestion.schema.registry import check_registry

    if args.all == bool(args.pipeline):
        raise UsageError("name one pipeline, or pass --all")
    configs = _all_valid() if args.all else [_load(args.pipeline)]
    contexts = []
    for config in configs:  # Kafka and the registry first: a refusal is told in seconds, before a JVM boots
        contexts.append(check_kafka(config, create_topic=args.create_topic))
        check_registry(config, subject_may_be_missing=args.register_schemas)
    # A dry run starts nothing: without the local catalog's Derby server running, catalog names are not checked.
    unchecked = args.dry_run and any(c.catalog_names is not None and not metastore.uses_external(c.spark)
                                     for c in configs) and metastore.running() is None
    sessions: list[SparkSession] = []

    def session() -> SparkSession:  # only when a step needs a JVM (catalog names, what delta-rs cannot do)
        if not sessions:
            sessions.append(_session("ingest-onboard", configs, catalog=False if unchecked else None))
        return sessions[0]

    for ctx in contexts:
        report = onboard(session, ctx, dry_run=args.dry_run, create_topic=args.create_topic,
                         register_schemas=args.register_schemas)
        print("\n".join(report.lines))
    if unchecked:
        print("catalog names not checked against the local catalog: its Derby server is not running, and a dry run "
              "starts nothing (`ingest metastore start` first to have them checked)")
    return 0


def _status(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ingestion.ops import status
    from ingestion.stream import context

    configs = [_load(args.pipeline)] if args.pipeline else _all_valid()
    found = [_read_only(args, functools.partial(_status_of, ctx=context.resolve(c)), c) for c in configs]
    if args.json:
        print(json.dumps([asdict(s) for s in found], indent=2))
    else:
        print("\n\n".join(status.render(s) for s in found))
    return 0


def _status_of(reader: Any, *, ctx: Any) -> Any:
    from ingestion.ops import status

    return status.pipeline_status(reader, ctx)


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ingestion.ops import report
    from ingestion.paths import state_dir

    config = _load(args.pipeline)
    output = Path(args.output) if args.output else state_dir() / "reports" / f"{config.name}.png"
    print(report.write_png(config, output, args.run))
    return 0


def _sql(args: argparse.Namespace) -> int:
    from ingestion.config import list_pipelines
    from ingestion.ops import sql_query

    if args.output and Path(args.output).suffix not in (".csv", ".parquet"):
        raise UsageError(f"--output must end in .csv or .parquet, got {args.output!r}")
    configs = [_load(p) for p in list_pipelines()]
    if args.engine != "spark":
        try:
            return _sql_result(sql_query.duckdb_answer(args.query, configs), args)
        except sql_query.NotForDuckDB as why:
            if args.engine == "duckdb":
                raise IngestionError(f"DuckDB cannot answer this query ({why}); --engine spark or auto does") from None
            log.info("Spark SQL answers: %s", why)
    from ingestion.ops import catalog  # Spark's side: imported only when Spark answers

    spark = _session("ingest-sql", configs, catalog=True)
    tables = catalog.register(spark, configs)
    log.debug("tables: %s", tables)
    try:
        result = spark.sql(args.query)
        return _sql_result(result.toArrow() if args.output else result.limit(args.limit).toArrow(), args)
    except Exception as exc:
        gone = catalog.time_travel_failure(spark, tables, args.query, exc)
        if gone is not None:
            raise gone from None
        raise


def _sql_result(result: Any, args: argparse.Namespace) -> int:
    """Print or write a pyarrow table."""
    from ingestion.ops import sql_query

    if args.output:
        out = Path(args.output)
        sql_query.write(result, out)
        print(f"{result.num_rows} rows written to {out}")
        return 0
    print(sql_query.render(result.slice(0, args.limit)))
    return 0


def _maintain(args: argparse.Namespace) -> int:
    from ingestion.ops.maintain import maintain

    if args.all == bool(args.pipeline):
        raise UsageError("name one pipeline, or pass --all")
    configs = _all_valid() if args.all else [_load(args.pipeline)]
    both = not args.optimize and not args.vacuum
    spark = _session("ingest-maintain", configs)
    for config in configs:
        report = maintain(spark, config, optimize=both or args.optimize, vacuum=both or args.vacuum,
                          dry_run=args.dry_run)
        print("\n".join(report.lines))
    return 0


def _sql_server(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ingestion.ops import sql_server

    server = sql_server.SqlServer(Path(args.home)) if args.home else sql_server.SqlServer.default()
    if args.action == "serve":
        from ingestion.config import load_all

        configs, errors = load_all()
        for error in errors:  # a bad file costs its pipeline's names, not the server
            log.warning("not serving: %s", error)
        sql_server.serve(configs, args.port or sql_server.DEFAULT_PORT)
        return 0
    if args.action == "stop":
        pid = server.stop()
        print(f"stopped (pid {pid})" if pid else "not running")
        return 0
    if args.action == "status":
        found = server.running()
        if found is None:
            print(f"not running (folder {server.home})")
            return 1
        print(f"running: pid {found[0]}, jdbc:hive2://127.0.0.1:{found[1]}/default, log {server.log_file}")
        return 0
    pid, port = server.start(port=args.port)
    print(f"running: pid {pid}, jdbc:hive2://127.0.0.1:{port}/default (stop: ingest sql-server stop)")
    return 0


def _metastore(args: argparse.Namespace) -> int:
    from ingestion.runtime import metastore

    if args.action == "start":
        port = metastore.start()
        print(f"running: jdbc:derby://127.0.0.1:{port}/metastore_db, folder {metastore.home()}")
    elif args.action == "stop":
        pid = metastore.stop()
        print(f"stopped (pid {pid})" if pid else "not running")
    else:
        found = metastore.running()
        if found is None:
            print(f"not running (folder {metastore.home()})")
            return 1
        print(f"running: pid {found[0]}, jdbc:derby://127.0.0.1:{found[1]}/metastore_db, folder {metastore.home()}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from ingestion.ops import replay
    from ingestion.stream import context

    config = _load(args.pipeline)
    ctx = context.resolve(config)
    replay.check_positions(ctx, args.topic, args.start, args.end)  # a wrong topic or position: before a JVM
    spark = _session(f"ingest-{config.name}", [config])
    r = replay.replay(spark, ctx, start=args.start, end=args.end, topic=args.topic)
    print(f"{r.read} records read, {r.already_present} already present, {r.written} written to bronze, "
          f"{r.quarantined} quarantined (bronze version {r.bronze_version})")
    return 0


def _rewind(args: argparse.Namespace) -> int:
    import datetime as dt

    from ingestion.ops import rewind

    config, spark = _pipeline_session(args.pipeline)
    when = dt.datetime.fromisoformat(args.to_timestamp) if args.to_timestamp else None
    r = rewind.rewind(spark, config, to_version=args.to_version, to_timestamp=when)
    print(rewind.render(r, args.pipeline))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from ingestion.ops import verify
    from ingestion.stream import context

    ctx = context.resolve(_load(args.pipeline))
    result = _read_only(args, lambda reader: verify.audit(reader, ctx), ctx.config)
    if ctx.config.silver is None:
        print(json.dumps(result.to_json(), indent=2) if args.json else verify.render(result))
        return 0 if result.ok else 1
    from ingestion.silver import audit

    found = audit.audit(_session(f"ingest-{ctx.name}", [ctx.config]), ctx.config)
    if args.json:
        print(json.dumps({**result.to_json(), "silver": found.to_json()}, indent=2))
    else:
        print(verify.render(result))
        print(audit.render(found))
    return 0 if result.ok and found.ok else 1


def _silver(args: argparse.Namespace) -> Any:
    """The pipeline's silver follower, under the pipeline's writer lock (no run of it may write meanwhile)."""
    from ingestion.errors import ConfigError
    from ingestion.silver.follower import SilverFollower

    config, spark = _pipeline_session(args.pipeline)
    if config.silver is None:
        raise ConfigError(f"{config.file}: pipeline {config.name!r} has no 'silver' section (docs/cdc.md)")
    return SilverFollower(spark, config)


def _locked(follower: Any, work: Callable[[], Any]) -> Any:
    from ingestion.stream.lock import WriterLock

    lock = WriterLock(follower.config.name, follower.config.checkpoint_path, follower.session)
    lock.acquire()
    try:
        return work()
    finally:
        lock.release()


def _silver_run(args: argparse.Namespace) -> int:
    follower = _silver(args)
    follower.prepare()
    steps = _locked(follower, follower.drain)
    at = follower.current()
    print(f"silver {follower.spec.path}: {steps} step(s), at bronze version "
          f"{at.bronze_version if at else 'none (bronze has no table yet)'}")
    return 0


def _silver_rebuild(args: argparse.Namespace) -> int:
    follower = _silver(args)
    follower.prepare()

    def rebuild() -> Any:
        if args.from_version is not None:
            follower.restore(args.from_version)
        else:
            follower.rebuild(reason="ingest silver rebuild")
        follower.drain()
        return follower.current()

    at = _locked(follower, rebuild)
    print(f"silver {follower.spec.path}: rebuilt, at bronze version {at.bronze_version} (epoch {at.epoch})")
    return 0


def _silver_status(args: argparse.Namespace) -> int:
    from ingestion.silver import ledger

    follower = _silver(args)
    found = ledger.records(follower.session, follower.spec.path, limit=50)
    at = follower.current()
    lag = follower.lag()
    rows = follower.table.read().count() if follower.table.exists() else 0
    cross = sum(r.cross_partition_keys for _, r in found)
    out = {"pipeline": follower.spec.pipeline, "table": follower.spec.path, "mode": follower.spec.mode,
           "bronze_version": at.bronze_version if at else None, "epoch": at.epoch if at else None, "rows": rows,
           "lag_versions": lag.versions, "lag_seconds": round(lag.seconds, 1),
           "cross_partition_keys": cross,
           "steps": [{"version": v, **{k: str(x) if k == "kind" else x for k, x in vars(r).items()}}
                     for v, r in found[:10]]}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if at is None:
        print(f"silver {follower.spec.path}: no table yet (ingest run {follower.spec.pipeline})")
        return 0
    print(f"silver {follower.spec.path} ({follower.spec.mode}): {rows:,} rows at bronze version {at.bronze_version} "
          f"(epoch {at.epoch}), lag {lag.versions} bronze versions ({lag.seconds:.0f}s)")
    if cross:
        print(f"  {cross} keys had changes in two or more Kafka partitions in the last steps: Kafka orders none of "
              f"them (set silver.sequenceBy to a field that does)")
    for version, r in found[:10]:
        print(f"  version {version}: {r.kind} bronze {r.bronze_from + 1}-{r.bronze_version}, {r.changes:,} changes, "
              f"{r.inserted:,} inserted, {r.updated:,} updated, {r.deleted:,} deleted")
    return 0


def _quarantine_list(args: argparse.Namespace) -> int:
    from ingestion.ops import quarantine

    config = _load(args.pipeline)
    found = _read_only(args, lambda reader: quarantine.groups(reader, config), config)
    print(quarantine.render_groups(found, config.quarantine_path))
    return 0


def _quarantine_show(args: argparse.Namespace) -> int:
    from ingestion.ops import quarantine

    config = _load(args.pipeline)
    found, present = _read_only(args, lambda reader: (
        quarantine.records(reader, config, limit=args.limit, error_class=args.error_class),
        quarantine.groups(reader, config) if args.error_class else []), config)
    if args.error_class and not found:
        classes = sorted({g.error_class for g in present})
        print(f"no quarantined records of error class {args.error_class!r}; "
              + (f"the classes quarantined now: {', '.join(classes)}" if classes else "the quarantine is empty"))
        return 1 if classes else 0
    print(quarantine.render_records(found))
    return 0


def _quarantine_reprocess(args: argparse.Namespace) -> int:
    from ingestion.ops import quarantine
    from ingestion.stream import context

    ctx = context.resolve(_load(args.pipeline))
    spark = _session(f"ingest-{ctx.name}", [ctx.config])
    r = quarantine.redecode(spark, ctx)
    print(quarantine.render_redecode(r))
    return 0


def _new(args: argparse.Namespace) -> int:
    from ingestion.ops import project

    folder = Path(args.folder)
    for placed in project.lay_out(folder):
        state = "made" if placed.made else "exists, left as it is"
        print(f"{placed.path}{'/' if placed.path.is_dir() else ''}: {state}")
    where = "" if folder.resolve() == Path.cwd() else f"cd {folder}; "
    print(f"next: {where}ingest kafka start (or set KAFKA_BOOTSTRAP_SERVERS in conf/defaults.yaml), then "
          "ingest init <topic> for each topic")
    return 0


def _init(args: argparse.Namespace) -> int:
    from ingestion.ops import init

    failed = 0
    drafts = []
    for topic in args.topic:
        try:
            drafts.append(init.draft(topic))
        except IngestionError as exc:
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
    for draft in drafts:
        if args.dry_run:
            print(f"# {draft.path}\n{draft.text}")
    written = [] if args.dry_run else init.write(drafts)
    for draft in drafts:
        if not args.dry_run:
            print(f"{draft.path}: {'written' if draft.path in written else 'exists, left as it is'}")
    if written:
        print(f"next: ingest onboard <name> for each, or ingest onboard --all ({len(written)} new)")
    return 1 if failed else 0


def _package(args: argparse.Namespace) -> int:
    from ingestion.config import load_all
    from ingestion.ops import package

    configs = [_load(name) for name in args.pipeline] if args.pipeline else load_all()[0]
    bundle = package.build(Path(args.out), [location for c in configs for location in c.locations])
    print(f"{bundle.archive}: the ingestion package, for --py-files")
    print(f"{bundle.entry}: the main file for spark-submit; {len(bundle.jars)} jars in {bundle.jars[0].parent}")
    pipeline = args.pipeline[0] if len(args.pipeline) == 1 else "PIPELINE.yaml"
    print("run a pipeline on the cluster (its Python packages on every node, docs/cluster.md):")
    print("  " + package.shell_line(bundle.submit_command(args.master, ["run", pipeline])))
    return 0


def _jars(args: argparse.Namespace) -> int:
    from ingestion.runtime import jars

    for artifacts in jars.ALL_SETS:
        print(f"{artifacts.name}: {len(jars.resolve(artifacts))} jars in {artifacts.folder(jars.jar_cache())}")
    print(f"helper: {jars.helper_jar()}")
    return 0

