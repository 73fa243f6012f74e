"""Decoding JSON values in the JVM (the helper's `JsonDecode`, Jackson's streaming parser), for the records it can
vouch for; the Python decoder (`json_decoder`) settles the rest, as for Avro (`jvm_decoder`) and Protobuf.

Spark's own `from_json` is not used: it turns a value of the wrong type into null, keeps the last of duplicate keys
and parses timestamps leniently. `JsonDecode` reads a body with the same rules as `json_types` (strict JSON,
duplicate keys refused, types, required properties, enums, bounds, lengths, formats) and builds the row; it
returns null for anything it cannot vouch for. A record is tried in the JVM when its header names the table's
schema id (`jsonschema`; every record for `json`) and it is within `value.maxBytes`; older schema ids, bad framing
and whatever the function refuses go to Python, the authority on what is wrong with a record.

Schemas with a free-form value (a JSON text column) or a `pattern` (Java's regular expressions are not Python's)
are decoded in Python altogether, as are Kafka Connect records (their schema travels with each record).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ingestion.decode import jvm_decoder
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import HEADER_SIZE, encode
from ingestion.runtime import helper
from ingestion.schema import json_types


def unusable(spark: SparkSession, spec: DecodeSpec) -> str | None:
    """Why the JVM cannot decode this pipeline's JSON records, or None when it can."""
    if spec.value_format == "connect-json":
        return "Kafka Connect records carry their own schema: decoded in Python"
    python_only = _python_only(json_types.compile_document(spec.reader_schema).tree, "$")
    if python_only:
        return f"{python_only}: decoded in Python"
    try:
        _udf(spark, spec)
        helper.partition_summary(spark)
    except Exception as exc:  # noqa: BLE001 - py4j reports a missing class as it can
        return (f"the project's JVM helper ({helper.JSON_DECODE_CLASS}) is not usable; is the helper jar "
                f"(`ingest jars`) in spark.jars? {str(exc).strip().splitlines()[-1][:300]}")
    return None


def _python_only(tree: dict[str, Any], path: str) -> str | None:
    """The first place of a schema tree the Java function leaves to Python (a JSON text column, a pattern)."""
    if tree["k"] == "text":
        return f"{path} is free-form JSON (kept as text)"
    if tree["k"] == "string" and tree.get("pattern") is not None:
        return f"{path} has a pattern"
    inner = [(f"{path}.{p['n']}", p["t"]) for p in tree.get("props", [])]
    inner += [(f"{path}[]", tree[k]) for k in ("i", "v") if k in tree]
    if tree.get("extra"):
        inner.append((f"{path}.*", tree["extra"]))
    for where, sub in inner:
        found = _python_only(sub, where)
        if found:
            return found
    return None


def _udf(spark: SparkSession, spec: DecodeSpec) -> str:
    tree = json.dumps(json_types.compile_document(spec.reader_schema).tree)
    header = 0 if spec.plain_schema_id is not None else HEADER_SIZE
    return helper.json_decoder(spark, tree, header, spec.payload_type)


def decode_in_jvm(kafka_rows: DataFrame, spec: DecodeSpec) -> DataFrame:
    """Kafka rows -> decoder rows, as `jvm_decoder.decode_in_jvm` gives them (UNVERIFIED rows to settle)."""
    return jvm_decoder.decode_with_function(kafka_rows, spec, lambda i: encode(i, b""), lambda spark: _udf(spark, spec))
