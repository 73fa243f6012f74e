"""Data-quality expectations (docs/expectations.md): a pipeline's rules, compiled against bronze's columns, and
their verdict on bronze-shaped rows, in Spark (the Spark write path) or in DuckDB over Arrow (the driver).

A row violates a rule when its `expect` is false or null; tombstones carry no payload and are not checked. Spark
SQL is the contract; the driver evaluates the same text with DuckDB, given the few Spark functions it lacks as
macros (`regexp_like`, `rlike`, `size`), so a rule is compiled by both engines before it runs: DuckDB at load
(`compile_rules`, no JVM), Spark once its session is up (`check_in_spark`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion.columns import METADATA_COLUMNS
from ingestion.config import PipelineConfig, conditions
from ingestion.errors import ConfigError, ExpectationError
from ingestion.runtime.arrow_types import to_arrow_schema

log = logging.getLogger(__name__)

EXPECTATION_FAILED = "ExpectationFailed"  # the quarantine's `_error_class` of a row a `quarantine` rule refused
__all__ = ["EXPECTATION_FAILED", "Counts", "ExpectationError", "Rule", "Rules", "check_conditions", "compile_rules",
           "evaluate", "flag_rows"]
BLOCKING = ("quarantine", "fail")  # the actions that keep a row out of bronze
_MACROS = ("CREATE MACRO regexp_like(s, p) AS regexp_matches(s, p)",
           "CREATE MACRO rlike(s, p) AS regexp_matches(s, p)",
           "CREATE MACRO size(x) AS coalesce(len(x), -1)")


@dataclass(frozen=True)
class Rule:
    name: str
    expect: str
    on_violation: str
    columns: tuple[str, ...]  # the bronze columns the expression names, for the message of a failed row


@dataclass(frozen=True)
class Rules:
    """A pipeline's rules, compiled against one bronze schema."""

    rules: tuple[Rule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rules)

    @property
    def blocking(self) -> tuple[Rule, ...]:
        """The rules whose violation keeps a row out of bronze (quarantine, fail)."""
        return tuple(r for r in self.rules if r.on_violation in BLOCKING)


@dataclass
class Counts:
    """Per batch: the rows the rules were checked on, and per rule the rows that broke it."""

    checked: int = 0
    violated: dict[str, int] = field(default_factory=dict)

    def add(self, other: Counts) -> Counts:
        names = dict.fromkeys([*self.violated, *other.violated])
        return Counts(self.checked + other.checked,
                      {n: self.violated.get(n, 0) + other.violated.get(n, 0) for n in names})


NO_RULES = Rules()


def compile_rules(config: PipelineConfig, bronze_schema: T.StructType) -> Rules:
    """The pipeline's rules, each checked by DuckDB against bronze's columns (`check_conditions`): a ConfigError
    names the file, the rule and the reason when an expression does not parse, names a column bronze does not
    have, or is not a boolean."""
    if not config.expectations:
        return NO_RULES
    check_conditions([(conditions.where(config.file, f"expectations[{i}].expect", rule.expect, rule.name),
                       rule.expect) for i, rule in enumerate(config.expectations)], bronze_schema)
    names = [f.name for f in bronze_schema.fields]
    return Rules(tuple(Rule(rule.name, rule.expect, rule.on_violation, _named_columns(rule.expect, names))
                       for rule in config.expectations))


def check_conditions(found: Iterable[tuple[str, str]], bronze_schema: T.StructType, *,
                     spark_dialect: bool = False) -> None:
    """Each (where, SQL condition) of `found` is one row-level condition (`config.conditions`) that DuckDB binds to
    a boolean over bronze's columns (an empty table of them), else a ConfigError `<where>: <reason>`.
    `spark_dialect`: a condition DuckDB does not parse or bind is left for Spark to check (silver's conditions,
    which Spark evaluates where DuckDB cannot: Spark's own syntax and functions, its double-quoted strings)."""
    empty = to_arrow_schema(bronze_schema).empty_table()
    with _connection() as con:
        con.register("bronze", empty)
        for where, text in found:
            conditions.check(where, text, spark_dialect=spark_dialect)
            try:
                kind = con.execute(f"DESCRIBE SELECT ({text}) AS v FROM bronze").fetchall()[0][1]
            except Exception as exc:  # noqa: BLE001 - DuckDB's parser, binder and catalog errors alike
                if spark_dialect:
                    log.info("%s: not checked without Spark (DuckDB: %s); Spark checks it when it runs", where,
                             _reason(exc))
                    continue
                raise ConfigError(f"{where}: {_reason(exc)}") from None
            if kind != "BOOLEAN":
                raise ConfigError(f"{where}: is not a condition (true or false) but of type {kind}")


