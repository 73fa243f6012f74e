"""The `ingest` argument parser: every command, its options and help. A command's function is named here by
module and name and imported only when it runs, so `ingest --help` and the light commands import nothing heavy."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from ingestion import positions
from ingestion.errors import UsageError
from ingestion.units import TIME_FORMS, parse_time, version_or_time

if TYPE_CHECKING:
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

DESCRIPTION = """Land Kafka topics (Avro, Protobuf, JSON) in bronze Delta tables, exactly once; current-state
(silver) tables of CDC topics beside them.

Pipelines are YAML files in conf/pipelines/ (name them by file stem or path). Local state (the dev broker,
tables, checkpoints, the MLflow store, the JVM jars) lives in .ingest/ or $INGEST_HOME."""

PIPELINE_HELP = "pipeline name (conf/pipelines/<name>.yaml) or path to a YAML file"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingest", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_kafka(commands)
    _add_run(commands)
    _add_history(commands)
    _add_onboard(commands)
    _add_status(commands)
    _add_report(commands)
    _add_sql(commands)
    _add_sql_server(commands)
    _add_metastore(commands)
    _add_replay(commands)
    _add_rewind(commands)
    _add_maintain(commands)
    _add_verify(commands)
    _add_silver(commands)
    _add_quarantine(commands)
    _add_shadow(commands)
    _add_demo(commands)
    _add_jars(commands)
    _add_new(commands)
    _add_init(commands)
    _add_package(commands)
    _finish_subcommands(parser)
    return parser


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` were parsed for: the one whose usage a mistake in them shows."""
    current = parser
    while True:
        subs = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, subs.dest, None) if subs is not None else None
        if subs is None or chosen not in subs.choices:
            return current
        current = subs.choices[chosen]


