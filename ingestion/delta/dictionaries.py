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
# Below this many values a column chunk says little: small files give up dictionaries of unique values early.
MIN_VALUES = 10_000


def abandoned(spark: SparkSession, paths: list[str]) -> list[str]:
    """Columns (dot paths) whose dictionary Parquet gave up in every row group of these files, judged only when
    every chunk holds at least MIN_VALUES non-null values; booleans never have one and are left out."""
    verdicts: dict[str, bool] = {}  # column -> every chunk so far was plain
    for chunk in hadoop.parquet_chunks(spark, paths):
        if chunk.physical_type == "BOOLEAN":
            continue
        values = chunk.values - max(chunk.nulls, 0)
        plain = values >= MIN_VALUES and not chunk.has_dictionary
        verdicts[chunk.column] = verdicts.get(chunk.column, True) and plain
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
