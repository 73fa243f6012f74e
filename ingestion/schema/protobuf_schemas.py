"""Protobuf schemas: `.proto` text (or a registry's serialized descriptor) -> one self-contained document.

A Protobuf schema is a file that may import others (a registry's *references*, well-known types such as
`google/protobuf/timestamp.proto`). The pipeline keeps each schema id as a *document*: canonical JSON holding a
`FileDescriptorSet` of the file and everything it imports (base64), and the file's name. A document is plain text,
as an Avro schema is, so the resolver, the spec and the executors carry it the same way, and an executor needs
nothing but the `protobuf` package to decode with it (no protoc, no registry).

`.proto` text is compiled by protoc as the `grpcio-tools` package bundles it (`python -m grpc_tools.protoc`, with
its copy of the well-known `.proto` files); a serialized `FileDescriptorProto` (base64, what confluent-kafka's
serializer registers, and what a registry returns for `format=serialized`) is used as it is.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ingestion.errors import SchemaError

DOCUMENT_KEY = "protobuf"
# The bronze table property that records the message the table holds, written when the table is created: a
# restart keeps the message whatever the topic's earliest records are by then (docs/protobuf.md#which-message).
TABLE_PROPERTY = "ingest.protobuf.message"


def is_document(text: str) -> bool:
    """Whether a schema text is a Protobuf document (as opposed to an Avro schema's JSON)."""
    return text.startswith('{"protobuf":')


_DOCUMENTS: dict[str, str] = {}  # what document() made, by its input: protoc costs a process per call


def document(main: str, files: Mapping[str, str], includes: tuple[Path, ...] = ()) -> str:
    """The document of file `main`, given the text of it and of every file it imports that is not a well-known
    type, by import name (`.proto` text or a base64 serialized FileDescriptorProto); `.proto` text may also import
    files from `includes` folders. SchemaError naming the file when protoc refuses it."""
    key = json.dumps([main, sorted(files.items()), [str(p) for p in includes]])
    if key in _DOCUMENTS:
        return _DOCUMENTS[key]
    from google.protobuf import descriptor_pb2

    compiled: dict[str, bytes] = {}
    for name, text in files.items():
        serialized = _serialized(text)
        if serialized is not None:
            compiled[name] = serialized
    texts = {name: text for name, text in files.items() if name not in compiled}
    if main in texts:
        fds = _protoc(main, texts, compiled, includes)
    else:
        fds = _assemble(main, {**compiled, **_protoc_each(texts, compiled, includes)})
    last = descriptor_pb2.FileDescriptorSet.FromString(fds).file[-1].name  # the main file comes last
    made = json.dumps({DOCUMENT_KEY: {"descriptorSet": base64.b64encode(fds).decode("ascii"), "file": last}},
                      sort_keys=True, separators=(",", ":"))
    _DOCUMENTS[key] = made
    return made


def _serialized(text: str) -> bytes | None:
    """The FileDescriptorProto bytes of a base64 serialized schema, or None for `.proto` text."""
    from google.protobuf import descriptor_pb2

    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or ";" in stripped:
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, Exception):  # noqa: BLE001 - not base64 or not a descriptor: text
        return None
    return raw if proto.name or proto.message_type else None


def _well_known(name: str) -> bytes | None:
    """The serialized FileDescriptorProto of a well-known file (`google/protobuf/*.proto`) from the protobuf
    package itself, or None."""
    if not name.startswith("google/protobuf/") or not name.endswith(".proto"):
        return None
    module = "google.protobuf." + name[len("google/protobuf/"):-len(".proto")].replace("/", ".") + "_pb2"
    try:
        return bytes(importlib.import_module(module).DESCRIPTOR.serialized_pb)
    except ImportError:
        return None


def _assemble(main: str, compiled: Mapping[str, bytes]) -> bytes:
    """A FileDescriptorSet of `main` and its imports, dependencies first."""
    from google.protobuf import descriptor_pb2

    out = descriptor_pb2.FileDescriptorSet()
    done: set[str] = set()

    def add(name: str, chain: tuple[str, ...]) -> None:
        if name in done:
            return
        if name in chain:
            raise SchemaError(f"Protobuf file {name!r} imports itself through {' -> '.join(chain)}")
        raw = compiled.get(name) or _well_known(name)
        if raw is None and not chain:
            raise SchemaError(f"Protobuf file {name!r} is not among the files given")
        if raw is None:
            raise SchemaError(f"Protobuf file {chain[-1]!r} imports {name!r}, which no reference provides")
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
        for dependency in proto.dependency:
            add(dependency, (*chain, name))
        if not proto.name:
            proto.name = name
        done.add(name)
        out.file.append(proto)

    add(main, ())
    return out.SerializeToString(deterministic=True)


def _protoc_each(texts: Mapping[str, str], compiled: Mapping[str, bytes],
                 includes: tuple[Path, ...]) -> dict[str, bytes]:
    """Text dependencies of a serialized main file, compiled one by one."""
    from google.protobuf import descriptor_pb2

    out: dict[str, bytes] = {}
    for name in texts:
        fds = descriptor_pb2.FileDescriptorSet.FromString(_protoc(name, texts, compiled, includes))
        out[name] = next(f for f in fds.file if f.name == name).SerializeToString(deterministic=True)
    return out


