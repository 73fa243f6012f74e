"""The Schema Registry over HTTPS with basic auth, through confluent-kafka's client against the suite's registry
server (tests/registry_server.py): versions and ids resolve, refused credentials, an unreachable registry and an
untrusted certificate are each named as such, and a registry that goes away costs nothing for known ids."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingestion.config import parse_pipeline
from ingestion.decode.resolver import SchemaResolver
from ingestion.dev.secure import SecureSetup
from ingestion.errors import SchemaError
from ingestion.schema.registry import source_for
from tests.registry_server import RegistryServer

REPO = Path(__file__).resolve().parents[2]
V1 = (REPO / "schemas" / "orders-value" / "1.avsc").read_text()
CANARY = "canary-registry-pw-7f3a"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    setup = SecureSetup(tmp_path_factory.mktemp("registry-tls"))
    setup.prepare()
    return setup


@pytest.fixture
def registry(tls: SecureSetup) -> Iterator[RegistryServer]:
    server = RegistryServer(tls.broker_pem, tls.broker_pem, {"sr-user": CANARY})
    server.start()
    server.register("orders-value", V1)
    yield server
    server.stop()


def _config(tls: SecureSetup, url: str, auth: str = f"sr-user:{CANARY}", **extra: str) -> object:
    return parse_pipeline({"name": "p", "topic": "t", "value": {"subject": "orders-value", "registry": {
        "url": url, "basic.auth.user.info": auth, "ssl.ca.location": str(tls.ca_file), **extra}}}, Path("p.yaml"))


def test_versions_and_ids_resolve_over_https_with_basic_auth(tls: SecureSetup, registry: RegistryServer) -> None:
    source = source_for(_config(tls, registry.url))  # type: ignore[arg-type]
    assert list(source.versions("orders-value")) == [1]
    assert json.loads(source.versions("orders-value")[1]) == json.loads(V1)
    assert source.by_id(1) == source.versions("orders-value")[1]
    assert source.by_id(99) is None  # a 404 is "unknown", not a failure
    assert ("GET", "/subjects/orders-value/versions", 200) in registry.requests
    assert registry.ids_requested() == [1, 99]


def test_refused_credentials_are_not_a_missing_subject(tls: SecureSetup, registry: RegistryServer) -> None:
    source = source_for(_config(tls, registry.url, auth="sr-user:wrong-" + CANARY))  # type: ignore[arg-type]
    with pytest.raises(SchemaError) as caught:
        source.versions("orders-value")
    assert str(caught.value) == (f"schema registry at {registry.url} refused the credentials (401 Unauthorized); "
                                 "check value.registry.basic.auth.user.info (user:password)")
    with pytest.raises(SchemaError, match="refused the credentials"):
        source.by_id(1)
    assert registry.requests[-1][2] == 401


def test_an_unreachable_registry_and_an_untrusted_certificate(tls: SecureSetup, tmp_path: Path) -> None:
    server = RegistryServer(tls.broker_pem, tls.broker_pem, {"sr-user": CANARY})
    url = server.start()
    server.stop()  # nothing listens on its port any more
    source = source_for(_config(tls, url, **{"max.retries": "1", "retries.wait.ms": "10"}))  # type: ignore[arg-type]
    with pytest.raises(SchemaError) as caught:
        source.versions("orders-value")
    assert str(caught.value).startswith(f"schema registry at {url} did not answer after 2 attempts (ConnectError: ")
    assert str(caught.value).endswith("; check value.registry.url and that the registry runs")

    other = SecureSetup(tmp_path / "other-ca")
    other.prepare()
    served = RegistryServer(tls.broker_pem, tls.broker_pem, {"sr-user": CANARY})
    try:
        url = served.start()
        untrusted = source_for(_config(other, url, **{"max.retries": "0"}))  # type: ignore[arg-type]
        with pytest.raises(SchemaError, match=f"schema registry at {url}: TLS certificate not trusted .*"
                                              "value.registry.ssl.ca.location"):
            untrusted.versions("orders-value")
    finally:
        served.stop()


def test_known_ids_need_no_registry_unknown_ones_fail_naming_it(tls: SecureSetup, registry: RegistryServer) -> None:
    config = _config(tls, registry.url, **{"max.retries": "1", "retries.wait.ms": "10"})
    resolver = SchemaResolver(config, source_for(config))  # type: ignore[arg-type]
    asked = len(registry.requests)
    registry.stop()
    assert resolver.refresh({1}) is False  # an id the spec holds needs no registry
    assert sorted(resolver.spec.writer_schemas) == [1]
    with pytest.raises(SchemaError, match=f"schema registry at {registry.url} did not answer after 2 attempts"):
        resolver.refresh({2})
    assert len(registry.requests) == asked  # the stopped server saw nothing
    assert CANARY not in repr(resolver.spec.writer_schemas)
