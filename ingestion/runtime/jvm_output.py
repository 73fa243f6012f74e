"""The local JVM's own standard output and error, passed on line by line without the lines that only make noise.

Spark's launcher always adds `--add-modules=jdk.incubator.vector`, so every JVM start prints `WARNING: Using
incubator modules: jdk.incubator.vector`; Delta's VACUUM prints `Deleted 0 files and directories in a total of 1
directories.` to standard output; a JVM that cannot use its class archive (class_archive.py) says so once. None of
these goes through log4j, so its configuration cannot quiet them. They go to the debug log instead (`ingest -v`
shows them); every other line reaches the terminal as before.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from py4j.java_gateway import JavaGateway

log = logging.getLogger("ingestion.jvm")

NOISE = re.compile(r"^WARNING: Using incubator modules: |"
                   r"^Deleted \d+ files and directories in a total of \d+ directories\.$|"
                   r"^\[[\d.]+s\]\[warning\]\[cds")


def is_noise(line: str) -> bool:
    return NOISE.search(line.rstrip("\n")) is not None


def forward(stream: IO[bytes], target: Callable[[], IO[str]], name: str) -> threading.Thread:
    """Copy `stream` (the JVM's pipe) to `target()` (looked up per line: a test may swap sys.stderr) until it
    closes, noise to the debug log; the daemon thread doing it."""

    def copy() -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            if is_noise(line):
                log.debug("jvm %s: %s", name, line.rstrip("\n"))
                continue
            out = target()
            out.write(line)
            out.flush()

    thread = threading.Thread(target=copy, name=f"jvm-{name}", daemon=True)
    thread.start()
    return thread


def launch_gateway(options: dict[str, str]) -> JavaGateway | None:
    """Start the JVM with its standard output and error piped through `forward`, for the next SparkContext (which
    takes a gateway that is already there); the gateway, or None when one ran already."""
    import subprocess

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway as pyspark_launch

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return None
        conf = SparkConf(loadDefaults=False)
        for key, value in options.items():
            conf.set(key, value)
        gateway = pyspark_launch(conf, popen_kwargs={"stdout": subprocess.PIPE, "stderr": subprocess.PIPE})
        forward(gateway.proc.stdout, lambda: sys.stdout, "stdout")
        forward(gateway.proc.stderr, lambda: sys.stderr, "stderr")
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
        return gateway
