"""The local JVM's class archive: Java's class-data sharing (CDS) for the project's classpath.

A local session's JVM loads about 18,000 classes (Spark, Delta, Kafka's client, Janino, the helper jar) before
its first batch; parsing and verifying them is a good part of its start, and of its first batch. Java can map
classes from an archive instead (`-XX:SharedArchiveFile`), already parsed and verified
(docs/performance.md#the-jvms-class-archive).

An archive is only valid for the Java runtime and the classpath that wrote it, so each is kept under a key: the
hash of the `java` executable, pyspark's jars and the session's own jars and driver settings. The first
`ingest run` of a key has its JVM list the classes it loads (`-XX:DumpLoadedClassList`: a line per class, no
measurable cost; a run loads what every command needs: Kafka's client, Parquet's writer, Delta's commit). A
detached process (`finish`, below) waits for that JVM to exit, then, at the lowest CPU priority, has Java write
the archive of those classes (`-Xshare:dump`, about 20 s of one core, once per key), checks it (`-Xshare:on`,
which refuses a file it cannot use) and only then moves it into place, so a JVM never starts with a half-written
archive. Every later session of the key starts with it, a notebook's too. A JVM that still cannot start with an
archive is started again without one, and the archive is removed. The three most recently used archives are kept.

Recording was once `-XX:ArchiveClassesAtExit`, which made the recording run itself markedly slower (a session and
its first job 24.6 s instead of 12.8), so it waited for `INGEST_CLASS_ARCHIVE=record`; the class list costs the
run nothing, so every run records when its key has no archive. `INGEST_CLASS_ARCHIVE=off` turns the archive off
(neither used nor recorded); so does a session whose own `spark.driver.extraJavaOptions` already choose class
sharing (`-Xshare`, `-XX:SharedArchiveFile`, `-XX:ArchiveClassesAtExit`, `-XX:DumpLoadedClassList`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ingestion import processes
from ingestion.paths import jar_cache

log = logging.getLogger(__name__)

SWITCH = "INGEST_CLASS_ARCHIVE"
OFF = {"off", "0", "false", "no"}  # the switch's values that turn the archive off; any other (on, record) records
RECORD = "record"
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
# Settings that decide which classes a local driver loads from where: its classpath and the jars Spark adds.
_KEYED_SETTINGS = ("spark.driver.extraClassPath", "spark.jars", "spark.driver.memory")
_OWN_CHOICE = ("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-XX:DumpLoadedClassList")
# A claim file that names no process (its maker died before writing its pid) is given up after this long.
CLAIM_SECONDS = 60.0
# How long `finish` waits for the recording JVM to exit (a streaming run's may run for days: then no archive), and
# gives Java to write the archive.
EXIT_WAIT_SECONDS = 900.0
DUMP_SECONDS = 600.0
# The fewest classes a class list must name to be archived: a run that got to its first batch lists about 18,000,
# a session alone about 9,800 (a JVM killed during its start fewer), and an archive without what a batch loads
# would stay for good.
MIN_CLASSES = 12_000
# The recording JVM's options that decide which classes may be archived, given to the dump too.
_MODULE_OPTIONS = ("--add-modules", "--add-opens", "--add-exports", "--add-reads", "--enable-native-access")
# Archives kept, the most recently used (each is 150-200 MB; a new helper jar or Spark setting makes a new key).
KEEP = 3


@dataclass(frozen=True)
class Plan:
    """What one JVM start does with the archive of its key: start with it (`use`), or record it at exit."""

    archive: Path
    use: bool

    @property
    def recording(self) -> Path:
        """The class list the recording JVM writes."""
        return self.archive.with_name(f"{self.archive.stem}.{os.getpid()}.recording")

    @property
    def claim(self) -> Path:
        return self.archive.with_suffix(".claim")

    def java_option(self) -> str:
        if self.use:
            return f"-XX:SharedArchiveFile={self.archive}"
        return f"-XX:DumpLoadedClassList={self.recording}"


def folder() -> Path:
    return jar_cache() / "class-archive"


def java_executable() -> Path | None:
    """The `java` Spark's launcher runs: `$JAVA_HOME/bin/java`, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).is_file() else None


