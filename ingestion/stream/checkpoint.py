"""The txnAppId lives inside the checkpoint folder, so it is reused on restart and new with a new checkpoint.

Delta skips a write whose (txnAppId, txnVersion) it has already committed. Batch ids restart at 0 with a new
checkpoint, so a new checkpoint must come with a new app id, or Delta would silently skip its first batches.
Keeping the id in the checkpoint folder ties the two together: lose one, lose both.

Both are read without a JVM where the checkpoint's store allows it (`state_files`: a local folder, S3, ADLS), else
through the JVM's Hadoop file system (`spark` given).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from pyspark.sql import SparkSession

from ingestion import state_files
from ingestion.errors import IngestionError
from ingestion.runtime import hadoop

APP_ID_FILE = "_ingest_app_id"


def has_progress(location: str, settings: Mapping[str, str] | None = None,
                 spark: SparkSession | None = None) -> bool:
    """True when the checkpoint has started batches (Spark's `offsets/` log exists and is not empty)."""
    offsets = location.rstrip("/") + "/offsets"
    files = state_files.for_location(location, settings)
    if files is not None:
        return files.has_children(offsets)
    return hadoop.has_children(_jvm(spark, location), offsets)


def app_id(location: str, pipeline: str, settings: Mapping[str, str] | None = None,
           spark: SparkSession | None = None) -> str:
    """The txnAppId of the checkpoint at `location`, created when the checkpoint has none (under the pipeline's
    writer lock: one writer creates it)."""
    path = location.rstrip("/") + "/" + APP_ID_FILE
    files = state_files.for_location(location, settings)
    if files is not None:
        found = files.read_text(path)
        if found is None:
            files.write_text(path, found := _new_app_id(pipeline))
        return found.strip()
    jvm = _jvm(spark, location)
    if hadoop.exists(jvm, path):
        return hadoop.read_text(jvm, path).strip()
    new_id = _new_app_id(pipeline)
    hadoop.create_text(jvm, path, new_id)
    return new_id


def reachable_without_jvm(location: str, settings: Mapping[str, str] | None = None) -> bool:
    """Whether the checkpoint's own files (the txnAppId, the lease, Spark's offsets log) are read and written
    without a JVM."""
    return state_files.for_location(location, settings) is not None


def _new_app_id(pipeline: str) -> str:
    return f"{pipeline}-{uuid.uuid4().hex[:16]}"


def _jvm(spark: SparkSession | None, location: str) -> SparkSession:
    if spark is None:
        raise IngestionError(f"the checkpoint {location} is reached only through Spark's Hadoop file system")
    return spark
