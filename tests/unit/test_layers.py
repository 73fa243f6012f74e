"""The package's boundaries: py4j handles only under runtime/, one SparkSession factory. (The import layers are
checked by `lint-imports`, contracts in pyproject.toml.)"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ingestion"
RUNTIME = PACKAGE / "runtime"
# PySpark's private handles on JVM objects.
PRIVATE_HANDLE = re.compile(r"\._(jvm|jdf|jsc|jo|jsparkSession|jsq|jconf|jsparkContext)\b")


def _modules_outside_runtime() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if RUNTIME not in p.parents]


def test_the_pattern_finds_every_kind_of_handle() -> None:
    samples = ["spark._jvm.org", "df._jdf", "spark.sparkContext._jsc.sc()", "observation._jo.get()",
               "spark._jsparkSession", "SparkContext._jvm"]
    assert [bool(PRIVATE_HANDLE.search(s)) for s in samples] == [True] * len(samples)
    assert not PRIVATE_HANDLE.search("self._jvm_path = x; self._uses_jvm = True")


def test_no_module_outside_runtime_touches_a_py4j_handle() -> None:
    offenders = [f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
                 for p in _modules_outside_runtime()
                 for n, line in enumerate(p.read_text().splitlines(), 1) if PRIVATE_HANDLE.search(line)]
    assert offenders == []
    assert len(_modules_outside_runtime()) > 30  # the scan saw the package


def test_one_session_factory() -> None:
    builders = sorted(str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
                      if "SparkSession.builder" in p.read_text())
    assert builders == ["ingestion/runtime/session.py"]


def test_the_public_api_resolves_and_imports_no_spark_until_used() -> None:
    import subprocess
    import sys

    code = ("import sys, ingestion; assert 'pyspark' not in sys.modules, 'pyspark imported'; "
            "missing = [n for n in ingestion.__all__ if getattr(ingestion, n, None) is None]; print(missing)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
