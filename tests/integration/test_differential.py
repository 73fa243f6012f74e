"""The Python decoder against Apache Avro's own Java decoder, on bodies nobody chose: random schemas of every type
the project maps, random valid records, then mutated bodies (bits flipped, bytes cut, added or replaced, varints
negated). For every body, both must make the same decision (a row, or quarantine), and a row must hold the value
Avro's reader gives (compared as both decoders' values written back by their own writers).

The reference is `tests/reference/AvroReference.java`: Avro's GenericDatumReader, plus the rules of the
specification that it leaves unchecked (see its comment). Seeded: a failure names the seed, schema and body.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import os
import random
import struct
import subprocess
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_writer

from ingestion.columns import KAFKA_SOURCE_SCHEMA
from ingestion.decode.python_decoder import BatchDecoder
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import encode
from ingestion.limits import AVRO_JAVA_LIMITS
from ingestion.schema.files import canonical_json

pytestmark = pytest.mark.jvm  # Avro's Java reader, compiled and run by the test

REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "AvroReference.java"
SEED = int(os.environ.get("INGEST_DIFFERENTIAL_SEED", "20261124"))
SCHEMAS = 40
RECORDS_PER_SCHEMA = 8
MUTATIONS_PER_RECORD = 18  # 40 x 8 x 18 = 5,760 mutated bodies, plus the 320 valid ones


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command that runs the reference decoder (compiled against pyspark's Avro jar)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    wanted = ("avro-[0-9]*.jar", "jackson-core-2*.jar", "jackson-databind-*.jar", "jackson-annotations-*.jar",
              "slf4j-api-*.jar", "commons-compress-*.jar")
    classpath = [str(next(iter(sorted(jars.glob(pattern))))) for pattern in wanted]
    classes = tmp_path_factory.mktemp("reference")
    subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", os.pathsep.join(classpath), str(REFERENCE)],
                   check=True, capture_output=True)
    limits = [f"-D{key}={value}" for key, value in AVRO_JAVA_LIMITS.items()]
    return ["java", "-Xmx512m", *limits, "-cp", os.pathsep.join([str(classes), *classpath]), "AvroReference"]


# --- random schemas ------------------------------------------------------------------------------------------

class SchemaMaker:
    """Random record schemas over every type the project maps, with unique names."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.names = 0

    def name(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def record(self, depth: int = 0) -> dict[str, Any]:
        fields = [{"name": f"f{i}", "type": self.any(depth + 1)} for i in range(self.rng.randint(1, 5))]
        return {"type": "record", "name": self.name("R"), "fields": fields}

    def any(self, depth: int, union: bool = True) -> Any:
        """A random type; `union` False: not a union (a union's branch cannot be one)."""
        choices = ["primitive", "primitive", "logical", "enum", "fixed", "decimal"] + (["nullable"] if union else [])
        if depth < 3:
            choices += ["record", "array", "map"] + (["union"] if union else [])
        kind = self.rng.choice(choices)
        if kind == "primitive":
            return self.rng.choice(["boolean", "int", "long", "float", "double", "bytes", "string"])
        if kind == "logical":
            return self.rng.choice([
                {"type": "int", "logicalType": "date"}, {"type": "int", "logicalType": "time-millis"},
                {"type": "long", "logicalType": "time-micros"}, {"type": "long", "logicalType": "timestamp-millis"},
                {"type": "long", "logicalType": "timestamp-micros"},
                {"type": "long", "logicalType": "local-timestamp-micros"},
                {"type": "string", "logicalType": "uuid"}])
        if kind == "enum":
            return {"type": "enum", "name": self.name("E"),
                    "symbols": [f"S{i}" for i in range(self.rng.randint(1, 6))]}
        if kind == "fixed":
            return {"type": "fixed", "name": self.name("F"), "size": self.rng.randint(1, 6)}
        if kind == "decimal":
            precision = self.rng.randint(1, 20)
            scale = self.rng.randint(0, precision)
            if self.rng.random() < 0.5:
                return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
            size = next(n for n in range(1, 16) if 2 ** (8 * n - 1) > 10 ** precision)
            return {"type": "fixed", "name": self.name("D"), "size": size, "logicalType": "decimal",
                    "precision": precision, "scale": scale}
        if kind == "nullable":
            return ["null", self.any(depth + 1, union=False)]
        if kind == "record":
            return self.record(depth)
        if kind == "array":
            return {"type": "array", "items": self.any(depth + 1)}
        if kind == "map":
            return {"type": "map", "values": self.any(depth + 1)}
        # a union of distinct primitive kinds (Avro forbids two of one kind) and maybe a record
        branches: list[Any] = self.rng.sample(["null", "boolean", "int", "string", "bytes", "double"],
                                              self.rng.randint(2, 4))
        if self.rng.random() < 0.3:
            branches.append(self.record(depth + 1))
        return branches


def value_for(schema: Any, rng: random.Random, named: dict[str, Any]) -> Any:
    """A random valid value of `schema`, as fastavro writes it."""
    if isinstance(schema, list):
        return value_for(rng.choice(schema), rng, named)
    if isinstance(schema, str):
        if schema in named:
            return value_for(named[schema], rng, named)
        return {
            "null": lambda: None, "boolean": lambda: rng.random() < 0.5,
            "int": lambda: rng.randint(-(2**31), 2**31 - 1), "long": lambda: rng.randint(-(2**63), 2**63 - 1),
            "float": lambda: rng.uniform(-1e6, 1e6), "double": lambda: rng.uniform(-1e12, 1e12),
            "bytes": lambda: rng.randbytes(rng.randint(0, 8)),
            "string": lambda: "".join(rng.choice("abcé€😀 ") for _ in range(rng.randint(0, 6))),
        }[schema]()
    kind, logical = schema["type"], schema.get("logicalType")
    if kind in ("record", "enum", "fixed") and "name" in schema:
        named[schema["name"]] = schema
    if logical == "decimal":
        digits = rng.randint(0, 10 ** schema["precision"] - 1) * rng.choice([1, -1])
        return Decimal(digits).scaleb(-schema["scale"])
    if logical == "date":
        return dt.date(2000, 1, 1) + dt.timedelta(days=rng.randint(-5000, 5000))
    if logical in ("time-millis", "time-micros"):
        return (dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 86_399_999_999))).time().replace(
            microsecond=0 if logical == "time-millis" else rng.randint(0, 999_999))
    if logical in ("timestamp-millis", "timestamp-micros"):
        return dt.datetime(2020, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=rng.randint(-10**11, 10**11))
    if logical == "local-timestamp-micros":
        return dt.datetime(2020, 1, 1) + dt.timedelta(microseconds=rng.randint(-10**14, 10**14))
    if logical == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if kind == "record":
        return {f["name"]: value_for(f["type"], rng, named) for f in schema["fields"]}
    if kind == "enum":
        return rng.choice(schema["symbols"])
    if kind == "fixed":
        return rng.randbytes(schema["size"])
    if kind == "array":
        return [value_for(schema["items"], rng, named) for _ in range(rng.randint(0, 3))]
    if kind == "map":
        return {f"k{i}é": value_for(schema["values"], rng, named) for i in range(rng.randint(0, 3))}
    return value_for(kind, rng, named)


