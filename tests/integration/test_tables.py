"""The bronze table a pipeline creates: Delta statistics on the columns that skip files, not on every column."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import types as T

from ingestion.columns import KAFKA_SOURCE_SCHEMA
from ingestion.config import load_pipeline
from ingestion.decode import bronze
from ingestion.decode.python_decoder import decode_in_python
from ingestion.decode.spec import DecodeSpec
from ingestion.delta import rs_tables, tables
from ingestion.dev.samples import produce_orders
from ingestion.runtime import delta_txn
from ingestion.schema import protobuf_schemas
from ingestion.stream import context, pipeline, setup
from tests.conftest import pipeline_yaml
from tests.helpers import table_rows

pytestmark = pytest.mark.integration

# The orders schema's whole numbers and times (customer_id, placed_at), after the Kafka and ingest columns; not its
# strings, enum, decimal, array or optional note.
ORDERS_STATS = ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_batch_id",
                "_ingested_at", "customer_id", "placed_at"]


def _file_stats(table: str) -> list[dict[str, object]]:
    """The statistics of every data file added to the table, as its commits wrote them."""
    found = []
    for commit in sorted(Path(table, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add.get("stats"):
                found.append(json.loads(add["stats"]))
    return found


def test_bronze_has_statistics_on_coordinates_times_and_whole_numbers(spark, kafka_servers, make_topic,
                                                                      orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))

    pipeline.run(spark, config, available_now=True)

    properties = DeltaTable.forPath(spark, config.table_path).detail().first()["properties"]
    assert properties[tables.STATS_PROPERTY] == ",".join(ORDERS_STATS)
    stats = _file_stats(config.table_path)
    assert stats and sum(int(s["numRecords"]) for s in stats) == 40  # the writer's count check reads these
    for s in stats:
        assert sorted(s["minValues"]) == sorted(ORDERS_STATS)
        assert sorted(s["nullCount"]) == sorted(ORDERS_STATS)
    quarantine = DeltaTable.forPath(spark, config.quarantine_path).detail().first()["properties"]
    assert tables.STATS_PROPERTY not in quarantine  # few rows, Delta's defaults


def test_partition_columns_and_configured_statistics_are_left_out(spark, kafka_servers, tmp_path: Path) -> None:
    spec = setup.resolver(spark, context.known(load_pipeline(pipeline_yaml(tmp_path / "a", topic="t",
                                                                        servers=kafka_servers)))).spec
    partitioned = load_pipeline(pipeline_yaml(tmp_path / "b", topic="t", servers=kafka_servers,
                                              sink="  partitionBy: [_kafka_partition]\n"))
    bronze_plan = setup.plans(spark, partitioned, spec)[0]
    assert bronze_plan.properties[tables.STATS_PROPERTY] == ",".join(c for c in ORDERS_STATS
                                                                     if c != "_kafka_partition")

    for key in tables.STATS_PROPERTIES:  # either of Delta's two settings means the user chose
        configured = load_pipeline(pipeline_yaml(tmp_path / key, topic="t", servers=kafka_servers,
                                                 sink=f"  tableProperties:\n    {key}: '5'\n"))
        properties = setup.plans(spark, configured, spec)[0].properties
        assert properties.get(key) == "5"
        assert set(properties) & set(tables.STATS_PROPERTIES) == {key}


def _protobuf_document() -> str:
    folder = Path(__file__).parents[1] / "protobuf"
    files = {"shop/v1/common.proto": (folder / "common.proto").read_text(),
             "shop/v1/shop.proto": (folder / "shop.proto").read_text()}
    return protobuf_schemas.document("shop/v1/shop.proto", files)


@pytest.mark.parametrize("key_format", ["none", "bytes", "string", "avro", "protobuf", "json"])
def test_table_schemas_without_a_jvm_equal_the_schemas_of_the_rows_spark_makes(spark, orders_schema,
                                                                             key_format: str) -> None:
    """Tables are created before the session starts, from schemas computed in Python: each must be exactly the
    schema (types, nullability, order) of the rows a batch writes, else the first batch's append would change it."""
    orders = json.dumps(orders_schema)
    key_avro = json.dumps({"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]})
    if key_format == "protobuf":
        document = _protobuf_document()
        spec = DecodeSpec({3: document}, document, 1000, False, key_format="protobuf", key_schemas={4: document},
                          key_reader=document, value_format="protobuf", message_name="shop.v1.Order",
                          key_message_name="shop.v1.Address")
    elif key_format == "json":  # a JSON Schema value (value.format jsonschema), a string key
        from tests.unit.test_json import spec as json_spec

        spec = json_spec()
    else:
        keys = {"key_schemas": {2: key_avro}, "key_reader": key_avro} if key_format == "avro" else {}
        spec = DecodeSpec({1: orders}, orders, 1000, False, key_format=key_format, **keys)  # type: ignore[arg-type]
    decoded = decode_in_python(spark.createDataFrame([], KAFKA_SOURCE_SCHEMA), spec)
    now = dt.datetime.now(dt.UTC)
    made = (bronze.bronze_rows(decoded, batch_id=0, ingested_at=now).schema,
            bronze.quarantine_rows(decoded, batch_id=0, ingested_at=now).schema)

    assert bronze.table_schemas(spec) == made
    assert [f.nullable for f in made[0]] == [f.nullable for f in bronze.table_schemas(spec)[0]]


def _log_actions(path: str) -> dict[str, dict[str, object]]:
    lines = (Path(path) / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    return {name: body for line in lines for name, body in json.loads(line).items() if name != "commitInfo"}


@pytest.mark.parametrize("ntz", [False, True])
def test_a_table_made_without_a_jvm_is_the_one_spark_makes(spark, tmp_path: Path, ntz: bool) -> None:
    """delta-rs makes the tables of legacy protocols (the same protocol, schema, partitioning, properties and
    comment as Spark's Delta would write) and leaves the rest to Spark: a timestamp_ntz column needs table
    features, which delta-rs would list without the legacy ones Spark counts as in use."""
    assert not rs_tables.create(str(tmp_path / "cdf"), T.StructType([T.StructField("id", T.LongType())]),
                                properties={"delta.enableChangeDataFeed": "true"})  # Spark writes (1, 7) there
    schema = T.StructType([T.StructField("id", T.LongType(), False),
                           T.StructField("at", T.TimestampNTZType() if ntz else T.TimestampType()),
                           T.StructField("inner", T.StructType([T.StructField("x", T.LongType(), False)]))])
    # the project's own property (a Protobuf table's message) keeps the legacy protocol in both
    properties = {"delta.checkpointInterval": "7", protobuf_schemas.TABLE_PROPERTY: "bar.shop.Order"}
    plan = tables.TablePlan(str(tmp_path / "rs"), schema, ("id",), properties, False, "hi")
    made = rs_tables.create(plan.path, plan.schema, partition_by=plan.partition_by, properties=plan.properties,
                            comment=plan.comment)
    assert made is not ntz
    if made:
        tables._create_with_spark(spark, dataclasses.replace(plan, path=str(tmp_path / "spark")))
        ours, spark_made = _log_actions(plan.path), _log_actions(str(tmp_path / "spark"))
        assert ours["protocol"] == spark_made["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
        for key in ("schemaString", "partitionColumns", "configuration", "description"):
            assert ours["metaData"][key] == spark_made["metaData"][key], key  # type: ignore[index]
        spark.range(3).selectExpr("id", "current_timestamp() AS at", "named_struct('x', id) AS inner") \
            .write.format("delta").mode("append").save(plan.path)
        assert rs_tables.state(plan.path).exists and len(table_rows(plan.path)) == 3


def test_a_table_made_without_a_jvm_has_the_checksum_delta_would_write(spark, tmp_path: Path) -> None:
    """delta-rs writes no checksum (`.crc`); without one, the JVM's first transaction on a new table reconstructed
    its whole state with Spark jobs (seconds of a new pipeline's first batch). The checksum `create` writes is the
    one Delta computes (its own validation agrees, at the creation and after a commit), and the first transaction
    reads the table, checks its set transactions and commits with no Spark job but its write's."""
    path = str(tmp_path / "t")
    schema = T.StructType([T.StructField("id", T.LongType())])
    assert rs_tables.create(path, schema, properties={"delta.checkpointInterval": "7"}, comment="c")
    assert (tmp_path / "t" / "_delta_log" / f"{0:020d}.crc").exists()
    assert not rs_tables.write_first_checksum(path)  # there already
    log = delta_txn.delta_log(spark, path)
    created = log.getSnapshotAt(0, *(getattr(log, f"getSnapshotAt$default${i}")() for i in (2, 3, 4)))
    assert created.checksumOpt().isDefined()
    context = spark.sparkContext
    context.setLocalProperty("spark.jobGroup.id", "first-transaction")
    try:
        txn = delta_txn.DeltaTxn(spark, path)
        assert txn.committed_version("app") == -1
        files = txn.write(spark.range(3))
        jobs_before_commit = list(context.statusTracker().getJobIdsForGroup("first-transaction"))
        assert txn.commit(files, app_id="app", txn_version=0, user_metadata="{}") == 1
        jobs = list(context.statusTracker().getJobIdsForGroup("first-transaction"))
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert len(jobs_before_commit) == 1 and jobs == jobs_before_commit  # the write's job only
    latest = delta_txn.latest_snapshot(spark, path)
    empty = getattr(latest, "validateChecksum$default$1")()
    assert created.validateChecksum(empty) and latest.validateChecksum(empty)
    assert delta_txn.DeltaTxn(spark, path).committed_version("app") == 0
    assert len(table_rows(path)) == 3
