"""A local S3-compatible server for the tests: moto's server mode (`moto_server`, from the dev dependencies) on
127.0.0.1, started by the tests that need object storage and stopped by its pid. A stand-in for S3 itself; Spark's
S3A file system, Delta's S3 log store and delta-rs talk to it over real HTTP."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingestion.processes import free_port

ACCESS_KEY, SECRET_KEY, REGION = "testing-access-key", "testing-secret-key", "us-east-1"


class S3Server:
    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p",
                                          str(self.port)], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.endpoint, timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start:\n{log.read_text()[-2000:]}") from None
                time.sleep(0.2)

    def environment(self) -> dict[str, str]:
        """Credentials the way S3A's and delta-rs's default chains read them."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}

    def spark_settings(self) -> dict[str, str]:
        """A pipeline's `spark:` section for this server, under Hadoop's S3A names."""
        return {"spark.hadoop.fs.s3a.endpoint": self.endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.endpoint.region": REGION}

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def storage_options(self) -> dict[str, str]:
        """delta-rs's options for this server, for reads that check the tables independently of the project."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true", **self.environment()}

    def coordinates(self, *tables: str) -> collections.Counter[tuple[int, int]]:
        """(partition, offset) of every row of these Delta tables (`s3a://bucket/...`), read with delta-rs."""
        from deltalake import DeltaTable, QueryBuilder

        held: collections.Counter[tuple[int, int]] = collections.Counter()
        for uri in tables:
            table = DeltaTable(uri, storage_options=self.storage_options())
            rows = pa.table(QueryBuilder().register("t", table).execute(
                'SELECT "_kafka_partition", "_kafka_offset" FROM t'))
            held.update(zip(rows["_kafka_partition"].to_pylist(), rows["_kafka_offset"].to_pylist(), strict=True))
        return held

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
