"""The one SparkSession factory's settings (ingestion/spark.py), read from the builder without starting a JVM."""

from __future__ import annotations

import pytest

from ingestion.errors import ConfigError
from ingestion.runtime import session as spark


def test_java_options_of_a_pipeline_come_after_ingests_own() -> None:
    options = spark.builder("t", "local[2]", conf={"spark.driver.extraJavaOptions": "-Xms1g -XX:+UseG1GC",
                                                   "spark.driver.memory": "1g"})._options
    driver = options["spark.driver.extraJavaOptions"]
    assert driver.startswith(f"-Dlog4j2.configurationFile={spark.LOG4J_CONFIG} ")  # the log config is kept
    assert driver.endswith(" -Xms1g -XX:+UseG1GC")  # and the pipeline's options follow, so theirs win
    assert "-Xms1g" not in options["spark.executor.extraJavaOptions"]
    assert options["spark.driver.memory"] == "1g"


def test_local_masters_schedule_batches_before_background_checkpoints() -> None:
    local = spark.builder("t", "local[2]")._options
    assert local["spark.scheduler.mode"] == "FAIR"
    assert local["spark.scheduler.allocation.file"] == str(spark.FAIR_POOLS) and spark.FAIR_POOLS.is_file()
    remote = spark.builder("t", "spark://127.0.0.1:7077")._options
    assert "spark.scheduler.mode" not in remote and "spark.scheduler.allocation.file" not in remote


def test_local_masters_rebuild_delta_state_with_half_their_cores() -> None:
    import os

    assert spark.builder("t", "local[2]")._options[spark.SNAPSHOT_PARTITIONS] == "1"
    assert spark.builder("t", "local[8]")._options[spark.SNAPSHOT_PARTITIONS] == "4"
    assert spark.snapshot_partitions("local") == spark.snapshot_partitions("local[3,2]") == 1
    assert spark.snapshot_partitions("local[*]") == max(1, (os.cpu_count() or 1) // 2)
    assert spark.builder("t", "local[2]", conf={spark.SNAPSHOT_PARTITIONS: "6"})._options[
        spark.SNAPSHOT_PARTITIONS] == "6"  # a pipeline's `spark:` section wins
    assert spark.SNAPSHOT_PARTITIONS not in spark.builder("t", "spark://127.0.0.1:7077")._options


def test_a_local_jvm_that_runs_pipelines_holds_its_whole_heap_from_the_start() -> None:
    def driver_options(master: str, conf: dict[str, str] | None = None, fixed_heap: bool = True) -> str:
        return str(spark.builder("t", master, conf, fixed_heap=fixed_heap)._options["spark.driver.extraJavaOptions"])

    assert " -Xms2048m -XX:+AlwaysPreTouch" in driver_options("local[2]")  # ingest's spark.driver.memory, 2g
    assert driver_options("local[2]", {"spark.driver.memory": "1536m", "spark.driver.extraJavaOptions":
                                       "-XX:-AlwaysPreTouch"}).endswith(
        " -Xms1536m -XX:+AlwaysPreTouch -XX:-AlwaysPreTouch")  # the pipeline's memory, and its options win
    assert "-Xms" not in driver_options("local[2]", fixed_heap=False)  # other commands: the JVM's own sizing
    assert "-Xms" not in driver_options("spark://127.0.0.1:7077")  # a cluster's driver holds no batch data
    assert "-Xms" not in str(spark.builder("t", "local[2]", fixed_heap=True)._options[
        "spark.executor.extraJavaOptions"])


@pytest.mark.parametrize(("size", "mib"), [("2g", 2048), ("2G", 2048), ("2gb", 2048), ("1536m", 1536),
                                           ("1024", 1024), ("4096k", 4), ("1t", 1024 * 1024)])
def test_memory_sizes_read_as_spark_reads_them(size: str, mib: int) -> None:
    assert spark.memory_mib(size) == mib


def test_a_memory_size_spark_cannot_read_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"spark\.driver\.memory.*got 'two gigs'"):
        spark.memory_mib("two gigs")
