"""The txnAppId lives inside the checkpoint folder, so it is reused on restart and new with a new checkpoint.

Delta skips a write whose (txnAppId, txnVersion) it has already committed. Batch ids restart at 0 with a new
checkpoint, so a new checkpoint must come with a new app id, or Delta would silently skip its first batches.
Keeping the id in the checkpoint folder ties the two together: lose one, lose both.
"""

from __future__ import annotations

import uuid
from typing import Any

from pyspark.sql import SparkSession

APP_ID_FILE = "_ingest_app_id"


def _fs(spark: SparkSession, location: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem and Path for `location` (py4j objects), so any checkpoint store works."""
    jvm: Any = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(location)
    jsc: Any = spark._jsc
    return path.getFileSystem(jsc.hadoopConfiguration()), path


def has_progress(spark: SparkSession, location: str) -> bool:
    """True when the checkpoint has started batches (Spark's `offsets/` log exists and is not empty)."""
    fs, path = _fs(spark, location.rstrip("/") + "/offsets")
    return bool(fs.exists(path)) and len(fs.listStatus(path)) > 0


def app_id(spark: SparkSession, location: str, pipeline: str) -> str:
    """The txnAppId of the checkpoint at `location`, created when the checkpoint has none."""
    fs, path = _fs(spark, location.rstrip("/") + "/" + APP_ID_FILE)
    if fs.exists(path):
        stream = fs.open(path)
        try:
            jvm: Any = spark._jvm
            data = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()
        return str(data).strip()
    new_id = f"{pipeline}-{uuid.uuid4().hex[:16]}"
    out = fs.create(path, False)
    try:
        out.write(bytearray(new_id.encode()))
    finally:
        out.close()
    return new_id
