"""The small files of a pipeline's state beside its checkpoint (the txnAppId, the writer lease) and whether Spark's
checkpoint has batches, read and written by this process without a JVM wherever the checkpoint lives.

A local folder is read with the standard library; S3 (`s3a://`, `s3://`) and ADLS (`abfss://`) through pyarrow's
file systems, with the pipeline's settings under Hadoop's names (its `spark:` section, as `storage.delta_rs_options`
reads them) and the environment's credentials, as delta-rs and S3A read them. For any other scheme (`hdfs://`,
`gs://`, ...) `for_location` is None and the caller reaches the files through the JVM's Hadoop file system
(`runtime.hadoop`), as before: so a checkpoint in S3 is locked, and its txnAppId read, before the JVM boots, and a
pipeline there has its start batch too.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from ingestion import storage


class StateFiles(Protocol):
    """Whole small files at absolute locations (the checkpoint's scheme and authority included)."""

    def read_text(self, location: str) -> str | None:
        """The file's text, None when there is no such file."""

    def write_text(self, location: str, text: str) -> None:
        """Write the file whole, replacing any."""

    def delete(self, location: str) -> None:
        """Remove the file if it exists."""

    def has_children(self, location: str) -> bool:
        """Whether the folder (a prefix in object storage) holds anything."""


def for_location(location: str, settings: Mapping[str, str] | None = None) -> StateFiles | None:
    """The state files of a checkpoint at `location` reachable without a JVM, or None (see the module)."""
    if storage.local_folder(location) is not None:
        return LocalFiles()
    scheme = storage.scheme(location)
    options = storage.delta_rs_options(dict(settings or {}), location)
    if scheme in storage.S3_SCHEMES:
        return ArrowFiles(_s3(options), _bucket_path)
    if scheme in storage.AZURE_SCHEMES and options.get("AZURE_STORAGE_ACCOUNT_KEY"):
        from pyarrow import fs

        return ArrowFiles(fs.AzureFileSystem(account_name=options["AZURE_STORAGE_ACCOUNT_NAME"],
                                             account_key=options["AZURE_STORAGE_ACCOUNT_KEY"]), _container_path)
    return None


class LocalFiles:
    def read_text(self, location: str) -> str | None:
        path = _local(location)
        try:
            return path.read_text()
        except FileNotFoundError:
            return None

    def write_text(self, location: str, text: str) -> None:
        path = _local(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text)
        temporary.replace(path)

    def delete(self, location: str) -> None:
        _local(location).unlink(missing_ok=True)

    def has_children(self, location: str) -> bool:
        path = _local(location)
        return path.is_dir() and any(path.iterdir())


class ArrowFiles:
    """Files in an object store through a pyarrow file system; `path` maps a location to the store's path."""

    def __init__(self, filesystem: Any, path: Any) -> None:
        self.fs = filesystem
        self.path = path

    def read_text(self, location: str) -> str | None:
        try:
            with self.fs.open_input_stream(self.path(location)) as stream:
                return bytes(stream.read()).decode()
        except FileNotFoundError:
            return None

    def write_text(self, location: str, text: str) -> None:
        with self.fs.open_output_stream(self.path(location)) as stream:
            stream.write(text.encode())

    def delete(self, location: str) -> None:
        try:
            self.fs.delete_file(self.path(location))
        except FileNotFoundError:
            pass

    def has_children(self, location: str) -> bool:
        from pyarrow import fs

        try:
            found = self.fs.get_file_info(fs.FileSelector(self.path(location).rstrip("/"), allow_not_found=True))
        except FileNotFoundError:
            return False
        return bool(found)


def _local(location: str) -> Path:
    path = storage.local_folder(location)
    assert path is not None
    return path


def _bucket_path(location: str) -> str:
    """`s3a://bucket/a/b` as pyarrow's S3 path, `bucket/a/b`."""
    parts = urlparse(location)
    return f"{parts.netloc.split('@')[-1]}/{parts.path.lstrip('/')}".rstrip("/")


def _container_path(location: str) -> str:
    """`abfss://container@account.dfs.core.windows.net/a/b` as pyarrow's ADLS path, `container/a/b`."""
    parts = urlparse(location)
    return f"{parts.netloc.split('@')[0]}/{parts.path.lstrip('/')}".rstrip("/")


def filesystem(location: str, options: Mapping[str, str]) -> tuple[Any, str] | None:
    """pyarrow's file system of an object-store location and the location's path in it, for delta-rs's
    `options` of that location; None for a store this module does not reach."""
    scheme = storage.scheme(location)
    if scheme in storage.S3_SCHEMES:
        return _s3(options), _bucket_path(location)
    return None


def _s3(options: Mapping[str, str]) -> Any:
    """pyarrow's S3 file system for delta-rs's options of a location (credentials left out: the AWS chain)."""
    from pyarrow import fs

    kwargs: dict[str, Any] = {}
    endpoint = options.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlparse(endpoint)
        kwargs.update(endpoint_override=parts.netloc or parts.path, scheme=parts.scheme or "https")
    for option, name in (("AWS_ACCESS_KEY_ID", "access_key"), ("AWS_SECRET_ACCESS_KEY", "secret_key"),
                         ("AWS_SESSION_TOKEN", "session_token"), ("AWS_REGION", "region")):
        if options.get(option):
            kwargs[name] = options[option]
    if "AWS_VIRTUAL_HOSTED_STYLE_REQUEST" in options:
        kwargs["force_virtual_addressing"] = options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "true"
    return fs.S3FileSystem(**kwargs)
