"""Local files through the project's Hadoop file system (data/NoForkLocalFileSystem.java): the same results as
Hadoop's own, without a `chmod` or `readlink` child process per file."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ingestion.runtime.session import NO_FORK_FS_CLASS


def _fs(spark: Any, path: Path) -> Any:
    hadoop = spark._jvm.org.apache.hadoop.fs
    return hadoop.Path(path.as_uri()).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def test_the_session_reads_and_writes_local_files_through_it(spark: Any, tmp_path: Path) -> None:
    fs = _fs(spark, tmp_path)
    assert fs.getClass().getName() == NO_FORK_FS_CLASS
    context = spark._jvm.org.apache.hadoop.fs.FileContext.getFileContext(
        spark._jvm.java.net.URI(tmp_path.as_uri()), spark.sparkContext._jsc.hadoopConfiguration())
    assert context.getDefaultFileSystem().getClass().getName() == f"{NO_FORK_FS_CLASS}$Fs"


def test_created_files_get_hadoops_permissions_and_checksums(spark: Any, tmp_path: Path) -> None:
    hadoop = spark._jvm.org.apache.hadoop.fs
    fs = _fs(spark, tmp_path)
    out = fs.create(hadoop.Path((tmp_path / "d" / "f").as_uri()), True)
    out.write(b"abc")
    out.close()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "d" / "f").stat().st_mode) == 0o666 & ~umask
    assert (tmp_path / "d" / ".f.crc").is_file()  # still a checksummed file system
    fs.setPermission(hadoop.Path((tmp_path / "d" / "f").as_uri()),
                     hadoop.permission.FsPermission.createImmutable(0o640))
    assert stat.S_IMODE((tmp_path / "d" / "f").stat().st_mode) == 0o640


def test_renames_and_symlinks_answer_as_hadoops(spark: Any, tmp_path: Path) -> None:
    hadoop = spark._jvm.org.apache.hadoop.fs
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    context = hadoop.FileContext.getFileContext(spark._jvm.java.net.URI(tmp_path.as_uri()), conf)
    (tmp_path / "a").write_text("x")
    (tmp_path / "b").write_text("y")
    none = spark.sparkContext._gateway.new_array(hadoop.Options.Rename, 0)
    # FileContext.rename without OVERWRITE refuses an existing target: what Delta's log and Spark's checkpoint
    # rely on to never overwrite a commit.
    try:
        context.rename(hadoop.Path((tmp_path / "a").as_uri()), hadoop.Path((tmp_path / "b").as_uri()), none)
        raise AssertionError("rename over an existing file succeeded")
    except Exception as exc:  # noqa: BLE001 - py4j wraps the FileAlreadyExistsException
        assert "FileAlreadyExistsException" in str(exc)
    context.rename(hadoop.Path((tmp_path / "a").as_uri()), hadoop.Path((tmp_path / "c").as_uri()), none)
    assert (tmp_path / "c").read_text() == "x" and not (tmp_path / "a").exists()

    (tmp_path / "link").symlink_to(tmp_path / "c")
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    stock = hadoop.RawLocalFileSystem()
    stock.initialize(spark._jvm.java.net.URI("file:///"), conf)
    ours = _fs(spark, tmp_path)
    for name, is_link in (("link", True), ("c", False)):
        path = hadoop.Path(str(tmp_path / name))  # no scheme: the form Hadoop's `readlink` check can see
        got, expected = ours.getFileLinkStatus(path), stock.getFileLinkStatus(path)
        assert got.isSymlink() == expected.isSymlink() == is_link
        assert (got.getLen(), got.isFile(), got.getPath()) == (expected.getLen(), expected.isFile(), expected.getPath())