def check_in_spark(spark: SparkSession, rules: Rules, bronze_schema: T.StructType, file: object) -> None:
    """Compile each rule with Spark against bronze's columns (no job runs): a ConfigError names the rule and
    Spark's reason, as `compile_rules` does for DuckDB's."""
    if not rules:
        return
    empty = spark.createDataFrame([], bronze_schema)
    for rule in rules.rules:
        try:
            kind = empty.select(F.expr(rule.expect).alias("v")).schema["v"].dataType
        except Exception as exc:  # noqa: BLE001 - Spark's parse and analysis errors alike
            raise ConfigError(f"{file}: rule {rule.name!r} ({rule.expect!r}): Spark refuses it: {_reason(exc)}") \
                from None
        if not isinstance(kind, T.BooleanType):
            raise ConfigError(f"{file}: rule {rule.name!r} ({rule.expect!r}): is not a condition (true or false) "
                              f"but of type {kind.simpleString()}")


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2])[:300] if lines else type(exc).__name__


def _named_columns(expect: str, names: Iterable[str]) -> tuple[str, ...]:
    """The columns an expression names (outside string literals), in the table's order."""
    text = re.sub(r"'(?:[^'\\]|\\.)*'", "''", expect).lower()
    words = set(re.findall(r"[a-z_][a-z0-9_]*", text))
    return tuple(n for n in names if n.lower() in words)


_local = threading.local()


@contextlib.contextmanager
def _connection() -> Iterator[Any]:
    """A DuckDB connection of this thread with the Spark functions DuckDB lacks, in UTC as Spark's session time zone
    is (`runtime.session`); reused, as opening one costs milliseconds. The caller registers `bronze`."""
    con = getattr(_local, "con", None)
    if con is None:
        import duckdb

        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        for macro in _MACROS:
            con.execute(macro)
        _local.con = con
    try:
        yield con
    finally:
        con.unregister("bronze")


@dataclass(frozen=True)
class Verdict:
    """The rules' verdict on bronze-shaped rows: per rule, which rows broke it."""

    rules: Rules
    violated: Mapping[str, np.ndarray]  # rule name -> bool per row (False for tombstones)
    checked: int

    @property
    def flagged(self) -> np.ndarray:
        """The rows a blocking rule keeps out of bronze."""
        out = np.zeros(self.checked_rows, dtype=bool)
        for rule in self.rules.blocking:
            out |= self.violated[rule.name]
        return out

    @property
    def checked_rows(self) -> int:
        return len(next(iter(self.violated.values()))) if self.violated else 0

    def counts(self, rows: np.ndarray | None = None) -> Counts:
        """The counts of the rows `rows` selects (all when None)."""
        pick = slice(None) if rows is None else rows
        return Counts(self.checked if rows is None else int(rows.sum()),
                      {name: int(v[pick].sum()) for name, v in self.violated.items()})

    def messages(self) -> list[str | None]:
        """Per row, the names of the quarantine rules it broke (`_error_message`), None for a row none refused."""
        names = [r.name for r in self.rules.blocking]
        return [", ".join(n for n in names if self.violated[n][i]) or None for i in range(self.checked_rows)]


