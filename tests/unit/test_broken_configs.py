"""A table of broken pipeline files, each a different mistake: every one is refused at load, in one line that
names the file and the key, before Spark or Kafka would have refused it later."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestion.config import load_all, load_pipeline
from ingestion.errors import ConfigError

GOOD = """name: orders
topic: orders
kafka:
  bootstrap.servers: "127.0.0.1:9092"
value:
  subject: orders-value
"""


def _kafka(settings: str) -> str:
    """The good file with more `kafka:` settings."""
    return GOOD.replace("kafka:\n", "kafka:\n" + settings)


# mistake -> (text appended to or replacing the good file, the key the message names)
BROKEN: dict[str, tuple[str, str]] = {
    "unknown key": (GOOD + "sink:\n  tabel: /tmp/x\n", "sink.tabel"),
    "misspelt start position": (GOOD + "source:\n  startingOffset: earliest\n", "source.startingOffset"),
    "negative trigger": (GOOD + "sink:\n  trigger: -5 seconds\n", "sink.trigger"),
    "trigger without a unit": (GOOD + "sink:\n  trigger: '10'\n", "sink.trigger"),
    "zero maxOffsetsPerTrigger": (GOOD + "source:\n  maxOffsetsPerTrigger: 0\n", "source.maxOffsetsPerTrigger"),
    "maxOffsetsPerTrigger as text": (GOOD + "source:\n  maxOffsetsPerTrigger: lots\n",
                                     "source.maxOffsetsPerTrigger"),
    "startingOffsets not JSON": (GOOD + "source:\n  startingOffsets: '{0: 5'\n", "source.startingOffsets"),
    "startingOffsets of another topic": (GOOD + "source:\n  startingOffsets: '{\"other\": {\"0\": 5}}'\n",
                                         "source.startingOffsets"),
    "negative startingTimestamp": (GOOD + "source:\n  startingTimestamp: -1\n", "source.startingTimestamp"),
    "negative minPartitions": (GOOD + "source:\n  minPartitions: -2\n", "source.minPartitions"),
    "zero broker timeout": (GOOD + "source:\n  brokerTimeout: 0 seconds\n", "source.brokerTimeout"),
    "negative maxBytes": (GOOD.replace("  subject: orders-value\n", "  subject: orders-value\n  maxBytes: -1\n"),
                          "value.maxBytes"),
    "unknown decoder": (GOOD.replace("  subject: orders-value\n", "  subject: orders-value\n  decoder: rust\n"),
                        "value.decoder"),
    "value subject not a name": (GOOD.replace("  subject: orders-value\n", "  subject: [a, b]\n"), "value.subject"),
    "unknown onError": (GOOD + "sink:\n  onError: skip\n", "sink.onError"),
    "typeWidening not a boolean": (GOOD + "sink:\n  typeWidening: maybe\n", "sink.typeWidening"),
    "isolation level misspelt": (GOOD.replace("kafka:\n", "kafka:\n  isolation.level: read-committed\n"),
                                 "kafka.isolation.level"),
    "kafka. prefix on a client setting": (GOOD.replace("kafka:\n", "kafka:\n  kafka.acks: all\n"),
                                          "kafka.kafka.acks"),
    "driver memory without a unit size": (GOOD + "spark:\n  spark.driver.memory: lots\n", "spark.spark.driver.memory"),
    "two garbage collectors": (GOOD + "spark:\n  spark.driver.extraJavaOptions: -XX:+UseG1GC -XX:+UseParallelGC\n",
                               "spark.spark.driver.extraJavaOptions"),
    "registry without url": (GOOD.replace("  subject: orders-value\n",
                                          "  subject: orders-value\n  registry:\n    basic.auth.user.info: a:b\n"),
                             "value.registry"),
    "registry url not a url": (GOOD.replace("  subject: orders-value\n",
                                            "  subject: orders-value\n  registry:\n    url: not a url\n"),
                               "value.registry.url"),
    "registry url with a port that is no number": (GOOD.replace(
        "  subject: orders-value\n", "  subject: orders-value\n  registry: {url: 'http://localhost:port'}\n"),
        "value.registry.url"),
    "SASL credentials without a protocol": (_kafka("  sasl.username: a\n  sasl.password: b\n"), "kafka.sasl.username"),
    "SASL mechanism without a protocol": (_kafka("  sasl.mechanism: PLAIN\n"), "kafka.sasl.mechanism"),
    "SASL protocol without a mechanism": (_kafka("  security.protocol: SASL_SSL\n  sasl.username: a\n"
                                                 "  sasl.password: b\n"), "kafka.sasl.mechanism"),
    "session timeout not a number": (_kafka("  session.timeout.ms: soon\n"), "kafka.session.timeout.ms"),
    "negative fetch.max.bytes": (_kafka("  fetch.max.bytes: -5\n"), "kafka.fetch.max.bytes"),
    "auto commit not a boolean": (_kafka("  enable.auto.commit: maybe\n"), "kafka.enable.auto.commit"),
    "bootstrap port not a number": (GOOD.replace('"127.0.0.1:9092"', '"localhost:notaport"'),
                                    "kafka.bootstrap.servers"),
    "bootstrap server as a URL": (GOOD.replace('"127.0.0.1:9092"', '"http://127.0.0.1:9092"'),
                                  "kafka.bootstrap.servers"),
    "empty bootstrap servers": (GOOD.replace('"127.0.0.1:9092"', '""'), "kafka.bootstrap.servers"),
    "table and quarantine in one folder": (GOOD + "sink: {table: /tmp/q, quarantineTable: /tmp/q}\n",
                                           "sink.quarantineTable"),
    "quarantine as the table's file URI": (GOOD + "sink: {table: /tmp/q, quarantineTable: 'file:///tmp/x/../q/'}\n",
                                           "sink.quarantineTable"),
    "checkpoint inside the table": (GOOD + "sink: {table: /tmp/q, checkpointLocation: /tmp/q/checkpoint}\n",
                                    "sink.checkpointLocation"),
    "silver table holding bronze": (GOOD + "sink: {table: /tmp/lake/q}\nsilver: {key: id, table: /tmp/lake}\n",
                                    "silver.table"),
    "object-store table and quarantine alike": (GOOD + "sink: {table: 's3a://b/t', quarantineTable: 's3a://b/t/'}\n",
                                                "sink.quarantineTable"),
    "name with a space": (GOOD.replace("name: orders", "name: my orders"), "name"),
    "missing name": (GOOD.replace("name: orders\n", ""), "name"),
    "typo in the kafka section": (GOOD.replace("kafka:\n", "kafka:\n  client.idd: ingest-orders\n"),
                                  "kafka.client.idd"),
    "rule that closes its own parenthesis": (GOOD + 'expectations: [{name: a, expect: "amount < 0) OR (1=1", '
                                            'onViolation: fail}]\n', "expectations[0].expect"),
    "rule of two statements": (GOOD + "expectations: [{name: a, expect: \"amount > 0; DROP TABLE t\"}]\n",
                               "expectations[0].expect"),
    "rule over all rows (an aggregate)": (GOOD + "expectations: [{name: a, expect: 'count(*) > 100'}]\n",
                                          "expectations[0].expect"),
    "rule with a window function": (GOOD + "expectations: [{name: a, expect: 'sum(amount) OVER () > 1'}]\n",
                                    "expectations[0].expect"),
    "rule that goes on past its condition": (GOOD + "expectations: [{name: a, expect: 'amount > 0 LIMIT 1'}]\n",
                                             "expectations[0].expect"),
    "rule ending in a comment": (GOOD + "expectations: [{name: a, expect: 'amount > 0 -- positive'}]\n",
                                 "expectations[0].expect"),
    "deleteWhen of an aggregate": (GOOD + "silver: {key: id, deleteWhen: 'count(*) > 1'}\n", "silver.deleteWhen"),
    "deleteWhen ending in a comment": (GOOD + "silver: {key: id, deleteWhen: \"op = 'd' -- the rest\"}\n",
                                       "silver.deleteWhen"),
    "deleteWhen of two statements": (GOOD + "silver: {key: id, deleteWhen: \"status = 'X'; DROP TABLE t\"}\n",
                                     "silver.deleteWhen"),
    "truncateWhen with a subquery": (GOOD + "silver: {key: id, truncateWhen: 'op IN (SELECT 1)'}\n",
                                     "silver.truncateWhen"),
    "routed silver's deleteWhen": (GOOD.replace("topic: orders", "topics: [a, b]") + "routing:\n  by: topic\n"
                                   "  silver:\n    a: {key: id, deleteWhen: 'max(x) > 1'}\n",
                                   "routing.silver.a.deleteWhen"),
    "unset environment variable": (GOOD.replace('"127.0.0.1:9092"', '"${NO_SUCH_VARIABLE_HERE}"'),
                                   "kafka.bootstrap.servers"),
}


@pytest.mark.parametrize("mistake", sorted(BROKEN))
def test_each_broken_file_is_one_line_naming_the_file_and_the_key(mistake: str, tmp_path: Path) -> None:
    text, key = BROKEN[mistake]
    path = tmp_path / f"{mistake.replace(' ', '_')}.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    message = str(caught.value)
    assert "\n" not in message, message
    assert message.startswith(f"{path}: "), message
    assert repr(key) in message or f"'{key}" in message or f" {key} " in message, message


@pytest.mark.parametrize(("text", "said"), [
    ('name: a\ntopic: "x\nkafka:\n', "line 4, column 1: not valid YAML: found unexpected end of stream, while "
                                      "scanning a quoted scalar at line 2, column 8"),
    ("name: a\n  topic: x\n", "line 2, column 8: not valid YAML: mapping values are not allowed here"),
    ("name: a\ntopic: {x\n", "line 3, column 1: not valid YAML: expected ',' or '}', but got '<stream end>', while "
                             "parsing a flow mapping at line 2, column 8"),
    ("name: a\n\ttopic: x\n", "line 2, column 1: not valid YAML: found character '\\t' that cannot start any token "
                             "(a tab: YAML indents with spaces), while scanning for the next token"),
    ("name: a\n---\nname: b\n", "line 2, column 1: not valid YAML: but found another document, expected a single "
                                "document in the stream at line 1, column 1"),
], ids=["an unclosed quote", "an indented key", "an unclosed brace", "a tab", "two documents"])
def test_a_yaml_syntax_error_is_one_line_naming_the_file_line_and_column(text: str, said: str,
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    assert str(caught.value) == f"{path}: {said}"


def test_a_typo_in_the_kafka_section_names_the_closest_setting_of_either_client(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(GOOD.replace('  bootstrap.servers: "127.0.0.1:9092"\n', '  bootstrap.servers: "127.0.0.1:9092"\n'
                                 "  client.idd: me\n  max.poll.records: 10\n  fetch.wait.max.ms: 50\n"))
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    assert str(caught.value) == (f"{path}: unknown key 'kafka.client.idd' (value 'me'): neither librdkafka nor "
                                 "Kafka's Java client has this setting; closest: client.id")
    path.write_text(GOOD.replace("kafka:\n", "kafka:\n  max.poll.records: 10\n  fetch.wait.max.ms: 50\n"))
    assert load_pipeline(path).kafka["max.poll.records"] == "10"


def test_a_key_given_twice_is_a_warning_naming_both_lines_and_the_second_wins(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # YAML loaders keep the last of two equal keys without a word: a second `sink:` drops the first's table.
    path = tmp_path / "twice.yaml"
    path.write_text(GOOD.replace("kafka:\n", "kafka:\n  client.id: a\n  client.id: b\n") + "sink:\n  table: /tmp/a\n"
                    "source:\n  maxOffsetsPerTrigger: 5\nsink:\n  trigger: 5 seconds\n")
    with caplog.at_level("WARNING", logger="ingestion.config"):
        config = load_pipeline(path)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: key 'kafka.client.id' is given twice (lines 4 and 5); the second wins and what the first set is "
        "dropped: give it once",
        f"{path}: key 'sink' is given twice (lines 9 and 13); the second wins and what the first set is dropped: "
        "give it once"]
    assert (config.kafka["client.id"], config.sink.trigger) == ("b", "5 seconds")
    assert config.table_path != "/tmp/a"  # what the first `sink:` set is gone, as YAML has it
    caplog.clear()
    path.write_text(GOOD + "expectations:\n  - {name: a, expect: 'order_id > 0', name: b}\n")
    with caplog.at_level("WARNING", logger="ingestion.config"):
        load_pipeline(path)
    assert "key 'expectations[0].name' is given twice (lines 8 and 8)" in caplog.text
    # A merge key's keys are overridden by the keys beside it, as YAML means: no warning.
    caplog.clear()
    path.write_text(GOOD + "source: {maxOffsetsPerTrigger: 7}\n"
                    "sink:\n  <<: {trigger: 5 seconds, table: /tmp/a}\n  table: /tmp/b\n")
    with caplog.at_level("WARNING", logger="ingestion.config"):
        config = load_pipeline(path)
    assert not caplog.records
    assert (config.table_path, config.sink.trigger, config.source.max_offsets_per_trigger) == (
        "/tmp/b", "5 seconds", 7)


def test_the_table_covers_at_least_fifteen_mistakes() -> None:
    assert len(BROKEN) >= 15


def test_run_all_sees_every_bad_file_and_pipelines_that_share_a_name(tmp_path: Path) -> None:
    files = {}
    for name, text in {"a": GOOD, "b": GOOD, "c": GOOD.replace("name: orders", "name: payments") + "bad: 1\n",
                       "d": GOOD.replace("name: orders", "name: refunds")}.items():
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(text)
    configs, errors = load_all(sorted(files.values()))
    assert [c.name for c in configs] == ["refunds"]
    messages = [str(e) for e in errors]
    assert len(messages) == 2  # one for each bad file but the first of a pair
    assert any(m.startswith(f"{files['c']}: unknown key 'bad'") for m in messages)
    assert any(m.startswith(f"{files['b']}: pipeline 'orders' has the same name 'orders' as {files['a']}")
               for m in messages)


def test_a_catalog_name_or_location_one_pipeline_has_under_another_role_is_a_clash_too(tmp_path: Path) -> None:
    first, second, third = (tmp_path / f"{n}.yaml" for n in ("a", "b", "c"))
    first.write_text(GOOD + f"sink:\n  catalogTable: bronze.orders\n  table: {tmp_path / 'orders'}\n")
    # its catalogTable is the first's quarantine catalog name (bronze.orders_quarantine)
    second.write_text(GOOD.replace("name: orders", "name: refunds")
                      + "sink:\n  catalogTable: bronze.orders_quarantine\n")
    # its table is where the first keeps its quarantine (beside bronze: <sink.table>_quarantine)
    third.write_text(GOOD.replace("name: orders", "name: returns")
                     + f"sink:\n  table: {tmp_path / 'orders_quarantine'}/\n")
    configs, errors = load_all([first, second, third])
    assert configs == []
    assert [str(e) for e in errors] == [
        f"{second}: pipeline 'refunds' has 'bronze.orders_quarantine' as its catalog table, which is the quarantine "
        f"catalog table of {first}; each pipeline needs its own",
        f"{third}: pipeline 'returns' has '{tmp_path / 'orders_quarantine'}/' as its table, which is the quarantine "
        f"table of {first}; each pipeline needs its own"]


def test_locations_are_compared_as_the_folders_they_are_and_one_inside_another_clashes_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative path (as the product opens it: from the working directory), a `file:` URI and a path through
    `..` are one folder; a table in another's folder, or a checkpoint in a table, would mix their files."""
    monkeypatch.chdir(tmp_path)
    base = tmp_path / ".ingest" / "tables" / "base"
    files = [tmp_path / f"{n}.yaml" for n in ("a", "b", "c", "d", "e")]
    for i, (file, sink) in enumerate(zip(files, [
            "table: .ingest/tables/base", f"table: 'file://{base}'", f"table: {base.parent / 'x' / '..' / 'base'}",
            f"table: {base / 'inner'}", f"checkpointLocation: {base}/checkpoint"], strict=True)):
        file.write_text(GOOD.replace("name: orders", f"name: p{i}") + f"sink:\n  {sink}\n")
    configs, errors = load_all(files)
    assert configs == []
    assert [str(e) for e in errors] == [
        f"{files[1]}: pipeline 'p1' has the same table 'file://{base}' as {files[0]}; each pipeline needs its own",
        f"{files[2]}: pipeline 'p2' has the same table '{base.parent / 'x' / '..' / 'base'}' as {files[0]}; each "
        "pipeline needs its own",
        f"{files[3]}: pipeline 'p3' has '{base / 'inner'}' as its table, which is inside the table of {files[0]}; "
        "each pipeline needs its own",
        f"{files[4]}: pipeline 'p4' has '{base}/checkpoint' as its checkpoint, which is inside the table of "
        f"{files[0]}; each pipeline needs its own"]
    # Delta's own layout, a checkpoint in the table's hidden `_checkpoints` folder (readers and VACUUM pass it over)
    own = tmp_path / "g.yaml"
    own.write_text(GOOD + f"sink:\n  table: {tmp_path / 'lake' / 'c'}\n  checkpointLocation: "
                          f"{tmp_path / 'lake' / 'c' / '_checkpoints'}\n")
    assert load_pipeline(own).checkpoint_path.endswith("/c/_checkpoints")
    apart = tmp_path / "f.yaml"  # a sibling folder whose name starts with the other's is apart
    apart.write_text(GOOD.replace("name: orders", "name: p5") + f"sink:\n  table: {base}2\n")
    assert [c.name for c in load_all([files[0], apart])[0]] == ["p0", "p5"]


