"""The README documents what the code does: config keys, commands and bronze columns may not drift apart."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

from ingestion.bronze import METADATA_COLUMNS, QUARANTINE_COLUMNS
from ingestion.cli import _parser
from ingestion.config import PipelineConfig

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    following = re.compile(r"\n##+ ").search(README, start + 1)  # up to the next heading of any depth
    return README[start:following.start() if following else len(README)]


def _first_cells(section: str) -> list[str]:
    return [re.split(r"(?<!\\)\|", line)[1] for line in section.splitlines() if line.startswith("| `")]


def _config_keys(cls: type, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        key = prefix + f.metadata.get("key", f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            keys |= _config_keys(hints[f.name], key + ".")
        elif typing.get_origin(hints[f.name]) in (typing.Mapping, dict) or "Mapping" in str(hints[f.name]):
            keys.add(key + ".<setting>")
        else:
            keys.add(key)
    return keys


def test_every_config_key_is_documented_and_every_documented_key_exists() -> None:
    documented = {k for cell in _first_cells(_section("Pipeline config reference"))
                  for k in re.findall(r"`([^`]+)`", cell)}
    documented = {re.sub(r"<[^>]+>", "<setting>", k) for k in documented}
    actual = _config_keys(PipelineConfig)
    # a mapping may be documented as `key` or as `key.<setting>`
    documented |= {f"{k}.<setting>" for k in documented if f"{k}.<setting>" in actual}
    documented -= {k.removesuffix(".<setting>") for k in actual if k.endswith(".<setting>")}
    assert actual - documented == set(), "config keys missing from the README"
    assert documented - actual - {"kafka.bootstrap.servers"} == set(), "README documents keys that do not exist"


def test_every_command_is_documented_and_every_documented_command_exists() -> None:
    commands = _parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    actual = set()
    for name, sub in commands.items():
        nested = [a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction"]
        actual |= {f"{name} {action}" for action in nested[0].choices} if nested else {name}
    documented = set()
    for cell in _first_cells(_section("Commands")):
        for usage in re.findall(r"`ingest ([a-z][^`]*)`", cell):
            words = usage.split()
            documented.add(" ".join(words[:2]) if " ".join(words[:2]) in actual else words[0])
    for slashed in re.findall(r"`ingest (\w+) (\w+)` / `(\w+)`", _section("Commands")):
        documented.add(f"{slashed[0]} {slashed[2]}")
    assert actual - documented == set(), "commands missing from the README"
    assert documented - actual == set(), "README documents commands that do not exist"


def test_bronze_and_quarantine_column_references_match_the_code() -> None:
    bronze = [c for cell in _first_cells(_section("Bronze columns")) for c in re.findall(r"`([^`]+)`", cell)]
    assert bronze == list(METADATA_COLUMNS)
    quarantine = [c for cell in _first_cells(_section("Quarantine columns")) for c in re.findall(r"`([^`]+)`", cell)]
    assert quarantine == list(QUARANTINE_COLUMNS)
