"""Where a pipeline's state lives: local folders or object storage (`s3a://`, `abfss://`, `gs://`), and the one
translation of a pipeline's object-store settings from Spark's (Hadoop's) names to delta-rs's.

Users configure object storage once, the way Spark documents it, in the pipeline's `spark:` section
(`spark.hadoop.fs.s3a.endpoint`, `spark.hadoop.fs.s3a.path.style.access`, ...) or through the environment
(`AWS_ACCESS_KEY_ID`, ...), which both Hadoop's S3A and delta-rs read. The read-only commands read tables with
delta-rs, which names the same settings differently (`AWS_ENDPOINT_URL`, ...): `delta_rs_options` derives them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

S3_SCHEMES = frozenset({"s3a", "s3", "s3n"})
AZURE_SCHEMES = frozenset({"abfss", "abfs"})
GCS_SCHEMES = frozenset({"gs"})
OBJECT_STORE_SCHEMES = S3_SCHEMES | AZURE_SCHEMES | GCS_SCHEMES

_HADOOP = "spark.hadoop."


def scheme(location: str) -> str:
    """The URI scheme of a table or checkpoint location; `file` for a plain path."""
    found = urlparse(location).scheme.lower() if "://" in location else ""
    return found or "file"


def is_object_store(location: str) -> bool:
    return scheme(location) in OBJECT_STORE_SCHEMES


def local_folder(location: str) -> Path | None:
    """The local folder of a location (a plain path or a `file:` URI), or None for a remote store."""
    if location.startswith("file:"):
        return Path(location.removeprefix("file:").replace("///", "/", 1))
    return None if "://" in location else Path(location)


def location_key(location: str) -> str:
    """A location as the same folder is always written: a local one (a path relative to the working directory, as
    the product opens it, or a `file:` URI) absolute, with `..` and links resolved; an object-store URI without a
    trailing slash."""
    folder = local_folder(location)
    return location.rstrip("/") if folder is None else os.path.realpath(folder)


def nesting(one: str, other: str) -> str | None:
    """How two locations (`location_key`s) overlap: `same`, `inside` (one is in a folder of other) or `holds`
    (the reverse); None when they are apart."""
    if one == other:
        return "same"
    if _below(one, other):
        return "inside"
    return "holds" if _below(other, one) else None


def _below(inner: str, outer: str) -> bool:
    """Whether `inner` is in a folder of `outer` that is not hidden: `_checkpoints` or `.state` inside a table's
    folder is Delta's own documented layout, which its readers and VACUUM pass over."""
    prefix = outer.rstrip("/") + "/"
    return inner.startswith(prefix) and not inner[len(prefix):].startswith(("_", "."))


def _bucket(location: str) -> str:
    return urlparse(location).netloc.split("@")[-1]


def _true(value: str | None) -> bool:
    return str(value).strip().lower() == "true"


def delta_rs_options(spark: Mapping[str, str], location: str) -> dict[str, str]:
    """delta-rs storage options for `location` from a pipeline's `spark:` settings (Hadoop's names). Settings the
    environment holds (AWS_*, AZURE_*, GOOGLE_*) are read by delta-rs itself and not repeated here."""
    kind = scheme(location)
    if kind in S3_SCHEMES:
        return _s3(spark, _bucket(location))
    if kind in AZURE_SCHEMES:
        return _azure(spark, _bucket(location))
    if kind in GCS_SCHEMES:
        keyfile = spark.get(f"{_HADOOP}google.cloud.auth.service.account.json.keyfile")
        return {"GOOGLE_SERVICE_ACCOUNT": keyfile} if keyfile else {}
    return {}


# Settings with which delta-rs commits to S3 safely: a locking provider, its own opt-out, or conditional writes.
_S3_COMMIT_KEYS = ("AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME", "conditional_put", "aws_conditional_put",
                   "AWS_CONDITIONAL_PUT")


def delta_rs_write_options(location: str, options: Mapping[str, str] | None) -> dict[str, str]:
    """delta-rs's options for commits to `location`: on S3, a commit is a put-if-absent with S3's conditional
    writes (`If-None-Match`, which S3 and the S3-compatible stores in use honour) unless the options or the
    environment choose how delta-rs commits there (a DynamoDB locking provider, say)."""
    out = dict(options or {})
    if scheme(location) in S3_SCHEMES and not any(k in out or k in os.environ for k in _S3_COMMIT_KEYS):
        out["conditional_put"] = "etag"
    return out


def _s3(spark: Mapping[str, str], bucket: str) -> dict[str, str]:
    def setting(name: str) -> str | None:  # a per-bucket setting wins, as in S3A
        return spark.get(f"{_HADOOP}fs.s3a.bucket.{bucket}.{name}") or spark.get(f"{_HADOOP}fs.s3a.{name}")

    out: dict[str, str] = {}
    endpoint = setting("endpoint")
    if endpoint:
        secure = setting("connection.ssl.enabled")
        if "://" not in endpoint:
            endpoint = ("http://" if secure is not None and not _true(secure) else "https://") + endpoint
        out["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
    for hadoop, rust in (("access.key", "AWS_ACCESS_KEY_ID"), ("secret.key", "AWS_SECRET_ACCESS_KEY"),
                         ("session.token", "AWS_SESSION_TOKEN"), ("endpoint.region", "AWS_REGION")):
        value = setting(hadoop)
        if value:
            out[rust] = value
    style = setting("path.style.access")
    if style is not None:
        out["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if _true(style) else "true"
    return out


def _azure(spark: Mapping[str, str], host: str) -> dict[str, str]:
    account = host.split(".")[0]
    key = spark.get(f"{_HADOOP}fs.azure.account.key.{host}")
    out = {"AZURE_STORAGE_ACCOUNT_NAME": account} if account else {}
    if key:
        out["AZURE_STORAGE_ACCOUNT_KEY"] = key
    return out
