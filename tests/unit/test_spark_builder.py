"""The one SparkSession factory's settings (ingestion/spark.py), read from the builder without starting a JVM."""

from __future__ import annotations

import os

import pytest

from ingestion.runtime import session as spark

pytestmark = pytest.mark.jvm  # no JVM started, but the builder needs the jars `make setup` resolves with Maven


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


def test_a_local_jvm_gets_a_small_heap_and_the_serial_collector_unless_the_pipeline_says_otherwise() -> None:
    def driver(master: str, conf: dict[str, str] | None = None) -> str:
        return str(spark.builder("t", master, conf)._options["spark.driver.extraJavaOptions"])

    options = spark.builder("t", "local[2]")._options
    assert options["spark.driver.memory"] == "1g"
    young = "-XX:NewRatio=1 -XX:MaxNewSize=192m -XX:SurvivorRatio=2 -XX:TargetSurvivorRatio=90"
    assert driver("local[2]").endswith(f" -XX:+UseSerialGC {young}")
    # the young generation's cap follows the heap: a pipeline's or many pipelines' spark.driver.memory
    assert "-XX:MaxNewSize=384m " in driver("local[2]", {"spark.driver.memory": "2g"})
    assert "-XX:MaxNewSize=288m " in driver("local[2]", {"spark.driver.memory": "1536"})
    # sized for one pipeline (and its silver query); a session of many keeps the JVM's own sizes
    assert "-XX:MaxNewSize=192m " in str(spark.builder("t", "local[2]", pipelines=2)._options[
        "spark.driver.extraJavaOptions"])
    assert "Ratio" not in str(spark.builder("t", "local[2]", pipelines=3)._options["spark.driver.extraJavaOptions"])
    assert "-Xms" not in driver("local[2]") and "AlwaysPreTouch" not in driver("local[2]")  # no fixed heap
    # A pipeline's own collector replaces ours (two would stop the JVM from starting); its other options add up.
    assert "SerialGC" not in driver("local[2]", {"spark.driver.extraJavaOptions": "-XX:+UseG1GC -Xms1g"})
    assert "Ratio" not in driver("local[2]", {"spark.driver.extraJavaOptions": "-XX:+UseG1GC"})  # serial's sizes
    assert driver("local[2]", {"spark.driver.extraJavaOptions": "-XX:+UseG1GC -Xms1g"}).endswith(" -XX:+UseG1GC -Xms1g")
    assert driver("local[2]", {"spark.driver.extraJavaOptions": "-Xms1g"}).endswith(
        f" -XX:+UseSerialGC {young} -Xms1g")
    assert "GC" not in driver("spark://127.0.0.1:7077")  # a cluster's driver: the JVM's own choice
    # no collection for class metadata while Spark, Delta and Kafka load theirs (a pipeline's own value comes last)
    assert " -XX:MetaspaceSize=256m" in driver("local[2]")
    assert driver("local[2]", {"spark.driver.extraJavaOptions": "-XX:MetaspaceSize=64m"}).endswith("=64m")
    assert "Metaspace" not in driver("spark://127.0.0.1:7077")
    # the JIT compiles later than Java's defaults on a local master (fewer compilations of code run a few thousand
    # times per run); a pipeline's own thresholds come later and win; a cluster's driver keeps Java's
    assert " -XX:Tier4InvocationThreshold=50000 " in driver("local[2]")
    assert driver("local[2]", {"spark.driver.extraJavaOptions": "-XX:Tier4InvocationThreshold=5000"}).endswith(
        " -XX:Tier4InvocationThreshold=5000")
    assert "Tier" not in driver("spark://127.0.0.1:7077")


