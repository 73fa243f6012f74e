"""Spark Connect's server (SparkConnectService, in pyspark's own jars on every 4.x line) over a session's catalog:
`pyspark-client` sessions (`builder.remote("sc://127.0.0.1:PORT")`) reach it over gRPC."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from ingestion.runtime.gateway import java

CONNECT_PORT = "spark.connect.grpc.binding.port"
CONNECT_BIND_ADDRESS = "spark.connect.grpc.binding.address"
_SERVICE = "org.apache.spark.sql.connect.service.SparkConnectService"


def settings(port: int, host: str = "127.0.0.1") -> dict[str, str]:
    """Session settings that put the server on `host:port`, and on no other port when that one is taken (no
    authentication: a client names any user)."""
    return {CONNECT_PORT: str(port), CONNECT_BIND_ADDRESS: host, "spark.connect.grpc.port.maxRetries": "0"}


def start(spark: SparkSession) -> None:
    """Start the server in this session's JVM: each client session is a new session of its context, sharing the
    catalog and Delta's extension."""
    java(spark.sparkContext._jvm, _SERVICE).start(spark.sparkContext._jsc.sc())  # type: ignore[union-attr]


def stop(spark: SparkSession) -> None:
    """Stop the server (its clients' sessions end with it)."""
    jvm: Any = spark.sparkContext._jvm
    none = java(jvm, "scala.Option").empty()
    java(jvm, _SERVICE).stop(none, none)  # no timeout: Scala's defaults
