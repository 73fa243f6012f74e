"""One writer per pipeline: a lock file beside the checkpoint, held by the running process.

The lock is an operating-system lock (`flock`) on `<checkpoint>/_ingest_writer.lock`, so a process that dies (even
by SIGKILL) releases it at once: there is no stale lock to clean up. The file also says who holds it (host, pid,
start time), for the error a second writer gets, and the MLflow run it reports to (`note_run`): a holder that
releases the lock clears the file, so a record found by the next holder is one of a writer that died (SIGKILL, the
OOM killer, a lost node) and left its MLflow run RUNNING; `taken_from` hands it to the next holder, which ends that
run as KILLED (`metrics.end_abandoned`). It works where the checkpoint is a local or shared POSIX file system (NFS
with working locks included).

Object storage (`s3a://`, `abfss://`, `gs://`) has no file locks. There the lock is a lease: an object
`<checkpoint>/_ingest_writer.lease` naming its holder and when it expires, written without a JVM where pyarrow
reaches the store (S3, ADLS: `state_files`), else through the JVM's Hadoop file system (so every store Spark reaches
works alike), renewed by a thread every third of `LEASE_SECONDS`, deleted on release.
A writer takes a lease that is absent, expired, its own, or held by a process of its own host that no longer
exists (a restart after a kill does not wait); it then reads the lease back after `SETTLE_SECONDS` and proceeds
only if its own token is still there, so of two writers racing for it, one wins. A lease found expired or of a
dead process is, like a lock file's record, a holder that did not release (`taken_from`). A second writer is
refused in seconds (where the lease is written without a JVM, before one starts). What the lease cannot rule out
(a holder paused longer than the lease, clocks apart by more than it), Delta itself catches: the two writers'
batches share the checkpoint's txnAppId, and Delta commits each (txnAppId, txnVersion) once
(docs/cluster.md#one-writer-on-object-storage).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pyspark.sql import SparkSession

from ingestion import state_files
from ingestion.errors import IngestionError, one_line
from ingestion.runtime.hadoop import HadoopFiles
from ingestion.state_files import StateFiles
from ingestion.storage import local_folder

log = logging.getLogger(__name__)

LOCK_FILE = "_ingest_writer.lock"
LEASE_FILE = "_ingest_writer.lease"
LEASE_SECONDS = 60.0
SETTLE_SECONDS = 1.0


class PipelineRunning(IngestionError):
    """Another process writes this pipeline now."""


@dataclass(frozen=True)
class Holder:
    """A writer that held the lock and ended without releasing it, as its record says."""

    pid: int
    host: str
    started: str
    mlflow_run: str | None  # the MLflow run it reported to, which nobody closed
    mlflow_uri: str | None
    reason: str  # why it counts as ended, for the run's tag: `writer lock taken from dead pid 4242`

    @classmethod
    def parse(cls, text: str, reason: str) -> Holder | None:
        try:
            found = json.loads(text)
            pid = int(found["pid"])
        except (ValueError, KeyError, TypeError):
            return None  # empty (released) or not ours
        run, uri = found.get("mlflowRun"), found.get("mlflowUri")
        return cls(pid, str(found.get("host")), str(found.get("started")), str(run) if run else None,
                   str(uri) if uri else None, reason.format(pid=pid, host=found.get("host")))


class WriterLock:
    """The lock of one pipeline's checkpoint, held from `acquire` until `release` or the process ends."""

    def __init__(self, pipeline: str, checkpoint: str, spark: SparkSession | None = None,
                 settings: Mapping[str, str] | None = None) -> None:
        self.pipeline = pipeline
        self.checkpoint = checkpoint
        # How the lease's object is reached: without a JVM where pyarrow reaches the store (`settings`: the
        # pipeline's spark: section, Hadoop's names), else through `spark`'s Hadoop file system.
        files = state_files.for_location(checkpoint, settings) if local_folder(checkpoint) is None else None
        self._files = files if files is not None else (HadoopFiles(spark) if spark is not None else None)
        self._file: IO[str] | None = None
        self._lease: Lease | None = None
        self._record: dict[str, object] = {}
        self.taken_from: Holder | None = None  # set by `acquire` when the previous holder died holding the lock

    def acquire(self) -> None:
        folder = local_folder(self.checkpoint)
        if folder is None:
            if self._files is not None:
                self._lease = Lease(self._files, self.pipeline, self.checkpoint.rstrip("/") + "/" + LEASE_FILE)
                self._lease.acquire()
                self.taken_from = self._lease.taken_from
            return
        handle = self._locked(folder)
        handle.seek(0)
        self.taken_from = Holder.parse(handle.read(), "writer lock taken from dead pid {pid}")
        self._file = handle
        self._record = {"pipeline": self.pipeline, "host": socket.gethostname(), "pid": os.getpid(),
                        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        self._write(self._record)

    def _locked(self, folder: Path) -> IO[str]:
        """The lock file, open and locked by this process; PipelineRunning naming the holder when another has it."""
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
        return handle

    def _write(self, record: dict[str, object] | None) -> None:
        """Replace the lock file's record (None: empty it, the mark of a lock released)."""
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            self._file.write(json.dumps(record) if record is not None else "")
            self._file.flush()

    def note_run(self, run_id: str, uri: str) -> None:
        """Record the MLflow run this holder reports to, so that the next holder can end it should this one die."""
        self._record.update(mlflowRun=run_id, mlflowUri=_without_password(uri))
        self._write(self._record)
        if self._lease is not None:
            self._lease.note(mlflowRun=run_id, mlflowUri=_without_password(uri))

    @property
    def held(self) -> bool:
        """Whether this process holds the lock now (a lease on a store reached only through the JVM is not taken
        until a session is given)."""
        return self._file is not None or self._lease is not None

    def probe(self) -> None:
        """Raise PipelineRunning now if another process holds the lock (without keeping it or touching its record,
        which `acquire` reads): a command refuses at once, before it starts a JVM; `acquire` then takes it."""
        folder = local_folder(self.checkpoint)
        if folder is None:
            if self._files is not None and not isinstance(self._files, HadoopFiles):
                holder = Lease(self._files, self.pipeline, self.checkpoint.rstrip("/") + "/" + LEASE_FILE).holder()
                if holder is not None and _alive(holder):
                    raise Lease.refusal(self.pipeline, self.checkpoint.rstrip("/") + "/" + LEASE_FILE, holder)
            return
        if not (folder / LOCK_FILE).exists():
            return  # no process holds a lock it has no file for (and a probe creates nothing)
        handle = self._locked(folder)
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()

    def release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if self._file is not None:
            self._write(None)
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class Lease:
    """A writer's lease on object storage (see the module's docstring)."""

    def __init__(self, files: StateFiles, pipeline: str, location: str, seconds: float = LEASE_SECONDS) -> None:
        self.files = files
        self.pipeline = pipeline
        self.location = location
        self.seconds = seconds
        self.token = uuid.uuid4().hex
        self.taken_from: Holder | None = None  # an earlier holder that did not release: expired, or its pid gone
        self._noted: dict[str, str] = {}
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def holder(self) -> dict[str, object] | None:
        """The lease's record now, None when there is none (or not one of ours)."""
        try:
            text = self.files.read_text(self.location)
            found = json.loads(text) if text is not None else None
        except (ValueError, OSError):
            return None
        return found if isinstance(found, dict) else None

    def _write(self) -> None:
        now = time.time()
        self.files.write_text(self.location, json.dumps({
            "pipeline": self.pipeline, "token": self.token, "host": socket.gethostname(), "pid": os.getpid(),
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "expires": now + self.seconds,
            **self._noted}))

    def note(self, **values: str) -> None:
        """Add `values` to the lease's record (the MLflow run of its holder), written now and with each renewal."""
        self._noted.update(values)
        self._write()

    def _refuse(self, holder: dict[str, object]) -> PipelineRunning:
        return self.refusal(self.pipeline, self.location, holder)

    @staticmethod
    def refusal(pipeline: str, location: str, holder: dict[str, object]) -> PipelineRunning:
        left = float(str(holder.get("expires", 0))) - time.time()
        return PipelineRunning(
            f"pipeline {pipeline!r} is already running ({_describe(json.dumps(holder))}; lease "
            f"{location}, renewed while it runs, expires in {max(0.0, left):.0f}s if it stops); stop it "
            "first, or run this one elsewhere with its own checkpoint")

    def acquire(self) -> None:
        holder = self.holder()
        if holder is not None and holder.get("token") != self.token and _alive(holder):
            raise self._refuse(holder)
        if holder is not None and holder.get("token") != self.token:
            self.taken_from = Holder.parse(json.dumps(holder), "writer lease taken from pid {pid} on {host}, "
                                           "expired or ended")
        self._write()
        time.sleep(SETTLE_SECONDS)
        holder = self.holder()
        if holder is None or holder.get("token") != self.token:  # another writer took it at the same moment
            raise self._refuse(holder or {})
        self._renewer = threading.Thread(target=self._renew, name=f"lease-{self.pipeline}", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                holder = self.holder()
                if holder is not None and holder.get("token") != self.token:
                    log.error("%s: another writer took the lease %s (%s); Delta's txnAppId keeps its batches from "
                              "landing twice, but stop one of them", self.pipeline, self.location,
                              _describe(json.dumps(holder)))
                    return
                self._write()
            except Exception as exc:  # noqa: BLE001 - a store hiccup: the next renewal tries again
                log.warning("%s: could not renew the lease %s: %s", self.pipeline, self.location,
                            one_line(exc))

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(10)
        try:
            holder = self.holder()
            if holder is not None and holder.get("token") == self.token:
                self.files.delete(self.location)
        except Exception as exc:  # noqa: BLE001 - it expires by itself
            log.warning("%s: could not delete the lease %s: %s", self.pipeline, self.location, exc)


def _alive(holder: dict[str, object]) -> bool:
    """Whether a lease still binds: not expired, and not held by a process of this host that has ended."""
    try:
        if float(str(holder.get("expires", 0))) <= time.time():
            return False
    except ValueError:
        return False
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(str(holder.get("pid"))), 0)
        except (ProcessLookupError, ValueError):
            return False
        except PermissionError:
            return True
    return True


def _without_password(uri: str) -> str:
    """A tracking URI fit to write beside the checkpoint: a password in it is left out."""
    scheme, sep, rest = uri.partition("://")
    userinfo, at, host = rest.partition("@")
    if not sep or not at or "/" in userinfo or ":" not in userinfo:
        return uri
    return f"{scheme}://{userinfo.split(':', 1)[0]}@{host}"


def _describe(text: str) -> str:
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on {holder['host']} since {holder['started']}"
    except (ValueError, KeyError, TypeError):
        return "holder unknown"
