"""The runtime's data files (the helper's Java sources, the log4j and scheduler settings) as real files, also when
the package is imported from a zip (`spark-submit --py-files ingestion.zip`, docs/cluster.md): the JVM and `javac`
need paths, so a zipped file is copied once into the jar cache, under a folder named by its content."""

from __future__ import annotations

import hashlib
import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from ingestion.paths import jar_cache

_FOLDER = resources.files("ingestion.runtime") / "data"


def names(suffix: str) -> list[str]:
    """The data files whose names end with `suffix`, sorted."""
    return sorted(item.name for item in _FOLDER.iterdir() if item.name.endswith(suffix))


def read(name: str) -> bytes:
    return _item(name).read_bytes()


def path(name: str) -> Path:
    """A path on the local file system holding the data file `name`."""
    item = _item(name)
    if isinstance(item, Path):
        return item
    content = item.read_bytes()
    target = jar_cache() / "data" / hashlib.sha1(content).hexdigest()[:12] / name
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.{os.getpid()}")
        staging.write_bytes(content)
        os.replace(staging, target)  # whole or absent for a process reading it meanwhile
    return target


def _item(name: str) -> Traversable:
    item = _FOLDER / name
    if not item.is_file():
        raise FileNotFoundError(f"ingestion/runtime/data/{name} is missing from the installed package")
    return item
