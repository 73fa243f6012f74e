"""tests/venvs.py, the virtualenvs the e2e tests build once per machine: keyed by their requirements and the
Python, and a build that fails leaves nothing where the next run would take it for a whole virtualenv."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import venvs


@pytest.fixture(autouse=True)
def _root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INGEST_TEST_VENVS", str(tmp_path / "venvs"))
    return tmp_path / "venvs"


def test_a_virtualenv_per_name_and_requirements_outside_the_clone(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    one = venvs.location("pyspark", ["pyspark==4.1.1"])
    assert one == venvs.location("pyspark", ["pyspark==4.1.1"])
    assert one.parent == tmp_path / "venvs" and one.name.startswith("pyspark-")
    assert venvs.location("pyspark", ["pyspark==4.0.1"]) != one
    assert venvs.location("pyspark-client", ["pyspark==4.1.1"]) != one
    monkeypatch.delenv("INGEST_TEST_VENVS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert venvs.root() == tmp_path / "cache" / "ingest-tests" / "venvs"


def test_a_failed_build_leaves_nothing_behind(_root: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-package"  # pip fails on it at once, without an index
    with pytest.raises(subprocess.CalledProcessError):
        venvs.cached_venv("broken", [str(missing)], timeout=300)
    assert list(_root.iterdir()) == []  # neither the virtualenv nor its building folder


def test_one_found_in_place_is_taken_as_it_is(_root: Path) -> None:
    venv = venvs.location("ready", ["anything==1"])
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert venvs.cached_venv("ready", ["anything==1"]) == venv  # no build: pip would have failed on it
