"""Where local state lives: one folder (default `.ingest/` in the working directory, or `$INGEST_HOME`)."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """The local state folder: jars, the dev broker, tables, checkpoints and the MLflow store live below it."""
    return Path(os.environ.get("INGEST_HOME", ".ingest")).absolute()


def conf_dir() -> Path:
    """Where pipeline configs are looked up by name (`conf/pipelines/<name>.yaml`)."""
    return Path(os.environ.get("INGEST_CONF_DIR", "conf")).absolute()


def schemas_dir() -> Path:
    """The folder of Avro schema files, laid out as `<subject>/<schema id>.avsc`."""
    return Path(os.environ.get("INGEST_SCHEMAS_DIR", "schemas")).absolute()
