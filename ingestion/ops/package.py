"""A job for a Spark cluster: the package as a zip for `--py-files`, an entry script for spark-submit, and the
jars for `--jars`, in one folder to copy where spark-submit runs (docs/cluster.md)."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from zipfile import ZIP_DEFLATED, ZipFile

import ingestion
from ingestion.runtime import jars

DISTRIBUTION = "kafka-delta-lakehouse-ingest"
ENTRY = '''"""spark-submit entry point of ingest: spark-submit [options] ingest_main.py <command> [arguments]."""
import sys

from ingestion.cli import main

sys.exit(main(sys.argv[1:]))
'''


@dataclass(frozen=True)
class Bundle:
    archive: Path  # the package, for --py-files
    entry: Path  # the main file spark-submit runs on the driver
    jars: tuple[Path, ...]  # for --jars
    spark_line: str  # the Spark line the jars are built for ("4.2")

    def submit_command(self, master: str, ingest_args: Iterable[str]) -> list[str]:
        return ["spark-submit", "--master", master, "--py-files", str(self.archive),
                "--jars", ",".join(map(str, self.jars)), str(self.entry), *ingest_args]


def build(out: Path, locations: Iterable[str] = (), spark_version: str | None = None) -> Bundle:
    """Write the bundle into `out`; `locations` (the pipelines' tables and checkpoints) choose the file systems'
    jars (S3A for `s3a://`), `spark_version` the cluster's Spark line (default: the local pyspark's)."""
    line = jars.spark_line(spark_version)
    out.mkdir(parents=True, exist_ok=True)
    source = Path(ingestion.__file__).parent
    archive = out / f"ingestion-{_version()}.zip"
    staging = archive.with_name(f".{archive.name}.tmp")
    with ZipFile(staging, "w", ZIP_DEFLATED) as zipped:
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                zipped.write(path, (Path("ingestion") / path.relative_to(source)).as_posix())
    staging.replace(archive)
    entry = out / "ingest_main.py"
    entry.write_text(ENTRY)
    jar_folder = out / "jars"
    jar_folder.mkdir(exist_ok=True)
    wanted = jars.spark_jars(locations, line.line)
    for stale in set(jar_folder.glob("*.jar")) - {jar_folder / jar.name for jar in wanted}:
        stale.unlink()  # packaged before for another Spark line or other stores: --jars takes the folder's jars
    copied = []
    for jar in wanted:
        target = jar_folder / jar.name
        if not target.is_file() or target.stat().st_size != jar.stat().st_size:
            shutil.copy2(jar, target)
        copied.append(target)
    return Bundle(archive, entry, tuple(copied), line.line)


def shell_line(command: list[str]) -> str:
    """The command for a shell, an option (or the main file) per line."""
    lines: list[list[str]] = [[]]
    for part in command:
        if part.startswith("--") or part.endswith(".py"):
            lines.append([])
        lines[-1].append(shlex.quote(part))
    return " \\\n    ".join(" ".join(line) for line in lines if line)


def _version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "dev"
