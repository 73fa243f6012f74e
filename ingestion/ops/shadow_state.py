"""A shadow's facts (`Shadow`) and the small JSON file that keeps them beside the pipeline's checkpoint,
`<checkpoint>.shadows.json` (`state_files`: a local folder or object storage); see `ops/shadow.py`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ingestion import state_files
from ingestion.config import PipelineConfig
from ingestion.delta import shadow_tables
from ingestion.errors import IngestionError

DEFAULT_NAME = "shadow"
STATE_SUFFIX = ".shadows.json"
STARTING, READY, PROMOTING, PROMOTED = "starting", "ready", "promoting", "promoted"


class ShadowError(IngestionError):
    """A shadow command cannot do what was asked; the message says why, in one line."""


@dataclass(frozen=True)
class Span:
    """Offsets `first`..`last` (inclusive) of one partition."""

    topic: str
    partition: int
    first: int
    last: int

    def as_tuple(self) -> shadow_tables.Span:
        return (self.topic, self.partition, self.first, self.last)

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}:{self.first}-{self.last}"


@dataclass
class Shadow:
    """One shadow's facts, as its state file keeps them."""

    name: str
    config_file: str  # the other config, absolute
    table: str  # a routed pipeline's: "" (its route tables are `routes`)
    quarantine: str
    versions: tuple[int, int]  # the live bronze versions re-ingested, both inclusive (a routed pipeline's: -1, -1)
    spans: tuple[Span, ...]
    state: str = STARTING
    created_at: str = ""
    rows: int = 0  # the shadow's bronze rows
    quarantined: int = 0  # its quarantine rows
    promote_txn: int | None = None  # the promote's txnVersion (app id `promote_app_id(name)`), once recorded
    promoted_version: int | None = None  # the live bronze version the promote committed
    config_backup: str | None = None  # where the live config file was kept at the promote
    # A routed pipeline's shadow: the times `--from`/`--to` named (ISO; "" for no --to), its route tables by the
    # live table's name they stand for (`<table>` -> the path of `<table>__<name>`, filled by `start`), and the
    # version each live table's promote committed
    times: tuple[str, str] | None = None
    routes: dict[str, str] = field(default_factory=dict)
    promoted_versions: dict[str, int] = field(default_factory=dict)
    # What the shadow was made from, for a promote to refuse a stale one: the live table's newest version when it
    # was planned (a routed pipeline's: None), and the other config's text then (sha256; "": not recorded)
    live_version: int | None = None
    config_digest: str = ""

    @property
    def routed(self) -> bool:
        return self.times is not None

    @property
    def covers(self) -> str:
        """What the shadow re-ingests, for messages: `versions 12-30`, or a routed pipeline's times."""
        if self.times is None:
            return f"versions {self.versions[0]}-{self.versions[1]}"
        return f"the batches committed from {self.times[0]}" + (f" to {self.times[1]}" if self.times[1] else "")

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["versions"] = list(self.versions)
        body["spans"] = [asdict(s) for s in self.spans]
        body["times"] = None if self.times is None else list(self.times)
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Shadow:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in body.items() if k in fields}
        values["versions"] = (int(body["versions"][0]), int(body["versions"][1]))
        values["spans"] = tuple(Span(**s) for s in body["spans"])
        if body.get("times") is not None:
            values["times"] = (str(body["times"][0]), str(body["times"][1]))
        return cls(**values)


def promote_app_id(name: str, table: str = "") -> str:
    """The promote's txnAppId: `promote.<name>`; a route table's `promote.<name>.<table>` (so its ledger says it is
    the pipeline's, `delta/routed.py`, a table the promote made included)."""
    return f"promote.{name}.{table}" if table else f"promote.{name}"


# --- the state file ---------------------------------------------------------------------------------------------

def state_location(config: PipelineConfig) -> str:
    """`<checkpoint>.shadows.json`: beside the checkpoint, so a rewind's move of the checkpoint keeps it."""
    return config.checkpoint_path.rstrip("/") + STATE_SUFFIX


def _files(config: PipelineConfig) -> state_files.StateFiles:
    files = state_files.for_location(state_location(config), config.spark)
    if files is None:
        raise ShadowError(f"{config.name}: shadows keep their state beside the checkpoint, and "
                          f"{config.checkpoint_path} is on a store reached only through the JVM (not yet)")
    return files


def load_shadows(config: PipelineConfig) -> dict[str, Shadow]:
    text = _files(config).read_text(state_location(config))
    if not text:
        return {}
    try:
        body = json.loads(text)
        return {name: Shadow.from_json(s) for name, s in body["shadows"].items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise ShadowError(f"{state_location(config)} cannot be read as shadows ({exc}); remove it to start over") \
            from None


def save_shadow(config: PipelineConfig, shadow: Shadow | None, name: str) -> None:
    """Write `shadow` under `name` in the state file (None: remove it), the others kept."""
    shadows = load_shadows(config)
    if shadow is None:
        shadows.pop(name, None)
    else:
        shadows[name] = shadow
    body = {"pipeline": config.name, "shadows": {n: s.to_json() for n, s in sorted(shadows.items())}}
    _files(config).write_text(state_location(config), json.dumps(body, indent=2) + "\n")


def get(config: PipelineConfig, name: str) -> Shadow:
    shadows = load_shadows(config)
    if name not in shadows:
        known = ", ".join(sorted(shadows)) or "none"
        raise ShadowError(f"{config.name} has no shadow {name!r} (shadows: {known}); `ingest shadow start` makes one")
    return shadows[name]


def digest(file: str | Path) -> str:
    """A config file's text as the shadow records it (sha256); "" when the file is gone."""
    try:
        return hashlib.sha256(Path(file).read_bytes()).hexdigest()
    except OSError:
        return ""
