"""The `silver:` section: defaults, locations, and what is refused in one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestion.config import load_pipeline
from ingestion.errors import ConfigError
from ingestion.silver.ledger import SilverRecord, StepKind
from ingestion.silver.spec import SilverSpec


def _load(tmp_path: Path, silver: str, sink: str = "sink:\n  table: /lake/bronze/orders\n") -> object:
    file = tmp_path / "orders.yaml"
    file.write_text(f"name: orders\ntopic: orders\n{sink}silver:\n{silver}")
    return load_pipeline(file)


def test_defaults_and_where_silver_lives(tmp_path: Path) -> None:
    config = _load(tmp_path, "  key: id\n")
    assert config.silver is not None and config.silver.key == ("id",)  # a single name for a one-field key
    assert (config.silver.mode, config.silver.envelope, config.silver.sequence_by) == ("upsert", "none", "")
    assert config.silver_path == "/lake/bronze/orders_silver"
    spec = SilverSpec.of(config)
    assert spec.markers_path == "/lake/bronze/orders_silver_deletes" and spec.sequence_by is None
    assert not spec.sequenced and not spec.by_source  # Kafka's order: no envelope names a position
    assert spec.txn_app_id(3) == "ingest-silver-orders.3" and spec.txn_app_id(3, "deletes").endswith(".3.deletes")
    assert spec.trigger == "10 seconds"
    assert (spec.truncate_when, spec.refolds) == ("", False)
    debezium = SilverSpec.of(_load(tmp_path, "  key: id\n  envelope: debezium\n  ignoreNullUpdates: true\n"))
    assert (debezium.truncate_when, debezium.refolds) == ("op = 't'", True)  # Debezium's truncates by default
    own = _load(tmp_path, "  key: id\n  envelope: debezium\n  truncateWhen: op = 'x'\n  exceptColumns: [email]\n")
    assert SilverSpec.of(own).truncate_when == "op = 'x'" and not SilverSpec.of(own).keeps("email")
    other = _load(tmp_path, "  key: [tenant, id]\n  table: /lake/silver/orders\n  sequenceBy: source.lsn\n")
    assert other.silver_path == "/lake/silver/orders" and SilverSpec.of(other).sequence_by == "source.lsn"


@pytest.mark.parametrize(("silver", "message"), [
    ("  mode: upsert\n", "key 'silver.key' must name the fields that identify a row"),
    ("  key: [id]\n  mode: scd2\n", "key 'silver.mode' must be one of ['upsert', 'history'], got 'scd2'"),
    ("  key: [id]\n  envelope: maxwell\n", "key 'silver.envelope' must be one of ['none', 'debezium']"),
    ("  key: ['id; DROP']\n", "key 'silver.key' names fields (dotted for nested ones), got 'id; DROP'"),
    ("  key: [id]\n  sequenceBy: 'a b'\n", "key 'silver.sequenceBy' is 'kafka' or a field"),
    ("  key: [id]\n  catalogTable: a.b.c\n", "key 'silver.catalogTable' must be a table name"),
    ("  key: [id]\n  trigger: soon\n", "key 'silver.trigger' must be a duration"),
    ("  key: [id]\n  table: /lake/bronze/orders\n",
     "key 'silver.table' is '/lake/bronze/orders', the same folder as sink.table"),
    ("  key: [id]\n  keys: [id]\n", "unknown key 'silver.keys'"),
    ("  key: [id]\n  columns: [id, a]\n  exceptColumns: [b]\n",
     "keys 'silver.columns' and 'silver.exceptColumns' exclude each other"),
    ("  key: [id]\n  columns: [name]\n", "key 'silver.columns' leaves out the key field 'id'"),
    ("  key: [id]\n  exceptColumns: [id]\n", "key 'silver.exceptColumns' leaves out the key field 'id'"),
    ("  key: [id]\n  trackHistoryOn: [tier]\n", "key 'silver.trackHistoryOn' needs 'silver.mode: history'"),
    ("  key: [id]\n  mode: history\n  trackHistoryOn: [id]\n", "key 'silver.trackHistoryOn' names the key field"),
    ("  key: [id]\n  mode: history\n  exceptColumns: [tier]\n  trackHistoryOn: [tier]\n",
     "key 'silver.trackHistoryOn' names 'tier', which silver.columns/exceptColumns leave out"),
    ("  key: [id]\n  columns: ['a.b']\n", "key 'silver.columns' names top-level fields of the row, got 'a.b'"),
    ("  key: [id]\n  ignoreNullUpdates: maybe\n", "key 'silver.ignoreNullUpdates'"),
])
def test_a_wrong_silver_section_is_refused_naming_the_key(tmp_path: Path, silver: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"orders\.yaml: .*") as refused:
        _load(tmp_path, silver)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_the_silver_ledger_record_round_trips_and_ignores_other_metadata() -> None:
    record = SilverRecord(pipeline="orders", kind=StepKind.MERGE, epoch=2, bronze_version=17, bronze_from=15,
                          changes=40, keys=12, cross_partition_keys=1,
                          truncates=(("orders", 1, 0, 100_000_000, None, 100_000_000),))
    assert SilverRecord.from_user_metadata(record.to_user_metadata()) == record
    assert SilverRecord.from_user_metadata('{"ingest": {"pipeline": "orders"}}') is None
    assert SilverRecord.from_user_metadata("not json") is None and SilverRecord.from_user_metadata(None) is None


@pytest.mark.parametrize(("condition", "reason"), [
    ("amount", "is not a condition (true or false) but of type BIGINT"),
    ("lower(status)", "is not a condition (true or false) but of type VARCHAR"),
])
def test_delete_and_truncate_conditions_are_checked_against_the_bronze_row_before_a_run(
        tmp_path: Path, condition: str, reason: str) -> None:
    """`deleteWhen` and `truncateWhen` read the bronze row: a column it lacks or a value that is no condition is
    refused where `onboard --dry-run` checks silver (`SilverSpec.check`), before bronze commits anything."""
    from pyspark.sql import types as T

    bronze = T.StructType([T.StructField("id", T.LongType()), T.StructField("amount", T.LongType()),
                           T.StructField("status", T.StringType()), T.StructField("_kafka_offset", T.LongType())])
    for key in ("deleteWhen", "truncateWhen"):
        spec = SilverSpec.of(_load(tmp_path, f"  key: id\n  {key}: \"{condition}\"\n"))
        with pytest.raises(ConfigError) as refused:
            spec.check(bronze)
        message = str(refused.value)
        assert message.startswith(f"{tmp_path / 'orders.yaml'}: key 'silver.{key}' ({condition!r}): "), message
        assert reason.lower() in message.lower() and "\n" not in message, message
    fine = SilverSpec.of(_load(tmp_path, "  key: id\n  deleteWhen: \"status = 'X' AND amount > 0\"\n"
                                          "  truncateWhen: spark_only_function(status)\n"))
    fine.check(bronze)  # a function DuckDB lacks is Spark's to check, as the fold falls back to Spark for it
    # Spark's own SQL, which DuckDB does not parse or binds otherwise (a double-quoted string is a column there), is
    # Spark's to check when silver runs; the fold in DuckDB leaves it to Spark too.
    for spark_sql in ("status RLIKE '^X'", 'status = "X"', "exists(array(amount), x -> x > 0)"):
        SilverSpec.of(_load(tmp_path, f"  key: id\n  deleteWhen: {spark_sql!r}\n")).check(bronze)
    from ingestion.silver import fold_sql

    with pytest.raises(fold_sql.NotInDuckDB):
        fold_sql._condition("amount < 0) OR (1 = 1")  # would read as one condition inside the fold's query


def test_a_key_field_the_kafka_key_lacks_names_the_keys_fields_or_its_type(tmp_path: Path) -> None:
    from pyspark.sql import types as T

    row = [T.StructField("id", T.LongType()), T.StructField("amount", T.LongType())]
    for kafka_key, said in ((T.StructType([T.StructField("order_id", T.StringType())]), "its fields: ['order_id']"),
                            (T.StringType(), "it is string: key.format gives it no fields")):
        bronze = T.StructType([*row, T.StructField("_kafka_key", kafka_key)])
        with pytest.raises(ConfigError) as refused:
            SilverSpec.of(_load(tmp_path, "  key: [_kafka_key.id]\n")).check(bronze)
        assert str(refused.value) == (f"{tmp_path / 'orders.yaml'}: key 'silver.key' names '_kafka_key.id', which "
                                      f"is not a field of the Kafka key ({said})")