def test_a_copied_file_that_keeps_its_siblings_catalog_table_is_refused_before_a_run_or_onboard(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`run --all` and `onboard --all` refuse two files that share a name, table, checkpoint or catalog table; a
    single pipeline's run or onboard (its dry run too, which asks no catalog) refuses it as well."""
    from ingestion.cli import main
    from ingestion.config import check_siblings

    folder = tmp_path / "conf" / "pipelines"
    folder.mkdir(parents=True)
    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path / "conf"))
    (folder / "orders.yaml").write_text(GOOD + "sink:\n  catalogTable: bronze.orders\n")
    copy = GOOD.replace("name: orders", "name: payments").replace("topic: orders", "topic: payments")
    (folder / "payments.yaml").write_text(copy + "sink:\n  catalogTable: bronze.orders\n")
    (folder / "broken.yaml").write_text(GOOD + "bad: 1\n")  # its own error; not compared
    refusal = (f"error: {folder / 'payments.yaml'}: pipeline 'payments' has the same catalog table 'bronze.orders' "
               f"as {folder / 'orders.yaml'}; each pipeline needs its own")
    for command in (["onboard", "payments", "--dry-run"], ["run", "payments", "--available-now"]):
        capsys.readouterr()
        assert main(command) == 1
        assert capsys.readouterr().err.strip() == refusal
    (folder / "payments.yaml").write_text(copy + "sink:\n  catalogTable: bronze.payments\n")
    assert check_siblings(load_pipeline("payments")).sink.catalog_table == "bronze.payments"
    linked = tmp_path / "kept-elsewhere.yaml"  # a file of conf/pipelines/ that links elsewhere is one of them
    linked.write_text(copy + "sink:\n  catalogTable: bronze.orders\n")
    (folder / "payments.yaml").unlink()
    (folder / "payments.yaml").symlink_to(linked)
    with pytest.raises(ConfigError, match=r"has the same catalog table 'bronze\.orders' as"):
        check_siblings(load_pipeline("payments"))
    (folder / "payments.yaml").unlink()
    elsewhere = tmp_path / "orders.yaml"  # a file outside conf/pipelines/ stands alone, as `ingest run <path>`
    elsewhere.write_text(GOOD + "sink:\n  catalogTable: bronze.orders\n")
    assert check_siblings(load_pipeline(elsewhere)).name == "orders"


