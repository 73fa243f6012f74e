"""Virtualenvs of other pyspark installs (another Spark line, the Connect client) for the tests that run them:
built once per machine, outside the clone, and shared by every clone and run after.

Each lives under `~/.cache/ingest-tests/venvs/<name>-<hash>` (`INGEST_TEST_VENVS` names another folder), the hash
of its requirements and of the Python that builds it, so a new requirement or Python makes a new one. It is built
in a temporary folder beside that and renamed into place only once pip has finished, so a build that is killed
or fails never leaves a half virtualenv where the next run would take it for a whole one; two builds at once each
finish, and the second's rename finds the first's in place and is discarded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path


def root() -> Path:
    """The machine's folder of test virtualenvs."""
    named = os.environ.get("INGEST_TEST_VENVS")
    if named:
        return Path(named)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ingest-tests" / "venvs"


def _base_python() -> str:
    """The interpreter a new virtualenv is made from: the one below this environment's (a virtualenv of a
    virtualenv points at the base interpreter, not at the clone's `.venv`)."""
    return getattr(sys, "_base_executable", sys.executable) or sys.executable


def location(name: str, requirements: Sequence[str]) -> Path:
    """Where the virtualenv `name` with `requirements` lives on this machine."""
    digest = hashlib.sha256("\n".join([sys.version, _base_python(), *requirements]).encode()).hexdigest()[:12]
    return root() / f"{name}-{digest}"


def cached_venv(name: str, requirements: Sequence[str], *, timeout: float = 1500) -> Path:
    """The folder of a virtualenv (no pip of its own) with `requirements` installed by this environment's pip;
    built on the first call on this machine, found in place on every later one."""
    venv = location(name, requirements)
    if (venv / "bin" / "python").exists():
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    building = venv.parent / f".{venv.name}.building-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        subprocess.run([_base_python(), "-m", "venv", "--without-pip", str(building)], check=True, timeout=120)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(building / "bin" / "python"), "install",
                        "--quiet", *requirements], check=True, timeout=timeout)
        _point_scripts_at(building, venv)
        try:
            building.rename(venv)  # atomic: the virtualenv is whole, or not there
        except OSError:
            if not (venv / "bin" / "python").exists():  # not another build's that finished first
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return venv


def _point_scripts_at(building: Path, venv: Path) -> None:
    """pip writes the building folder's Python into the scripts it installs (`#!.../bin/python`): the final
    folder's instead, before the rename."""
    for script in (building / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        text = script.read_bytes()
        if text.startswith(b"#!") and str(building).encode() in text.split(b"\n", 1)[0]:
            first, _, rest = text.partition(b"\n")
            script.write_bytes(first.replace(str(building).encode(), str(venv).encode()) + b"\n" + rest)
