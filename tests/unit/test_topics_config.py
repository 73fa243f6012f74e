"""Pipelines of several topics: `topics`, `topicPattern`, subject name strategies, and the resolver that reads
each topic's writer schemas from its own subject."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingestion.config import load_pipeline
from ingestion.decode.resolver import SchemaResolver
from ingestion.errors import ConfigError, SubjectNotFoundError
from ingestion.stream.context import known
from ingestion.stream.source import kafka_options


def _load(tmp_path: Path, text: str) -> object:
    text = text + "kafka:\n  bootstrap.servers: 127.0.0.1:9\n" if "kafka:" not in text else text
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return load_pipeline(path)


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    return str(info.value)


def test_a_list_of_topics_reads_each_with_its_own_subject(tmp_path: Path) -> None:
    config = _load(tmp_path, "name: orders\ntopics: [orders.eu, orders.us, orders.eu]\n")
    assert config.topics == ("orders.eu", "orders.us") and config.topic == ""  # duplicates dropped
    assert config.value_subjects(config.topics) == ["orders.eu-value", "orders.us-value"]
    assert kafka_options(known(config))["subscribe"] == "orders.eu,orders.us"
    assert "subscribePattern" not in kafka_options(known(config))
    assert config.reads == "topics 'orders.eu', 'orders.us'"


def test_one_topic_in_a_list_is_a_single_topic_pipeline(tmp_path: Path) -> None:
    config = _load(tmp_path, "name: orders\ntopics: [orders]\n")
    assert (config.topic, config.value.subject) == ("orders", "orders-value")


def test_a_pattern_subscribes_by_pattern_and_matches_as_spark_finds(tmp_path: Path) -> None:
    config = _load(tmp_path, 'name: events\ntopicPattern: "events\\\\..*"\n')
    options = kafka_options(known(config))
    assert options["subscribePattern"] == "events\\..*" and "subscribe" not in options
    # Spark 4.0's subscribePattern finds the pattern anywhere in a name (Regex.findFirstIn), as reads_topic does.
    assert config.reads_topic("events.acme") and config.reads_topic("old.events.acme")
    assert not config.reads_topic("eventsXacme")
    assert config.topics == () and config.value.subject == ""
    anchored = _load(tmp_path, 'name: events\ntopicPattern: "^events\\\\..*$"\n')
    assert anchored.reads_topic("events.acme") and not anchored.reads_topic("old.events.acme")


@pytest.mark.parametrize(("strategy", "expected"), [
    ("TopicNameStrategy", ["a-value", "b-value"]),
    ("RecordNameStrategy", ["com.acme.Event"]),
    ("TopicRecordNameStrategy", ["a-com.acme.Event", "b-com.acme.Event"]),
])
def test_subject_name_strategies(tmp_path: Path, strategy: str, expected: list[str]) -> None:
    config = _load(tmp_path, f"name: e\ntopics: [a, b]\nvalue:\n  subjectNameStrategy: {strategy}\n"
                             "  recordName: com.acme.Event\n")
    assert config.value_subjects(config.topics) == expected


def test_an_explicit_subject_serves_every_topic(tmp_path: Path) -> None:
    config = _load(tmp_path, "name: e\ntopics: [a, b]\nvalue:\n  subject: shared-value\n")
    assert config.value_subjects(config.topics) == ["shared-value"]


@pytest.mark.parametrize(("text", "said"), [
    ("name: e\n", "missing required key 'topic' (or 'topics: [a, b]', or 'topicPattern')"),
    ("name: e\ntopic: a\ntopics: [b]\n", "give only one of topic, topics and topicPattern, got ['topic', 'topics']"),
    ("name: e\ntopicPattern: 'events.(('\n", "key 'topicPattern' is not a valid regular expression"),
    ("name: e\ntopics: [a, 'b c']\n", "key 'topics': a Kafka topic name is 1-249 letters, digits, '.', '_' or '-', "
                                      "got 'b c'"),
    ("name: e\ntopics: a\n", "key 'topics' must be a list of names, got 'a'"),
    ("name: e\ntopics: [a, b]\nvalue:\n  subjectNameStrategy: RecordNameStrategy\n",
     "needs 'value.recordName'"),
    ("name: e\ntopics: [a, b]\nvalue:\n  subjectNameStrategy: TopicName\n",
     "key 'value.subjectNameStrategy' must be one of ['TopicNameStrategy', 'RecordNameStrategy', "
     "'TopicRecordNameStrategy'], got 'TopicName'"),
    ("name: e\ntopicPattern: 'e.*'\nvalue:\n  format: avro\n", "set 'value.subject' for topics matching 'e.*'"),
    ("name: e\ntopics: [a, b]\nsource:\n  startingOffsets: '{\"a\": {\"0\": 1}}'\n",
     "names topics ['a'], but the pipeline reads topics 'a', 'b' (missing: ['b'])"),
    ("name: e\ntopicPattern: 'e\\..*'\nsource:\n  startingOffsets: '{\"e.x\": {\"0\": 1}}'\n",
     "JSON positions cannot follow a topicPattern"),
    ("name: e\ntopics: [a]\nsource:\n  startingOffsets: '{\"x\": {\"0\": 1}}'\n", "(not read: ['x'])"),
])
def test_topic_settings_refused_with_file_key_and_value(tmp_path: Path, text: str, said: str) -> None:
    message = _error(tmp_path, text)
    assert said in message and str(tmp_path / "p.yaml") in message


def test_shared_defaults_cannot_hold_topics(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").write_text("topicPattern: 'x.*'\n")
    message = _error(tmp_path, "extends: d.yaml\nname: e\ntopic: a\n")
    assert "key 'topicPattern' belongs in each pipeline's file" in message


_V1 = {"type": "record", "name": "Event", "namespace": "com.acme",
       "fields": [{"name": "id", "type": "long"}]}
_V2 = {**_V1, "fields": [*_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}


class _Subjects:
    """A stand-in schema source (the registry is not what this tests): subject -> {id: schema JSON}."""

    def __init__(self, subjects: dict[str, dict[int, dict[str, object]]]) -> None:
        self.data = subjects

    def versions(self, subject: str) -> dict[int, str]:
        if subject not in self.data:
            raise SubjectNotFoundError(f"subject {subject!r} not found")
        return {i: json.dumps(s, sort_keys=True, separators=(",", ":")) for i, s in self.data[subject].items()}

    def subjects(self) -> list[str]:
        return sorted(self.data)


def test_resolver_reads_every_topics_subject_and_follows_the_newest_version(tmp_path: Path) -> None:
    config = _load(tmp_path, "name: e\ntopics: [a, b]\n")
    source = _Subjects({"a-value": {1: _V1}, "b-value": {1: _V1, 7: _V2}})
    resolver = SchemaResolver(config, source)  # type: ignore[arg-type]
    assert set(resolver.spec.writer_schemas) == {1, 7}
    assert json.loads(resolver.spec.reader_schema)["fields"][-1]["name"] == "note"


def test_resolver_learns_a_new_topics_subject_when_its_ids_arrive(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.decode import resolver as resolver_module

    config = _load(tmp_path, "name: e\ntopicPattern: 'events\\..*'\n")
    source = _Subjects({"events.a-value": {1: _V1}, "events.b-value": {1: _V1, 4: _V2}})
    resolver = SchemaResolver(config, source, topics=("events.a",))  # type: ignore[arg-type]
    assert resolver.refresh({4}, {"events.b"})  # a topic found by the pattern: its subject read with its first ids
    assert not resolver.refresh({9}, {"events.new"})  # no subject yet: a warning, records stay undecodable
    source.data["events.new-value"] = {9: _V2}
    clock = resolver_module.time.monotonic() + resolver_module.ASK_AGAIN_SECONDS + 1
    monkeypatch.setattr(resolver_module.time, "monotonic", lambda: clock)  # asked again after the window
    assert resolver.refresh({9}, {"events.new"})
    assert set(resolver.spec.writer_schemas) == {1, 4, 9}
    assert resolver.subjects == ["events.a-value", "events.b-value", "events.new-value"]


def test_resolver_names_a_named_topics_missing_subject(tmp_path: Path) -> None:
    config = _load(tmp_path, "name: e\ntopics: [a, b]\n")
    with pytest.raises(SubjectNotFoundError, match="'b-value'"):
        SchemaResolver(config, _Subjects({"a-value": {1: _V1}}))  # type: ignore[arg-type]


def test_resolver_of_a_pattern_without_topics_or_subject_says_what_to_do(tmp_path: Path) -> None:
    config = _load(tmp_path, "name: e\ntopicPattern: 'events\\..*'\n")
    with pytest.raises(Exception, match="no topic matches topicPattern"):
        SchemaResolver(config, _Subjects({}), topics=())  # type: ignore[arg-type]


_MARKS = {"a": {0: (0, 50), 1: (10, 40)}, "b": {0: (0, 7)}}


def test_replay_positions_per_topic_in_spark_json_or_pairs_of_one_topic() -> None:
    from ingestion.errors import IngestionError
    from ingestion.ops.replay import source_option
    from ingestion.positions import ending, starting

    key, value = source_option(starting('{"b": {"0": 3}}'), _MARKS)
    assert key == "startingOffsets" and json.loads(value) == {"a": {"0": -2, "1": -2}, "b": {"0": 3}}
    key, value = source_option(ending('{"a": {"1": 99, "0": -1}}'), _MARKS)  # clamped to the end; -1 kept
    assert key == "endingOffsets" and json.loads(value) == {"a": {"0": -1, "1": 40}, "b": {"0": -1}}
    one = {"b": _MARKS["b"]}
    assert json.loads(source_option(starting("0:5"), one)[1]) == {"b": {"0": 5}}
    with pytest.raises(IngestionError, match="name it with --topic"):
        source_option(starting("0:5"), _MARKS)
    with pytest.raises(IngestionError, match=r"partitions \[3\] are not partitions of 'b'"):
        source_option(starting('{"b": {"3": 1}}'), _MARKS)
    assert source_option(ending("latest"), _MARKS) == ("endingOffsets", "latest")
    assert source_option(starting("2026-01-01T00:00:00+01:00"), _MARKS) == ("startingTimestamp", "1767222000000")


def test_replay_reads_the_topics_named_and_refuses_others(tmp_path: Path) -> None:
    from ingestion.errors import IngestionError
    from ingestion.ops.replay import replay_topics
    from ingestion.positions import replay_range

    config = known(_load(tmp_path, "name: e\ntopics: [a, b]\n"))  # type: ignore[arg-type]
    whole = replay_range("earliest")
    assert replay_topics(config, None, whole) == ["a", "b"]
    assert replay_topics(config, "b", whole) == ["b"]
    assert replay_topics(config, None, replay_range('{"b": {"0": 1}}')) == ["b"]
    with pytest.raises(IngestionError, match="does not read topic 'c': it reads topics 'a', 'b'"):
        replay_topics(config, "c", whole)
    with pytest.raises(IngestionError, match="name different topics"):
        replay_topics(config, "a", replay_range('{"b": {"0": 1}}'))


def test_replay_positions_are_checked_before_a_jvm_starts(tmp_path: Path) -> None:
    from ingestion.errors import IngestionError
    from ingestion.ops.replay import check_positions

    config = known(_load(tmp_path, "name: e\ntopics: [a, b]\n"))  # type: ignore[arg-type]
    assert check_positions(config, None, '{"a": {"0": 1}}', "latest") == ["a"]
    assert check_positions(config, "b", "0:4", "latest") == ["b"]
    with pytest.raises(IngestionError, match="name it with --topic"):
        check_positions(config, None, "0:4", "latest")
    with pytest.raises(IngestionError, match="Spark's JSON form"):
        check_positions(config, None, '{"a": [1]}', "latest")


def test_an_unresolved_id_is_not_asked_for_again_at_every_batch(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.decode import resolver as resolver_module

    config = _load(tmp_path, "name: e\ntopics: [a, b]\n")
    source = _Subjects({"a-value": {1: _V1}, "b-value": {1: _V1}})
    asked: list[str] = []
    versions = source.versions
    source.versions = lambda subject: asked.append(subject) or versions(subject)  # type: ignore[method-assign]
    resolver = SchemaResolver(config, source)  # type: ignore[arg-type]
    asked.clear()
    assert not resolver.refresh({5}, {"a"})
    assert asked == ["a-value", "b-value"]
    assert not resolver.refresh({5}, {"a"}) and asked == ["a-value", "b-value"]  # not again within the window
    clock = resolver_module.time.monotonic() + resolver_module.ASK_AGAIN_SECONDS + 1
    monkeypatch.setattr(resolver_module.time, "monotonic", lambda: clock)
    source.data["b-value"][5] = _V2
    assert resolver.refresh({5}, {"b"}) and 5 in resolver.spec.writer_schemas
