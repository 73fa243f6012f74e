"""Where the JVM artifacts come from: Maven Central, resolved once with `mvn` into a cache folder.

Spark gets its jars by path (`spark.jars`), so starting a session never resolves anything over the network.
Spark's own Ivy resolution (`spark.jars.packages`) is avoided on purpose: it needs repositories this project
cannot count on, and it pulls transitive jars (Hadoop, Jackson, Parquet) that clash with the ones pyspark ships.

One jar is the project's own (`data/*.java`: the Avro body check of the JVM decode path, the Protobuf decoder, the
per-partition summary aggregate of the one-pass write, the local file system without child processes), compiled
with `javac` against pyspark's jars and protobuf-java into the same cache, named by the hash of its sources.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from zipfile import ZipFile

from ingestion import storage
from ingestion.errors import JvmError
from ingestion.paths import jar_cache
from ingestion.runtime import data_files

log = logging.getLogger(__name__)

SCALA_BINARY = "2.13"
DELTA_VERSION = "4.4.0"
KAFKA_BROKER_VERSION = "4.1.1"
# protobuf-java for the helper's Protobuf decoder (DynamicMessage); it depends on nothing. Spark's own
# spark-protobuf (from_protobuf) does not resolve from the Maven Central reached here.
PROTOBUF_JAVA_VERSION = "4.29.3"


@dataclass(frozen=True)
class SparkLine:
    """The jars of one Spark minor line (4.0, 4.1, ...): each the release of that line Maven Central serves, with the
    versions its POMs name (spark-parent's `kafka.version`, `hadoop.version`, ...). A job packaged for a line runs on
    any patch release of it (docs/cluster.md#which-spark)."""

    line: str
    spark: str  # spark-sql-kafka-0-10 and spark-avro
    token_provider: str  # spark-token-provider-kafka-0-10, which the Kafka source needs
    kafka_clients: str
    commons_pool2: str
    hadoop: str  # pyspark's Hadoop: hadoop-aws of the same version
    aws_sdk_bundle: str  # what that hadoop-aws was built against
    hadoop_cloud: str  # spark-hadoop-cloud (S3A's abortable checkpoint manager)
    s3_analytics: str | None = None  # analyticsaccelerator-s3, which hadoop-aws 3.4.2 and later load

    @property
    def delta_artifact(self) -> str:
        return f"delta-spark_{self.line}_{SCALA_BINARY}"


# Where a line's own release of a jar is not served here, the nearest served one of the same line stands in (a
# patch release apart, binary compatible): the token provider 4.0.0 for 4.0.2; spark-hadoop-cloud 4.1.1 for 4.2,
# whose checkpoint manager class is unchanged between them.
SPARK_LINES: dict[str, SparkLine] = {line.line: line for line in (
    SparkLine("4.0", spark="4.0.2", token_provider="4.0.0", kafka_clients="3.9.1", commons_pool2="2.12.0",
              hadoop="3.4.1", aws_sdk_bundle="2.24.6", hadoop_cloud="4.0.2"),
    SparkLine("4.1", spark="4.1.1", token_provider="4.1.1", kafka_clients="3.9.1", commons_pool2="2.12.1",
              hadoop="3.4.2", aws_sdk_bundle="2.29.52", hadoop_cloud="4.1.1", s3_analytics="1.2.1"),
    SparkLine("4.2", spark="4.2.0", token_provider="4.2.0", kafka_clients="3.9.2", commons_pool2="2.13.1",
              hadoop="3.5.0", aws_sdk_bundle="2.35.4", hadoop_cloud="4.1.1", s3_analytics="1.3.1"),
)}


def local_line() -> str:
    """The Spark line of the installed pyspark ("4.2" for 4.2.0)."""
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:2])


def spark_line(line: str | None = None) -> SparkLine:
    """The jars of `line` (default: the installed pyspark's)."""
    wanted = line or local_line()
    if wanted not in SPARK_LINES:
        raise JvmError(f"Spark {wanted} is not a supported line: choose one of {', '.join(SPARK_LINES)}")
    return SPARK_LINES[wanted]


