"""A small Schema Registry for the tests: HTTPS with basic auth, speaking the REST endpoints of Confluent's Schema
Registry API that confluent-kafka's SchemaRegistryClient calls, with the registry's JSON error bodies.

No registry-compatible server installs from the package registries this project uses (Confluent's is a Java
distribution outside Maven Central; Karapace and Apicurio are not on them either), so this one is faithful to the
documented API for what the client asks: subjects and their versions, schemas by id, registering and looking up
a schema. Every request is recorded (`requests`), so a test can tell what went through HTTP.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def _canonical(text: str, schema_type: str = "AVRO") -> str:
    if schema_type == "PROTOBUF":  # a .proto file's text: the same text is the same schema
        return text.strip()
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


class RegistryServer:
    """One registry on 127.0.0.1: `start()` gives its https URL, `stop()` ends it (the port is then refused)."""

    def __init__(self, cert_file: Path, key_file: Path, users: dict[str, str]) -> None:
        self.cert_file, self.key_file, self.users = cert_file, key_file, users
        self.subjects: dict[str, list[int]] = {}  # subject -> schema id of each version (version = index + 1)
        self.schemas: dict[int, str] = {}  # schema id -> schema text as registered
        self.types: dict[int, str] = {}  # schema id -> its schemaType, when not AVRO
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> str:
        registry = self

        class Handler(_Handler):
            server_registry = registry

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="test-registry", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register `schema` under `subject` as the registry does: the same schema keeps its id everywhere, and a
        subject gets a new version only for a schema it does not hold yet. `schema_type`: AVRO, or PROTOBUF (a
        .proto file's text without references)."""
        with self.lock:
            wanted = _canonical(schema, schema_type)
            schema_id = next((i for i, text in self.schemas.items() if self.types.get(i, "AVRO") == schema_type
                              and _canonical(text, schema_type) == wanted), None)
            if schema_id is None:
                schema_id = max(self.schemas, default=0) + 1
                self.schemas[schema_id] = schema
                if schema_type != "AVRO":
                    self.types[schema_id] = schema_type
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def schema_type(self, schema_id: int) -> dict[str, str]:
        """The `schemaType` of a schema's answers: left out for Avro, as the registry does."""
        found = self.types.get(schema_id)
        return {"schemaType": found} if found else {}

    def ids_requested(self) -> list[int]:
        """Schema ids fetched by id, in request order."""
        return [int(m[1]) for _, path, _ in self.requests if (m := re.fullmatch(r"/schemas/ids/(\d+)", path))]


class _Handler(BaseHTTPRequestHandler):
    server_registry: RegistryServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests read `requests`

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        path = urlsplit(self.path).path.rstrip("/")
        status, body = self._answer(method, path)
        with self.server_registry.lock:
            self.server_registry.requests.append((method, path, status))
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(payload)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="SchemaRegistry"')
        self.end_headers()
        self.wfile.write(payload)

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        return self.server_registry.users.get(user) == password

    def _answer(self, method: str, path: str) -> tuple[int, Any]:
        if not self._authorized():
            return 401, {"error_code": 40101, "message": "Unauthorized"}
        registry = self.server_registry
        parts = [unquote(p) for p in path.strip("/").split("/")]
        with registry.lock:
            if method == "GET" and parts == ["subjects"]:
                return 200, sorted(registry.subjects)
            if method == "GET" and parts == ["schemas", "types"]:
                return 200, ["AVRO", "PROTOBUF"]
            if method == "GET" and len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                text = registry.schemas.get(int(parts[2]))
                if text is None:
                    return 404, {"error_code": 40403, "message": f"Schema {parts[2]} not found"}
                return 200, {"schema": text, **registry.schema_type(int(parts[2]))}
            if len(parts) >= 2 and parts[0] == "subjects" and not (method == "POST" and len(parts) == 3):
                versions = registry.subjects.get(parts[1])
                if versions is None and not (method == "POST" and len(parts) == 2):
                    return 404, {"error_code": 40401, "message": f"Subject '{parts[1]}' not found."}
                if method == "GET" and len(parts) == 3 and parts[2] == "versions":
                    return 200, list(range(1, len(versions or []) + 1))
                if method == "GET" and len(parts) == 4 and parts[2] == "versions":
                    return self._version(parts[1], versions or [], parts[3])
                if method == "POST" and len(parts) == 2:
                    return self._lookup(parts[1], versions or [])
        if method == "POST" and len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            body = self._body()
            if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
                return 422, {"error_code": 42201, "message": "Invalid schema"}
            try:
                schema_id = registry.register(parts[1], body["schema"], body.get("schemaType") or "AVRO")
            except ValueError:
                return 422, {"error_code": 42201, "message": "Invalid schema"}
            return 200, {"id": schema_id}
        return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}

    def _version(self, subject: str, versions: list[int], which: str) -> tuple[int, Any]:
        index = len(versions) if which == "latest" else int(which) if which.isdigit() else 0
        if not 1 <= index <= len(versions):
            return 404, {"error_code": 40402, "message": f"Version {which} not found."}
        schema_id = versions[index - 1]
        return 200, {"subject": subject, "version": index, "id": schema_id,
                     "schema": self.server_registry.schemas[schema_id], **self.server_registry.schema_type(schema_id)}

    def _lookup(self, subject: str, versions: list[int]) -> tuple[int, Any]:
        body = self._body()
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            return 422, {"error_code": 42201, "message": "Invalid schema"}
        if not versions:
            return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
        schema_type = body.get("schemaType") or "AVRO"
        wanted = _canonical(body["schema"], schema_type)
        registry = self.server_registry
        for index, schema_id in enumerate(versions, start=1):
            if registry.types.get(schema_id, "AVRO") == schema_type and \
                    _canonical(registry.schemas[schema_id], schema_type) == wanted:
                return 200, {"subject": subject, "version": index, "id": schema_id,
                             "schema": registry.schemas[schema_id], **registry.schema_type(schema_id)}
        return 404, {"error_code": 40403, "message": "Schema not found"}

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length", "0") or 0)
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            return None