def test_a_pipeline_name_not_found_names_those_there_are_or_what_writes_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.config import load_pipeline
    from ingestion.errors import ConfigError

    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path / "conf"))
    folder = tmp_path / "conf" / "pipelines"
    with pytest.raises(ConfigError) as empty:
        load_pipeline("ordres")
    assert str(empty.value) == (
        f"no pipeline config 'ordres': {folder / 'ordres.yaml'} does not exist (no pipeline files in {folder}; "
        "`ingest init <topic>` writes one from what the broker knows, `ingest new <folder>` lays out a project)")
    folder.mkdir(parents=True)
    for name in ("payments", "orders"):
        (folder / f"{name}.yaml").write_text(GOOD)
    with pytest.raises(ConfigError) as typo:
        load_pipeline("ordres")
    assert str(typo.value).endswith("ordres.yaml does not exist (known: orders, payments)")


@pytest.mark.parametrize("text", [
    GOOD + "sasl.password: hunter2-canary\n",  # a secret at the wrong level: an unknown key
    GOOD + "sink:\n  basic.auth.user.info: user:hunter2-canary\n",
    GOOD.replace("kafka:\n", "kafka:\n  sasl.password: [hunter2-canary]\n"),  # not a plain value
    GOOD + "metrics:\n  secret:\n    password: hunter2-canary\n",
])
def test_rejected_secrets_are_not_shown_in_the_error(text: str, tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    assert "hunter2-canary" not in str(caught.value)
    assert "***" in str(caught.value)


def test_conditions_are_checked_on_several_threads_at_once() -> None:
    """`run --all` checks pipelines on a pool of threads: one DuckDB connection used by several at once crashed the
    process (a segmentation fault); each check has a cursor of its own."""
    import threading

    from ingestion.config.conditions import problem

    texts = ["amount > 0", "amount < 0) OR (1=1", "count(*) > 1", "status IN ('a', 'b')"]
    said: list[str | None] = []

    def check() -> None:
        for i in range(300):
            said.append(problem(texts[i % len(texts)]))

    threads = [threading.Thread(target=check) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(said) == 1800 and said.count(None) == 900


@pytest.mark.parametrize("kafka", [
    '  bootstrap.servers: "PLAINTEXT://broker-1:9092,SASL_SSL://broker-2:9093"\n',
    '  bootstrap.servers: "broker-1:9092,"\n',
    '  bootstrap.servers: "[fe80::1%eth0]:9092"\n',
    '  bootstrap.servers: "b:9092"\n  request.timeout.ms: 2147483647\n',  # the Java client's; librdkafka producers'
    '  bootstrap.servers: "b:9092"\n  security.protocol: SASL_SSL\n  sasl.kerberos.service.name: kafka\n',
])
def test_valid_kafka_settings_of_either_client_load(kafka: str, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(GOOD.replace('  bootstrap.servers: "127.0.0.1:9092"\n', kafka))
    assert load_pipeline(path).kafka
