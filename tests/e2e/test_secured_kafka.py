"""A pipeline on a secured Kafka and a schema registry over HTTPS, configured as confluent-kafka users write it.

The suite's second broker (`secure_broker`): SASL_SSL, SASL_PLAINTEXT and SSL with client certificates on
127.0.0.1, SCRAM and PLAIN users, KRaft's StandardAuthorizer. Pipelines carry librdkafka's keys in their `kafka:`
section with the password from the environment; every command works with them, Spark's included. Kafka's refusals
are one line with nothing created, and a canary password appears in no file and no output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ingestion.dev.samples import Produced, produce_orders
from tests.helpers import table_rows
from tests.registry_server import RegistryServer

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")
REPO = Path(__file__).resolve().parents[2]
CANARY = f"canary-{uuid.uuid4().hex[:12]}"  # the pipeline user's password; "wrong-" + CANARY is a wrong one
PASSWORD_ENV = "SECURED_TEST_KAFKA_PASSWORD"
REGISTRY_ENV = "SECURED_TEST_REGISTRY_PASSWORD"
TOPIC_PREFIX = "sec-"


@dataclass
class Users:
    """The test users of the secured broker and what they may do."""

    pipeline: str  # READ on every sec-* topic and every ingest-* group; password CANARY
    outsider: str  # no ACL at all
    nogroup: str  # READ on the topics, nothing on the groups
    describer: str  # DESCRIBE on the topics (metadata, offsets) but no READ; READ on the groups
    group_describer: str  # READ on the topics, DESCRIBE on the groups (may list offsets, not commit them)
    passwords: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def users(secure_broker: Any) -> Users:
    from confluent_kafka.admin import AdminClient

    from ingestion.dev.secure import add_user, grant

    admin = AdminClient(secure_broker.admin_settings())
    tag = uuid.uuid4().hex[:6]
    found = Users(f"pipe-{tag}", f"outsider-{tag}", f"nogroup-{tag}", f"describer-{tag}", f"gdescriber-{tag}")
    found.passwords = {found.pipeline: CANARY, found.outsider: f"o-{tag}", found.nogroup: f"n-{tag}",
                       found.describer: f"d-{tag}", found.group_describer: f"g-{tag}"}
    for user, password in found.passwords.items():
        add_user(admin, user, password)
    for user in (found.pipeline, found.nogroup, found.group_describer):
        grant(admin, f"User:{user}", "TOPIC", TOPIC_PREFIX, ("READ",), prefixed=True)
    grant(admin, f"User:{found.group_describer}", "GROUP", "ingest-", ("DESCRIBE",), prefixed=True)
    grant(admin, f"User:{found.describer}", "TOPIC", TOPIC_PREFIX, ("DESCRIBE",), prefixed=True)
    for user in (found.pipeline, found.describer):
        grant(admin, f"User:{user}", "GROUP", "ingest-", ("READ",), prefixed=True)
    return found


@pytest.fixture
def outputs() -> list[str]:
    """Every stdout and stderr a command of the test printed."""
    return []


def _topic(broker: Any, partitions: int = 3) -> str:
    from ingestion.kafka import create_topic

    name = f"{TOPIC_PREFIX}{uuid.uuid4().hex[:10]}"
    create_topic(broker.admin_settings(), name, partitions)
    return name


def _produce(broker: Any, topic: str, count: int, schema: dict[str, Any], first_seq: int = 0,
             schema_id: int = 1) -> list[Produced]:
    settings = broker.admin_settings()
    extra = {k: v for k, v in settings.items() if k != "bootstrap.servers"}
    return produce_orders(settings["bootstrap.servers"], topic, count, schema_id=schema_id, schema=schema,
                          first_seq=first_seq, extra=extra)


def _kafka_section(broker: Any, user: str, *, listener: str = "SASL_SSL", mechanism: str = "SCRAM-SHA-512") -> str:
    lines = [f'  bootstrap.servers: "{broker.security.listeners()[listener]}"', f"  security.protocol: {listener}",
             f"  sasl.mechanism: {mechanism}", f"  sasl.username: {user}", f"  sasl.password: ${{{PASSWORD_ENV}}}"]
    if listener.endswith("SSL"):
        lines.append(f"  ssl.ca.location: {broker.security.ca_file}")
    return "\n".join(lines)


def _pipeline(tmp_path: Path, name: str, topic: str, kafka: str, extra: str = "") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""name: {name}
topic: {topic}
kafka:
{kafka}
source:
  brokerTimeout: 20 seconds
value:
  format: confluent
  subject: orders-value
key:
  format: string
sink:
  table: {tmp_path / 'tables' / name}
  checkpointLocation: {tmp_path / 'checkpoints' / name}
  quarantineTable: {tmp_path / 'tables' / (name + '_quarantine')}
  trigger: 1 second
{extra}""")
    return path