def _finish_subcommands(parser: argparse.ArgumentParser) -> None:
    """What every subcommand has: its line of the listing above it as the head of its own `--help` (unless it has
    a description of its own), and `-v` after the command as well as before it (`ingest run orders -v`, as users
    type it), which leaves the top level's value alone when not given."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.description is None and listed.get(name):
                    sub.description = listed[name]
                sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                                 help="debug logging, and the trace of a failure")
                _finish_subcommands(sub)


def _lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command function `name` of `ingestion.cli.commands.<module>`, imported when the command runs; it
    carries the function's module and name (the tests check that each one exists)."""
    path = f"ingestion.cli.commands.{module}"

    def command(args: argparse.Namespace) -> int:
        function: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(path), name)
        return function(args)

    command.__module__, command.__name__, command.__qualname__ = path, name, name
    return command


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse` as an argparse type: its ValueError's or UsageError's message (naming the value and what is
    allowed) becomes argparse's error after the option's name, exit 2, before anything starts."""

    def checked(text: str) -> Any:
        try:
            return parse(text)
        except (ValueError, UsageError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    checked.__name__ = parse.__name__
    return checked


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of `minimum` or more (a count: 1, a table version: 0)."""

    def whole_number(text: str) -> int:
        if not text.strip().isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {minimum} or more")
        return int(text)

    return whole_number


COUNT, VERSION = _at_least(1), _at_least(0)


def _version_or_time(text: str) -> str:
    """A table version or a time, checked (`units.version_or_time`); the command reads the text itself."""
    version_or_time(text)
    return text


def _reader_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--reader", choices=("delta-rs", "spark"), default="delta-rs",
                         help="how the tables are read: delta-rs, without a JVM (default; Spark is used anyway, "
                              "with a warning, for a table delta-rs cannot read), or a Spark session")


def _add_kafka(commands: Commands) -> None:
    kafka = commands.add_parser("kafka", help="the local development Kafka broker (KRaft, 127.0.0.1)")
    kafka_cmds = kafka.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = kafka_cmds.add_parser("start", help="start it (or find it running); prints the bootstrap address")
    start.add_argument("--port", type=int, help="listener port (default: the previous one, else a free one)")
    secure_help = ("the secured broker (.ingest/kafka-secure/): SASL_SSL, SASL_PLAINTEXT and SSL (client "
                   "certificates) listeners, SCRAM and PLAIN users, ACLs")
    start.add_argument("--secure", action="store_true", help=secure_help)
    start.set_defaults(func=_lazy("kafka_command", "kafka_start"))
    stop = kafka_cmds.add_parser("stop", help="stop it by its pid")
    stop.add_argument("--secure", action="store_true", help=secure_help)
    stop.set_defaults(func=_lazy("kafka_command", "kafka_stop"))
    status = kafka_cmds.add_parser("status", help="pid, address and topics; exit 1 when not running")
    status.add_argument("--secure", action="store_true", help=secure_help)
    status.set_defaults(func=_lazy("kafka_command", "kafka_status"))


def _add_run(commands: Commands) -> None:
    run = commands.add_parser("run", help="run a pipeline (streams until stopped, or --available-now)")
    run.add_argument("pipeline", nargs="?", help=PIPELINE_HELP)
    run.add_argument("--all", action="store_true",
                     help="run every pipeline in conf/pipelines/ in one Spark application, a query each")
    run.add_argument("--available-now", action="store_true",
                     help="process everything up to the latest offsets, in batches of maxOffsetsPerTrigger, "
                          "then exit 0")
    run.add_argument("--metrics-port", type=int, metavar="N",
                     help="serve Prometheus metrics on port N (over metrics.prometheus.port; 0: off)")
    run.set_defaults(func=_lazy("run_command", "run"))


def _add_history(commands: Commands) -> None:
    history = commands.add_parser("history", help="table versions with the Kafka offsets each one holds")
    history.add_argument("pipeline", help=PIPELINE_HELP)
    history.add_argument("--json", action="store_true", help="one JSON document for scripts")
    _reader_option(history)
    history.set_defaults(func=_lazy("read_command", "show_history"))


def _add_onboard(commands: Commands) -> None:
    onboard = commands.add_parser("onboard", help="validate a pipeline config, check (or create) its topic, "
                                  "resolve its schema, print the bronze schema and create its tables; idempotent")
    onboard.add_argument("pipeline", nargs="?", help=PIPELINE_HELP)
    onboard.add_argument("--all", action="store_true", help="every pipeline in conf/pipelines/ (every bad file is "
                         "reported, one line each, and then none is onboarded)")
    onboard.add_argument("--dry-run", action="store_true", help="check and print, change nothing")
    onboard.add_argument("--create-topic", action="store_true",
                         help="create the topic when missing (topicSettings: partitions, replicationFactor)")
    onboard.add_argument("--register-schemas", action="store_true",
                         help="register schemas/<subject>/*.avsc in value.registry, oldest first")
    onboard.set_defaults(func=_lazy("onboard_command", "onboard_pipelines"))


def _add_status(commands: Commands) -> None:
    status = commands.add_parser("status", help="per partition: Kafka's end offset, the table's, lag in records "
                                 "and seconds, quarantined records; all pipelines when none is named")
    status.add_argument("pipeline", nargs="?", help=PIPELINE_HELP)
    status.add_argument("--json", action="store_true", help="one JSON document for scripts")
    _reader_option(status)
    status.set_defaults(func=_lazy("read_command", "show_status"))


def _add_report(commands: Commands) -> None:
    report = commands.add_parser("report", help="plot lag and throughput per batch from the MLflow run to a PNG")
    report.add_argument("pipeline", help=PIPELINE_HELP)
    report.add_argument("--run", help="MLflow run id (default: the pipeline's newest run)")
    report.add_argument("--output", help="PNG path (default: .ingest/reports/<pipeline>.png)")
    report.set_defaults(func=_lazy("read_command", "write_report"))


def _add_sql(commands: Commands) -> None:
    sql = commands.add_parser(
        "sql", help="SQL over every pipeline's tables by name (sink.catalogTable and silver.catalogTable, else "
        "<name>, <name>_quarantine, <name>_silver); a SELECT / WITH query (VERSION AS OF n included) is answered by "
        "DuckDB without a JVM, in about a second; Spark SQL answers only what DuckDB cannot (TIMESTAMP AS OF, other "
        "statements, what DuckDB refuses), after a line saying why; an unknown table is one line naming the known")
    sql.add_argument("query", nargs="+", action=_Joined, metavar="QUERY",
                     help="the query, best in quotes (unquoted words are joined with spaces; the shell expands * and "
                          "parentheses first)")
    sql.add_argument("--engine", choices=("auto", "duckdb", "spark"), default="auto",
                     help="auto (default): DuckDB where it can answer, else Spark; spark: Spark SQL's dialect and "
                          "semantics for every query; duckdb: fail rather than start a JVM")
    sql.add_argument("--output", help="write the result to a .parquet file (nested types intact) or a .csv file "
                                      "(nested values as JSON text) instead of printing it")
    sql.add_argument("--limit", type=COUNT, default=100, help="rows to print (default 100)")
    sql.set_defaults(func=_lazy("sql_command", "sql"))


class _Joined(argparse.Action):
    """Words given apart (`ingest sql SELECT 1`) as one string, joined with spaces."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, " ".join(values))


def _add_sql_server(commands: Commands) -> None:
    """`sql-server` (Thrift) and `connect-server` (Spark Connect): the same actions over the same catalog."""
    for name, what, default_port, func in (
            ("sql-server", "Spark's Thrift JDBC/ODBC server on 127.0.0.1 over the catalog (beeline, PyHive, "
             "JDBC/ODBC clients)", 10000, "manage_sql_server"),
            ("connect-server", "Spark Connect's server on 127.0.0.1 over the catalog (pyspark-client sessions, "
             "sc://127.0.0.1:PORT)", 15002, "manage_connect_server")):
        server = commands.add_parser(name, help=f"{what}; start (default), stop or status")
        server.add_argument("action", nargs="?", choices=("start", "stop", "status", "serve"), default="start",
                            help="start it in the background (default), stop it by its pid, show it, or serve in "
                                 "the foreground")
        server.add_argument("--port", type=int, help=f"port (default: the previous one, else {default_port} when "
                            "free, else a free one)")
        server.add_argument("--home", help=argparse.SUPPRESS)
        server.set_defaults(func=_lazy("server_command", func))


def _add_metastore(commands: Commands) -> None:
    meta = commands.add_parser("metastore", help="the local persistent catalog's Derby server (127.0.0.1); it "
                               "starts by itself when a session needs it")
    meta.add_argument("action", choices=("start", "stop", "status"),
                      help="start the server (a session that needs it starts it too), stop it by its pid, or show it")
    meta.set_defaults(func=_lazy("server_command", "manage_metastore"))


def _add_replay(commands: Commands) -> None:
    replay = commands.add_parser("replay", help="read a Kafka range again and write only the records neither "
                                 "bronze nor quarantine holds (fills gaps; a no-op over ingested ranges)")
    replay.add_argument("pipeline", help=PIPELINE_HELP)
    replay.add_argument("--from", dest="start", required=True, type=_checked(positions.starting),
                        help="earliest | partition:offset pairs like 0:100,1:250 | Spark's JSON form "
                        "'{\"orders\": {\"0\": 100}}' (replays the topics it names) | an ISO-8601 time (UTC unless "
                        "it names a zone) | epoch milliseconds")
    replay.add_argument("--to", dest="end", default="latest", type=_checked(positions.ending),
                        help="latest (default) or the same forms; offsets are exclusive ends as in Spark's "
                        "endingOffsets")
    replay.add_argument("--topic", help="replay this topic only, of a pipeline that reads several (needed for "
                        "partition:offset positions there)")
    replay.set_defaults(func=_lazy("replay_command", "replay_range"))


def _add_rewind(commands: Commands) -> None:
    rewind = commands.add_parser("rewind", help="restore bronze and quarantine to an earlier version; the next "
                                 "`ingest run` resumes from that version's offsets with a new checkpoint")
    rewind.add_argument("pipeline", help=PIPELINE_HELP)
    target = rewind.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-version", type=VERSION, metavar="N",
                        help="the table version to restore (ingest history lists them)")
    target.add_argument("--to-timestamp", metavar="TIME", type=_checked(parse_time),
                        help=f"the newest version committed at or before this time: {TIME_FORMS}")
    rewind.set_defaults(func=_lazy("replay_command", "rewind_tables"))


def _add_maintain(commands: Commands) -> None:
    maintain = commands.add_parser("maintain", help="compact (OPTIMIZE), VACUUM and checkpoint a pipeline's tables; "
                                   "neither --optimize nor --vacuum: both")
    maintain.add_argument("pipeline", nargs="?", help=PIPELINE_HELP)
    maintain.add_argument("--all", action="store_true", help="every pipeline in conf/pipelines/")
    maintain.add_argument("--optimize", action="store_true", help="bin-pack small files (maintenance.targetFileSize, "
                          "maintenance.zOrderBy)")
    maintain.add_argument("--vacuum", action="store_true", help="delete files no version inside "
                          "maintenance.vacuumRetention needs")
    maintain.add_argument("--dry-run", action="store_true", help="print files and bytes now and after, and the files "
                          "VACUUM would delete; write nothing")
    maintain.set_defaults(func=_lazy("maintain_command", "maintain_tables"))


def _add_verify(commands: Commands) -> None:
    verify = commands.add_parser("verify", help="audit bronze + quarantine against Kafka: duplicates, gaps, and "
                                 "which gaps Kafka explains; silver (if any) against bronze's fold, key by key; "
                                 "exit 1 on a real violation, 3 when silver misses change records that sit in "
                                 "quarantine")
    verify.add_argument("pipeline", help=PIPELINE_HELP)
    verify.add_argument("--json", action="store_true", help="one JSON document for scripts")
    _reader_option(verify)
    verify.set_defaults(func=_lazy("read_command", "verify_pipeline"))


def _add_silver(commands: Commands) -> None:
    silver = commands.add_parser("silver", help="the current-state table kept from bronze (the pipeline's silver: "
                                 "section): merge what bronze holds, rebuild it, show where it stands")
    s_cmds = silver.add_subparsers(dest="action", required=True, metavar="ACTION")
    s_run = s_cmds.add_parser("run", help="merge every bronze version silver does not hold yet, then exit (ingest "
                              "run does this itself; this runs silver alone)")
    s_run.add_argument("pipeline", help=PIPELINE_HELP)
    _route_option(s_run)
    s_run.set_defaults(func=_lazy("silver_command", "silver_run"))
    s_rebuild = s_cmds.add_parser("rebuild", help="recompute silver from bronze's rows (whole), or put back its "
                                  "state at a bronze version and merge what bronze committed after it")
    s_rebuild.add_argument("pipeline", help=PIPELINE_HELP)
    s_rebuild.add_argument("--from-version", type=VERSION, metavar="N", help="start from silver's state at bronze "
                           "version N (its newest commit at or before N) instead of from nothing")
    _route_option(s_rebuild)
    s_rebuild.set_defaults(func=_lazy("silver_command", "silver_rebuild"))
    s_status = s_cmds.add_parser("status", help="silver's bronze version, lag, rows and its last steps")
    s_status.add_argument("pipeline", help=PIPELINE_HELP)
    s_status.add_argument("--json", action="store_true", help="one JSON document for scripts")
    s_status.set_defaults(func=_lazy("silver_command", "silver_status"))


def _route_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--route", metavar="ROUTE", help="a routed pipeline's route whose silver (routing.silver) "
                        "to act on, by its value or table name")


def _add_quarantine(commands: Commands) -> None:
    quarantine = commands.add_parser("quarantine", help="records that could not be decoded: list, show, re-decode")
    q_cmds = quarantine.add_subparsers(dest="action", required=True, metavar="ACTION")
    q_list = q_cmds.add_parser("list", help="counts per error class and partition")
    q_list.add_argument("pipeline", help=PIPELINE_HELP)
    _reader_option(q_list)
    q_list.set_defaults(func=_lazy("quarantine_command", "quarantine_list"))
    q_show = q_cmds.add_parser("show", help="the quarantined records themselves")
    q_show.add_argument("pipeline", help=PIPELINE_HELP)
    q_show.add_argument("--limit", type=COUNT, default=20, help="at most this many records (default 20)")
    q_show.add_argument("--error-class", help="only records that failed with this error class")
    _reader_option(q_show)
    q_show.set_defaults(func=_lazy("quarantine_command", "quarantine_show"))
    q_redo = q_cmds.add_parser("reprocess", help="re-decode with the current schemas; what decodes moves to "
                               "bronze exactly once, what still fails stays with its new error")
    q_redo.add_argument("pipeline", help=PIPELINE_HELP)
    q_redo.set_defaults(func=_lazy("quarantine_command", "quarantine_reprocess"))


def _add_shadow(commands: Commands) -> None:
    shadow = commands.add_parser(
        "shadow", help="re-ingest the offsets some table versions hold under another config into a shadow table "
        "beside the live one, compare it record by record, promote it in one commit, or drop it "
        "(docs/reprocessing.md)",
        description="start: re-ingest from Kafka the offsets the live versions --from..--to hold, under --config, "
        "into <table>__<name> (and its quarantine); status: the shadows and their counts; diff: shadow against "
        "live by (topic, partition, offset), no JVM; promote: the live rows of those offsets replaced by the "
        "shadow's in one commit per table (under the writer lock) and the pipeline switched to --config's file; "
        "drop: remove a shadow not promoted. A silver table is rebuilt from the promoted bronze; a routed pipeline's "
        "shadow covers the batches committed between two times (--from/--to ISO times: its tables each have "
        "versions of their own), a shadow table per route table.")
    s_cmds = shadow.add_subparsers(dest="action", required=True, metavar="ACTION")

    def named(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("pipeline", help=PIPELINE_HELP)
        parser.add_argument("--name", default="shadow", help="the shadow's name (default: shadow); its tables are "
                            "<table>__<name> and <quarantine>__<name>")

    start = s_cmds.add_parser("start", help="re-ingest the Kafka offsets live versions --from..--to hold, under "
                              "another config, into a shadow table; refused when Kafka no longer holds them; a "
                              "rerun completes an interrupted start")
    named(start)
    start.add_argument("--config", required=True, metavar="FILE", help="the other config: the same pipeline "
                       "(name, topic, tables) with another schema file, version pin, decoder option or expectations")
    start.add_argument("--from", dest="start", required=True, metavar="VERSION|TIME", type=_checked(_version_or_time),
                       help="the first live table version, or a time (the first version committed at or after it; "
                       f"a routed pipeline: a time only, the batches committed from it): {TIME_FORMS}")
    start.add_argument("--to", dest="end", metavar="VERSION|TIME", type=_checked(_version_or_time),
                       help="the last live table version, or a time (the last version committed at or before it); "
                       "default: the newest")
    start.set_defaults(func=_lazy("shadow_command", "shadow_start"))
    status = s_cmds.add_parser("status", help="the pipeline's shadows: versions, offsets, rows, quarantined "
                               "records, state (no JVM)")
    status.add_argument("pipeline", help=PIPELINE_HELP)
    status.add_argument("--json", action="store_true", help="one JSON document for scripts")
    status.set_defaults(func=_lazy("shadow_command", "shadow_status"))
    diff = s_cmds.add_parser("diff", help="compare the shadow with the live table over the same offsets, record by "
                             "record: rows only in one, moves to or from quarantine, changed values per column with "
                             "sample offsets (no JVM)")
    named(diff)
    diff.add_argument("--json", action="store_true", help="one JSON document for scripts")
    diff.set_defaults(func=_lazy("shadow_command", "shadow_diff"))
    promote = s_cmds.add_parser("promote", help="under the writer lock, replace the live rows of the shadow's "
                                "offsets with the shadow's in one commit (quarantine likewise), switch the pipeline "
                                "file to the other config (the old kept as <file>.before-<name>); refused while the "
                                "pipeline runs")
    named(promote)
    promote.set_defaults(func=_lazy("shadow_command", "shadow_promote"))
    drop = s_cmds.add_parser("drop", help="remove a shadow that was not promoted: its tables and its state")
    named(drop)
    drop.set_defaults(func=_lazy("shadow_command", "shadow_drop"))


def _add_demo(commands: Commands) -> None:
    demo = commands.add_parser("demo", help="broker + sample topic + sample records + one ingestion + summary; "
                               "works in any folder (without conf/pipelines/orders.yaml, the pipeline and schema "
                               "come with the package)")
    demo.add_argument("--records", type=COUNT, default=10_000, help="sample records to produce (default 10000)")
    demo.add_argument("--keep-servers", "--keep-broker", dest="keep_servers", action="store_true",
                      help="leave the servers it started (the broker, the catalog's Derby server) running afterwards; "
                      "by default it stops them and leaves running only what it found running")
    demo.set_defaults(func=_lazy("project_command", "demo"))


def _add_jars(commands: Commands) -> None:
    jars = commands.add_parser("jars", help="resolve the JVM jars (Delta, Spark Kafka source, broker) via Maven; "
                          "build the helper jar")
    jars.add_argument("--debezium", action="store_true",
                      help="also resolve Kafka Connect and Debezium's Postgres connector (the real CDC source of "
                      "the tests, docs/cdc.md#tested-against-real-debezium)")
    jars.set_defaults(func=_lazy("project_command", "resolve_jars"))


def _add_new(commands: Commands) -> None:
    laid_out = ("lay out a new project folder: conf/defaults.yaml (shared settings), conf/pipelines/, schemas/ and "
                "a .gitignore for the state folder .ingest/; an existing file is never overwritten")
    new = commands.add_parser("new", help=laid_out, description=laid_out + ". Then: ingest init <topic> writes "
                              "conf/pipelines/<name>.yaml (docs/operations.md#a-new-project).")
    new.add_argument("folder", nargs="?", default=".", help="the project folder, made if missing (default: here)")
    new.set_defaults(func=_lazy("project_command", "new_project"))


def _add_init(commands: Commands) -> None:
    init = commands.add_parser(
        "init", help="write conf/pipelines/<name>.yaml for each topic from what the broker and the registry (or "
        "schemas/) know: partitions, the <topic>-value subject, an Avro key when <topic>-key exists; a topic "
        "of JSON without a subject gets a schema file too, inferred from its first records (docs/json.md); files "
        "inherit conf/defaults.yaml; an existing file is never overwritten")
    init.add_argument("topic", nargs="+", help="Kafka topics to write pipeline files for")
    init.add_argument("--dry-run", action="store_true", help="print the files, write nothing")
    init.set_defaults(func=_lazy("project_command", "init_pipelines"))


def _add_package(commands: Commands) -> None:
    package = commands.add_parser(
        "package", help="a job for a Spark cluster: the package zip, the spark-submit entry script and the jars in "
        "one folder, and the spark-submit line that runs a command with them (docs/cluster.md)")
    package.add_argument("pipeline", nargs="*", help="pipelines the job will run: their tables' stores choose the "
                         "file system jars (S3A for s3a://); default: every pipeline in conf/pipelines/, if any")
    package.add_argument("--out", default="dist", help="the folder to write (default: dist)")
    package.add_argument("--master", default="spark://HOST:7077", help="the master in the printed spark-submit line")
    package.add_argument("--spark-version", metavar="LINE", default=None,
                         help="the cluster's Spark line, whose Delta and Kafka connector jars the job carries: 4.0, "
                         "4.1 or 4.2 (default: the local pyspark's; docs/cluster.md#which-spark)")
    package.set_defaults(func=_lazy("project_command", "package_job"))