def mutate(body: bytes, rng: random.Random) -> bytes:
    """One random damage of a valid body."""
    data = bytearray(body)
    how = rng.choice(["flip", "flip", "cut", "extend", "replace", "negate", "insert"])
    if not data or how == "extend":
        return bytes(data + rng.randbytes(rng.randint(1, 4)))
    i = rng.randrange(len(data))
    if how == "flip":
        data[i] ^= 1 << rng.randrange(8)
    elif how == "cut":
        del data[i:]
    elif how == "replace":
        data[i] = rng.choice([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    elif how == "negate":
        data[i] ^= 0x01  # the zig-zag sign bit of a varint's first byte
    else:
        data.insert(i, rng.randrange(256))
    return bytes(data)


# --- the project's side ----------------------------------------------------------------------------------------

def decoded_batch(schema_json: str, bodies: list[bytes], *, one_pass: bool = True) -> pa.RecordBatch:
    """The project's decoder rows of `bodies` (schema id 1, written with `schema_json`), in one Arrow batch;
    `one_pass` False: without the generated one-pass read (the check, then fastavro, for every body)."""
    decoder = BatchDecoder(DecodeSpec(writer_schemas={1: schema_json}, reader_schema=schema_json,
                                      max_bytes=1 << 20, fail_fast=False))
    decoder._prepare()
    if not one_pass:
        decoder._reads = {}
    values = [encode(1, b) for b in bodies]
    rows: dict[str, list[Any]] = {f.name: [None] * len(values) for f in KAFKA_SOURCE_SCHEMA.fields}
    rows.update(value=values, topic=["t"] * len(values), partition=[0] * len(values),
                offset=list(range(len(values))))
    from ingestion.runtime.arrow_types import to_arrow_schema

    return next(decoder([pa.RecordBatch.from_pydict(rows, schema=to_arrow_schema(KAFKA_SOURCE_SCHEMA))]))


def project_decode(schema_json: str, bodies: list[bytes]) -> list[tuple[bool, str]]:
    """(decoded, the row's payload written back, or the error) per body, through the project's decoder on an Arrow
    batch: the payload is what goes to Arrow and bronze."""
    out = decoded_batch(schema_json, bodies)
    errors = out.column("_error_class").to_pylist()
    messages = out.column("_error_message").to_pylist()
    payloads = out.column("_payload").to_pylist()  # as Arrow holds it, whichever way the decoder read the body
    schema = json.loads(schema_json)
    results = []
    for i in range(len(bodies)):
        if errors[i] is not None:
            results.append((False, f"{errors[i]}: {messages[i]}"))
            continue
        results.append((True, write_back(schema, payloads[i], {}).hex()))
    return results


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def write_back(schema: Any, value: Any, named: dict[str, Any]) -> bytes:
    """A payload as the project hands it to Arrow (its union members, map entry lists, dates and times), written
    in Avro's binary encoding canonically: one block per array and map, minimal decimals, canonical NaNs."""
    if isinstance(schema, list):
        non_null = [b for b in schema if b != "null"]
        if value is None:
            return _varint(schema.index("null"))
        if len(non_null) == 1:
            return _varint(schema.index(non_null[0])) + write_back(non_null[0], value, named)
        member, inner = next((k, v) for k, v in value.items() if v is not None)  # Arrow holds the others as null
        branch = non_null[int(member.removeprefix("member"))]
        return _varint(schema.index(branch)) + write_back(branch, inner, named)
    if isinstance(schema, str):
        if schema in named:
            return write_back(named[schema], value, named)
        schema = {"type": schema}
    kind, logical = schema["type"], schema.get("logicalType")
    if isinstance(kind, (dict, list)):
        return write_back(kind, value, named)
    if kind in ("record", "enum", "fixed"):
        named[schema["name"]] = schema
    if kind == "null":
        return b""
    if kind == "boolean":
        return b"\x01" if value else b"\x00"
    if kind in ("int", "long"):
        if logical == "date":
            value = (value - dt.date(1970, 1, 1)).days
        elif logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
            aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
            micros = (aware - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
            value = micros // 1000 if logical.endswith("-millis") else micros
        return _varint(int(value))
    if kind in ("float", "double"):
        return struct.pack("<f" if kind == "float" else "<d", float("nan") if math.isnan(value) else value)
    if kind == "bytes" and logical == "decimal":
        unscaled = int(value.scaleb(schema["scale"]))
        raw = unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
        return _varint(len(raw)) + raw
    if kind == "bytes":
        return _varint(len(value)) + bytes(value)
    if kind == "string":
        raw = str(value).encode()
        return _varint(len(raw)) + raw
    if kind == "fixed":
        if logical == "decimal":
            return int(value.scaleb(schema["scale"])).to_bytes(schema["size"], "big", signed=True)
        return bytes(value)
    if kind == "enum":
        return _varint(schema["symbols"].index(value))
    if kind == "array":
        items = b"".join(write_back(schema["items"], v, named) for v in value)
        return (_varint(len(value)) + items if value else b"") + b"\x00"
    if kind == "map":
        entries = b"".join(write_back("string", k, named) + write_back(schema["values"], v, named) for k, v in value)
        return (_varint(len(value)) + entries if value else b"") + b"\x00"
    return b"".join(write_back(f["type"], value[f["name"]], named) for f in schema["fields"])


def reference_decode(command: list[str], cases: list[tuple[str, list[bytes]]]) -> list[list[tuple[bool, str]]]:
    lines = []
    for schema_json, bodies in cases:
        lines.append("S " + schema_json)
        lines.extend(b.hex() for b in bodies)
    done = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True, text=True, check=False,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = iter(done.stdout.splitlines())
    results = []
    for _, bodies in cases:
        verdicts = []
        for _ in bodies:
            word, _, rest = next(answers).partition(" ")
            verdicts.append((word == "OK", rest))
        results.append(verdicts)
    return results


def test_the_python_decoder_agrees_with_avros_java_reader(reference: list[str]) -> None:
    rng = random.Random(SEED)
    maker = SchemaMaker(rng)
    cases: list[tuple[str, list[bytes]]] = []
    for _ in range(SCHEMAS):
        schema = maker.record()
        parsed = parse_schema(schema)
        bodies = []
        for _ in range(RECORDS_PER_SCHEMA):
            out = io.BytesIO()
            schemaless_writer(out, parsed, value_for(schema, rng, {}))
            valid = out.getvalue()
            bodies.append(valid)
            bodies.extend(mutate(valid, rng) for _ in range(MUTATIONS_PER_RECORD))
        cases.append((canonical_json(schema), bodies))
    expected = reference_decode(reference, cases)
    disagreements = []
    decided = {True: 0, False: 0}
    for (schema_json, bodies), want in zip(cases, expected, strict=True):
        got = project_decode(schema_json, bodies)
        for body, (ours, ours_detail), (theirs, their_detail) in zip(bodies, got, want, strict=True):
            decided[theirs] += 1
            if ours != theirs or (ours and ours_detail != their_detail):
                disagreements.append(f"seed {SEED} schema {schema_json} body {body.hex()}: ours "
                                     f"{'row ' if ours else ''}{ours_detail}, Avro's {'row ' if theirs else ''}"
                                     f"{their_detail}")
    assert sum(decided.values()) >= 5_000
    assert decided[True] > 500 and decided[False] > 1_000, decided  # both outcomes are well exercised
    assert disagreements == [], f"{len(disagreements)} disagreements, first: {disagreements[:3]}"


def test_the_one_pass_read_gives_the_rows_and_reasons_of_the_check_and_fastavro() -> None:
    """`validate_fast.reader` (one generated pass: the check and the values) against the check then fastavro, on
    random schemas with valid and mutated bodies: the same payloads in Arrow, error classes and messages, and the
    one-pass read used for most schemas (not generated only for unions of several types)."""
    rng = random.Random(SEED + 1)
    maker = SchemaMaker(rng)
    read = 0
    for _ in range(SCHEMAS * 3):
        schema = maker.record()
        parsed = parse_schema(schema)
        bodies = []
        for _ in range(4):
            out = io.BytesIO()
            schemaless_writer(out, parsed, value_for(schema, rng, {}))
            bodies.append(out.getvalue())
            bodies.extend(mutate(bodies[-1], rng) for _ in range(4))
        schema_json = canonical_json(schema)
        from ingestion.decode.validate import body_reader

        read += body_reader(json.loads(schema_json)) is not None
        one, two = (decoded_batch(schema_json, bodies, one_pass=p) for p in (True, False))
        for column in ("_payload", "_error_class", "_error_message", "_schema_id"):
            assert repr(one.column(column).to_pylist()) == repr(two.column(column).to_pylist()), (column, schema_json)
    assert read > SCHEMAS * 3 // 2, read  # most schemas take the one-pass read