def _ingest(outputs: list[str], *args: str, password: str = CANARY,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, PASSWORD_ENV: password}
    done = subprocess.run([INGEST, *args], capture_output=True, text=True, timeout=timeout, env=env)
    outputs += [done.stdout, done.stderr]
    return done


def _rows(spark: Any, table: Path) -> list[tuple[int, int]]:
    return sorted((r["_kafka_partition"], r["_kafka_offset"]) for r in table_rows(table))


def _files_holding(needle: str, *roots: Path) -> list[Path]:
    data = needle.encode()
    return [f for root in roots for f in root.rglob("*") if f.is_file() and data in f.read_bytes()]


def test_a_pipeline_on_a_secured_broker_end_to_end(spark: Any, secure_broker: Any, users: Users,
                                                   orders_schema: dict[str, Any], state_home: Path, tmp_path: Path,
                                                   outputs: list[str], capfd: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion import kafka
    from ingestion.config import load_pipeline
    from ingestion.ops import replay

    topic = _topic(secure_broker)
    produced = _produce(secure_broker, topic, 200, orders_schema)
    name = f"sec{uuid.uuid4().hex[:8]}"
    config_file = _pipeline(tmp_path, name, topic, _kafka_section(secure_broker, users.pipeline))
    bronze = tmp_path / "tables" / name

    onboarded = _ingest(outputs, "onboard", str(config_file))
    assert onboarded.returncode == 0, onboarded.stderr[-3000:]
    assert f"topic '{topic}': exists with 3 partitions" in onboarded.stdout
    assert f"table {bronze}:" in onboarded.stdout

    # One streaming run, at debug level (-v: its log must not show the password either), takes the first records,
    # then records produced while it runs. (`run --available-now` on this broker: the refused run below, which
    # fails in the same checks before Spark; Spark's batch read through the same options: the replay below.)
    log = tmp_path / "stream.log"
    with open(log, "w") as out:
        stream = subprocess.Popen([INGEST, "-v", "run", str(config_file)], stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env={**os.environ, PASSWORD_ENV: CANARY},
                                  start_new_session=True)
    try:
        _wait(lambda: _rows(spark, bronze) == sorted((p.partition, p.offset) for p in produced), stream, log)
        produced += _produce(secure_broker, topic, 150, orders_schema, first_seq=200)
        _wait(lambda: len(_rows(spark, bronze)) >= 350, stream, log)
    finally:
        os.killpg(stream.pid, signal.SIGTERM)
        assert stream.wait(120) == 0, log.read_text()[-3000:]
        outputs.append(log.read_text())
    assert _rows(spark, bronze) == sorted((p.partition, p.offset) for p in produced)

    monkeypatch.setenv(PASSWORD_ENV, CANARY)
    config = load_pipeline(config_file)
    ends = {p: high for p, (_, high) in kafka.watermarks(kafka.resolve_settings(config).client, topic).items()}
    assert sum(ends.values()) == 350
    _wait(lambda: kafka.committed_offsets(kafka.resolve_settings(config).client, f"ingest-{name}", topic) == ends)

    status = _ingest(outputs, "status", str(config_file), "--json")
    assert status.returncode == 0, status.stderr[-3000:]
    (shown,) = json.loads(status.stdout)
    assert {p["partition"]: (p["latest_offset"], p["ingested_up_to"], p["lag_records"])
            for p in shown["partitions"]} == {p: (end, end, 0) for p, end in ends.items()}
    verified = _ingest(outputs, "verify", str(config_file))
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    assert verified.stdout.splitlines()[0] == f"{name}: topic {topic}: OK"

    again = replay.replay(spark, config, start="earliest")  # Spark's batch read through the same derived options
    assert (again.read, again.already_present, again.written, again.quarantined) == (350, 350, 0, 0)

    # A failing run and a failing -v status with a wrong password: one line each, and the password shows nowhere.
    refused = _ingest(outputs, "run", str(config_file), "--available-now", password=f"wrong-{CANARY}")
    assert refused.returncode == 1
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"error: Kafka at {secure_broker.security.listeners()['SASL_SSL']} refused to "
                           f"authenticate user '{users.pipeline}' with SASL SCRAM-SHA-512: wrong password"), line
    verbose = _ingest(outputs, "-v", "status", str(config_file), password=f"wrong-{CANARY}")
    assert verbose.returncode == 1
    assert "Traceback" in verbose.stderr  # -v shows the trace
    assert verbose.stderr.strip().splitlines()[-1].startswith("error: Kafka at ")
    assert _rows(spark, bronze) == sorted((p.partition, p.offset) for p in produced)

    captured = capfd.readouterr()
    outputs += [captured.out, captured.err]
    assert sum(len(text) for text in outputs) > 1000  # the commands did print (progress lines, the -v trace)
    assert [text for text in outputs if CANARY in text] == []
    assert _files_holding(CANARY, tmp_path, state_home) == []


