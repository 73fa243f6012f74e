"""`ingest new [DIR]`: the folder layout of a new project, from the package's own template (`ops/template/`):
`conf/defaults.yaml` (the shared settings every pipeline inherits), `conf/pipelines/` (one file per pipeline,
written by `ingest init <topic>`), `schemas/` (Avro schemas when there is no registry) and a `.gitignore` that keeps
the state folder out of version control. A file that exists is never overwritten."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# template file -> where it goes in the project; folders are made even when empty
_FILES = {"conf/defaults.yaml": "conf/defaults.yaml", "gitignore": ".gitignore"}
_FOLDERS = ("conf/pipelines", "schemas")


@dataclass(frozen=True)
class Placed:
    """One file or folder of the layout, and whether this call made it (False: it existed and was left alone)."""

    path: Path
    made: bool


def lay_out(folder: Path) -> list[Placed]:
    """Make the project layout in `folder` (made if missing); what each piece is, in order."""
    template = resources.files("ingestion.ops") / "template"
    placed = []
    for name in _FOLDERS:
        path = folder / name
        placed.append(Placed(path, not path.is_dir()))
        path.mkdir(parents=True, exist_ok=True)
    for source, target in _FILES.items():
        path = folder / target
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "xb") as out:  # never overwrite, even a file made meanwhile
                out.write((template / source).read_bytes())
        except FileExistsError:
            placed.append(Placed(path, False))
            continue
        placed.append(Placed(path, True))
    return placed