def test_a_session_of_many_pipelines_gets_a_heap_that_grows_with_them() -> None:
    # With 100 streaming pipelines a 1g heap held about 860 MB after each full collection and collected back to
    # back (first batches took minutes): the default grows with the queries a session runs.
    assert [spark.driver_memory(n) for n in (1, 20, 36)] == ["1g"] * 3
    assert spark.driver_memory(37) == "1536m" and spark.driver_memory(100) == "2g"
    assert spark.driver_memory(200) == "3584m"
    assert spark.builder("t", "local[2]", pipelines=100)._options["spark.driver.memory"] == "2g"
    # a pipeline's own heap wins, however many run
    assert spark.builder("t", "local[2]", {"spark.driver.memory": "3g"}, pipelines=100)._options[
        "spark.driver.memory"] == "3g"


def test_under_spark_submit_the_master_and_jars_are_spark_submits(monkeypatch) -> None:
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # how spark-submit hands its JVM to the Python driver
    monkeypatch.delenv("INGEST_SPARK_MASTER", raising=False)
    options = spark.builder("t", locations=["s3a://lake/t"])._options
    assert "spark.master" not in options and "spark.jars" not in options  # --master and --jars stay in force
    assert "log4j2" not in options["spark.executor.extraJavaOptions"]  # a path on this machine only
    # the decoder limits still reach the executors
    assert "-Dorg.apache.avro.limits.string.maxLength=" in options["spark.executor.extraJavaOptions"]
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT")
    local = spark.builder("t", "local[2]", locations=["s3a://lake/t"])._options
    classpath = local["spark.driver.extraClassPath"].split(os.pathsep)
    # on a local master every jar is on the driver's classpath, none copied by spark.jars; the helper leads
    assert "spark.jars" not in local and classpath[0].endswith(".jar") and "ingest-helper" in classpath[0]
    assert any("hadoop-aws" in jar for jar in classpath) and any("delta-spark" in jar for jar in classpath)
    assert len(classpath) == len(set(classpath))
    # a caller's classpath follows ours, without the entries ours has (the SQL server gives the session's jars)
    served = spark.builder("t", "local[2]", {"spark.driver.extraClassPath": f"{classpath[-1]}{os.pathsep}/x.jar"},
                           locations=["s3a://lake/t"])._options["spark.driver.extraClassPath"].split(os.pathsep)
    assert served == [*classpath, "/x.jar"]
    cluster = spark.builder("t", "spark://127.0.0.1:7077", locations=["s3a://lake/t"])._options
    assert any("hadoop-aws" in jar for jar in cluster["spark.jars"].split(","))


def test_run_all_declares_a_pool_per_pipeline_ahead_of_background_checkpoints() -> None:
    import xml.etree.ElementTree as ET

    options = spark.builder("t", "local[2]", pools=["pipeline-a", "pipeline-b"])._options
    pools = {p.get("name"): int(p.findtext("minShare") or 0)
             for p in ET.parse(options["spark.scheduler.allocation.file"]).getroot()}
    assert pools == {"default": 1000, "delta-checkpoints": 0, "maintenance": 0, "pipeline-a": 1000, "pipeline-b": 1000}
    assert spark.builder("t", "local[2]")._options["spark.scheduler.allocation.file"] == str(spark.FAIR_POOLS)


def test_a_catalog_session_uses_the_metastore_its_settings_name_and_starts_no_local_server() -> None:
    external = {"spark.hadoop.hive.metastore.uris": "thrift://127.0.0.1:9083"}
    options = spark.builder("t", "local[2]", conf=external, catalog=True)._options
    assert options["spark.sql.catalogImplementation"] == "hive"
    assert options["spark.hadoop.hive.metastore.uris"] == "thrift://127.0.0.1:9083"
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in options
    assert "derbyclient" not in options["spark.driver.extraClassPath"]
    off = spark.builder("t", "local[2]", conf={"spark.sql.catalogImplementation": "in-memory"}, catalog=True)._options
    assert off["spark.sql.catalogImplementation"] == "in-memory"
    assert "spark.sql.catalogImplementation" not in spark.builder("t", "local[2]")._options