def test_refusals_are_one_line_and_create_nothing(secure_broker: Any, users: Users, orders_schema: dict[str, Any],
                                                  tmp_path: Path, outputs: list[str]) -> None:
    from mlflow.tracking import MlflowClient

    from ingestion.stream.metrics import tracking_uri

    topic = _topic(secure_broker)
    _produce(secure_broker, topic, 20, orders_schema)
    servers = secure_broker.security.listeners()["SASL_SSL"]
    name = f"den{uuid.uuid4().hex[:8]}"
    who_is = {"topic": users.outsider, "group": users.nogroup, "read": users.describer,
              "commit": users.group_describer, "login": users.pipeline}
    files = {who: _pipeline(tmp_path / who, name, topic, _kafka_section(secure_broker, user))
             for who, user in who_is.items()}
    passwords = {**{who: users.passwords[user] for who, user in who_is.items()}, "login": f"wrong-{CANARY}"}
    expected = {
        "topic": f"error: Kafka at {servers} denied user '{users.outsider}' access to topic '{topic}' "
                 f"(TOPIC_AUTHORIZATION_FAILED): grant User:{users.outsider} READ on topic '{topic}'",
        "read": f"error: Kafka at {servers} denied user '{users.describer}' access to topic '{topic}' "
                f"(TOPIC_AUTHORIZATION_FAILED): grant User:{users.describer} READ on topic '{topic}'",
        "group": f"error: Kafka at {servers} denied user '{users.nogroup}' access to consumer group 'ingest-{name}' "
                 f"(GROUP_AUTHORIZATION_FAILED): grant User:{users.nogroup} READ on group 'ingest-{name}'",
        "commit": f"error: Kafka at {servers} denied user '{users.group_describer}' access to consumer group "
                  f"'ingest-{name}' (GROUP_AUTHORIZATION_FAILED): grant User:{users.group_describer} READ on group "
                  f"'ingest-{name}'",
        "login": f"error: Kafka at {servers} refused to authenticate user '{users.pipeline}' with SASL "
                 "SCRAM-SHA-512: wrong password, unknown user, or a mechanism the broker does not enable",
    }
    cases = [(who, command) for who in ("topic", "group", "read", "commit", "login")
             for command in ("run", "onboard")]
    cases += [(who, command) for who in ("topic", "login") for command in ("status", "verify")]

    def attempt(case: tuple[str, str]) -> subprocess.CompletedProcess[str]:
        who, command = case
        extra = ("--available-now",) if command == "run" else ()
        return _ingest(outputs, command, str(files[case[0]]), *extra, password=passwords[who], timeout=120)

    with ThreadPoolExecutor(3) as pool:
        results = dict(zip(cases, pool.map(attempt, cases), strict=True))
    for (who, command), done in results.items():
        assert done.returncode == 1, (who, command, done.stdout[-2000:], done.stderr[-2000:])
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (who, command, done.stderr)
        assert lines[0].startswith(expected[who]), (who, command, lines[0])
        assert "does not exist" not in lines[0]
    for who in files:
        assert not (tmp_path / who / "tables").exists() and not (tmp_path / who / "checkpoints").exists(), who
    assert MlflowClient(tracking_uri()).get_experiment_by_name(f"ingest/{name}") is None
    assert [text for text in outputs if CANARY in text] == []
    assert _files_holding(CANARY, tmp_path) == []


@pytest.mark.parametrize("variant", ["SASL_SSL SCRAM-SHA-256", "SASL_SSL PLAIN", "SASL_PLAINTEXT SCRAM-SHA-512",
                                     "SASL_PLAINTEXT PLAIN", "SSL client certificate", "Java settings"])
