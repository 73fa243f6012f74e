"""Shared fixtures: one Kafka broker and one SparkSession per test session, a unique topic per test; a secured
broker for the tests that need one.

Set KAFKA_BOOTSTRAP_SERVERS to run against an existing cluster instead of starting a local broker.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parent.parent

# Everything the tests write goes below one temporary state folder; jars and schemas come from the repository.
os.environ.setdefault("INGEST_JAR_CACHE", str(REPO / ".ingest" / "jars"))
os.environ["INGEST_SCHEMAS_DIR"] = str(REPO / "schemas")
os.environ["TZ"] = "UTC"
# The suite's JVMs start as on any machine after its first run: with the class archive of their classpath
# (ingestion/runtime/class_archive.py), which the suite's first `ingest run` records into the jar cache (written
# after that run, in the background, once per classpath). tests/integration/test_class_archive.py still starts
# cold, with a classpath of its own, and records its archive; INGEST_CLASS_ARCHIVE=off runs the suite without.
time.tzset()
# The suite's SparkSessions (the workers', and those of the `ingest` commands, notebooks and spark-submit commands
# tests start) evaluate expressions interpreted instead of generating and compiling Java for each plan: on the
# suite's few rows per batch Janino's compiles and Spark's code generation were about a fifth of a worker JVM's CPU
# (three integration files 27% less CPU, two crash e2e files 9%; docs/performance.md#the-suites-cpu-process-by-process).
# Spark's results do not depend on it; the wheel's demo (tests/e2e/test_packaged.py) and `make demo` keep Spark's
# defaults, code generation on. Sessions started through pyspark read PYSPARK_SUBMIT_ARGS; the spark-submit
# commands of tests/e2e pass `submit_conf()`.
SUITE_SPARK_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def submit_conf() -> list[str]:
    """SUITE_SPARK_CONF as spark-submit's `--conf` arguments."""
    return [argument for name, value in SUITE_SPARK_CONF.items() for argument in ("--conf", f"{name}={value}")]


