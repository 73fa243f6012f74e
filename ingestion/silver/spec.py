"""What a pipeline's `silver:` section asks for, resolved once against bronze's columns: key paths, ordering,
envelope, the table's locations and transaction ids."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyspark.sql import types as T

from ingestion.columns import METADATA_COLUMNS
from ingestion.config import PipelineConfig, conditions
from ingestion.decode.expectations import check_conditions
from ingestion.errors import ConfigError
from ingestion.silver import order

# The columns silver adds after the row's own fields, by what they hold.
DEBEZIUM_COLUMNS = ("_op", "_source", "_ts_ms")  # the envelope's operation, source block and processing time
SEQUENCE = "_sequence"  # the `sequenceBy` field's value, or the Debezium connector's position (`order`)
KAFKA_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key")
HISTORY_COLUMNS = ("_deleted", "_valid_from", "_valid_to", "_is_current")
DEBEZIUM_TRUNCATE = "op = 't'"  # Debezium's truncate record (PostgreSQL, MySQL, ...): `truncateWhen` by default
DELETE = "_delete"  # a change row's own flag (not a column of the table): the change removes its key
KAFKA_KEY = "_kafka_key"


@dataclass(frozen=True)
class SilverSpec:
    pipeline: str
    file: str
    key: tuple[str, ...]
    mode: str  # upsert | history
    envelope: str  # none | debezium
    sequence_by: str | None  # a field; None: the connector's position (`by_source`) or Kafka order
    delete_when: str
    bronze_path: str
    path: str
    catalog_table: str
    trigger: str
    columns: tuple[str, ...] = ()  # only these of the row's fields (empty: all but `except_columns`)
    except_columns: tuple[str, ...] = ()
    track_history_on: tuple[str, ...] = ()  # history: a new version only when one of these changes
    ignore_null_updates: bool = False  # a null in a change keeps the value the key's row holds
    truncate_when: str = ""  # the bronze rows that truncate (debezium: op = 't' by default); "" for none
    # debezium with sequenceBy unset: ordered by the connector's own position in `source` (`order`)
    by_source: bool = False
    kafka_set: bool = False  # the file says `sequenceBy: kafka`
    direct_merge_max_changes: int = 0  # a step over at most this many bronze rows is the driver's (`rs_step`)

    @classmethod
    def of(cls, config: PipelineConfig) -> SilverSpec:
        silver = config.silver
        if silver is None or config.silver_path is None:
            raise ConfigError(f"{config.file}: pipeline {config.name!r} has no 'silver' section")
        given = silver.sequence_by
        return cls(pipeline=config.name, file=str(config.file), key=silver.key, mode=silver.mode,
                   envelope=silver.envelope,
                   sequence_by=None if given in ("", "kafka") else given,
                   by_source=given == "" and silver.envelope == "debezium", kafka_set=given == "kafka",
                   delete_when=silver.delete_when, bronze_path=config.table_path, path=config.silver_path,
                   catalog_table=silver.catalog_table, trigger=silver.trigger or config.sink.trigger,
                   columns=silver.columns, except_columns=silver.except_columns,
                   track_history_on=silver.track_history_on, ignore_null_updates=silver.ignore_null_updates,
                   truncate_when=silver.truncate_when or (DEBEZIUM_TRUNCATE if silver.envelope == "debezium" else ""),
                   direct_merge_max_changes=silver.direct_merge_max_changes)

    @property
    def sequenced(self) -> bool:
        """Whether changes are ordered by a sequence (`_sequence`: a field's, or the connector's position) rather
        than by Kafka."""
        return self.sequence_by is not None or self.by_source

    def ordering(self, bronze: T.StructType) -> str:
        """How a key's changes are ordered, for messages: `source.lsn`, `the connector's position (...)`,
        `Kafka offsets`."""
        if self.sequence_by:
            return self.sequence_by
        if self.by_source:
            found = order.of(bronze, self.file)
            return f"the {found.connector} connector's position ({found.fields})"
        return "Kafka offsets"

    def approximate(self, partitions: Mapping[str, Iterable[int]]) -> str | None:
        """A warning when the file sets `sequenceBy: kafka` and the topics have several partitions: Kafka orders
        nothing across partitions, so silver is approximate there; None otherwise."""
        count = sum(len(list(p)) for p in partitions.values())
        if not self.kafka_set or count <= 1:
            return None
        exact = ("; leave it unset for the Debezium connector's own position, which is exact"
                 if self.envelope == "debezium" else "; set it to a field that orders a key's changes")
        return (f"{self.file}: warning: silver of pipeline {self.pipeline!r} is ordered by Kafka "
                f"(silver.sequenceBy: kafka) over {count} partitions: approximate, since Kafka orders a key's "
                f"changes only within one partition and a truncate against the other partitions only by timestamp"
                f"{exact}")

    @property
    def markers_path(self) -> str:
        """Upsert mode's delete markers (key and sequence of each deleted key), outside the rows analysts read: a
        change older than a key's delete must not bring the key back."""
        return f"{self.path.rstrip('/')}_deletes"

    @property
    def app_id(self) -> str:
        return f"ingest-silver-{self.pipeline}"

    def txn_app_id(self, epoch: int, table: str = "") -> str:
        """The Delta txnAppId of silver's commits (and of its markers', `table="deletes"`) in one epoch: a rebuild
        starts a new epoch, so its commits are never mistaken for ones made before it."""
        return f"{self.app_id}.{epoch}" + (f".{table}" if table else "")

    @property
    def history(self) -> bool:
        return self.mode == "history"

    @property
    def refolds(self) -> bool:
        """Whether a step refolds the keys it touches from bronze: a key's row then depends on more than its
        newest change (`ignoreNullUpdates` fills from older ones, `trackHistoryOn` folds changes into versions), so
        a late change cannot simply be merged."""
        return self.ignore_null_updates or bool(self.track_history_on)

    def keeps(self, name: str) -> bool:
        """Whether silver keeps the row's top-level field `name` (`columns` / `exceptColumns`)."""
        return name in self.columns if self.columns else name not in self.except_columns

    def kept_type(self, bronze: T.StructType) -> T.StructType:
        """The row's fields silver keeps, in the row's order."""
        return T.StructType([f for f in self.row_type(bronze).fields if self.keeps(f.name)])

    def filled_fields(self, bronze: T.StructType) -> list[str]:
        """With `ignoreNullUpdates`, the kept fields a null does not overwrite: all but the key's."""
        keys = {p.split(".")[0] for p in self.key}
        return [f.name for f in self.kept_type(bronze).fields if f.name not in keys]

    def marker_column(self, i: int) -> str:
        return f"_key{i}"

    def check(self, bronze: T.StructType) -> None:
        """Refuse, in one line naming the key, a silver section bronze's columns cannot serve."""
        names = set(bronze.fieldNames())
        if self.envelope == "debezium":
            missing = [c for c in ("op", "before", "after") if c not in names]
            if missing:
                raise ConfigError(f"{self.file}: key 'silver.envelope' is debezium, but bronze has no column(s) "
                                  f"{missing} (a Debezium envelope has op, before, after, source, ts_ms)")
        row = self.row_type(bronze)
        for path in self.key:
            if path.split(".")[0] != KAFKA_KEY:
                if field_type(row, path) is None:
                    raise ConfigError(f"{self.file}: key 'silver.key' names {path!r}, which is not a field of the "
                                      f"row (fields: {row.fieldNames()})")
                continue
            if field_type(bronze, path) is None:
                kafka_key = field_type(bronze, KAFKA_KEY)
                has = (f"its fields: {kafka_key.fieldNames()}" if isinstance(kafka_key, T.StructType) else
                       f"it is {kafka_key.simpleString() if kafka_key is not None else 'absent'}: key.format gives "
                       "it no fields")
                raise ConfigError(f"{self.file}: key 'silver.key' names {path!r}, which is not a field of the "
                                  f"Kafka key ({has})")
        if self.by_source:
            order.of(bronze, self.file)  # a clear error when the source record has no position silver knows
        if self.sequence_by and field_type(bronze, self.sequence_by) is None and (
                self.envelope != "debezium" or field_type(row, self.sequence_by) is None):
            columns = [c for c in bronze.fieldNames() if c not in METADATA_COLUMNS]
            raise ConfigError(f"{self.file}: key 'silver.sequenceBy' names {self.sequence_by!r}, which is not a "
                              f"field of bronze's rows (columns: {columns})")
        fields = row.fieldNames()
        for key, given in (("columns", self.columns), ("exceptColumns", self.except_columns),
                           ("trackHistoryOn", self.track_history_on)):
            unknown = [n for n in given if n not in fields]
            if unknown:
                raise ConfigError(f"{self.file}: key 'silver.{key}' names {unknown[0]!r}, which is not a field of "
                                  f"the row (fields: {fields})")
        # `deleteWhen` and `truncateWhen` read the bronze row (`changes`, `fold_sql`): its columns, its types.
        check_conditions([(conditions.where(self.file, f"silver.{key}", text), text) for key, text in
                          (("deleteWhen", self.delete_when), ("truncateWhen", self.truncate_when)) if text],
                         bronze, spark_dialect=True)
        clash = sorted(set(row.fieldNames()) & {*DEBEZIUM_COLUMNS, SEQUENCE, *KAFKA_COLUMNS, *HISTORY_COLUMNS})
        if clash:
            raise ConfigError(f"{self.file}: the rows' fields {clash} clash with silver's own columns")

    def row_type(self, bronze: T.StructType) -> T.StructType:
        """The row's own fields: bronze's payload columns, or the Debezium envelope's `after` record."""
        if self.envelope == "debezium":
            after = bronze["after"].dataType
            if not isinstance(after, T.StructType):
                raise ConfigError(f"{self.file}: key 'silver.envelope' is debezium, but bronze's 'after' column is "
                                  f"{after.simpleString()}, not a record")
            return after
        return T.StructType([f for f in bronze.fields if f.name not in METADATA_COLUMNS])


def field_type(schema: T.StructType, path: str) -> T.DataType | None:
    """The type of a dotted field path in `schema`, or None when there is no such field."""
    kind: T.DataType = schema
    for part in path.split("."):
        if not isinstance(kind, T.StructType) or part not in kind.fieldNames():
            return None
        kind = kind[part].dataType
    return kind