def test_every_mechanism_and_protocol_reaches_both_clients(spark: Any, secure_broker: Any, users: Users,
                                                           orders_schema: dict[str, Any], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, variant: str) -> None:
    from confluent_kafka.admin import AdminClient

    from ingestion import kafka
    from ingestion.config import load_pipeline
    from ingestion.dev.secure import PIPELINE_USER, grant
    from ingestion.stream import context
    from ingestion.stream.source import kafka_options

    setup = secure_broker.security
    topic = _topic(secure_broker, partitions=2)
    produced = _produce(secure_broker, topic, 30, orders_schema)
    listener, _, mechanism = variant.partition(" ")
    if variant == "SSL client certificate":  # encrypted key in the traditional form, as openssl writes it
        common_name = f"mtls-{uuid.uuid4().hex[:6]}"
        grant(AdminClient(secure_broker.admin_settings()), f"User:{common_name}", "TOPIC", topic, ("READ",))
        cert, key = setup.client_certificate(common_name, key_password=CANARY, pkcs8=False)
        section = "\n".join([f'  bootstrap.servers: "{setup.listeners()["SSL"]}"', "  security.protocol: SSL",
                             f"  ssl.ca.location: {setup.ca_file}", f"  ssl.certificate.location: {cert}",
                             f"  ssl.key.location: {key}", f"  ssl.key.password: ${{{PASSWORD_ENV}}}"])
        monkeypatch.setenv(PASSWORD_ENV, CANARY)
    elif variant == "Java settings":  # a JAAS line and a PEM truststore, as Java clients are configured
        module = "org.apache.kafka.common.security.scram.ScramLoginModule"
        section = "\n".join([f'  bootstrap.servers: "{setup.listeners()["SASL_SSL"]}"',
                             "  security.protocol: SASL_SSL", "  sasl.mechanism: SCRAM-SHA-512",
                             f"  sasl.jaas.config: '{module} required username=\"{users.pipeline}\" "
                             f"password=\"${{{PASSWORD_ENV}}}\";'",
                             "  ssl.truststore.type: PEM", f"  ssl.truststore.location: {setup.ca_file}"])
        monkeypatch.setenv(PASSWORD_ENV, CANARY)
    else:  # PLAIN users are the broker's own (its JAAS); SCRAM ones are made by the admin client
        user = PIPELINE_USER if mechanism == "PLAIN" else users.pipeline
        section = _kafka_section(secure_broker, user, listener=listener, mechanism=mechanism)
        monkeypatch.setenv(PASSWORD_ENV, setup.password(PIPELINE_USER) if mechanism == "PLAIN" else CANARY)
    config = load_pipeline(_pipeline(tmp_path, "variant", topic, section))

    ends = {p: high for p, (_, high) in kafka.watermarks(kafka.resolve_settings(config).client, topic).items()}
    assert ends == {0: sum(p.partition == 0 for p in produced), 1: sum(p.partition == 1 for p in produced)}
    options = kafka_options(context.known(config), "earliest")
    rows = (spark.read.format("kafka").options(**{k: v for k, v in options.items() if k != "maxOffsetsPerTrigger"})
            .load().select("partition", "offset").collect())
    assert sorted((r[0], r[1]) for r in rows) == [(p.partition, p.offset) for p in produced]