def key(options: Mapping[str, str], java: Path) -> str:
    """The archive's name for a local driver started with `options` by `java`."""
    import pyspark

    stat = java.stat()
    parts = [str(java), str(stat.st_size), str(stat.st_mtime_ns), pyspark.__version__,
             str(Path(pyspark.__file__).parent / "jars"), os.environ.get("SPARK_CONF_DIR", ""),
             *(f"{name}={options.get(name, '')}" for name in _KEYED_SETTINGS)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def plan(options: Mapping[str, str], record: bool) -> Plan | None:
    """The archive step of a local driver's start with `options`, or None: switched off, the session chose its
    own class sharing, no `java` found, no archive yet and this start is not to `record` one (`ingest run`'s
    does), or another process records this key's archive right now."""
    if os.environ.get(SWITCH, "").strip().lower() in OFF:
        return None
    if any(choice in options.get(DRIVER_OPTIONS, "") for choice in _OWN_CHOICE):
        return None
    java = java_executable()
    if java is None:
        return None
    archive = folder() / f"{key(options, java)}.jsa"
    if archive.is_file():
        with contextlib.suppress(OSError):
            os.utime(archive)  # used: the last to be pruned
        return Plan(archive, use=True)
    if not record:
        return None
    step = Plan(archive, use=False)
    return step if _claim(step.claim) else None


def _claim(claim: Path) -> bool:
    """Whether this process may record: it made the claim file, or took it over from a process that ended
    without finishing its recording (killed: the pid in the claim is gone)."""
    claim.parent.mkdir(parents=True, exist_ok=True)
    try:
        holder = claim.read_text().strip()
        age = time.time() - claim.stat().st_mtime
    except FileNotFoundError:
        pass
    else:
        given_up = not processes.alive(int(holder)) if holder.isdigit() else age > CLAIM_SECONDS
        if given_up:
            claim.unlink(missing_ok=True)
            for pattern in (f"{claim.stem}.*.recording", f"{claim.stem}.*.writing"):
                for stale in claim.parent.glob(pattern):
                    stale.unlink(missing_ok=True)
    try:
        descriptor = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(descriptor, str(os.getpid()).encode())
    os.close(descriptor)
    return True


def with_option(options: Mapping[str, str], step: Plan | None) -> dict[str, str]:
    """`options` with the step's JVM option ahead of the session's own driver options."""
    result = dict(options)
    if step is not None:
        result[DRIVER_OPTIONS] = " ".join(filter(None, [step.java_option(), options.get(DRIVER_OPTIONS, "")]))
    return result


def started(step: Plan | None, jvm_pid: int, jvm: object) -> None:
    """After the JVM of `step` started: when it uses the archive, whether Java could map it (else it started
    without: the archive is removed, the next run records another); when it records, have `finish` write the
    archive once this process and its JVM are gone (the JVM completes its class list on its way out)."""
    if step is None:
        return
    if step.use:
        if not sharing(jvm):
            log.warning("the JVM could not use its class archive %s: removed, the next run records another",
                        step.archive)
            step.archive.unlink(missing_ok=True)
        return
    system = jvm.java.lang.System  # type: ignore[attr-defined]
    java = str(Path(system.getProperty("java.home")) / "bin" / "java")
    classpath = system.getProperty("java.class.path")
    arguments = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()  # type: ignore[attr-defined]
    modules = [str(a) for a in arguments if str(a).startswith(_MODULE_OPTIONS)]

    def hand_over() -> None:
        finisher = subprocess.Popen([sys.executable, "-m", __name__, str(jvm_pid), str(step.recording),
                                     str(step.archive), str(step.claim), java, classpath, *modules],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True, close_fds=True, cwd=step.archive.parent)
        step.claim.write_text(str(finisher.pid))  # the claim is the finisher's now, while it waits for the JVM

    atexit.register(hand_over)
    log.debug("recording the JVM's class list for the class archive %s, written after this run (once per "
              "classpath)", step.archive.name)


def sharing(jvm: object) -> bool:
    """Whether the JVM maps classes from an archive (Java starts without one it cannot map, and says nothing)."""
    try:
        management = jvm.java.lang.management.ManagementFactory  # type: ignore[attr-defined]
        bean = management.getPlatformMXBean(jvm.java.lang.Class.forName(  # type: ignore[attr-defined]
            "com.sun.management.HotSpotDiagnosticMXBean"))
        return str(bean.getVMOption("UseSharedSpaces").getValue()) == "true"
    except Exception:  # noqa: BLE001 - a JVM without that bean: nothing to learn, the archive stays
        return True


def discard(step: Plan) -> None:
    """The archive would not start a JVM: remove it, so the next start records a new one."""
    log.warning("the JVM did not start with its class archive %s: removed, starting without it", step.archive)
    step.archive.unlink(missing_ok=True)


def check(java: str, archive: Path, classpath: str) -> bool:
    """Whether `java` can start on `classpath` with `archive` (`-Xshare:on` refuses one it cannot map)."""
    crash_report = archive.with_suffix(".hs_err")
    try:
        done = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={archive}", f"-XX:ErrorFile={crash_report}",
                               "-cp", classpath, "-version"], capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        crash_report.unlink(missing_ok=True)
    return done.returncode == 0


