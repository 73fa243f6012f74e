"""The JVM's own output lines: noise (the incubator-module warning of every start, VACUUM's count) goes to the
debug log, every other line to the terminal."""

from __future__ import annotations

import io
import logging
import os

import pytest

from ingestion.runtime.jvm_output import forward


def test_noise_goes_to_the_debug_log_and_the_rest_through(caplog: pytest.LogCaptureFixture) -> None:
    read, write = os.pipe()
    shown = io.StringIO()
    with caplog.at_level(logging.DEBUG, logger="ingestion.jvm"), os.fdopen(read, "rb") as pipe:
        thread = forward(pipe, lambda: shown, "stderr")
        with os.fdopen(write, "wb") as jvm:
            jvm.write(b"WARNING: Using incubator modules: jdk.incubator.vector\n"
                      b"18:00:01 WARN SparkContext: something worth seeing\n"
                      b"Deleted 0 files and directories in a total of 1 directories.\n"
                      b"Deleted 3 files and directories in a total of 2 directories.\n"
                      b"[0.140s][warning][cds,dynamic] Unable to use shared archive. The top archive failed\n"
                      b"Exception in thread \"main\" java.lang.OutOfMemoryError\n")
        thread.join(10)
    assert shown.getvalue() == ("18:00:01 WARN SparkContext: something worth seeing\n"
                                "Exception in thread \"main\" java.lang.OutOfMemoryError\n")
    assert [r.getMessage() for r in caplog.records] == [
        "jvm stderr: WARNING: Using incubator modules: jdk.incubator.vector",
        "jvm stderr: Deleted 0 files and directories in a total of 1 directories.",
        "jvm stderr: Deleted 3 files and directories in a total of 2 directories.",
        "jvm stderr: [0.140s][warning][cds,dynamic] Unable to use shared archive. The top archive failed"]
