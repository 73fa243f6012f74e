"""parse_pipeline / load_pipeline: the shipped config loads; every rejection names file, key and value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingestion.config import (
    KeyFormat,
    MetricsOptions,
    PipelineConfig,
    SinkOptions,
    SourceOptions,
    ValueFormat,
    load_pipeline,
    parse_pipeline,
)
from ingestion.errors import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf"

MINIMAL = """\
name: demo
topic: demo-topic
value:
  subject: demo-value
"""


def write(tmp_path: Path, text: str, name: str = "pipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def config_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    return str(info.value)


# --- the shipped config -----------------------------------------------------------------------------------------

def test_shipped_orders_config_loads_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_CONF_DIR", str(CONF))
    config = load_pipeline("orders")
    path = CONF / "pipelines" / "orders.yaml"
    assert config == PipelineConfig(
        name="orders",
        topic="orders", topics=("orders",),
        value=ValueFormat(format="confluent", subject="orders-value", max_bytes=8 * 1024 * 1024),
        kafka={"client.id": "ingest-orders"},
        source=SourceOptions(starting_offsets="earliest", max_offsets_per_trigger=20000, fail_on_data_loss=True,
                             min_partitions=None),
        key=KeyFormat(format="string"),
        sink=SinkOptions(table="", checkpoint_location="", quarantine_table="", trigger="10 seconds",
                         on_error="quarantine", catalog_table="bronze.orders"),
        metrics=MetricsOptions(experiment=""),
        spark={},
        file=path,
    )
    assert config.file == path
    assert config.experiment == "ingest/orders"
    assert config.catalog_names == ("bronze.orders", "bronze.orders_quarantine")


def test_shipped_orders_config_loads_by_path() -> None:
    path = CONF / "pipelines" / "orders.yaml"
    config = load_pipeline(path)
    assert config.name == "orders"
    assert config.topic == "orders"
    assert config.value.subject == "orders-value"
    assert config.source.max_offsets_per_trigger == 20000
    assert config.file == path


def test_unknown_pipeline_name_lists_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_CONF_DIR", str(CONF))
    with pytest.raises(ConfigError) as info:
        load_pipeline("nope")
    message = str(info.value)
    assert "'nope'" in message
    assert str(CONF / "pipelines" / "nope.yaml") in message
    assert message.endswith("does not exist (known: orders)")
    with pytest.raises(ConfigError) as info:
        load_pipeline(__file__)  # a file, but no pipeline's
    assert str(info.value) == (f"{__file__} is no pipeline file: give a .yaml file, or a pipeline's name (its file "
                               f"in {CONF / 'pipelines'})")


def test_minimal_config_gets_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    config = load_pipeline(path)
    assert config == PipelineConfig(name="demo", topic="demo-topic", topics=("demo-topic",),
                                    value=ValueFormat(subject="demo-value"),
                                    file=path)
    assert config.source == SourceOptions(starting_offsets="earliest", max_offsets_per_trigger=None,
                                          fail_on_data_loss=True, min_partitions=None)
    assert config.key == KeyFormat(format="bytes")
    assert config.kafka == {}
    assert config.value.max_bytes == 8 * 1024 * 1024


def test_kafka_and_spark_values_become_strings(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "kafka:\n  linger.ms: 5\n  enable.idempotence: true\n"
                                     "spark:\n  spark.sql.shuffle.partitions: 4\n")
    config = load_pipeline(path)
    assert config.kafka == {"linger.ms": "5", "enable.idempotence": "true"}
    assert config.spark == {"spark.sql.shuffle.partitions": "4"}


def test_not_a_mapping_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "- a\n- b\n")
    message = config_error(path)
    assert message == f"{path}: expected a mapping of settings at the top level, got ['a', 'b']"


def test_invalid_yaml_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "name: [unclosed\n")
    message = config_error(path)
    assert message == (f"{path}: line 2, column 1: not valid YAML: expected ',' or ']', but got '<stream end>', "
                       "while parsing a flow sequence at line 1, column 7")
    assert config_error(write(tmp_path, "# nothing yet\n")) == (f"{path}: is empty: expected a mapping of settings "
                                                                "at the top level")


# --- unknown keys -----------------------------------------------------------------------------------------------

def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "sinks:\n  table: x\n")
    message = config_error(path)
    assert str(path) in message
    assert "unknown key 'sinks'" in message
    assert "(value {'table': 'x'})" in message
    assert ("known keys here: expectations, extends, kafka, key, maintenance, metrics, name, routing, silver, sink, "
            "source, spark, topic, topicPattern, topicSettings, topics, value") in message


def test_unknown_nested_key_typo(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "source:\n  startingOffset: latest\n")
    message = config_error(path)
    assert message == (f"{path}: unknown key 'source.startingOffset' (value 'latest'); known keys here: "
                       "brokerTimeout, failOnDataLoss, maxOffsetsPerTrigger, minPartitions, startFromActiveGroup, "
                       "startFromGroup, startingOffsets, startingOffsetsByTimestamp, startingTimestamp")


def test_python_field_name_is_not_a_key(tmp_path: Path) -> None:
    # The file uses Spark's spelling; the Python attribute name is not accepted in its place.
    path = write(tmp_path, MINIMAL + "source:\n  max_offsets_per_trigger: 10\n")
    message = config_error(path)
    assert "unknown key 'source.max_offsets_per_trigger' (value 10)" in message


# --- wrong types ------------------------------------------------------------------------------------------------

def test_max_offsets_not_an_integer(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "source:\n  maxOffsetsPerTrigger: ten\n")
    message = config_error(path)
    assert message == f"{path}: key 'source.maxOffsetsPerTrigger' must be an integer, got 'ten'"


def test_max_offsets_bool_is_not_an_integer(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "source:\n  maxOffsetsPerTrigger: true\n")
    message = config_error(path)
    assert message == f"{path}: key 'source.maxOffsetsPerTrigger' must be an integer, got True"


def test_fail_on_data_loss_string_yes(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + 'source:\n  failOnDataLoss: "yes"\n')
    message = config_error(path)
    assert message == f"{path}: key 'source.failOnDataLoss' must be true or false, got 'yes'"


def test_section_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "source: earliest\n")
    message = config_error(path)
    assert message == f"{path}: key 'source' must be a mapping, got 'earliest'"


def test_kafka_nested_value_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "kafka:\n  sasl:\n    mechanism: PLAIN\n")
    message = config_error(path)
    assert message == f"{path}: key 'kafka.sasl' must be a plain value, got {{'mechanism': 'PLAIN'}}"


def test_literal_violation_names_allowed_values(tmp_path: Path) -> None:
    path = write(tmp_path, "name: demo\ntopic: t\nvalue:\n  format: xml\n  subject: s\n")
    message = config_error(path)
    assert message == (f"{path}: key 'value.format' must be one of ['confluent', 'avro', 'protobuf', 'jsonschema', "
                       "'json', 'connect-json'], got 'xml'")


def test_key_format_literal_violation(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "key:\n  format: json\n")
    message = config_error(path)
    assert message == (f"{path}: key 'key.format' must be one of ['none', 'bytes', 'string', 'avro', 'protobuf'], "
                       "got 'json'")


def test_avro_keys_default_to_the_topics_key_subject(tmp_path: Path) -> None:
    config = load_pipeline(write(tmp_path, MINIMAL + "key:\n  format: avro\n"))
    assert config.key.subject == "demo-topic-key"  # Confluent's TopicNameStrategy


def test_contradictory_start_positions_are_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "source:\n  startingOffsets: latest\n  startingTimestamp: 1700000000000\n")
    assert config_error(path) == (f"{path}: give only one of source.startingOffsets, source.startingTimestamp and "
                                  "source.startingOffsetsByTimestamp, got ['startingOffsets', 'startingTimestamp']")


# --- required keys ----------------------------------------------------------------------------------------------

def test_missing_topic(tmp_path: Path) -> None:
    path = write(tmp_path, "name: demo\nvalue:\n  subject: s\n")
    message = config_error(path)
    assert message == f"{path}: missing required key 'topic' (or 'topics: [a, b]', or 'topicPattern')"


def test_the_value_subject_defaults_to_the_topics(tmp_path: Path) -> None:
    config = load_pipeline(write(tmp_path, "name: demo\ntopic: t\n"))
    assert (config.value.format, config.value.subject) == ("confluent", "t-value")


# --- ${VAR} interpolation ---------------------------------------------------------------------------------------

def test_env_interpolation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_TEST_TOPIC", "orders-eu")
    monkeypatch.setenv("INGEST_TEST_PASSWORD", "s3cr3t")
    path = write(tmp_path, "name: demo\ntopic: ${INGEST_TEST_TOPIC}\nvalue:\n  subject: ${INGEST_TEST_TOPIC}-value\n"
                           "kafka:\n  ssl.key.password: ${INGEST_TEST_PASSWORD}\n")
    config = load_pipeline(path)
    assert config.topic == "orders-eu"
    assert config.value.subject == "orders-eu-value"
    assert config.kafka == {"ssl.key.password": "s3cr3t"}


def test_env_default_used_when_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INGEST_TEST_UNSET", raising=False)
    path = write(tmp_path, "name: demo\ntopic: ${INGEST_TEST_UNSET:-fallback-topic}\nvalue:\n  subject: s\n"
                           "kafka:\n  client.id: ${INGEST_TEST_UNSET:-}\n")
    config = load_pipeline(path)
    assert config.topic == "fallback-topic"
    assert config.kafka == {"client.id": ""}


def test_env_set_wins_over_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_TEST_SET", "from-env")
    path = write(tmp_path, "name: demo\ntopic: ${INGEST_TEST_SET:-fallback}\nvalue:\n  subject: s\n")
    assert load_pipeline(path).topic == "from-env"


def test_env_unset_raises_naming_key_and_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INGEST_TEST_MISSING", raising=False)
    path = write(tmp_path, MINIMAL + "kafka:\n  sasl.password: ${INGEST_TEST_MISSING}\n")
    message = config_error(path)
    assert message == (f"{path}: key 'kafka.sasl.password' uses ${{INGEST_TEST_MISSING}}, "
                       "which is not set in the environment")


def test_env_unset_top_level_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INGEST_TEST_MISSING", raising=False)
    path = write(tmp_path, "name: demo\ntopic: pre-${INGEST_TEST_MISSING}\nvalue:\n  subject: s\n")
    message = config_error(path)
    assert message == f"{path}: key 'topic' uses ${{INGEST_TEST_MISSING}}, which is not set in the environment"


# --- kafka settings and secrets ---------------------------------------------------------------------------------

def test_kafka_prefix_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "kafka:\n  kafka.bootstrap.servers: localhost:9092\n")
    message = config_error(path)
    assert str(path) in message
    assert "'kafka.kafka.bootstrap.servers'" in message
    assert "without the 'kafka.' prefix" in message
    assert "got 'kafka.bootstrap.servers'" in message


def test_redacted_hides_secrets_keeps_the_rest(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "kafka:\n  client.id: me\n  sasl.password: hunter2\n  ssl.key.password: pw\n"
                                     "  sasl.username: alice\n  security.protocol: SASL_SSL\n  sasl.mechanism: PLAIN\n"
                                     "spark:\n  spark.hadoop.fs.s3a.secret.key: abc\n  spark.app.name: x\n")
    out = load_pipeline(path).redacted()
    assert out["kafka"] == {"client.id": "me", "sasl.password": "***", "ssl.key.password": "***",
                            "sasl.username": "alice", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    assert out["spark"] == {"spark.hadoop.fs.s3a.secret.key": "***", "spark.app.name": "x"}
    assert out["file"] == str(path)
    assert out["name"] == "demo"
    assert out["value"] == {"format": "confluent", "subject": "demo-value", "max_bytes": 8 * 1024 * 1024,
                            "decoder": "auto", "registry": {}, "subject_name_strategy": "TopicNameStrategy",
                            "record_name": "", "message_name": "", "strict": False, "schema_file": ""}
    assert "hunter2" not in repr(out)


def test_redacted_does_not_change_the_config(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "kafka:\n  ssl.key.password: hunter2\n")
    config = load_pipeline(path)
    config.redacted()
    assert config.kafka == {"ssl.key.password": "hunter2"}


# --- contradictions ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["a/b", "../orders", "has space"])
def test_bad_pipeline_name(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, f"name: {name!r}\ntopic: t\nvalue:\n  subject: s\n")
    message = config_error(path)
    assert message == f"{path}: key 'name' must be letters, digits, '_', '-' or '.', got {name!r}"


@pytest.mark.parametrize(("text", "key"), [("name: ''\ntopic: t\n", "name"), ("name: a\ntopic: ' '\n", "topic"),
                                           ("name: a\ntopic: t\nsink:\n  root: ''\n", "sink.root"),
                                           ("name: a\ntopic: t\nsource:\n  startFromGroup: ''\n",
                                            "source.startFromGroup")])
def test_an_empty_value_is_refused_not_taken_for_the_default(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    assert config_error(path) == f"{path}: key {key!r} is empty: give it a value (an optional key may be left out)"


def test_a_list_of_names_naming_one_twice_or_an_empty_one_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "name: a\ntopic: t\nvalue:\n  subject: s\nsilver:\n  key: [id, id]\n")
    assert config_error(path) == f"{path}: key 'silver.key' names 'id' twice, got ['id', 'id']"
    path = write(tmp_path, "name: a\ntopics: [t, '']\n")
    assert config_error(path) == f"{path}: key 'topics' must be a list of names, got ['t', '']"


@pytest.mark.parametrize("name", ["orders", "orders.v2", "orders_eu-1", "_x"])
def test_good_pipeline_names(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, f"name: {name}\ntopic: t\nvalue:\n  subject: s\n")
    assert load_pipeline(path).name == name


def test_max_offsets_negative_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "source:\n  maxOffsetsPerTrigger: -5\n")
    message = config_error(path)
    assert message == f"{path}: key 'source.maxOffsetsPerTrigger' must be positive, got -5"


def test_max_offsets_zero_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "source:\n  maxOffsetsPerTrigger: 0\n")
    with pytest.raises(ConfigError, match=re.escape("key 'source.maxOffsetsPerTrigger' must be positive, got 0")):
        load_pipeline(path)


def test_parse_pipeline_in_memory() -> None:
    file = Path("/nowhere/x.yaml")
    config = parse_pipeline({"name": "x", "topic": "t", "value": {"subject": "s"}}, file)
    assert config.file == file
    assert config.value == ValueFormat(format="confluent", subject="s", max_bytes=8 * 1024 * 1024)
    with pytest.raises(ConfigError) as info:
        parse_pipeline({"name": "x", "topic": "t", "value": {"subject": "s"}, "bogus": 1}, file)
    assert str(info.value).startswith("/nowhere/x.yaml: unknown key 'bogus' (value 1); ")


# --- shared defaults --------------------------------------------------------------------------------------------

DEFAULTS = """\
kafka:
  bootstrap.servers: broker-1:9092
  security.protocol: SASL_SSL
  sasl.mechanism: SCRAM-SHA-512
  sasl.username: ingest
  sasl.password: ${DEFAULTS_TEST_PASSWORD:-pw}
