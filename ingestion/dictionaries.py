"""Parquet dictionaries that do not pay, learnt from the footers of the files a batch wrote.

Parquet's writer starts every column chunk with a dictionary and gives it up when the dictionary does not make
the data smaller (ids, uuids, offsets, timestamps): the chunk is then written plain, and building the dictionary
was wasted work (on the benchmark, most of the ~0.7 s Parquet's dictionaries cost per 250,000-record batch).
After a batch whose files are large enough to judge, every column whose dictionary Parquet gave up in all of
them gets the table property `parquet.enable.dictionary#<column>` = `false`. Delta hands a table's properties to
the Parquet writer, so later files hold the same plain bytes, written without the wasted work.

It is an ordinary table property: `SHOW TBLPROPERTIES` lists it, `ALTER TABLE ... UNSET TBLPROPERTIES` removes
it, and a column whose property is set to anything (`true` pins the dictionary on) is never decided again.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PREFIX = "parquet.enable.dictionary#"
# Below this many values a column chunk says little: small files give up dictionaries of unique values early.
MIN_VALUES = 10_000


def abandoned(spark: SparkSession, paths: list[str]) -> list[str]:
    """Columns (dot paths) whose dictionary Parquet gave up in every row group of these files, judged only when
    every chunk holds at least MIN_VALUES non-null values; booleans never have one and are left out."""
    jvm: Any = spark._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    hadoop, fs = jvm.org.apache.parquet.hadoop, jvm.org.apache.hadoop.fs
    verdicts: dict[str, bool] = {}  # column -> every chunk so far was plain
    for path in paths:
        reader = hadoop.ParquetFileReader.open(hadoop.util.HadoopInputFile.fromPath(fs.Path(path), conf))
        try:
            blocks = reader.getFooter().getBlocks()
            for b in range(blocks.size()):
                columns = blocks.get(b).getColumns()
                for c in range(columns.size()):
                    chunk = columns.get(c)
                    name = chunk.getPath().toDotString()
                    if chunk.getPrimitiveType().getPrimitiveTypeName().name() == "BOOLEAN":
                        continue
                    values = chunk.getValueCount() - max(chunk.getStatistics().getNumNulls(), 0)
                    plain = values >= MIN_VALUES and not chunk.hasDictionaryPage()
                    verdicts[name] = verdicts.get(name, True) and plain
        finally:
            reader.close()
    return sorted(name for name, plain in verdicts.items() if plain)


def learn(spark: SparkSession, table_path: str, properties: dict[str, str], paths: list[str]) -> list[str]:
    """Turn the dictionary off for the columns whose dictionary Parquet gave up in these files (one table commit,
    only when there is something new); the columns it was turned off for."""
    new = [c for c in abandoned(spark, paths) if PREFIX + c not in properties]
    if new:
        quoted = table_path.replace("`", "``")
        assignments = ", ".join("'{}' = 'false'".format((PREFIX + c).replace("'", "\\'")) for c in new)
        spark.sql(f"ALTER TABLE delta.`{quoted}` SET TBLPROPERTIES ({assignments})")
    return new
