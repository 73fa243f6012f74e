"""The txnAppId lives inside the checkpoint folder, so it is reused on restart and new with a new checkpoint.

Delta skips a write whose (txnAppId, txnVersion) it has already committed. Batch ids restart at 0 with a new
checkpoint, so a new checkpoint must come with a new app id, or Delta would silently skip its first batches.
Keeping the id in the checkpoint folder ties the two together: lose one, lose both.
"""

from __future__ import annotations

import uuid

from pyspark.sql import SparkSession

from ingestion.runtime import hadoop

APP_ID_FILE = "_ingest_app_id"


def has_progress(spark: SparkSession, location: str) -> bool:
    """True when the checkpoint has started batches (Spark's `offsets/` log exists and is not empty)."""
    return hadoop.has_children(spark, location.rstrip("/") + "/offsets")


def app_id(spark: SparkSession, location: str, pipeline: str) -> str:
    """The txnAppId of the checkpoint at `location`, created when the checkpoint has none."""
    path = location.rstrip("/") + "/" + APP_ID_FILE
    if hadoop.exists(spark, path):
        return hadoop.read_text(spark, path).strip()
    new_id = f"{pipeline}-{uuid.uuid4().hex[:16]}"
    hadoop.create_text(spark, path, new_id)
    return new_id
