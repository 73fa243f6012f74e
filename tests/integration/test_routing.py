"""routing: one topic into a table per route, each exactly once (docs/routing.md).

Record types per topic: Avro records of three types produced with confluent-kafka's `AvroSerializer` and
`TopicRecordNameStrategy` against the registry stand-in; each type's table holds exactly its records with its own
columns, a fourth type registered while the query runs gets its table without a restart, a record without a schema
id goes to quarantine as RouteError, and each table's commits carry `<checkpoint id>.<table>` as txnAppId.
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import PipelineConfig, load_pipeline
from ingestion.stream import checkpoint, pipeline
from tests.helpers import commits_without_txn, delta_txns, pipeline_head, routed_by_field, table_rows, wait_rows

NAMESPACE = "com.acme.orders"
TYPES: dict[str, list[dict[str, Any]]] = {
    "OrderCreated": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"}],
    "OrderPaid": [{"name": "id", "type": "string"}, {"name": "paid_at", "type": "long"},
                  {"name": "method", "type": "string"}],
    "OrderCancelled": [{"name": "id", "type": "string"}, {"name": "reason", "type": ["null", "string"]}],
    "OrderShipped": [{"name": "id", "type": "string"}, {"name": "carrier", "type": "string"},
                     {"name": "parcels", "type": "int"}],
}


def schema_text(kind: str) -> str:
    return json.dumps({"type": "record", "name": kind, "namespace": NAMESPACE, "fields": TYPES[kind]})


def record(kind: str, n: int) -> dict[str, Any]:
    """The n-th record of a type, every field set from n."""
    values: dict[str, Any] = {"id": f"{kind}-{n}"}
    for f in TYPES[kind][1:]:
        values[f["name"]] = {"amount": n + 0.25, "paid_at": 1_700_000_000_000 + n, "method": f"card-{n % 3}",
                             "reason": None if n % 4 == 0 else f"reason-{n}", "carrier": f"c{n % 2}",
                             "parcels": n % 5}[f["name"]]
    return values


class Registry:
    """The registry stand-in over HTTPS (tests/registry_server.py) with a certificate made for it."""

    def __init__(self, home: Path) -> None:
        from ingestion.dev.secure import SecureSetup
        from tests.registry_server import RegistryServer

        self.setup = SecureSetup(home)
        self.setup.prepare()
        self.server = RegistryServer(self.setup.broker_pem, self.setup.broker_pem, {"sr": "sr-secret"})
        self.url = self.server.start()

    @property
    def client_conf(self) -> dict[str, str]:
        return {"url": self.url, "basic.auth.user.info": "sr:sr-secret", "ssl.ca.location": str(self.setup.ca_file)}

    def yaml(self) -> str:
        return "".join(f"    {k}: \"{v}\"\n" for k, v in self.client_conf.items())


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Any:
    found = Registry(tmp_path_factory.mktemp("registry"))
    yield found
    found.server.stop()


class Producer:
    """Records of the types produced with AvroSerializer + TopicRecordNameStrategy (auto-registering each type's
    subject `<topic>-<full name>`), spread over the partitions; what went where remembered by (partition, offset)."""

    def __init__(self, servers: str, registry: Registry, topic: str, partitions: int = 3) -> None:
        from confluent_kafka import Producer as KafkaProducer
        from confluent_kafka.schema_registry import SchemaRegistryClient, topic_record_subject_name_strategy
        from confluent_kafka.schema_registry.avro import AvroSerializer

        self.topic, self.partitions = topic, partitions
        self.client = SchemaRegistryClient(registry.client_conf)
        self.producer = KafkaProducer({"bootstrap.servers": servers})
        self.serializers = {kind: AvroSerializer(self.client, schema_text(kind), conf={
            "subject.name.strategy": topic_record_subject_name_strategy, "auto.register.schemas": True})
            for kind in TYPES}
        self.produced: dict[tuple[int, int], tuple[str, dict[str, Any] | None]] = {}
        self._n = 0

    def send(self, kinds: list[str], raw: list[bytes] = ()) -> None:  # type: ignore[assignment]
        from confluent_kafka.serialization import MessageField, SerializationContext

        context = SerializationContext(self.topic, MessageField.VALUE)
        for kind in kinds:
            self._n += 1
            values = record(kind, self._n)
            self._produce(self.serializers[kind](values, context), kind, values)
        for value in raw:
            self._produce(value, "", None)
        self.producer.flush(30)

    def _produce(self, value: bytes, kind: str, values: dict[str, Any] | None) -> None:
        def done(err: Any, msg: Any) -> None:
            assert err is None, err
            self.produced[(msg.partition(), msg.offset())] = (kind, values)

        self.producer.produce(self.topic, value=value, key=f"k{self._n}".encode(),
                              partition=self._n % self.partitions, on_delivery=done)
        self.producer.poll(0)

    def of(self, kind: str) -> dict[tuple[int, int], dict[str, Any] | None]:
        return {k: v for k, (t, v) in self.produced.items() if t == kind}


def routed_yaml(tmp_path: Path, *, name: str, topic: str, servers: str, registry: Registry, sink: str = "",
                source: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(pipeline_head(name, topic, servers) + f"""source:
  startingOffsets: earliest
{source}value:
  format: confluent
  subjectNameStrategy: TopicRecordNameStrategy
  registry:
{registry.yaml()}key:
  format: string
