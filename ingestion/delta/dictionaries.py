"""Parquet dictionaries that do not pay, learnt from the footers of the files a batch wrote.

Parquet's writer starts every column chunk with a dictionary and gives it up when the dictionary does not make
the data smaller (ids, uuids, offsets, timestamps): the chunk is then written plain, and building the dictionary
was wasted work (docs/performance.md#parquet-dictionaries).
After a batch whose files are large enough to judge, every column whose dictionary Parquet gave up in all of
them gets the table property `parquet.enable.dictionary#<column>` = `false`. Delta hands a table's properties to
the Parquet writer, so later files hold the same plain bytes, written without the wasted work.

It is an ordinary table property: `SHOW TBLPROPERTIES` lists it, `ALTER TABLE ... UNSET TBLPROPERTIES` removes
it, and a column whose property is set to anything (`true` pins the dictionary on) is never decided again.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from ingestion.runtime import hadoop

log = logging.getLogger(__name__)

PREFIX = "parquet.enable.dictionary#"
# Below this many values a column chunk says little: in a small file a column of a few thousand distinct values
# looks unique, and its dictionary would be lost for the larger files of a backlog or a compaction. A second's
# batch at 20,000 records/s writes two files of about 10,000 (docs/performance.md#parquet-dictionaries).
MIN_VALUES = 5_000


def abandoned(spark: SparkSession, paths: list[str]) -> list[str]:
    """Columns (dot paths) whose dictionary Parquet gave up (before its first page or after) in every chunk of
    these files that holds at least MIN_VALUES non-null values, and in at least one; smaller chunks say nothing
    either way. Booleans never have a dictionary and are left out."""
    verdicts: dict[str, bool] = {}  # column -> every chunk large enough so far was plain
    for chunk in hadoop.parquet_chunks(spark, paths):
        if chunk.physical_type == "BOOLEAN" or chunk.values - max(chunk.nulls, 0) < MIN_VALUES:
            continue
        verdicts[chunk.column] = verdicts.get(chunk.column, True) and chunk.dictionary_given_up
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
