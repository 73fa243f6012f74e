"""The change records of a silver pipeline that sit in quarantine: silver can equal the fold of bronze and still miss
them, so `verify` and `silver status` count them and name the first keys, read from each record's Kafka key (an
Avro key through the pipeline's schema source, a JSON or text key as it is); read with delta-rs, no JVM."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

from ingestion.config import PipelineConfig
from ingestion.delta import rs_reads

MAX_SHOWN = 20
MAX_READ = 1000  # the quarantined records whose keys are read for the first MAX_SHOWN distinct ones


@dataclass(frozen=True)
class QuarantinedChanges:
    count: int  # change records of the pipeline in its quarantine table
    keys: tuple[str, ...] = ()  # the first keys affected (by partition and offset), as `id=7`, or the key's text
    keyless: int = 0  # of the records read, those without a key to show

    def render(self, pipeline: str) -> str:
        if not self.count:
            return "no change records in quarantine"
        shown = "; ".join(self.keys) if self.keys else "none readable"
        return (f"{self.count:,} change record(s) in quarantine, not in bronze nor silver: silver misses them until "
                f"they are re-decoded (ingest quarantine reprocess {pipeline}); first keys: {shown}")


def quarantined_changes(config: PipelineConfig) -> QuarantinedChanges:
    """Count the pipeline's quarantined records and read the first keys (JvmFreeReadError where delta-rs cannot
    read the table: `counted` then counts them through a reader)."""
    found = rs_reads.query(config.quarantine_path, (
        "SELECT count(*) AS n FROM t",
        f"SELECT _kafka_key FROM t ORDER BY _kafka_partition, _kafka_offset LIMIT {MAX_READ}"),
        config.storage_options() or None)
    if found is None:
        return QuarantinedChanges(0)
    count = int(found[0].column(0)[0].as_py())
    first = found[1].column(0).to_pylist()
    keys: list[str] = []
    keyless = 0
    for raw in first:
        shown = key_text(config, raw)
        if shown is None:
            keyless += 1
        elif shown not in keys and len(keys) < MAX_SHOWN:
            keys.append(shown)
    return QuarantinedChanges(count, tuple(keys), keyless)


def key_text(config: PipelineConfig, raw: bytes | None) -> str | None:
    """A quarantined record's key as `audit` names keys (`id=7`) where the key is a record holding silver's key
    fields, else its text or hex; None without a key."""
    if raw is None:
        return None
    value = _decoded(config, bytes(raw))
    if isinstance(value, dict) and "payload" in value and "schema" in value:  # Kafka Connect's JsonConverter
        value = value["payload"]
    if isinstance(value, dict):
        assert config.silver is not None
        paths = [p.removeprefix("_kafka_key.") for p in config.silver.key]
        found = [_at(value, p) for p in paths]
        if all(v is not None for v in found):
            return ", ".join(f"{p}={v!r}" for p, v in zip(config.silver.key, found, strict=True))
        return json.dumps(value, default=str, sort_keys=True)
    return value if isinstance(value, str) else repr(value)


def _decoded(config: PipelineConfig, raw: bytes) -> Any:
    if config.key.format == "avro" and len(raw) > 5 and raw[0] == 0:
        try:
            return _avro(config, int.from_bytes(raw[1:5], "big"), raw[5:])
        except Exception:  # noqa: BLE001 - a key that does not decode is shown as bytes
            return "0x" + raw.hex()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + raw.hex()
    try:
        return json.loads(text)
    except ValueError:
        return text


def _avro(config: PipelineConfig, schema_id: int, body: bytes) -> Any:
    from fastavro import parse_schema, schemaless_reader

    from ingestion.schema.registry import source_for

    text = source_for(config).by_id(schema_id)
    if text is None:
        raise LookupError(schema_id)
    return schemaless_reader(io.BytesIO(body), parse_schema(json.loads(text)), None)


def _at(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def counted(reader: Any, config: PipelineConfig) -> QuarantinedChanges:
    """The count alone, through a `TableReader` (Spark's where delta-rs cannot read the quarantine table)."""
    return QuarantinedChanges(sum(g.records for g in reader.quarantine_groups(config.quarantine_path)))