@dataclass(frozen=True)
class ArtifactSet:
    """A named list of Maven coordinates (group:artifact:version) resolved into one folder."""

    name: str
    coordinates: tuple[str, ...]
    transitive: bool

    def folder(self, cache: Path) -> Path:
        return cache / self.name


def spark_artifacts(line: str | None = None) -> ArtifactSet:
    """Delta and the Kafka source of a Spark line (default: the installed pyspark's). Non-transitive: everything
    else these jars need is already in pyspark's own jars folder."""
    spark = spark_line(line)
    return ArtifactSet(
        f"spark-{spark.line}",
        (
            f"io.delta:{spark.delta_artifact}:{DELTA_VERSION}",
            f"io.delta:delta-storage:{DELTA_VERSION}",
            f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{spark.spark}",
            f"org.apache.spark:spark-avro_{SCALA_BINARY}:{spark.spark}",  # from_avro: the fast decode path
            f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA_BINARY}:{spark.token_provider}",
            f"org.apache.kafka:kafka-clients:{spark.kafka_clients}",
            f"org.apache.commons:commons-pool2:{spark.commons_pool2}",
            f"com.google.protobuf:protobuf-java:{PROTOBUF_JAVA_VERSION}",  # the JVM decoder of Protobuf values
        ),
        transitive=False,
    )


# The broker runs in its own JVM with its own classpath, so its full dependency tree is fine.
BROKER_JARS = ArtifactSet(
    "kafka-broker",
    (
        f"org.apache.kafka:kafka_{SCALA_BINARY}:{KAFKA_BROKER_VERSION}",
        "org.apache.logging.log4j:log4j-slf4j2-impl:2.24.3",
        "org.apache.logging.log4j:log4j-core:2.24.3",
    ),
    transitive=True,
)

def s3a_artifacts(line: str | None = None) -> ArtifactSet:
    """Hadoop's S3A file system for `s3a://` tables and checkpoints: hadoop-aws of the line's Hadoop version and the
    AWS SDK bundle it was built against (shaded, so it clashes with none of Spark's jars). Resolved only when a
    pipeline's paths need it (`object_store_jars`): the bundle is 500-600 MB."""
    spark = spark_line(line)
    analytics = () if spark.s3_analytics is None else (
        f"software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:{spark.s3_analytics}",)
    return ArtifactSet(
        f"s3a-{spark.line}",
        (f"org.apache.hadoop:hadoop-aws:{spark.hadoop}", f"software.amazon.awssdk:bundle:{spark.aws_sdk_bundle}",
         # Spark's checkpoint file manager for stores without an atomic rename (`session.ABORTABLE_CHECKPOINTS`)
         f"org.apache.spark:spark-hadoop-cloud_{SCALA_BINARY}:{spark.hadoop_cloud}", *analytics),
        transitive=False,
    )


# The local metastore's Derby network server and its JDBC client (`runtime/metastore.py`): the whole of Derby, one
# version, resolved only when a session uses the local persistent catalog. The server runs in a JVM of its own with
# these jars alone on its classpath, never pyspark's: a job run by spark-submit imports `pyspark` from
# spark-submit's pyspark.zip, beside which there is no jars folder (nor on a cluster whose Spark is not pip's), so
# borrowing pyspark's engine (derby, derbyshared, derbytools) left a submitted driver's server without them on every
# line. The driver's client (derbyclient) is of the version every supported line's pyspark ships its engine at
# (`derbyshared`, which the client needs, comes from there): 10.16.1.1 on 4.0, 4.1 and 4.2.
DERBY_VERSION = "10.16.1.1"
DERBY_JARS = ArtifactSet(
    "derby-server",
    tuple(f"org.apache.derby:{artifact}:{DERBY_VERSION}"
          for artifact in ("derby", "derbyshared", "derbytools", "derbynet", "derbyclient")),
    transitive=False,
)