os.environ.setdefault("PYSPARK_SUBMIT_ARGS", " ".join([*submit_conf(), "pyspark-shell"]))
# The suite's Kafka brokers (the shared one, the secured one, those tests restart, tests/kafka_cluster.py's) run
# with the serial collector and C1 alone (KAFKA_OPTS, read by ingestion.dev.broker as by Kafka's scripts): a broker
# that serves a few thousand records a test started with 2.4 CPU s instead of 4.9, and served a minute of light load
# with 2.1 instead of 3.9 (docs/performance.md#the-suites-cpu-process-by-process). The brokers of `make demo` and
# the benchmarks keep Java's.
os.environ.setdefault("KAFKA_OPTS", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")


# Tiers a developer can choose (`-m`, or `make test-fast`): the folder's marker, and `jvm` on every test that needs
# Java and the jars `make setup` resolves with Maven: it starts Spark, the suite's Kafka broker, `java` or the
# `ingest` command (every e2e test does). Files whose tests need them with none of the fixtures below carry
# `pytest.mark.jvm` themselves or are named here; `debian` marks the tests of a Debian package's tool.
TIERS = ("unit", "integration", "e2e")
JVM_FIXTURES = frozenset({"spark", "kafka_servers", "secure_broker"})
JVM_FILES = frozenset({"test_clients_under_broker_faults.py"})  # brokers of its own (tests/kafka_cluster.py)


# Parallel workers (`make test` runs `-n 2 --dist loadgroup`, pytest-xdist): a file whose module-scoped fixture
# starts servers or lands data once for all its tests (PostgreSQL with Debezium, the catalog's SQL server, the
# secured broker, the Spark lines' metastore, the reference decoder's compile) runs on one worker, so the fixture
# is built once. The scheduler below groups them by file: xdist's own `xdist_group` mark does nothing under
# pytest 9.2 (xdist 3.8 renames the item's `_nodeid`, which pytest no longer reads).
GROUPED_FILES = frozenset({
    "test_catalog.py", "test_debezium.py", "test_secured_kafka.py", "test_spark_lines.py",
    "test_connect_evolution.py", "test_differential.py", "test_json.py"})


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`: xdist's load-group scheduling, with the tests of each of GROUPED_FILES as one unit.
    Units with more tests go out first (xdist's `loadscopereorder`), then single tests in collection order: e2e,
    the longest, first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class SuiteScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            path = nodeid.split("::", 1)[0]
            return path if scope == nodeid and Path(path).name in GROUPED_FILES else scope

    return SuiteScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            parts = item.path.resolve().relative_to(REPO / "tests").parts
        except ValueError:
            continue  # not one of the suite's folders
        tier = parts[0] if len(parts) > 1 and parts[0] in TIERS else None
        if tier is not None and item.get_closest_marker(tier) is None:
            item.add_marker(tier)
        if item.get_closest_marker("jvm") is None and (
                tier == "e2e" or item.path.name in JVM_FILES
                or JVM_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker("jvm")


def missing_tool(reason: str) -> NoReturn:
    """A tool the test needs is not installed: a skip that says why (`-ra`) on a developer's machine, a failure in
    CI (CI=true), whose `make test` installs every tool, so a missing one is a broken setup, not a test left out."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason}; CI needs it (CI=true)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def state_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("ingest-home")
    os.environ["INGEST_HOME"] = str(home)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{home / 'mlflow.db'}"
    return home


_SHARED_BROKER = "INGEST_TEST_SHARED_BROKER"  # the folder of the broker pytest_configure started for the workers
_BROKER_KEY = pytest.StashKey[Any]()


def _is_xdist_controller(config: pytest.Config) -> bool:
    """The process that hands tests to pytest-xdist's workers (`-n N`, N > 0), not a worker nor a plain run."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None)) \
        and getattr(config.option, "dist", "no") != "no"


def pytest_configure(config: pytest.Config) -> None:
    """Under parallel workers the suite starts one broker, here, before the workers start: they find it through
    KAFKA_BOOTSTRAP_SERVERS (topics are unique per test) instead of a broker each; stopped at the run's end."""
    if not _is_xdist_controller(config) or os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return
    import tempfile

    from ingestion.dev.broker import Broker

    broker = Broker(Path(tempfile.mkdtemp(prefix="ingest-suite-broker-")))
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = broker.start()
    os.environ[_SHARED_BROKER] = str(broker.home)
    config.stash[_BROKER_KEY] = broker


def pytest_unconfigure(config: pytest.Config) -> None:
    broker = config.stash.get(_BROKER_KEY, None)
    if broker is not None:
        broker.stop()
        shutil.rmtree(broker.home, ignore_errors=True)
        os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)
        os.environ.pop(_SHARED_BROKER, None)


@pytest.fixture(scope="session")
def kafka_servers(state_home: Path) -> Iterator[str]:
    existing = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if existing:
        if os.environ.get(_SHARED_BROKER):
            from ingestion.dev.broker import Broker

            _SUITE_BROKERS[existing] = Broker(Path(os.environ[_SHARED_BROKER]))
        yield existing
        return
    from ingestion.dev.broker import Broker

    broker = Broker(state_home / "kafka")
    servers = broker.start()
    _SUITE_BROKERS[servers] = broker
    try:
        yield servers
    finally:
        gc.collect()  # close producers tests left behind before their broker goes away (else they log refusals)
        broker.stop()


_SUITE_BROKERS: dict[str, Any] = {}  # bootstrap servers -> the broker this suite started


def _stop_if_broker_gone(servers: str) -> None:
    """Every later test needs the suite's broker: if it exited, end the run here, saying why (its log's last lines
    and the disk's free space: a full disk stops a broker), instead of a timeout in each test that follows."""
    broker = _SUITE_BROKERS.get(servers)
    if broker is None or broker.pid() is not None:
        return
    free = shutil.disk_usage(broker.home).free / 2**30
    log = broker.home / "server.log"  # the broker's own log (broker.log holds its standard output)
    tail = log.read_text(errors="replace").splitlines()[-30:] if log.is_file() else []
    pytest.exit(f"the suite's Kafka broker ({servers}) has exited; {free:.1f} GiB free on its disk; "
                f"{log} ends:\n" + "\n".join(tail), returncode=3)


@pytest.fixture(scope="module")
def secure_broker(state_home: Path) -> Iterator[Any]:
    """A second local broker, secured (`Broker(..., secure=True)`: SASL_SSL, SASL_PLAINTEXT and SSL with client
    certificates on 127.0.0.1, SCRAM and PLAIN users, ACLs), started only by the tests that ask for it and stopped
    by its pid after their module (idle, it still took about a second of CPU a minute for the rest of the run).
    `secure_broker.admin_settings()` are a super user's client settings."""
    from ingestion.dev.broker import Broker

    broker = Broker(state_home / "kafka-secure", secure=True)
    broker.start()
    try:
        yield broker
    finally:
        gc.collect()
        broker.stop()


@pytest.fixture(scope="session")
def s3_server(state_home: Path) -> Iterator[Any]:
    """A local S3-compatible server (tests/s3_server.py), started only by the tests that ask for it; its
    credentials are in the environment of the test process and the commands it starts."""
    from tests.s3_server import S3Server

    server = S3Server(state_home / "moto.log")
    saved = {k: os.environ.get(k) for k in server.environment()}
    os.environ.update(server.environment())
    try:
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def make_bucket(s3_server: Any) -> Callable[[], str]:
    """Create a uniquely named bucket on the local S3 server: make_bucket() -> name."""

    def make() -> str:
        name = f"lake-{uuid.uuid4().hex[:12]}"
        s3_server.client().create_bucket(Bucket=name)
        return name

    return make


@pytest.fixture(scope="session")
def spark(state_home: Path) -> Iterator[Any]:
    from ingestion.runtime.session import get_session

    # Databases the tests make by name live in the run's state folder, not in ./spark-warehouse of the checkout.
    session = get_session("ingest-tests", conf={"spark.sql.shuffle.partitions": "2",
                                                "spark.sql.warehouse.dir": str(state_home / "warehouse")})
    yield session
    session.stop()


@pytest.fixture
def make_topic(kafka_servers: str, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Create a uniquely named topic: make_topic(partitions=3) -> name."""
    from ingestion.kafka.clients import create_topic

    def make(partitions: int = 3) -> str:
        name = f"t-{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"
        try:
            create_topic({"bootstrap.servers": kafka_servers}, name, partitions)
        except Exception:
            _stop_if_broker_gone(kafka_servers)
            raise
        return name

    return make


@pytest.fixture
def orders_schema() -> dict[str, Any]:
    from ingestion.dev.samples import load_schema

    return load_schema(str(REPO / "schemas" / "orders-value" / "1.avsc"))


def pipeline_yaml(tmp_path: Path, *, topic: str, servers: str, extra: str = "", name: str = "orders",
                  sink: str = "") -> Path:
    """A pipeline config file with its table and checkpoint under tmp_path. A `value:`, `key:` or `kafka:` section
    in `extra` replaces the default one (a key given twice would be a warning)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    from tests.helpers import pipeline_head

    given = set(re.findall(r"^([A-Za-z]+):", extra, re.MULTILINE))
    head = pipeline_head(name, topic, None if "kafka" in given else servers)
    defaults = "".join(text for section, text in (
        ("value", "value:\n  format: confluent\n  subject: orders-value\n"),
        ("key", "key:\n  format: string\n")) if section not in given)
    path.write_text(head + defaults + f"""sink:
  table: {tmp_path / 'tables' / name}
  checkpointLocation: {tmp_path / 'checkpoints' / name}
  quarantineTable: {tmp_path / 'tables' / (name + '_quarantine')}
{sink}{extra}""")
    return path
