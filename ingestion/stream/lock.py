"""One writer per pipeline: a lock file beside the checkpoint, held by the running process.

The lock is an operating-system lock (`flock`) on `<checkpoint>/_ingest_writer.lock`, so a process that dies (even
by SIGKILL) releases it at once: there is no stale lock to clean up. The file also says who holds it (host, pid,
start time), for the error a second writer gets. It works where the checkpoint is a local or shared POSIX file
system (NFS with working locks included); on object storage (`s3a://`, `abfss://`, `gs://`) there is no such
lock, and a warning says the pipeline runs unguarded (docs/operations.md#one-writer-per-pipeline).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import socket
from pathlib import Path
from typing import IO

from ingestion.errors import IngestionError

log = logging.getLogger(__name__)

LOCK_FILE = "_ingest_writer.lock"


class PipelineRunning(IngestionError):
    """Another process writes this pipeline now."""


def local_folder(location: str) -> Path | None:
    """The local folder of a checkpoint location, or None for a remote store."""
    if location.startswith("file:"):
        return Path(location.removeprefix("file:").replace("///", "/", 1))
    return None if "://" in location else Path(location)


class WriterLock:
    """The lock of one pipeline's checkpoint, held from `acquire` until `release` or the process ends."""

    def __init__(self, pipeline: str, checkpoint: str) -> None:
        self.pipeline = pipeline
        self.checkpoint = checkpoint
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        folder = local_folder(self.checkpoint)
        if folder is None:
            log.warning("%s: no writer lock on %s (object storage has no file locks): make sure one process runs "
                        "this pipeline", self.pipeline, self.checkpoint)
            return
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_FILE
        handle = open(path, "a+")  # held open for the life of the lock
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _describe(handle.read())
            handle.close()
            raise PipelineRunning(f"pipeline {self.pipeline!r} is already running ({holder}; lock {path}); stop "
                                  "it first, or run this one elsewhere with its own checkpoint") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pipeline": self.pipeline, "host": socket.gethostname(), "pid": os.getpid(),
                                 "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}))
        handle.flush()
        self._file = handle

    def probe(self) -> None:
        """Raise PipelineRunning now if another process holds the lock (without keeping it): a command refuses
        at once, before it starts a JVM; `acquire` then takes it for real."""
        self.acquire()
        self.release()

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def _describe(text: str) -> str:
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on {holder['host']} since {holder['started']}"
    except (ValueError, KeyError, TypeError):
        return "holder unknown"