def evaluate(rules: Rules, rows: pa.Table) -> Verdict:
    """The rules on bronze-shaped rows, with DuckDB."""
    if not rows.num_rows:
        return Verdict(rules, {r.name: np.zeros(0, dtype=bool) for r in rules.rules}, 0)
    order = "__ingest_row"
    table = rows.append_column(order, pa.array(np.arange(rows.num_rows)))
    verdicts = ", ".join(f"({_violates(r.expect)}) AS r{i}" for i, r in enumerate(rules.rules))
    with _connection() as con:
        con.register("bronze", table)
        found = con.execute(f"SELECT {order}, {verdicts} FROM bronze").fetch_arrow_table()
    at = np.argsort(found.column(order).to_numpy())
    violated = {r.name: found.column(f"r{i}").to_numpy(zero_copy_only=False).astype(bool)[at]
                for i, r in enumerate(rules.rules)}
    tombstones = rows.column("_kafka_tombstone").to_numpy(zero_copy_only=False).astype(bool)
    return Verdict(rules, violated, int((~tombstones).sum()))


@dataclass(frozen=True)
class TableViolations:
    """A blocking rule's verdict on a table's rows: how many break it, and the first of them (topic, partition,
    offset)."""

    rule: str
    rows: int
    first: tuple[tuple[str, int, int], ...]


def violations_in_table(rules: Rules, dataset: Any, *, shown: int = 10) -> list[TableViolations]:
    """Per blocking rule (`quarantine`, `fail`), the rows of a table (a pyarrow dataset, scanned by DuckDB for the
    columns the rules and the coordinates name only) that break it: none should be in bronze."""
    found = []
    with _connection() as con:
        con.register("bronze", dataset)
        for rule in rules.blocking:
            where = _violates(rule.expect)
            count = con.execute(f"SELECT count(*) FROM bronze WHERE {where}").fetchone()
            first = con.execute(f"SELECT _kafka_topic, _kafka_partition, _kafka_offset FROM bronze WHERE {where} "
                                f"ORDER BY 1, 2, 3 LIMIT {int(shown)}").fetchall()
            found.append(TableViolations(rule.name, int(count[0]) if count else 0,
                                         tuple((str(t), int(p), int(o)) for t, p, o in first)))
    return found


def _violates(expect: str) -> str:
    """SQL true when a row breaks the rule: its condition false or null; never for a tombstone."""
    return f"NOT coalesce(_kafka_tombstone, false) AND NOT coalesce(({expect}), false)"


def first_failure(rules: Rules, verdict: Verdict, rows: pa.Table) -> str | None:
    """The line of the first row (by topic, partition, offset) that broke a `fail` rule, or None."""
    failing = [r for r in rules.rules if r.on_violation == "fail" and verdict.violated[r.name].any()]
    if not failing:
        return None
    best: tuple[tuple[str, int, int], Rule, int] | None = None
    coords = [rows.column(c).to_pylist() for c in ("_kafka_topic", "_kafka_partition", "_kafka_offset")]
    for rule in failing:
        for found in np.flatnonzero(verdict.violated[rule.name]).tolist():
            at = (coords[0][found], coords[1][found], coords[2][found])
            if best is None or at < best[0]:
                best = (at, rule, found)
    assert best is not None
    (topic, partition, offset), rule, row = best
    values = {c: rows.column(c)[row].as_py() for c in rule.columns}
    return failure_line(rule, topic, partition, offset, values)