value:
  registry:
    url: https://registry.example:8081
source:
  maxOffsetsPerTrigger: 5000
sink:
  root: s3a://lake/bronze
  trigger: 30 seconds
spark:
  spark.sql.shuffle.partitions: "4"
"""


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path / "conf"))
    (tmp_path / "conf" / "pipelines").mkdir(parents=True)
    return tmp_path / "conf"


def test_pipeline_files_inherit_conf_defaults_key_by_key(conf: Path) -> None:
    write(conf, DEFAULTS, "defaults.yaml")
    write(conf / "pipelines", "name: payments\ntopic: payments\nsource:\n  maxOffsetsPerTrigger: 200\n"
          "spark:\n  spark.driver.memory: 2g\n", "payments.yaml")
    config = load_pipeline("payments")
    assert config.kafka["security.protocol"] == "SASL_SSL" and config.kafka["sasl.password"] == "pw"
    assert config.value.registry["url"] == "https://registry.example:8081" and config.value.subject == "payments-value"
    assert config.source.max_offsets_per_trigger == 200  # the pipeline's own value wins
    assert config.sink.trigger == "30 seconds"
    assert config.spark == {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g"}  # merged, not replaced
    assert config.locations == ("s3a://lake/bronze/tables/payments", "s3a://lake/bronze/tables/payments_quarantine",
                                "s3a://lake/bronze/checkpoints/payments")


def test_a_file_s_start_replaces_the_start_its_defaults_give(conf: Path) -> None:
    # `ingest new` writes `source.startingOffsets: earliest` into conf/defaults.yaml; a pipeline that starts at a
    # time must not be refused for giving two starts (the file's start is the one setting, the defaults' goes).
    template = Path(__file__).resolve().parents[2] / "ingestion" / "ops" / "template" / "conf" / "defaults.yaml"
    (conf / "defaults.yaml").write_text(template.read_text())
    write(conf / "pipelines", "name: t\ntopic: t\nsource:\n  startingTimestamp: 1700000000000\n", "t.yaml")
    write(conf / "pipelines", 'name: b\ntopic: b\nsource:\n  startingOffsetsByTimestamp: \'{"b": {"0": 5}}\'\n',
          "b.yaml")
    write(conf / "pipelines", "name: l\ntopic: l\nsource:\n  startingOffsets: latest\n", "l.yaml")
    write(conf / "pipelines", "name: d\ntopic: d\n", "d.yaml")
    timed = load_pipeline("t")
    assert timed.source.starting_timestamp == 1700000000000
    assert load_pipeline("b").source.starting_offsets_by_timestamp == '{"b": {"0": 5}}'
    assert load_pipeline("l").source.starting_offsets == "latest"
    assert load_pipeline("d").source.starting_offsets == "earliest"  # inherited (and the built-in default)
    write(conf / "pipelines", "name: t\ntopic: t\nsource:\n  startingTimestamp: 1700000000000\n"
          "  startingOffsets: earliest\n", "t.yaml")
    with pytest.raises(ConfigError, match=r"give only one of .*got \['startingOffsets', 'startingTimestamp'\]"):
        load_pipeline("t")  # both in one file is still a contradiction


def test_a_pipeline_is_found_by_its_name_where_its_file_is_named_otherwise(conf: Path) -> None:
    write(conf / "pipelines", "name: orders\ntopic: orders\n", "orders-v2.yaml")
    assert load_pipeline("orders").file == conf / "pipelines" / "orders-v2.yaml"
    assert load_pipeline("orders-v2").name == "orders"
    write(conf / "pipelines", "name: orders\ntopic: other\n", "orders-v3.yaml")  # two: neither is chosen
    with pytest.raises(ConfigError, match=r"no pipeline config 'orders'.*known: orders-v2, orders-v3"):
        load_pipeline("orders")


def test_a_bad_key_in_the_defaults_is_reported_with_the_defaults_file(conf: Path) -> None:
    defaults = write(conf, DEFAULTS.replace("maxOffsetsPerTrigger: 5000", "maxOffsetPerTrigger: 5000"),
                     "defaults.yaml")
    write(conf / "pipelines", "name: a\ntopic: a\n", "a.yaml")
    with pytest.raises(ConfigError) as info:
        load_pipeline("a")
    assert str(info.value).startswith(f"{defaults}: unknown key 'source.maxOffsetPerTrigger' (value 5000)")
    write(conf, "sink:\n  trigger: 5\n  onError: maybe\n", "defaults.yaml")
    with pytest.raises(ConfigError) as info:
        load_pipeline("a")
    assert str(info.value) == f"{defaults}: key 'sink.onError' must be one of ['quarantine', 'fail'], got 'maybe'"
    write(conf, "name: shared\n", "defaults.yaml")
    with pytest.raises(ConfigError) as info:
        load_pipeline("a")
    assert str(info.value).startswith(f"{defaults}: key 'name' belongs in each pipeline's file")
    # Checked with the pipeline's settings (a value, a key of the Kafka client, a rule): the defaults file is named
    # where the key comes from it, the pipeline's where the pipeline gives it.
    pipeline = conf / "pipelines" / "a.yaml"
    for text, key in (("sink:\n  trigger: soon\n", "sink.trigger"), ("kafka:\n  client.idd: x\n", "kafka.client.idd"),
                      ("expectations:\n  - {name: a, expect: 'count(*) > 1'}\n", "expectations[0].expect")):
        write(conf, text, "defaults.yaml")
        with pytest.raises(ConfigError) as info:
            load_pipeline("a")
        assert str(info.value).startswith(f"{defaults}: ") and f"key '{key}'" in str(info.value), info.value
        assert str(info.value).endswith(f" (inherited by {pipeline})"), info.value
    write(conf, "sink:\n  trigger: 5 seconds\n", "defaults.yaml")
    write(conf / "pipelines", "name: a\ntopic: a\nsink:\n  trigger: soon\n", "a.yaml")
    with pytest.raises(ConfigError) as info:
        load_pipeline("a")
    assert str(info.value).startswith(f"{pipeline}: key 'sink.trigger'"), info.value


def test_extends_names_a_defaults_file_and_null_opts_out(conf: Path, tmp_path: Path) -> None:
    write(conf, DEFAULTS, "defaults.yaml")
    write(tmp_path, "sink:\n  trigger: 1 minute\n", "team.yaml")
    elsewhere = write(tmp_path, "extends: team.yaml\nname: x\ntopic: x\n", "x.yaml")
    assert load_pipeline(elsewhere).sink.trigger == "1 minute"
    assert load_pipeline(write(tmp_path, "name: y\ntopic: y\n", "y.yaml")).sink.trigger == "10 seconds"
    write(conf / "pipelines", "extends: null\nname: z\ntopic: z\n", "z.yaml")
    assert load_pipeline("z").kafka == {} or "security.protocol" not in load_pipeline("z").kafka
    write(tmp_path, "extends: x.yaml\nsink:\n  trigger: 1 minute\n", "team.yaml")
    with pytest.raises(ConfigError, match="goes round in a circle"):
        load_pipeline(elsewhere)
    missing = write(tmp_path, "extends: nowhere.yaml\nname: w\ntopic: w\n", "w.yaml")
    with pytest.raises(ConfigError, match=r"key 'extends' names 'nowhere.yaml'"):
        load_pipeline(missing)


# --- catalog names ----------------------------------------------------------------------------------------------

def test_catalog_names_default_the_quarantine_beside_bronze(tmp_path: Path) -> None:
    config = load_pipeline(write(tmp_path, MINIMAL + "sink:\n  catalogTable: bronze.demo\n"))
    assert config.catalog_names == ("bronze.demo", "bronze.demo_quarantine")
    named = load_pipeline(write(tmp_path, MINIMAL + "sink:\n  catalogTable: demo\n  quarantineCatalogTable: "
                                "errors.demo\n", "named.yaml"))
    assert named.catalog_names == ("demo", "errors.demo")
    assert load_pipeline(write(tmp_path, MINIMAL, "plain.yaml")).catalog_names is None


@pytest.mark.parametrize("name", ["bronze.orders.v1", "bronze-orders", "1st.orders", "bronze.", "a b"])
def test_a_catalog_name_that_is_not_a_table_name_is_refused(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, MINIMAL + f"sink:\n  catalogTable: '{name}'\n")
    assert config_error(path) == (f"{path}: key 'sink.catalogTable' must be a table name like bronze.orders "
                                  f"(letters, digits and '_', at most one '.' before the table), got {name!r}")


def test_a_quarantine_catalog_name_needs_the_bronze_one(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "sink:\n  quarantineCatalogTable: bronze.q\n")
    assert "key 'sink.quarantineCatalogTable' needs sink.catalogTable" in config_error(path)


def test_two_pipelines_with_one_catalog_name_are_both_refused(tmp_path: Path) -> None:
    from ingestion.config import load_all

    first = write(tmp_path, MINIMAL + "sink:\n  catalogTable: bronze.x\n", "a.yaml")
    second = write(tmp_path, MINIMAL.replace("demo\n", "other\n", 1) + "sink:\n  catalogTable: bronze.x\n", "b.yaml")
    configs, errors = load_all([first, second])
    assert configs == []
    assert [str(e) for e in errors] == [f"{second}: pipeline 'other' has the same catalog table 'bronze.x' as "
                                        f"{first}; each pipeline needs its own"]


# --- expectations (docs/expectations.md) ---------------------------------------------------------------------------

def test_expectations_are_read_with_warn_by_default(tmp_path: Path) -> None:
    config = load_pipeline(write(tmp_path, MINIMAL + "expectations:\n  - name: positive_qty\n    expect: qty > 0\n"
                                 "  - name: has_customer\n    expect: customer IS NOT NULL\n"
                                 "    onViolation: quarantine\n"))
    assert [(e.name, e.expect, e.on_violation) for e in config.expectations] == [
        ("positive_qty", "qty > 0", "warn"), ("has_customer", "customer IS NOT NULL", "quarantine")]


def test_sdps_drop_is_read_as_quarantine(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "expectations:\n  - name: a\n    expect: x > 0\n    onViolation: drop\n")
    assert load_pipeline(path).expectations[0].on_violation == "quarantine"


@pytest.mark.parametrize(("rules", "message"), [
    ("  - name: Bad-Name\n    expect: x > 0\n", "key 'expectations[0].name' must be lower-case letters, digits and "
     "'_', got 'Bad-Name'"),
    ("  - name: a\n    expect: x > 0\n  - name: a\n    expect: y > 0\n",
     "key 'expectations[1].name': each rule needs its own name, got 'a' twice"),
    ("  - name: a\n    expect: '  '\n", "key 'expectations[0].expect' is empty: give it a value"),
    ("  - name: a\n    expect: x > 0\n    onViolation: discard\n",
     "key 'expectations[0].onViolation' must be one of ['warn', 'quarantine', 'drop', 'fail'], got 'discard'"),
    ("  - name: a\n", "missing required key 'expectations[0].expect'"),
    ("  name: a\n", "key 'expectations' must be a list of mappings"),
])
def test_bad_expectations_are_refused_at_load(tmp_path: Path, rules: str, message: str) -> None:
    path = write(tmp_path, MINIMAL + "expectations:\n" + rules)
    found = config_error(path)
    assert found.startswith(f"{path}: ") and message in found, found