def _protoc(main: str, texts: Mapping[str, str], compiled: Mapping[str, bytes],
            includes: tuple[Path, ...] = ()) -> bytes:
    """protoc (grpcio-tools') on `.proto` texts, with serialized dependencies given as a descriptor set."""
    try:
        import grpc_tools
    except ImportError:
        raise SchemaError("compiling .proto text needs protoc from the grpcio-tools package (pip install "
                          "grpcio-tools)") from None
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="ingest-protoc-") as tmp:
        root = Path(tmp) / "src"
        for name, text in texts.items():
            path = root / name
            if ".." in Path(name).parts or Path(name).is_absolute():
                raise SchemaError(f"Protobuf import name {name!r} is not a relative path")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        out = Path(tmp) / "out.pb"
        root.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", *(f"-I{p}" for p in includes),
               f"-I{well_known}", "--include_imports",
               f"--descriptor_set_out={out}"]
        if compiled:
            given = Path(tmp) / "given.pb"
            given.write_bytes(_given_set(compiled))
            cmd.append(f"--descriptor_set_in={given}")
        cmd.append(main)
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=root,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if done.returncode != 0:
            lines = [line.replace(f"{root}/", "") for line in done.stderr.splitlines() if line.strip()] \
                or [f"exit {done.returncode}"]  # file names as they were given, not in the compile's folder
            raise SchemaError(f"protoc refuses {main!r}: {'; '.join(lines[:3])}")
        return out.read_bytes()


def _given_set(compiled: Mapping[str, bytes]) -> bytes:
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    for name, raw in compiled.items():
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
        proto.name = proto.name or name
        fds.file.append(proto)
    return fds.SerializeToString(deterministic=True)


def parse_document(text: str) -> tuple[bytes, str]:
    """(FileDescriptorSet bytes, main file name) of a document."""
    try:
        inner = json.loads(text)[DOCUMENT_KEY]
        return base64.b64decode(inner["descriptorSet"]), str(inner["file"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaError(f"not a Protobuf schema document: {exc}") from None


def file_names(text: str) -> list[str]:
    """The names of the files a document holds: its file and every file it imports, dependencies first."""
    from google.protobuf import descriptor_pb2

    return [f.name for f in descriptor_pb2.FileDescriptorSet.FromString(parse_document(text)[0]).file]


@functools.lru_cache(maxsize=64)
def file_descriptor(text: str) -> Any:
    """The main FileDescriptor of a document, in a descriptor pool of its own (one per document and process)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    fds_bytes, main = parse_document(text)
    pool = descriptor_pool.DescriptorPool()
    for proto in descriptor_pb2.FileDescriptorSet.FromString(fds_bytes).file:
        try:
            pool.Add(proto)
        except Exception as exc:  # noqa: BLE001 - the pool's own error types differ between implementations
            raise SchemaError(f"Protobuf file {proto.name!r} is not valid: {exc}") from None
    return pool.FindFileByName(main)


def message_names(text: str) -> list[str]:
    """Full names of the file's top-level messages, in file order (message index [i] names the i-th)."""
    return [m.full_name for m in file_descriptor(text).message_types_by_name.values()]


def by_indexes(text: str, indexes: tuple[int, ...]) -> Any:
    """The message a Confluent message-index path names (first index: a top-level message of the file, each next
    one a nested message of the previous), or None when there is none."""
    messages = list(file_descriptor(text).message_types_by_name.values())
    found = None
    for index in indexes:
        if not 0 <= index < len(messages):
            return None
        found = messages[index]
        messages = list(found.nested_types)
    return found


def indexes_of(descriptor: Any) -> tuple[int, ...]:
    """The Confluent message-index path of a message descriptor."""
    path: list[int] = []
    while descriptor is not None:
        parent = descriptor.containing_type
        siblings = list(parent.nested_types) if parent is not None else list(
            descriptor.file.message_types_by_name.values())
        path.append(next(i for i, s in enumerate(siblings) if s.full_name == descriptor.full_name))
        descriptor = parent
    return tuple(reversed(path))


def find_message(text: str, name: str) -> Any:
    """A message of the document by full name (or by simple name when that is unique); None when absent."""
    pool = file_descriptor(text).pool
    try:
        return pool.FindMessageTypeByName(name)
    except KeyError:
        pass
    candidates = [m for m in _all_messages(file_descriptor(text)) if m.name == name]
    return candidates[0] if len(candidates) == 1 else None


def all_messages(text: str) -> list[Any]:
    """Every message of the document's main file, nested ones after their parent, in file order."""
    return _all_messages(file_descriptor(text))


def _all_messages(file: Any) -> list[Any]:
    out: list[Any] = []

    def walk(message: Any) -> None:
        out.append(message)
        for nested in message.nested_types:
            walk(nested)

    for message in file.message_types_by_name.values():
        walk(message)
    return out


def candidates(text: str) -> list[str]:
    """Full names of the messages a table of this document may hold when nothing pins one: the file's top-level
    messages that no other message of the file uses as a field type (every top-level message when each is used),
    in file order. More than one: the file leaves the table's message open."""
    file = file_descriptor(text)
    tops = list(file.message_types_by_name.values())
    if not tops:
        raise SchemaError(f"Protobuf file {file.name!r} defines no message")
    used = {f.message_type.full_name for m in _all_messages(file) for f in m.fields if f.message_type is not None}
    roots = [str(m.full_name) for m in tops if m.full_name not in used]
    return roots or [str(m.full_name) for m in tops]


def table_message(text: str, pinned: str = "") -> str:
    """The message a table of this document holds when no record tells: the pinned one (`value.messageName`), else
    the file's only candidate (`candidates`), else its first top-level message (Confluent's default for a schema
    without a message name). SchemaError when the pin names no message."""
    if pinned:
        found = find_message(text, pinned)
        if found is None:
            raise SchemaError(f"value.messageName {pinned!r} is no message of {parse_document(text)[1]!r} (it has "
                              f"{', '.join(message_names(text))})")
        return str(found.full_name)
    names = candidates(text)
    return names[0] if len(names) == 1 else message_names(text)[0]