def test_a_background_server_is_stopped_by_its_pid_only_while_the_pid_is_still_that_server(tmp_path) -> None:
    import subprocess
    import sys
    import time
    from pathlib import Path

    from ingestion.processes import PidFile, alive

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--home={tmp_path}"])
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + 30
    while str(tmp_path).encode() not in cmdline.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)  # between fork and exec the child still has the parent's command line
    try:
        assert PidFile(tmp_path / "x.pid", marker=f"--home={tmp_path}").pid() is None  # no pid file yet
        PidFile(tmp_path / "x.pid", marker="--home=/elsewhere").write(process.pid)
        assert PidFile(tmp_path / "x.pid", marker="--home=/elsewhere").stop() is None  # a pid reused by another
        assert alive(process.pid)
        ours = PidFile(tmp_path / "x.pid", marker=f"--home={tmp_path}")
        ours.write(process.pid)
        assert ours.pid() == process.pid
        assert ours.stop(timeout=10) == process.pid
        process.wait(10)
        assert not (tmp_path / "x.pid").exists()
    finally:
        process.kill()


def test_every_jvm_writes_its_crash_log_under_the_state_folder(tmp_path, monkeypatch) -> None:
    """A JVM that crashes writes `hs_err_pid<pid>.log`; by default into the folder the command ran in (a checkout
    collected eight of them). The driver's, the broker's and the catalog server's go under `$INGEST_HOME/logs/`."""
    from ingestion import paths

    monkeypatch.setenv("INGEST_HOME", str(tmp_path))
    wanted = f"-XX:ErrorFile={tmp_path / 'logs' / 'hs_err_pid%p.log'}"
    assert paths.jvm_error_file() == wanted and (tmp_path / "logs").is_dir()
    for master in ("local[2]", "spark://127.0.0.1:7077"):
        assert wanted in spark.builder("t", master)._options["spark.driver.extraJavaOptions"].split(), master
    assert wanted not in spark.builder("t", "local[2]")._options["spark.executor.extraJavaOptions"]


def test_checkpoints_all_in_s3_are_written_in_place_not_renamed(tmp_path) -> None:
    from ingestion.config import load_pipeline

    def config(name: str, checkpoint: str, extra: str = "") -> object:
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"name: {name}\ntopic: t\nsink:\n  table: s3a://lake/{name}\n"
                        f"  checkpointLocation: {checkpoint}\n{extra}")
        return load_pipeline(path)

    in_s3, local = config("a", "s3a://lake/_checkpoints/a"), config("b", str(tmp_path / "checkpoints" / "b"))
    assert spark.checkpoint_settings([in_s3]) == {spark.CHECKPOINT_MANAGER: spark.ABORTABLE_CHECKPOINTS}
    assert spark.checkpoint_settings([in_s3, local]) == {}  # one session, one manager: a local folder has no S3A
    chosen = config("c", "s3a://lake/_checkpoints/c", f"spark:\n  {spark.CHECKPOINT_MANAGER}: my.Manager\n")
    assert spark.checkpoint_settings([chosen]) == {}  # the pipeline's own choice stands


def test_a_job_packaged_for_another_spark_line_is_refused_by_its_jar_names_before_a_context() -> None:
    from ingestion.errors import JvmError
    from ingestion.runtime.session import _check_submitted_line

    jars = "file:/dist/jars/delta-spark_4.2_2.13-4.4.0.jar,file:/dist/jars/spark-sql-kafka-0-10_2.13-4.2.0.jar"
    _check_submitted_line("4.2.0", jars)  # the same line: nothing to say
    _check_submitted_line("4.1.1", "file:/dist/jars/delta-core-custom.jar")  # a name that does not say: no refusal
    with pytest.raises(JvmError, match=r"^the job's Delta jar is built for Spark 4\.2, the cluster runs Spark 4\.1\.1: "
                                       r"package the job with `ingest package --spark-version 4\.1`"):
        _check_submitted_line("4.1.1", jars)
