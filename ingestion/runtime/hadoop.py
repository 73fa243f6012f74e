"""Hadoop file systems and Parquet footers, read through the JVM so that every store Spark can use works
(local files, HDFS, s3a://, abfss://, gs://) with the session's own Hadoop configuration."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from ingestion.runtime.gateway import java


def _fs(spark: SparkSession, location: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem and Path for `location` (py4j objects)."""
    path = java(spark._jvm, "org.apache.hadoop.fs.Path")(location)
    return path.getFileSystem(spark._jsc.hadoopConfiguration()), path  # type: ignore[union-attr]


def exists(spark: SparkSession, location: str) -> bool:
    fs, path = _fs(spark, location)
    return bool(fs.exists(path))


def has_children(spark: SparkSession, location: str) -> bool:
    """True when `location` is a folder with at least one entry."""
    fs, path = _fs(spark, location)
    return bool(fs.exists(path)) and len(fs.listStatus(path)) > 0


def read_text(spark: SparkSession, location: str, attempts: int = 3) -> str:
    """A file's text. A file replaced while it is read (S3A's RemoteFileChangedException: another process
    rewrote it between the open and the read, as a lease's holder does) is read again, up to `attempts` times."""
    from py4j.protocol import Py4JJavaError

    fs, path = _fs(spark, location)
    for attempt in range(attempts):
        stream = fs.open(path)
        try:
            return str(java(spark._jvm, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8"))
        except Py4JJavaError as exc:
            if attempt + 1 == attempts or "RemoteFileChangedException" not in str(exc.java_exception):
                raise
        finally:
            stream.close()
    raise AssertionError("unreachable")


def create_text(spark: SparkSession, location: str, text: str, *, overwrite: bool = False) -> None:
    """Write a file: a new one (never overwriting one), or replacing one with `overwrite`."""
    fs, path = _fs(spark, location)
    out = fs.create(path, overwrite)
    try:
        out.write(bytearray(text.encode()))
    finally:
        out.close()


def delete(spark: SparkSession, location: str, *, recursive: bool = False) -> bool:
    fs, path = _fs(spark, location)
    return bool(fs.delete(path, recursive))


def rename(spark: SparkSession, source: str, target: str) -> bool:
    """Move a file or folder (on object storage: copied, then deleted)."""
    fs, path = _fs(spark, source)
    return bool(fs.rename(path, java(spark._jvm, "org.apache.hadoop.fs.Path")(target)))


def file_sizes(spark: SparkSession, locations: Iterable[str]) -> list[int]:
    """The length in bytes of each file."""
    out = []
    for location in locations:
        fs, path = _fs(spark, location)
        out.append(int(fs.getFileStatus(path).getLen()))
    return out


def delete_files(spark: SparkSession, locations: Iterable[str]) -> None:
    for location in locations:
        fs, path = _fs(spark, location)
        fs.delete(path, False)


@dataclass(frozen=True)
class ColumnChunk:
    """One column chunk of a Parquet row group, as its footer describes it."""

    column: str  # dot path
    physical_type: str  # BOOLEAN, INT32, BINARY, ...
    values: int
    nulls: int  # -1 when the footer does not say
    dictionary_given_up: bool  # data pages written plain: no dictionary page, or a fallback after the first pages


def parquet_chunks(spark: SparkSession, locations: Iterable[str]) -> list[ColumnChunk]:
    """Every column chunk of every row group of these Parquet files, from their footers."""
    jvm: Any = spark._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    reader_class = java(jvm, "org.apache.parquet.hadoop.ParquetFileReader")
    input_file = java(jvm, "org.apache.parquet.hadoop.util.HadoopInputFile")
    path_class = java(jvm, "org.apache.hadoop.fs.Path")
    chunks: list[ColumnChunk] = []
    for location in locations:
        reader = reader_class.open(input_file.fromPath(path_class(location), conf))
        try:
            blocks = reader.getFooter().getBlocks()
            for b in range(blocks.size()):
                columns = blocks.get(b).getColumns()
                for c in range(columns.size()):
                    chunk = columns.get(c)
                    pages = chunk.getEncodingStats()  # None in files of writers that do not record it
                    given_up = not chunk.hasDictionaryPage() or (
                        pages is not None and bool(pages.hasNonDictionaryEncodedPages()))
                    chunks.append(ColumnChunk(
                        chunk.getPath().toDotString(), str(chunk.getPrimitiveType().getPrimitiveTypeName().name()),
                        int(chunk.getValueCount()), int(chunk.getStatistics().getNumNulls()), given_up))
        finally:
            reader.close()
    return chunks


class HadoopFiles:
    """`state_files.StateFiles` through the JVM's Hadoop file system: the checkpoint's own files on a store this
    process cannot reach without the JVM (`hdfs://`, `gs://`, ...)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def read_text(self, location: str) -> str | None:
        return read_text(self.spark, location) if exists(self.spark, location) else None

    def write_text(self, location: str, text: str) -> None:
        create_text(self.spark, location, text, overwrite=True)

    def delete(self, location: str) -> None:
        delete(self.spark, location)

    def has_children(self, location: str) -> bool:
        return has_children(self.spark, location)
