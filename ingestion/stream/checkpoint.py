"""The txnAppId lives inside the checkpoint folder, so it is reused on restart and new with a new checkpoint.

Delta skips a write whose (txnAppId, txnVersion) it has already committed. Batch ids restart at 0 with a new
checkpoint, so a new checkpoint must come with a new app id, or Delta would silently skip its first batches.
Keeping the id in the checkpoint folder ties the two together: lose one, lose both.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from pyspark.sql import SparkSession

from ingestion.runtime import hadoop
from ingestion.storage import local_folder

APP_ID_FILE = "_ingest_app_id"


def has_progress(spark: SparkSession, location: str) -> bool:
    """True when the checkpoint has started batches (Spark's `offsets/` log exists and is not empty)."""
    folder = local_folder(location)
    if folder is not None:
        return local_has_progress(folder)
    return hadoop.has_children(spark, location.rstrip("/") + "/offsets")


def app_id(spark: SparkSession, location: str, pipeline: str) -> str:
    """The txnAppId of the checkpoint at `location`, created when the checkpoint has none."""
    folder = local_folder(location)
    if folder is not None:
        return local_app_id(folder, pipeline)
    path = location.rstrip("/") + "/" + APP_ID_FILE
    if hadoop.exists(spark, path):
        return hadoop.read_text(spark, path).strip()
    new_id = _new_app_id(pipeline)
    hadoop.create_text(spark, path, new_id)
    return new_id


def _new_app_id(pipeline: str) -> str:
    return f"{pipeline}-{uuid.uuid4().hex[:16]}"


def local_has_progress(folder: Path) -> bool:
    """`has_progress` of a checkpoint in a local folder (no JVM needed)."""
    offsets = folder / "offsets"
    return offsets.is_dir() and any(offsets.iterdir())


def local_app_id(folder: Path, pipeline: str) -> str:
    """`app_id` of a checkpoint in a local folder (no JVM needed; the start batch's and the query's)."""
    path = folder / APP_ID_FILE
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            with path.open("x") as out:
                out.write(_new_app_id(pipeline))
        except FileExistsError:
            pass
    return path.read_text().strip()