def test_spark_reports_kafkas_refusals_in_one_line(spark: Any, secure_broker: Any, users: Users,
                                                   orders_schema: dict[str, Any], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.config import load_pipeline
    from ingestion.errors import KafkaAccessError
    from ingestion.stream import context, pipeline
    from ingestion.stream.source import kafka_options

    topic = _topic(secure_broker)
    _produce(secure_broker, topic, 10, orders_schema)
    servers = secure_broker.security.listeners()["SASL_SSL"]
    monkeypatch.setenv(PASSWORD_ENV, users.passwords[users.describer])
    config = load_pipeline(_pipeline(tmp_path, "describer", topic, _kafka_section(secure_broker, users.describer)))
    with pytest.raises(Exception) as caught:
        spark.read.format("kafka").options(**kafka_options(context.known(config), "earliest")).load().count()
    assert pipeline.failure_reason(caught.value, context.known(config)).startswith(
        f"Kafka at {servers} denied user '{users.describer}' access to topic '{topic}' "
        f"(TopicAuthorizationException): grant User:{users.describer} READ on topic '{topic}'")
    # The streaming query's own failure, past the checks `run` makes first (they would refuse before Spark):
    with pytest.raises(KafkaAccessError) as failed:  # a context listed without the checks
        pipeline.run(spark, context.resolve(config), available_now=True)
    assert failed.value.denied == "topic"
    assert str(failed.value).startswith(f"pipeline 'describer' failed: Kafka at {servers} denied user "
                                        f"'{users.describer}' access to topic '{topic}'")
    assert len(table_rows(config.table_path)) == 0

    monkeypatch.setenv(PASSWORD_ENV, f"wrong-{CANARY}")
    wrong = load_pipeline(_pipeline(tmp_path, "wrong", topic, _kafka_section(secure_broker, users.pipeline)))
    with pytest.raises(Exception) as caught:
        spark.read.format("kafka").options(**kafka_options(context.known(wrong), "earliest")).load().count()
    assert pipeline.failure_reason(caught.value, context.known(wrong)).startswith(
        f"Kafka at {servers} refused to authenticate user '{users.pipeline}' with SASL SCRAM-SHA-512: ")


def test_a_registry_over_https_with_basic_auth(spark: Any, secure_broker: Any, users: Users,
                                               orders_schema: dict[str, Any], state_home: Path, tmp_path: Path,
                                               outputs: list[str], capfd: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.config import load_pipeline
    from ingestion.ops.onboard import onboard
    from ingestion.stream import pipeline

    registry_password = f"registry-{CANARY}"
    registry = RegistryServer(secure_broker.security.broker_pem, secure_broker.security.broker_pem,
                              {"sr-user": registry_password})
    url = registry.start()
    try:
        assert registry.register("orders-value", (REPO / "schemas" / "orders-value" / "1.avsc").read_text()) == 1
        topic = _topic(secure_broker)
        produced = _produce(secure_broker, topic, 100, orders_schema)
        name = f"reg{uuid.uuid4().hex[:8]}"
        path = _pipeline(tmp_path, name, topic, _kafka_section(secure_broker, users.pipeline))
        path.write_text(path.read_text().replace("  subject: orders-value\n", f"""  subject: orders-value
  registry:
    url: {url}
    basic.auth.user.info: sr-user:${{{REGISTRY_ENV}}}
    ssl.ca.location: {secure_broker.security.ca_file}
    max.retries: 1
    retries.wait.ms: 50
"""))

        monkeypatch.setenv(REGISTRY_ENV, f"wrong-{registry_password}")
        refused = _ingest(outputs, "onboard", str(path), timeout=120)
        assert refused.returncode == 1
        (line,) = refused.stderr.strip().splitlines()
        assert line == (f"error: {path}: schema registry at {url} refused the credentials (401 Unauthorized); "
                        "check value.registry.basic.auth.user.info (user:password)")

        monkeypatch.setenv(REGISTRY_ENV, registry_password)
        monkeypatch.setenv(PASSWORD_ENV, CANARY)
        config = load_pipeline(path)
        report = onboard(spark, config)
        assert f"subject 'orders-value' at {url}: schema ids [1]; the table follows id 1" in report.lines
        running = pipeline.start(spark, config)
        try:
            bronze = Path(config.table_path)
            _wait(lambda: len(_rows(spark, bronze)) == 100, query=running.query)
            resolved = len(registry.requests)
            assert ("GET", "/subjects/orders-value/versions", 200) in registry.requests
            registry.stop()  # the registry goes away mid-run: known ids go on
            produced += _produce(secure_broker, topic, 100, orders_schema, first_seq=100)
            _wait(lambda: len(_rows(spark, bronze)) == 200, query=running.query)
            assert len(registry.requests) == resolved
            _produce(secure_broker, topic, 5, orders_schema, first_seq=200, schema_id=2)  # an id never seen
            _wait(lambda: not running.query.isActive)
            reason = pipeline.failure_reason(running.query.exception(), running.context)
        finally:
            pipeline.stop(spark, running, pipeline.RunStatus.FAILED)
        assert reason.startswith(f"schema registry at {url} did not answer after 2 attempts (ConnectError: "), reason
        assert _rows(spark, bronze) == sorted((p.partition, p.offset) for p in produced)  # nothing of id 2 landed
    finally:
        registry.stop()
    captured = capfd.readouterr()
    outputs += [captured.out, captured.err]
    assert [text for text in outputs if registry_password in text or CANARY in text] == []
    assert _files_holding(registry_password, tmp_path, state_home) == []


def _wait(predicate: Callable[[], bool], proc: subprocess.Popen[str] | None = None, log: Path | None = None,
          query: Any = None, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"ingest exited with {proc.returncode}:\n{log.read_text()[-3000:] if log else ''}")
        if query is not None and not query.isActive:
            raise AssertionError(f"the query ended: {query.exception()}")
        time.sleep(0.5)
    raise AssertionError(f"not reached within {timeout}s" + (f":\n{log.read_text()[-3000:]}" if log else ""))


@pytest.fixture(autouse=True)
def _no_leftover_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    monkeypatch.delenv(REGISTRY_ENV, raising=False)
    yield