def dump(java: str, classes: Path, archive: Path, classpath: str, modules: list[str]) -> bool:
    """Have `java` write the archive of the `classes` listed (a `-XX:DumpLoadedClassList` file) for `classpath`;
    whether it did. Java skips what it cannot archive (signed jars, generated classes) and says so: not shown."""
    try:
        done = subprocess.run([java, "-Xshare:dump", f"-XX:SharedClassListFile={classes}",
                               f"-XX:SharedArchiveFile={archive}", *modules, "-cp", classpath],
                              capture_output=True, timeout=DUMP_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and archive.is_file()


def listed(classes: Path) -> int:
    """How many classes a class list names (0: none, or no such file)."""
    try:
        with classes.open("rb") as lines:
            return sum(1 for line in lines if line[:1].isalpha())
    except OSError:
        return 0


def finish(jvm_pid: int, recording: Path, archive: Path, claim: Path, java: str, classpath: str,
           modules: list[str] | None = None) -> bool:
    """Wait for the recording JVM to exit, then, at the lowest CPU priority, write the archive of the classes it
    listed and move it into place if Java can use it; the claim is released either way. Whether the archive is
    in place."""
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    while processes.alive(jvm_pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    written = archive.with_name(f"{archive.stem}.{os.getpid()}.writing")
    try:
        if processes.alive(jvm_pid) or listed(recording) < MIN_CLASSES:
            return False
        with contextlib.suppress(OSError):
            os.nice(19)  # after the run, beside whatever the machine does next
        if not dump(java, recording, written, classpath, modules or []) or not check(java, written, classpath):
            return False
        os.replace(written, archive)
        prune(archive.parent)
        return True
    finally:
        recording.unlink(missing_ok=True)
        written.unlink(missing_ok=True)
        claim.unlink(missing_ok=True)


def prune(where: Path, keep: int = KEEP) -> None:
    """Remove all but the `keep` most recently used archives in `where`."""
    archives = sorted(where.glob("*.jsa"), key=lambda path: path.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        old.unlink(missing_ok=True)


if __name__ == "__main__":
    pid, recorded, target, claimed, java_path, class_path = sys.argv[1:7]
    sys.exit(0 if finish(int(pid), Path(recorded), Path(target), Path(claimed), java_path, class_path,
                         sys.argv[7:]) else 1)