sink:
  root: {tmp_path / 'lake'}
  trigger: 1 second
{sink}routing:
  by: recordName
  tables: {{OrderCreated: {name}_created}}
""")
    return path


def route_rows(spark: Any, config: PipelineConfig, kind: str) -> list[Any]:
    return table_rows(config.route_path(config.route_table(kind)))


def assert_route_tables(spark: Any, config: PipelineConfig, produced: Producer, kinds: list[str]) -> None:
    """Each type's table holds exactly its records, every field equal to what was produced, its own columns."""
    for kind in kinds:
        rows = route_rows(spark, config, kind)
        seen = Counter((r["_kafka_partition"], r["_kafka_offset"]) for r in rows)
        assert all(n == 1 for n in seen.values()), (kind, [k for k, n in seen.items() if n > 1])
        assert set(seen) == set(produced.of(kind)), kind
        for row in rows:
            want = produced.of(kind)[(row["_kafka_partition"], row["_kafka_offset"])]
            assert {f["name"]: row[f["name"]] for f in TYPES[kind]} == want
        columns = {f["name"] for f in TYPES[kind]}
        others = {f["name"] for k, fields in TYPES.items() if k != kind for f in fields} - columns
        assert columns <= set(rows[0].asDict()) and not others & set(rows[0].asDict()), kind