# Kafka Connect standalone with Debezium's Postgres connector: a real CDC source for the tests of silver's
# `envelope: debezium` (tests/debezium.py). Connect runs in its own JVM with this folder as its classpath, so the
# full dependency tree is fine. Resolved only when asked: by the fixture that starts Connect, or `ingest jars
# --debezium`.
DEBEZIUM_VERSION = "3.6.1.Final"
CONNECT_VERSION = "4.3.0"
DEBEZIUM_JARS = ArtifactSet(
    "debezium",
    (f"io.debezium:debezium-connector-postgres:{DEBEZIUM_VERSION}",
     f"org.apache.kafka:connect-runtime:{CONNECT_VERSION}",
     f"org.apache.kafka:connect-json:{CONNECT_VERSION}",
     # Connect logs through SLF4J: its 2.x API (named here, so it wins over the 1.7 the tree brings) and Log4j 2
     "org.slf4j:slf4j-api:2.0.16",
     "org.apache.logging.log4j:log4j-slf4j2-impl:2.24.3",
     "org.apache.logging.log4j:log4j-core:2.24.3"),
    transitive=True,
)


def all_sets() -> tuple[ArtifactSet, ...]:
    """What `ingest jars` resolves ahead: the local Spark line's set and the broker's."""
    return (spark_artifacts(), BROKER_JARS)


# Spark's parent POM lists extra repositories besides Maven's built-in default (Central), which would be asked for
# every artifact Central lacks, or first. Every repository but Central goes to an empty local folder instead, so
# resolution asks Central alone (whatever Maven's configured default is) without naming any host here.
_SETTINGS = """<settings><mirrors><mirror><id>no-other-repositories</id><mirrorOf>*,!central</mirrorOf>
<url>{dead_end}</url></mirror></mirrors></settings>"""


def _pom(artifacts: ArtifactSet) -> str:
    deps = []
    for coordinate in artifacts.coordinates:
        group, artifact, version = coordinate.split(":")
        exclusions = (
            "" if artifacts.transitive else
            "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
        )
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version>{exclusions}</dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>local.ingest</groupId><artifactId>{artifacts.name}</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{''.join(deps)}</dependencies></project>"
    )


def resolve(artifacts: ArtifactSet, cache: Path | None = None) -> list[Path]:
    """Return the jar paths of a set, running `mvn` only when the cached folder is missing or stale."""
    folder = artifacts.folder(cache or jar_cache())
    stamp = folder / ".coordinates"
    wanted = "\n".join(artifacts.coordinates)
    if not (stamp.is_file() and stamp.read_text() == wanted):
        _download(artifacts, folder)
        stamp.write_text(wanted)
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise JvmError(f"no jars in {folder} for artifact set {artifacts.name!r}")
    return jars