def failure_line(rule: Rule, topic: str, partition: int, offset: int, values: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{name}={value!r}" for name, value in values.items()) or "no columns"
    return (f"expectation {rule.name!r} ({rule.expect}) failed for record {topic}/{partition}@{offset}: {shown} "
            f"(onViolation: fail; nothing of the batch was committed)")


# --- Spark: the same verdict as columns of the decoder's rows ------------------------------------------------------

RULE_COLUMN = "__ingest_rule_{}"  # a rule's verdict column (true: the row broke it), by its index
CHECKED_COLUMN = "__ingest_checked"  # true for the rows the rules were checked on (decoded, not tombstones)
RAW_VALUE = "__ingest_value"  # the Kafka value, kept beside the decoder's rows for those a rule refuses


def with_raw_value(kafka_rows: DataFrame, rules: Rules) -> DataFrame:
    """Kafka source rows with their value also under `RAW_VALUE` when a rule may refuse a row (the decoders pass
    every column but `value` through, and keep the value only of the records that failed)."""
    return kafka_rows.withColumn(RAW_VALUE, F.col("value")) if rules.blocking else kafka_rows


def spark_counts(rows: DataFrame, rules: Rules, *, unflagged: bool) -> list[Column]:
    """Aggregates over `flag_rows`' output: `rules_checked` and `rule_<i>` per rule; `unflagged`: of the rows no
    blocking rule refused only (the Spark path's job: the driver counts those it settles)."""
    if not rules:
        return []
    keep = F.col("_error_class").isNull() if unflagged else F.lit(True)
    columns = [CHECKED_COLUMN, *(RULE_COLUMN.format(i) for i in range(len(rules.rules)))]
    return [F.count(F.when(F.col(c) & keep, 1)).alias(name)
            for c, name in zip(columns, count_names(rules), strict=True)]


def counts_of(values: Mapping[str, Any], rules: Rules) -> Counts | None:
    """`Counts` of `spark_counts`' values; None without rules."""
    if not rules:
        return None
    checked, *each = (int(values[name] or 0) for name in count_names(rules))
    return Counts(checked, {r.name: n for r, n in zip(rules.rules, each, strict=True)})


def count_names(rules: Rules) -> list[str]:
    """The names of `spark_counts`' values: the rows checked, then each rule's violations (none without rules)."""
    return ["rules_checked", *(f"rule_{i}" for i in range(len(rules.rules)))] if rules else []


def flag_rows(decoded: DataFrame, rules: Rules, sources: Mapping[str, str]) -> DataFrame:
    """Decoder rows with the rules' verdict: a row a blocking rule refuses becomes a failure (`_error_class`
    ExpectationFailed, `_error_message` the rules' names, `_raw_value` its value from `RAW_VALUE`); each rule's
    verdict is a column `RULE_COLUMN` (never true for a failed row or a tombstone), and `CHECKED_COLUMN` says which
    rows were checked. The rules see the row as bronze has it: the payload's fields and the metadata columns
    (`sources`: where each comes from in the decoder's rows). Without rules, `decoded` as it is."""
    if not rules:
        return decoded
    raw_value = RAW_VALUE
    inner = [F.col(f"`{c}`").alias(f"__d_{c}") for c in decoded.columns]
    payload = decoded.schema["_payload"].dataType
    assert isinstance(payload, T.StructType)
    shaped = [F.col(f"_payload.`{f.name}`").alias(f.name) for f in payload.fields]
    shaped += [F.col(sources[name]).alias(name) for name in METADATA_COLUMNS if name in sources]
    rows = decoded.select(*inner, *shaped)
    ok = F.col("__d__error_class").isNull() & ~F.col("__d__tombstone")
    verdicts = [(ok & ~F.coalesce(F.expr(r.expect), F.lit(False))) for r in rules.rules]
    rows = rows.select("*", ok.alias(CHECKED_COLUMN), *(v.alias(RULE_COLUMN.format(i)) for i, v in enumerate(verdicts)))
    blocking = [i for i, r in enumerate(rules.rules) if r.on_violation in BLOCKING]
    flagged: Column = F.lit(False)
    for i in blocking:
        flagged = flagged | F.col(RULE_COLUMN.format(i))
    message = F.concat_ws(", ", *(F.when(F.col(RULE_COLUMN.format(i)), F.lit(rules.rules[i].name)) for i in blocking))
    replaced = {"_error_class": F.when(flagged, F.lit(EXPECTATION_FAILED)).otherwise(F.col("__d__error_class")),
                "_error_message": F.when(flagged, message).otherwise(F.col("__d__error_message")),
                "_raw_value": (F.when(flagged, F.col(f"__d_{raw_value}")).otherwise(F.col("__d__raw_value"))
                               if raw_value in decoded.columns else F.col("__d__raw_value"))}
    out = [replaced[c].alias(c) if c in replaced else F.col(f"`__d_{c}`").alias(c) for c in decoded.columns]
    return rows.select(*out, CHECKED_COLUMN, *(RULE_COLUMN.format(i) for i in range(len(rules.rules))))
