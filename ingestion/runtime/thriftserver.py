"""Spark's Thrift JDBC/ODBC server (HiveThriftServer2, in pyspark's own jars) over a session's catalog."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import SparkSession

from ingestion.runtime import jars

THRIFT_PORT = "spark.hadoop.hive.server2.thrift.port"
THRIFT_BIND_HOST = "spark.hadoop.hive.server2.thrift.bind.host"


def settings(port: int, host: str = "127.0.0.1") -> dict[str, str]:
    """Session settings that put the server on `host:port` (binary Thrift transport, no authentication: a client
    gives any user name and no password)."""
    return {THRIFT_PORT: str(port), THRIFT_BIND_HOST: host,
            "spark.hadoop.hive.server2.transport.mode": "binary",
            "spark.hadoop.hive.server2.authentication": "NONE"}


def classpath(locations: Iterable[str], conf: Mapping[str, str]) -> dict[str, str]:
    """The session's jars (Delta, the Kafka source, the helper, object stores) also on the driver's own classpath.
    The server runs each client's statements on threads of its own, whose class loader is the JVM's, not the one
    `spark.jars` adds to the driver: there Delta's catalog was not found (`ClassNotFoundException: ...DeltaCatalog`
    when beeline opened a session) and Spark's closure cleaner could not read Delta's classes (`capturingClassReader
    is null` when a second client ran `VERSION AS OF`)."""
    ours = os.pathsep.join(str(jar) for jar in jars.spark_jars(locations))
    theirs = conf.get("spark.driver.extraClassPath")
    return {"spark.driver.extraClassPath": os.pathsep.join(filter(None, [ours, theirs]))}


def start(spark: SparkSession) -> Any:
    """Start the server in this session's JVM, sharing its catalog and Delta setup; the server's handle."""
    jvm: Any = spark.sparkContext._jvm
    server_class = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2
    return server_class.startWithContext(spark._jsparkSession.sqlContext())


def stop(server: Any) -> None:
    server.stop()
