"""The default order of an `envelope: debezium` silver (`silver/order.py`): the connector's own position, chosen
from the fields of bronze's `source` record for each connector, one SQL expression that DuckDB's fold evaluates as
Spark's does, Kafka order where the file sets it (with a warning over several partitions), and a one-line error
naming the file and the key when `source` has no position silver knows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T

from ingestion.config import load_pipeline
from ingestion.errors import ConfigError
from ingestion.silver import fold_sql, order
from ingestion.silver.spec import SilverSpec

S, L, I = T.StringType(), T.LongType(), T.IntegerType()  # noqa: E741

COMMON = [("version", S), ("connector", S), ("name", S), ("ts_ms", L), ("snapshot", S), ("db", S)]
SOURCES: dict[str, list[tuple[str, T.DataType]]] = {  # Debezium's source records, as its struct makers build them
    "postgresql": [*COMMON, ("sequence", S), ("schema", S), ("table", S), ("txId", L), ("lsn", L), ("xmin", L)],
    "mysql": [*COMMON, ("table", S), ("server_id", L), ("gtid", S), ("file", S), ("pos", L), ("row", I),
              ("thread", L), ("query", S)],
    "sqlserver": [*COMMON, ("schema", S), ("table", S), ("change_lsn", S), ("commit_lsn", S),
                  ("event_serial_no", L)],
    "oracle": [*COMMON, ("schema", S), ("table", S), ("txId", S), ("scn", S), ("commit_scn", S),
               ("lcr_position", S), ("rs_id", S), ("ssn", L), ("user_name", S)],
}


def _bronze(source: list[tuple[str, T.DataType]] | None) -> T.StructType:
    row = T.StructType([T.StructField("id", L), T.StructField("name", S)])
    fields = [T.StructField("before", row), T.StructField("after", row), T.StructField("op", S),
              T.StructField("ts_ms", L)]
    if source is not None:
        fields.append(T.StructField("source", T.StructType([T.StructField(n, k) for n, k in source])))
    meta = [("_kafka_topic", S), ("_kafka_partition", I), ("_kafka_offset", L), ("_kafka_timestamp", T.TimestampType()),
            ("_kafka_key", S), ("_kafka_tombstone", T.BooleanType())]
    return T.StructType([*fields, *[T.StructField(n, k) for n, k in meta]])


def _spec(tmp_path: Path, silver: str = "") -> SilverSpec:
    file = tmp_path / "customers.yaml"
    file.write_text(f"name: customers\ntopic: shop.customers\nsink:\n  table: /lake/customers\nsilver:\n"
                    f"  key: [id]\n  envelope: debezium\n{silver}")
    return SilverSpec.of(load_pipeline(file))


@pytest.mark.parametrize(("connector", "fields"), [
    ("postgresql", "source.lsn"),
    ("mysql", "source.file, source.pos, source.row"),
    ("sqlserver", "source.commit_lsn, source.change_lsn, source.event_serial_no"),
    ("oracle", "source.scn, source.commit_scn"),
])
def test_the_default_order_is_each_connectors_own_position(tmp_path: Path, connector: str, fields: str) -> None:
    spec = _spec(tmp_path)
    assert spec.by_source and spec.sequenced and spec.sequence_by is None
    found = order.of(_bronze(SOURCES[connector]), spec.file)
    assert (found.connector, found.fields) == (connector, fields)
    assert spec.ordering(_bronze(SOURCES[connector])) == f"the {connector} connector's position ({fields})"


def test_older_debezium_sources_without_optional_parts_keep_the_ones_they_have() -> None:
    sqlserver = [f for f in SOURCES["sqlserver"] if f[0] != "event_serial_no"]  # before Debezium 1.6
    assert order.of(_bronze(sqlserver), "f").fields == "source.commit_lsn, source.change_lsn"
    oracle = [f for f in SOURCES["oracle"] if f[0] != "commit_scn"]
    assert order.of(_bronze(oracle), "f").fields == "source.scn"


def test_a_source_without_a_known_position_is_one_line_naming_the_file_and_key(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    for source in ([*COMMON, ("table", S)], None):  # a connector silver does not know; no source column at all
        with pytest.raises(ConfigError) as caught:
            spec.check(_bronze(source))
        text = str(caught.value)
        assert "\n" not in text and text.startswith(f"{spec.file}: key 'silver.sequenceBy' is unset")
        assert "set 'silver.sequenceBy' to a field" in text and "'kafka'" in text
    with pytest.raises(ConfigError) as caught:
        order.of(_bronze([*COMMON, ("table", S)]), "f")
    assert "source fields: ['version', 'connector'" in str(caught.value)
    # Kafka's order or a field, set in the file, need no position.
    _spec(tmp_path, "  sequenceBy: kafka\n").check(_bronze(None))
    assert not _spec(tmp_path, "  sequenceBy: kafka\n").sequenced


def test_kafka_order_set_over_several_partitions_is_said_to_be_approximate(tmp_path: Path) -> None:
    kafka = _spec(tmp_path, "  sequenceBy: kafka\n")
    assert kafka.kafka_set and not kafka.by_source
    warning = kafka.approximate({"shop.customers": [0, 1, 2]})
    assert warning is not None and "\n" not in warning
    assert warning.startswith(f"{kafka.file}: warning: silver of pipeline 'customers' is ordered by Kafka")
    assert "over 3 partitions: approximate" in warning and "connector's own position" in warning
    assert kafka.approximate({"shop.customers": [0]}) is None  # one partition: Kafka's order is the log's
    assert _spec(tmp_path).approximate({"shop.customers": [0, 1, 2]}) is None  # the default is exact
    assert _spec(tmp_path, "  sequenceBy: source.lsn\n").approximate({"t": [0, 1]}) is None


def _duckdb_sequences(connector: str, sources: list[dict[str, Any]]) -> list[Any]:
    """Each source record's `_sequence` as DuckDB's fold computes it (`fold_sql`, the expression Spark's uses)."""
    import duckdb
    import pyarrow as pa

    fields = SOURCES[connector]
    arrow = {S: pa.string(), L: pa.int64(), I: pa.int32()}
    kind = pa.struct([(n, arrow[k]) for n, k in fields])
    table = pa.table({"source": pa.array([{n: s.get(n) for n, _ in fields} for s in sources], type=kind)})
    expression = order.duckdb_sql(order.of(_bronze(fields), "f"), fold_sql.path)
    con = duckdb.connect()
    con.register("__bronze", table)
    return [r[0] for r in con.sql(f"SELECT {expression} FROM __bronze").fetchall()]


def _ranks(values: list[Any]) -> list[int]:
    """Positions in DuckDB's ascending order (nulls first), as the fold sorts."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE v AS SELECT * FROM (SELECT unnest(?) AS s, generate_subscripts(?, 1) AS i)",
                [values, values])
    return [r[0] - 1 for r in con.sql("SELECT i FROM v ORDER BY s ASC NULLS FIRST, i").fetchall()]


def test_positions_order_as_each_connector_orders_its_log() -> None:
    # MySQL: the file by its number (000010 after 000009; a seventh digit after six), then pos, then row.
    mysql = _duckdb_sequences("mysql", [
        {"file": "mysql-bin.1000000", "pos": 4, "row": 0}, {"file": "mysql-bin.000010", "pos": 154, "row": 1},
        {"file": "mysql-bin.000010", "pos": 154, "row": 0}, {"file": "mysql-bin.000009", "pos": 9999, "row": 0},
        {"file": None, "pos": None}])
    assert mysql[3] == {"file": 9, "pos": 9999, "row": 0} and mysql[4] is None
    assert _ranks(mysql) == [4, 3, 2, 1, 0]
    # SQL Server: commit LSN, then change LSN (hex text, either case), then the event's serial number; a snapshot's
    # missing change LSN sorts first.
    sqlserver = _duckdb_sequences("sqlserver", [
        {"commit_lsn": "0000002d:00000c58:0003", "change_lsn": "0000002d:00000c58:0002", "event_serial_no": 2},
        {"commit_lsn": "0000002D:00000C58:0003", "change_lsn": "0000002d:00000c58:0002", "event_serial_no": 1},
        {"commit_lsn": "0000002d:00000a00:0001", "change_lsn": "0000002d:00000f00:0001", "event_serial_no": 1},
        {"commit_lsn": "0000002d:00000a00:0001", "change_lsn": None, "event_serial_no": None}])
    assert _ranks(sqlserver) == [3, 2, 1, 0]
    # Oracle: SCNs as numbers, not text (9 before 10).
    oracle = _duckdb_sequences("oracle", [{"scn": "10", "commit_scn": "12"}, {"scn": "9", "commit_scn": "12"},
                                          {"scn": "10", "commit_scn": None}])
    assert _ranks(oracle) == [1, 2, 0]
    postgres = _duckdb_sequences("postgresql", [{"lsn": 24023128}, {"lsn": 9}, {"lsn": None}])
    assert postgres == [{"lsn": 24023128}, {"lsn": 9}, None]


def test_spark_and_duckdb_read_the_same_expression() -> None:
    found = order.of(_bronze(SOURCES["mysql"]), "f")
    spark, duck = order.spark_sql(found), order.duckdb_sql(found, fold_sql.path)
    assert spark.startswith("CASE WHEN `source`.`file` IS NULL THEN NULL ELSE named_struct('file', ")
    assert duck.startswith("CASE WHEN struct_extract(\"source\", 'file') IS NULL THEN NULL ELSE struct_pack(")
    strip = lambda text: text.split(" ELSE ", 1)[1]  # noqa: E731 - the parts, after the engines' field names
    assert strip(spark).count("coalesce(") == strip(duck).count("coalesce(") == 3