def test_record_types_of_one_topic_land_each_in_its_table_and_a_new_type_gets_one_mid_run(
        spark: Any, kafka_servers: str, make_topic: Any, registry: Registry, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produced = Producer(kafka_servers, registry, topic)
    kinds = ["OrderCreated", "OrderPaid", "OrderCancelled"]
    # A type the registry knows under another subject only (RecordNameStrategy's): no table can read its subjects.
    stray = json.dumps({"type": "record", "name": "Stray", "namespace": NAMESPACE,
                        "fields": [{"name": "id", "type": "string"}]})
    stray_id = registry.server.register(f"{NAMESPACE}.Stray", stray)
    produced.send([random.Random(7).choice(kinds) for _ in range(40)] + kinds,
                  raw=[b"not avro", stray_id.to_bytes(5, "big") + b"\x02x"])
    config = load_pipeline(routed_yaml(tmp_path, name="shop", topic=topic, servers=kafka_servers, registry=registry))
    assert config.route_table("OrderCreated") == "shop_created" and config.route_table("OrderPaid") == "shop_orderpaid"
    running = pipeline.start(spark, config)
    try:
        for kind in kinds:
            wait_rows(config.route_path(config.route_table(kind)), len(produced.of(kind)))
        produced.send(["OrderShipped"] * 5 + ["OrderPaid"] * 2)  # a type registered now: its table comes mid-run
        wait_rows(config.route_path("shop_ordershipped"), 5)
        wait_rows(config.route_path("shop_orderpaid"), len(produced.of("OrderPaid")))
        assert running.query.isActive
    finally:
        pipeline.stop(spark, running)
    assert_route_tables(spark, config, produced, [*kinds, "OrderShipped"])
    failed = {bytes(r["_kafka_value"]): r for r in table_rows(config.quarantine_path)}
    assert sorted(failed) == sorted([b"not avro", stray_id.to_bytes(5, "big") + b"\x02x"])
    assert {r["_error_class"] for r in failed.values()} == {"RouteError"}
    assert "no Confluent header" in failed[b"not avro"]["_error_message"]
    assert f"{topic}-{NAMESPACE}.Stray" in failed[stray_id.to_bytes(5, "big") + b"\x02x"]["_error_message"]
    app_id = checkpoint.app_id(config.checkpoint_path, config.name, config.spark)
    for table in ("shop_created", "shop_orderpaid", "shop_ordercancelled", "shop_ordershipped"):
        txns = [(a, v) for _, a, v in delta_txns(Path(config.route_path(table)))]
        assert txns and {a for a, _ in txns} == {f"{app_id}.{table}"}, txns
        assert len(set(txns)) == len(txns)  # each (txnAppId, txnVersion) once
    assert not Path(config.table_path).exists()  # no table of the pipeline's own name: a table per route


def test_routing_by_header_splits_on_both_write_paths_and_quarantines_a_record_without_it(
        spark: Any, kafka_servers: str, make_topic: Any, orders_schema: dict[str, Any], tmp_path: Path) -> None:
    from confluent_kafka import Producer as KafkaProducer
    from fastavro import parse_schema

    from ingestion.decode.wire import encode
    from ingestion.dev.samples import avro_body, order
    from ingestion.stream.batch import WritePath
    from tests.helpers import as_produced

    topic = make_topic(partitions=2)
    producer = KafkaProducer({"bootstrap.servers": kafka_servers})
    parsed = parse_schema(orders_schema)
    produced: dict[tuple[int, int], tuple[str | None, dict[str, Any]]] = {}
    for seq in range(30):
        values = order(seq, random.Random(seq))
        kind = None if seq == 29 else ("Created", "paid-v2")[seq % 2]
        headers = [("trace", b"x")] + ([("event-type", kind.encode())] if kind else [])

        def done(err: Any, msg: Any, kind: str | None = kind, values: dict[str, Any] = values) -> None:
            assert err is None
            produced[(msg.partition(), msg.offset())] = (kind, values)

        producer.produce(topic, value=encode(1, avro_body(parsed, values)), key=f"k{seq}", headers=headers,
                         partition=seq % 2, on_delivery=done)
        producer.flush(30)
    config = header_yaml(tmp_path, "hdr", topic, kafka_servers)
    ran = pipeline.run(spark, config, available_now=True)
    paths = {b.path for b in ran.batches if b.rows}
    assert paths == {WritePath.SPARK, WritePath.DRIVER}  # new routes' tables by Spark, then the driver's batches
    assert sum(b.tables["hdr_created"][0] for b in ran.batches) == 15  # per table, as MLflow's rows_<table>
    for kind, table in (("Created", "hdr_created"), ("paid-v2", "hdr_paid_v2")):
        rows = table_rows(config.route_path(table))
        want = {k: v for k, (t, v) in produced.items() if t == kind}
        assert sorted((r["_kafka_partition"], r["_kafka_offset"]) for r in rows) == sorted(want)
        assert all(as_produced(r.asDict(recursive=False)) == want[(r["_kafka_partition"], r["_kafka_offset"])]
                   for r in rows)
    failed = table_rows(config.quarantine_path)
    assert [(r["_kafka_partition"], r["_kafka_offset"], r["_error_class"]) for r in failed] == \
        [(p, o, "RouteError") for (p, o), (t, _) in produced.items() if t is None]
    assert "'event-type'" in failed[0]["_error_message"]

    # A lost checkpoint whose newest batch a kill left in some tables only (its commit to hdr_paid_v2 never made):
    # the new checkpoint undoes that batch in every table and reads it again, each record once in its table.
    log = Path(config.route_path("hdr_paid_v2")) / "_delta_log"
    newest = max(int(f.stem) for f in log.glob("*.json"))
    for leftover in (log / f"{newest:020d}.json", log / f".{newest:020d}.json.crc", log / f"{newest:020d}.crc"):
        leftover.unlink(missing_ok=True)
    assert len(held(spark, config.route_path("hdr_paid_v2"))) < 15
    shutil.move(config.checkpoint_path, config.checkpoint_path + ".aside")
    again = pipeline.run(spark, config, available_now=True)
    assert 0 < sum(b.rows + b.quarantined for b in again.batches) < 30  # the newest batch again, not everything
    assert_each_once_in_its_table(spark, config, {k: (t, 0) for k, (t, _) in produced.items()})


EVENT_SCHEMA = {"type": "object", "properties": {"kind": {"type": "string"}, "id": {"type": "integer"},
                                                 "note": {"type": "string"}}}


def test_route_keys_are_the_same_on_both_paths(spark: Any, tmp_path: Path) -> None:
    """The Spark expression and the driver's Python read the same route key from every kind of record."""
    import pyarrow as pa

    from ingestion.columns import KAFKA_SOURCE_SCHEMA
    from ingestion.decode import routes
    from ingestion.kafka.fetch import SOURCE_ARROW_SCHEMA

    schema = tmp_path / "e.json"
    schema.write_text(json.dumps(EVENT_SCHEMA))
    values = [b'{"kind": "Sale", "id": 1}', b'{"kind": 7}', b'{"id": 2}', b'{"kind": ""}', b"not json", None,
              b'{"kind": null}', b"\x00\x00\x00\x01\x02{}", b"\x00\x00\x00\x00\x05{\"kind\": \"Refund\"}"]
    headers = [[{"key": "t", "value": b"A"}], [], None, [{"key": "t", "value": b""}], [{"key": "u", "value": b"B"}],
               [{"key": "t", "value": b"C"}], [{"key": "t", "value": None}], [], []]
    rows = [{"key": None if i % 3 else f"k{i}".encode(), "value": v, "topic": f"t{i % 2}", "partition": 0,
             "offset": i, "timestamp": None, "timestampType": 0, "headers": h}
            for i, (v, h) in enumerate(zip(values, headers, strict=True))]
    source = pa.RecordBatch.from_pylist(rows, schema=SOURCE_ARROW_SCHEMA)
    frame = spark.createDataFrame(rows, schema=KAFKA_SOURCE_SCHEMA)
    cases = {"field: kind": ("json", f"schemaFile: {schema}", "{by: field, field: kind}"),
             "jsonschema": ("jsonschema", "subject: s", "{by: field, field: kind}"),
             "header": ("confluent", "subject: s", "{by: header, header: t}"),
             "key": ("confluent", "subject: s", "{by: field, field: _kafka_key}"),
             "record": ("confluent", "subjectNameStrategy: RecordNameStrategy", "{by: recordName}")}
    for name, (value_format, more, routing) in cases.items():
        file = tmp_path / "k.yaml"
        file.write_text(f"name: k\ntopics: [t0, t1]\nvalue: {{format: {value_format}, {more}}}\nrouting: {routing}\n")
        config = load_pipeline(file)
        in_spark = [r[0] for r in frame.select(routes.key_column(config)).collect()]
        assert in_spark == routes.keys_of(config, source), name
        assert any(k is None for k in in_spark) and any(k is not None for k in in_spark), name
    assert in_spark == [None] * 7 + ["258", "5"]  # recordName: the schema id of the Confluent header


def test_topics_as_routes_a_table_per_topic_and_a_topic_created_mid_run(
        spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path) -> None:
    from confluent_kafka import Producer as KafkaProducer

    from ingestion.kafka.clients import create_topic

    schema = tmp_path / "event.json"
    schema.write_text(json.dumps(EVENT_SCHEMA))
    first = make_topic(partitions=1)
    prefix = first  # unique to this run: a cluster the suite reuses (KAFKA_BOOTSTRAP_SERVERS) keeps older runs' topics
    path = tmp_path / "tenants.yaml"
    path.write_text(f"""name: tenants
topicPattern: "^{prefix}.*"
kafka:
  bootstrap.servers: "{kafka_servers}"
value:
  format: json
  schemaFile: {schema}
sink:
  root: {tmp_path / 'lake'}
  trigger: 1 second
routing:
  by: topic
  table: "raw_{{route}}"
""")
    config = load_pipeline(path)
    producer = KafkaProducer({"bootstrap.servers": kafka_servers})

    def send(topic: str, n: int) -> None:
        for i in range(n):
            producer.produce(topic, value=json.dumps({"kind": topic, "id": i}).encode())
        producer.flush(30)

    send(first, 3)
    running = pipeline.start(spark, config)
    try:
        wait_rows(config.route_path(config.route_table(first)), 3)
        later = f"{prefix}-Later.2"
        create_topic({"bootstrap.servers": kafka_servers}, later, 2)
        send(later, 4)
        wait_rows(config.route_path(config.route_table(later)), 4, timeout=180)
        assert running.query.isActive
    finally:
        pipeline.stop(spark, running)
    for topic, n in ((first, 3), (later, 4)):
        rows = table_rows(config.route_path(config.route_table(topic)))
        assert sorted(r["id"] for r in rows) == list(range(n)) and {r["_kafka_topic"] for r in rows} == {topic}
    assert config.route_table(later) == "raw_" + later.replace("-", "_").replace(".", "_").lower()


def test_routing_by_a_field_of_json_records(spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path) -> None:
    from confluent_kafka import Producer as KafkaProducer

    schema = tmp_path / "event.json"
    schema.write_text(json.dumps(EVENT_SCHEMA))
    topic = make_topic(partitions=2)
    producer = KafkaProducer({"bootstrap.servers": kafka_servers})
    sent = [{"kind": ("Sale", "Refund")[i % 2], "id": i, "note": f"n{i}"} for i in range(12)] + [{"id": 99}]
    for doc in sent:
        producer.produce(topic, value=json.dumps(doc).encode(), partition=doc["id"] % 2)
    producer.flush(30)
    config = load_pipeline(routed_by_field(tmp_path, "outbox", topic, kafka_servers, schema,
                                           routing="  tables: {Refund: refunds}\n"))
    pipeline.run(spark, config, available_now=True)
    for kind, table in (("Sale", "outbox_sale"), ("Refund", "refunds")):
        rows = table_rows(config.route_path(table))
        assert sorted((r["id"], r["kind"], r["note"]) for r in rows) == \
            [(d["id"], kind, d["note"]) for d in sent if d.get("kind") == kind]
    failed = table_rows(config.quarantine_path)
    assert [(r["_error_class"], json.loads(r["_kafka_value"])) for r in failed] == [("RouteError", {"id": 99})]


def test_init_scaffolds_a_routed_pipeline_for_a_topic_of_several_record_subjects(
        kafka_servers: str, make_topic: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.ops import init

    topic = make_topic(partitions=3)
    conf, schemas = tmp_path / "conf", tmp_path / "schemas"
    conf.mkdir()
    (conf / "defaults.yaml").write_text(json.dumps({"kafka": {"bootstrap.servers": kafka_servers}}))
    for n, kind in enumerate(("OrderCreated", "OrderPaid"), start=1):
        folder = schemas / f"{topic}-{NAMESPACE}.{kind}"
        folder.mkdir(parents=True)
        (folder / f"{n}.avsc").write_text(schema_text(kind))
    monkeypatch.setenv("INGEST_CONF_DIR", str(conf))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    draft = init.draft(topic, "shop")
    config = draft.config
    assert config.routing is not None and config.routing.by == "recordName"
    assert config.value.subject_name_strategy == "TopicRecordNameStrategy" and config.value.subject == ""
    assert config.routed("OrderPaid", record=f"{NAMESPACE}.OrderPaid").value_subjects([topic]) == \
        [f"{topic}-{NAMESPACE}.OrderPaid"]
    assert "shop_ordercreated, shop_orderpaid" in draft.text and "3 partitions; values of 2 record types" in draft.text

    from ingestion.ops.onboard import onboard

    (written,) = init.write([draft])
    report = onboard(lambda: pytest.fail("a dry run starts no JVM"), load_pipeline(written), dry_run=True)
    assert any(line.startswith("routing by recordName: a table per route at ") for line in report.lines), report.lines


# --- operating a routed pipeline: replay, rewind, maintain and quarantine reprocess act on all of its tables ---

def send_by_header(servers: str, topic: str, kinds: dict[int, str | None], schema_id: Any = lambda seq: 1,
                   produced: dict[tuple[int, int], tuple[str | None, int]] | None = None
                   ) -> dict[tuple[int, int], tuple[str | None, int]]:
    """Orders (`dev.samples.order(seq)`) with header event-type set to kinds[seq] (none when None), over two
    partitions; (partition, offset) -> (kind, seq)."""
    from confluent_kafka import Producer as KafkaProducer

    from ingestion.decode.wire import encode
    from ingestion.dev.samples import avro_body, load_schema, order
    from tests.conftest import REPO

    parsed = load_schema(str(REPO / "schemas" / "orders-value" / "1.avsc"))
    producer = KafkaProducer({"bootstrap.servers": servers})
    found = {} if produced is None else produced
    for seq, kind in kinds.items():
        def done(err: Any, msg: Any, kind: str | None = kind, seq: int = seq) -> None:
            assert err is None
            found[(msg.partition(), msg.offset())] = (kind, seq)

        producer.produce(topic, value=encode(schema_id(seq), avro_body(parsed, order(seq, random.Random(seq)))),
                         key=f"k{seq}", headers=[("event-type", kind.encode())] if kind else [],
                         partition=seq % 2, on_delivery=done)
    producer.flush(30)
    return found


def header_yaml(tmp_path: Path, name: str, topic: str, servers: str) -> PipelineConfig:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""name: {name}
topic: {topic}
kafka:
  bootstrap.servers: "{servers}"
source:
  maxOffsetsPerTrigger: 8
value:
  subject: orders-value
key:
  format: string
sink:
  root: {tmp_path / 'lake'}
routing:
  by: header
  header: event-type
""")
    return load_pipeline(path)


def held(spark: Any, path: str) -> Counter[tuple[int, int]]:
    return Counter((r["_kafka_partition"], r["_kafka_offset"]) for r in table_rows(path))


def assert_each_once_in_its_table(spark: Any, config: PipelineConfig,
                                  produced: dict[tuple[int, int], tuple[str | None, int]]) -> None:
    """Each record once, in its kind's table (quarantine for none), and verify agrees."""
    from ingestion.delta.rs_reads import DeltaRsReader
    from ingestion.ops import verify

    kinds = {kind for kind, _ in produced.values()}
    for kind in kinds:
        path = config.quarantine_path if kind is None else config.route_path(config.route_table(kind))
        found = held(spark, path)
        assert found == Counter(k for k, (t, _) in produced.items() if t == kind), kind
    audit = verify.audit(DeltaRsReader(), config)
    assert audit.ok, verify.render(audit)


def stream_commits(config: PipelineConfig, table: str) -> dict[int, int]:
    """Batch id -> the commit's own clock (ms) of a route table's stream commits."""
    from deltalake import DeltaTable

    out = {}
    for commit in DeltaTable(config.route_path(table)).history():
        body = json.loads(commit.get("userMetadata") or "{}").get("ingest", {})
        if body.get("kind") == "stream":
            out[int(body["batch_id"])] = int(commit["timestamp"])
    return out


def test_replay_rewind_and_maintain_act_on_every_route_table_together(
        spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path) -> None:
    import datetime as dt

    from deltalake import DeltaTable

    from ingestion.ops import maintain, replay, rewind

    topic = make_topic(partitions=2)
    # 24 records, 3 batches of 8; the record without a header in the first (the Spark path's, which makes the
    # tables), so the later batches go the driver's path
    produced = send_by_header(kafka_servers, topic, {seq: (None if seq == 5 else ("Created", "Paid")[seq % 3 == 0])
                                                     for seq in range(24)})
    config = header_yaml(tmp_path, "ops", topic, kafka_servers)
    ran = pipeline.run(spark, config, available_now=True)
    assert len([b for b in ran.batches if b.rows]) >= 3
    assert_each_once_in_its_table(spark, config, produced)

    # maintain: every route table and quarantine, each with its own maintenance commit
    report = maintain.maintain(spark, config, vacuum=False, with_metrics=False)
    assert sorted(t.path for t in report.tables) == sorted(
        [config.route_path("ops_created"), config.route_path("ops_paid"), config.quarantine_path])
    for table in ("ops_created", "ops_paid"):
        assert ledger_kinds(config.route_path(table))[-1] == "optimize"
    assert_each_once_in_its_table(spark, config, produced)

    # replay: a gap made behind the pipeline's back is filled in its route's table; a route first seen by the
    # replay gets its table; what the tables hold is not written again
    DeltaTable(config.route_path("ops_created")).delete("_kafka_partition = 1 AND _kafka_offset < 5")
    gap = sum(1 for (p, o), (t, _) in produced.items() if t == "Created" and p == 1 and o < 5)
    send_by_header(kafka_servers, topic, {seq: "Shipped" for seq in range(24, 28)}, produced=produced)
    result = replay.replay(spark, config, start="earliest")
    assert (result.read, result.written, result.quarantined, dict(result.tables)) == \
        (28, gap + 4, 0, {"ops_created": gap, "ops_shipped": 4})
    assert_each_once_in_its_table(spark, config, produced)
    for table in ("ops_created", "ops_shipped"):  # each replay commit carries the replay's transaction id
        assert delta_txns(Path(config.route_path(table)))[-1][1:] == (f"replay.{table}", 0)
    again = replay.replay(spark, config, start="earliest")
    assert (again.already_present, again.written, again.tables) == (28, 0, {})

    # rewind to a time between two batches: every table (the replay's new one emptied) and quarantine go back
    # together, and the next run rewrites each record from there once, into its route's table
    batches = stream_commits(config, "ops_created")
    paid = stream_commits(config, "ops_paid")
    cut = max(batches[1], paid.get(1, 0))
    assert min(t for b, t in {**batches, **paid}.items() if b >= 2) > cut
    done = rewind.rewind(spark, config, to_timestamp=dt.datetime.fromtimestamp(cut / 1000, dt.UTC))
    assert done.checkpoint_moved_to is not None and done.tables["ops_shipped"] == -1
    assert (done.tables["ops_created"], done.tables["ops_paid"]) == (2, 2)  # made, batch 0, batch 1
    assert "ops_shipped emptied" in rewind.render(done, config.name)
    kept = {k for k, (_, seq) in produced.items() if seq < 16}  # batches 0 and 1: offsets 0-7 of each partition
    assert held(spark, config.route_path("ops_created")) + held(spark, config.route_path("ops_paid")) + \
        held(spark, config.quarantine_path) == Counter(kept)
    assert held(spark, config.route_path("ops_shipped")) == Counter()
    send_by_header(kafka_servers, topic, {seq: ("Created", "Paid")[seq % 2] for seq in range(28, 32)},
                   produced=produced)
    pipeline.run(spark, config, available_now=True)
    assert_each_once_in_its_table(spark, config, produced)
    app_id = checkpoint.app_id(config.checkpoint_path, config.name, config.spark)
    txns = delta_txns(Path(config.route_path("ops_shipped")))
    # emptied by the rewind, rewritten by the new checkpoint's stream
    assert {a for _, a, _ in txns} == {"replay.ops_shipped", f"{app_id}.ops_shipped"}
    assert [op for _, op in commits_without_txn(Path(config.route_path("ops_shipped")))] == ["DELETE"]  # rewind's


def ledger_kinds(path: str) -> list[str]:
    from ingestion.delta import rs_reads

    return [r.kind for r in rs_reads.history(path) or []]


def test_quarantine_reprocess_moves_each_record_into_its_route_table(
        spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.ops import quarantine
    from tests.conftest import REPO

    schemas = tmp_path / "schemas"
    shutil.copytree(REPO / "schemas", schemas)
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    topic = make_topic(partitions=2)
    kinds = {seq: None if seq == 9 else ("Created", "Paid")[seq % 2] for seq in range(12)}
    produced = send_by_header(kafka_servers, topic, kinds, schema_id=lambda seq: 7 if seq in (0, 3, 8) else 1)
    config = header_yaml(tmp_path, "redo", topic, kafka_servers)
    pipeline.run(spark, config, available_now=True)
    failed = table_rows(config.quarantine_path)
    assert sorted(r["_error_class"] for r in failed) == ["RouteError"] + ["UnknownSchemaError"] * 3

    (schemas / "orders-value" / "7.avsc").write_text((REPO / "schemas" / "orders-value" / "1.avsc").read_text())
    result = quarantine.redecode(spark, config)
    assert (result.examined, result.redecoded, result.already_in_bronze, result.still_failing) == (4, 3, 0, 1)
    assert dict(result.tables) == {"redo_created": 2, "redo_paid": 1}  # seq 0, 8 (Created), 4 (Paid)
    assert "route tables: redo_created 2, redo_paid 1" in quarantine.render_redecode(result)
    assert_each_once_in_its_table(spark, config, produced)
    rows = table_rows(config.route_path("redo_created"))
    assert sorted(r["_schema_id"] for r in rows) == [1] * 4 + [7] * 2
    assert ledger_kinds(config.route_path("redo_created"))[-1] == "redecode"
    assert delta_txns(Path(config.route_path("redo_created")))[-1][1:] == ("redecode.redo_created", 0)
    merges = {a for _, a, _ in delta_txns(Path(config.quarantine_path)) if a.startswith("redecode")}
    assert merges == {"redecode.redo_created", "redecode.redo_paid"}  # each route's MERGE of quarantine, its own id
    assert commits_without_txn(Path(config.quarantine_path)) == []
    again = quarantine.redecode(spark, config)
    assert (again.examined, again.redecoded, again.still_failing) == (1, 0, 1)