def _download(artifacts: ArtifactSet, folder: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmError("`mvn` is not on PATH; install Maven to resolve the Spark, Delta and Kafka jars")
    log.info("resolving %d Maven artifacts for %s into %s", len(artifacts.coordinates), artifacts.name, folder)
    with tempfile.TemporaryDirectory(prefix="ingest-mvn-") as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_text(_pom(artifacts))
        dead_end = work / "no-other-repositories"
        dead_end.mkdir()
        (work / "settings.xml").write_text(_SETTINGS.format(dead_end=dead_end.as_uri()))
        staging = work / "jars"
        cmd = [
            mvn, "-q", "-B", "-s", str(work / "settings.xml"), "-f", str(work / "pom.xml"),
            "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            errors = [line for line in done.stdout.splitlines() if "ERROR" in line][:5]
            raise JvmError(f"mvn could not resolve {artifacts.name!r}:\n" + "\n".join(errors or [done.stderr[-2000:]]))
        if folder.exists():
            shutil.rmtree(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), str(folder))


def classpath(artifacts: ArtifactSet) -> str:
    return os.pathsep.join(str(jar) for jar in resolve(artifacts))


HELPER_SOURCES = tuple(data_files.names(".java"))
# What the helper compiles against, from pyspark's own jars folder (the versions Spark runs with).
_HELPER_CLASSPATH = ("avro-[0-9]*.jar", "spark-sql-api_*.jar", "spark-core_*.jar",
                     "spark-common-utils_*.jar", "scala-library-*.jar", "scala-reflect-*.jar",
                     "hadoop-client-api-*.jar", "jackson-core-2*.jar", "jackson-databind-2*.jar")


def helper_jar(cache: Path | None = None) -> Path:
    """The project's JVM helper jar, compiled once per version of its sources and of pyspark (needs `javac`, i.e. a
    JDK). It uses only Spark API that every supported line shares, so a job packaged for another line carries it."""
    import pyspark

    digest = hashlib.sha1(pyspark.__version__.encode() + b"\0")
    for source in HELPER_SOURCES:
        digest.update(source.encode() + b"\0" + data_files.read(source) + b"\0")
    jar = (cache or jar_cache()) / "helper" / f"ingest-helper-{digest.hexdigest()[:12]}.jar"
    if jar.is_file():
        return jar
    names = ", ".join(HELPER_SOURCES)
    javac = shutil.which("javac")
    if javac is None:
        raise JvmError(f"`javac` is not on PATH; a JDK 17 is needed to build the project's JVM helper ({names})")
    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    classpath = [next(iter(sorted(pyspark_jars.glob(pattern))), None) for pattern in _HELPER_CLASSPATH]
    if None in classpath:
        raise JvmError(f"pyspark's jars folder {pyspark_jars} lacks one of {', '.join(_HELPER_CLASSPATH)}")
    classpath += helper_dependencies(cache)
    log.info("compiling %s into %s", names, jar)
    with tempfile.TemporaryDirectory(prefix="ingest-javac-") as tmp:
        classes = Path(tmp) / "classes"
        cmd = [javac, "--release", "17", "-nowarn", "-cp", os.pathsep.join(map(str, classpath)),
               "-d", str(classes), *(str(data_files.path(source)) for source in HELPER_SOURCES)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise JvmError(f"javac could not compile {names}:\n{done.stderr[-2000:]}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        staging = jar.parent / f".{jar.name}.{os.getpid()}"
        with ZipFile(staging, "w") as out:
            for path in sorted(classes.rglob("*.class")):
                out.write(path, path.relative_to(classes).as_posix())
        os.replace(staging, jar)  # atomic: a process starting Spark meanwhile sees no jar or the whole jar
    for old in jar.parent.glob("ingest-helper-*.jar"):
        if old != jar:
            old.unlink(missing_ok=True)
    return jar


def helper_dependencies(cache: Path | None = None) -> list[Path]:
    """The resolved jars the helper's classes need beyond pyspark's (protobuf-java): wherever the helper jar is put
    on a classpath of its own (the driver's, on local masters), they go beside it."""
    return [jar for jar in resolve(spark_artifacts(), cache) if jar.name.startswith("protobuf-java-")]


def spark_jars(locations: Iterable[str] = (), line: str | None = None) -> list[Path]:
    """Every jar a Spark session of this project needs on Spark `line` (default: the installed pyspark's): the
    resolved Maven set, the helper, and the file systems of the object stores among `locations` (tables,
    checkpoints)."""
    return [*resolve(spark_artifacts(line)), helper_jar(), *object_store_jars(locations, line)]


def object_store_jars(locations: Iterable[str], line: str | None = None) -> list[Path]:
    """The jars of the Hadoop file systems these locations need beyond pyspark's own: S3A for `s3a://`. Azure's
    (`abfss://`, hadoop-azure) and Google's (`gs://`, gcs-connector) are the cluster's to provide
    (docs/cluster.md)."""
    if any(storage.scheme(location) in storage.S3_SCHEMES for location in locations):
        return resolve(s3a_artifacts(line))
    return []
