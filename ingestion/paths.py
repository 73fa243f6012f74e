"""Where local state lives: one folder (default `.ingest/` in the working directory, or `$INGEST_HOME`)."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """The local state folder: jars, the dev broker, tables, checkpoints and the MLflow store live below it."""
    return Path(os.environ.get("INGEST_HOME", ".ingest")).absolute()


def jar_cache() -> Path:
    """Where resolved JVM jars, the helper jar and unpacked runtime data files are kept."""
    return Path(os.environ.get("INGEST_JAR_CACHE", state_dir() / "jars"))


def jvm_error_file() -> str:
    """`-XX:ErrorFile=` for every JVM the project starts: a JVM that crashes writes its `hs_err` log under the state
    folder (`logs/`), never into whatever folder the command ran in."""
    folder = state_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return f"-XX:ErrorFile={folder / 'hs_err_pid%p.log'}"


def conf_dir() -> Path:
    """Where pipeline configs are looked up by name (`conf/pipelines/<name>.yaml`)."""
    return Path(os.environ.get("INGEST_CONF_DIR", "conf")).absolute()


def schemas_dir() -> Path:
    """The folder of Avro schema files, laid out as `<subject>/<schema id>.avsc`."""
    return Path(os.environ.get("INGEST_SCHEMAS_DIR", "schemas")).absolute()


def local_broker_dir() -> Path:
    """The folder of the local development broker (`ingest kafka start`)."""
    return state_dir() / "kafka"


def local_broker_address() -> str | None:
    """The bootstrap address the local development broker wrote when it started, or None without one."""
    address = local_broker_dir() / "bootstrap"
    return address.read_text().strip() if address.is_file() else None
