"""`ingest demo`: a local broker, a sample topic, sample records, one caught-up ingestion, a summary.

The demo's pipeline (`orders`) and its schema are the project's `conf/pipelines/orders.yaml` and `schemas/` when
they are there (a clone); anywhere else (a folder after `pip install`) the demo writes them there from the copies it
brings as package data (`dev/demo_project/`), so the commands that follow find them. The servers it starts (the
broker, the catalog's Derby server) it stops at the end; those it found running it leaves running.
"""

from __future__ import annotations

import logging
import shutil
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from ingestion import kafka
from ingestion.config import PipelineConfig, load_pipeline
from ingestion.delta import ledger, reads
from ingestion.dev.broker import Broker
from ingestion.dev.samples import produce_orders
from ingestion.paths import conf_dir, schemas_dir
from ingestion.schema.files import load_subject

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def run_demo(*, records: int = 10_000, partitions: int = 3, keep_servers: bool = False) -> int:
    from ingestion.runtime import metastore
    from ingestion.runtime.session import pipelines_session
    from ingestion.stream import launch

    started = time.monotonic()
    _use_packaged_files()
    broker = Broker.default()
    was_running = broker.pid() is not None
    catalog_was_running = metastore.running() is not None
    servers = broker.start()
    try:
        config = load_pipeline("orders")
        settings = kafka.resolve_settings(config).client
        if kafka.create_topic(settings, config.topic, partitions):
            log.info("created topic %s with %d partitions", config.topic, partitions)
        subject = load_subject(schemas_dir(), config.value.subject)
        schema_id = subject.latest_id
        first = sum(end for _, end in kafka.watermarks(settings, config.topic).values())
        produce_orders(servers, config.topic, records, schema_id=schema_id,
                       schema=subject.latest, first_seq=first)
        log.info("produced %d sample orders to %s (schema id %d)", records, config.topic, schema_id)
        spark = pipelines_session("ingest-demo", [config])
        # the launch sequence `ingest run` takes, in the demo's session (its summary reads the table with it)
        ran = launch.run(spark, config, available_now=True)
        run_id = ran.metrics.run_id if not isinstance(ran, launch.Finished) and ran.metrics else None
        _summary(spark, config, run_id, time.monotonic() - started)
        spark.stop()
    finally:
        if not (keep_servers or catalog_was_running) and metastore.stop() is not None:
            log.info("stopped the catalog's Derby server the demo started")
        if not (keep_servers or was_running):
            broker.stop()
    return 0


def _use_packaged_files() -> None:
    """Where the working folder lacks the demo's pipeline or schema (a folder after `pip install`), copy them there
    from the package (never over a file of the caller's), so that `ingest status orders`, `ingest sql` and the
    other commands the summary names find the pipeline afterwards, as in a clone."""
    packaged = Path(str(resources.files("ingestion.dev") / "demo_project"))
    own = conf_dir() / "pipelines" / "orders.yaml"
    if not own.is_file():
        own.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(packaged / "conf" / "pipelines" / "orders.yaml", own)
        log.info("demo: wrote %s, the demo's pipeline (from the package)", own)
    schema = schemas_dir() / "orders-value"
    if not schema.is_dir():
        shutil.copytree(packaged / "schemas" / "orders-value", schema)
        log.info("demo: wrote %s, the demo's schema (from the package)", schema)


def _summary(spark: SparkSession, config: PipelineConfig, run_id: str | None, seconds: float) -> None:
    from ingestion.stream.metrics import tracking_uri

    path = config.table_path
    table = reads.read_table(spark, path)
    rows = table.count() if table is not None else 0
    records = ledger.history(spark, path)
    version = records[-1].version if records else ledger.table_version(spark, path)  # the last batch's, as history
    ingested = ledger.next_offsets(records).get(config.topic, {})
    ends = kafka.watermarks(kafka.resolve_settings(config).client, config.topic)
    print(f"\n=== demo summary ({seconds:.0f}s) ===")
    print(f"bronze table   {path}  ({rows} rows, version {version})")
    print(f"checkpoint     {config.checkpoint_path}")
    print(f"mlflow         {tracking_uri()}  run {run_id}  (open: mlflow ui --backend-store-uri {tracking_uri()})")
    print(f"{'partition':>10} {'end offset':>11} {'ingested up to':>15}")
    for partition, (_, end) in sorted(ends.items()):
        print(f"{partition:>10} {end:>11} {ingested.get(str(partition), 0):>15}")
    print(f"total          {sum(e for _, e in ends.values())} records in Kafka, {rows} rows in bronze")
    if config.catalog_names:
        print(f"read it with   spark.table('{config.catalog_names[0]}')  or  ingest sql \"SELECT count(*) FROM "
              f"{config.catalog_names[0]}\"  (catalog: docs/catalog.md)")
    else:
        print(f"read it with   spark.read.format('delta').load('{Path(path)}')")
