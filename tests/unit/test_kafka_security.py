"""One `kafka:` section, two clients: what confluent-kafka (librdkafka) and Spark's Java client each get, the checks
a section must pass, and secrets masked wherever they could be shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestion import security
from ingestion.config import parse_pipeline
from ingestion.dev.secure import SecureSetup
from ingestion.errors import ConfigError
from ingestion.kafka import resolve_settings
from ingestion.stream.context import known
from ingestion.stream.source import kafka_options

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _config(kafka: dict[str, str], **extra: object) -> object:
    return parse_pipeline({"name": "p", "topic": "t", "value": {"subject": "s"},
                           "kafka": {"bootstrap.servers": "127.0.0.1:9", **kafka}, **extra}, Path("p.yaml"))


def _ca(tmp_path: Path) -> Path:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return ca


def test_scram_over_tls_gives_each_client_its_spelling(tmp_path: Path) -> None:
    ca = _ca(tmp_path)
    config = _config({"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                      "sasl.password": "pa55", "ssl.ca.location": str(ca), "client.id": "me"})
    assert resolve_settings(config).client == {  # type: ignore[attr-defined]
        "bootstrap.servers": "127.0.0.1:9", "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "pa55", "ssl.ca.location": str(ca), "client.id": "me"}
    options = kafka_options(known(config))  # type: ignore[arg-type]
    kafka = {k: v for k, v in options.items() if k.startswith("kafka.")}
    assert kafka == {
        "kafka.bootstrap.servers": "127.0.0.1:9", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.client.id": "me", "kafka.isolation.level": "read_committed",
        "kafka.fetch.max.wait.ms": "20",
        "kafka.sasl.jaas.config": f'{SCRAM} required username="alice" password="pa55";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(ca)}


@pytest.mark.parametrize(("mechanism", "module"), [("PLAIN", PLAIN), ("SCRAM-SHA-256", SCRAM)])
def test_plain_and_scram_over_plaintext(mechanism: str, module: str) -> None:
    java = security.java_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism.lower(),
                                   "sasl.username": "bob", "sasl.password": "x"})
    assert java == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                    "sasl.jaas.config": f'{module} required username="bob" password="x";'}


def test_quotes_and_backslashes_in_a_password_survive_the_jaas_line() -> None:
    password = 'a"b\\c d;e'
    line = security.java_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                   "sasl.username": "u", "sasl.password": password})["sasl.jaas.config"]
    assert line == f'{PLAIN} required username="u" password="a\\"b\\\\c d;e";'
    assert security.jaas_options(line) == {"username": "u", "password": password}


def test_java_settings_given_by_the_user_win_and_librdkafka_takes_what_it_can_from_them(tmp_path: Path) -> None:
    ca = _ca(tmp_path)
    jaas = f'{SCRAM} required username="carol" password="s3cret";'
    section = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": jaas,
               "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca), "sasl.login.retry.backoff.ms": "50"}
    assert security.java_settings(section) == section
    assert security.librdkafka_settings(section) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
        "sasl.password": "s3cret", "ssl.ca.location": str(ca)}


def test_a_ca_folder_or_pem_text_becomes_inline_certificates(tmp_path: Path) -> None:
    folder = tmp_path / "cas"
    folder.mkdir()
    (folder / "a.pem").write_text("-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n")
    (folder / "b.crt").write_text("-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n")
    (folder / "README").write_text("not a certificate")
    java = security.java_settings({"security.protocol": "SSL", "ssl.ca.location": str(folder)})
    assert java["ssl.truststore.certificates"] == ((folder / "a.pem").read_text() + (folder / "b.crt").read_text())
    assert java["ssl.truststore.type"] == "PEM"
    pem = "-----BEGIN CERTIFICATE-----\nC\n-----END CERTIFICATE-----\n"
    assert security.java_settings({"security.protocol": "SSL", "ssl.ca.pem": pem}) == {
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pem}
    assert security.java_settings({"security.protocol": "SSL", "ssl.ca.location": "probe"}) == {
        "security.protocol": "SSL"}


def test_a_jks_truststore_goes_to_spark_only() -> None:
    section = {"security.protocol": "SSL", "ssl.truststore.location": "/etc/kafka/trust.jks",
               "ssl.truststore.password": "changeit", "ssl.keystore.type": "JKS",
               "ssl.keystore.location": "/etc/kafka/me.jks", "ssl.keystore.password": "changeit",
               "ssl.key.password": "k", "max.poll.records": "10"}
    assert security.librdkafka_settings(section) == {"security.protocol": "SSL", "ssl.key.password": "k"}
    assert security.java_settings(section) == section


def test_a_pkcs12_keystore_is_both_clients_and_typed_for_java() -> None:
    section = {"security.protocol": "SSL", "ssl.keystore.location": "/k/me.p12", "ssl.keystore.password": "pw"}
    assert security.librdkafka_settings(section) == section
    assert security.java_settings(section) == {**section, "ssl.keystore.type": "PKCS12"}


@pytest.mark.parametrize(("pkcs8", "password"), [(True, "kp"), (False, "kp"), (True, None)])
def test_client_certificates_become_a_pem_keystore_with_a_key_java_reads(tmp_path: Path, pkcs8: bool,
                                                                         password: str | None) -> None:
    from cryptography.hazmat.primitives import serialization

    tls = SecureSetup(tmp_path / "broker")
    tls.prepare()
    cert, key = tls.client_certificate("mtls-user", key_password=password, pkcs8=pkcs8)
    section = {"security.protocol": "SSL", "ssl.ca.location": str(tls.ca_file), "ssl.certificate.location": str(cert),
               "ssl.key.location": str(key), "ssl.endpoint.identification.algorithm": "none"}
    if password:
        section["ssl.key.password"] = password
    assert security.librdkafka_settings(section) == section
    java = security.java_settings(section)
    assert set(java) == {"security.protocol", "ssl.truststore.type", "ssl.truststore.location",
                         "ssl.keystore.type", "ssl.keystore.certificate.chain", "ssl.keystore.key",
                         "ssl.endpoint.identification.algorithm"}  # no ssl.key.password: the key is decrypted
    assert java["ssl.endpoint.identification.algorithm"] == ""
    assert java["ssl.keystore.type"] == "PEM"
    assert java["ssl.keystore.certificate.chain"] == cert.read_text()
    assert java["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    original = serialization.load_pem_private_key(key.read_bytes(), password.encode() if password else None)
    given = serialization.load_pem_private_key(java["ssl.keystore.key"].encode(), None)
    assert given.private_numbers() == original.private_numbers()  # type: ignore[union-attr]
    # `ingest -v` logs py4j's commands, the key among them with its newlines escaped: masked whole.
    escaped = java["ssl.keystore.key"].replace("\n", "\\n")
    assert security.mask(f"Command to send: c\no12\noption\nskafka.ssl.keystore.key\ns{escaped}\ne") == \
        "Command to send: c\no12\noption\nskafka.ssl.keystore.key\ns***\ne"
    if password:
        with pytest.raises(ConfigError, match=r"cannot be read .*ssl\.key\.password right"):
            security.java_settings({**section, "ssl.key.password": "wrong"})


def test_oauthbearer_oidc_is_derived_and_a_jaas_line_passes_through() -> None:
    section = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
               "sasl.oauthbearer.client.id": "app", "sasl.oauthbearer.client.secret": "cs",
               "sasl.oauthbearer.scope": "kafka", "sasl.oauthbearer.extensions": "logicalCluster=lkc-1",
               "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}
    assert security.librdkafka_settings(section) == section
    assert security.java_settings(section) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.jaas.config": f'{security.OAUTH_MODULE} required clientId="app" clientSecret="cs" scope="kafka" '
                            'extension_logicalCluster="lkc-1";',
        "sasl.login.callback.handler.class": security.OAUTH_CALLBACK}
    own = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
           "sasl.jaas.config": f'{security.OAUTH_MODULE} required clientId="a" clientSecret="b";',
           "sasl.login.callback.handler.class": "my.Handler", "sasl.oauthbearer.token.endpoint.url": "https://i/t",
           "sasl.oauthbearer.config": "principal=me", "enable.sasl.oauthbearer.unsecure.jwt": "true"}
    assert security.java_settings(own) == {k: v for k, v in own.items()
                                           if k not in ("sasl.oauthbearer.config",
                                                        "enable.sasl.oauthbearer.unsecure.jwt")}
    assert security.librdkafka_settings(own) == {k: v for k, v in own.items()
                                                 if k not in ("sasl.jaas.config", "sasl.login.callback.handler.class")}


@pytest.mark.parametrize(("section", "message"), [
    ({"security.protocol": "SASL_TLS"}, "key 'kafka.security.protocol' must be one of ['PLAINTEXT', 'SSL', "
                                        "'SASL_PLAINTEXT', 'SASL_SSL'], got 'SASL_TLS'"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-1"},
     "key 'kafka.sasl.mechanism' must be one of ['GSSAPI', 'PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512', "
     "'OAUTHBEARER'], got 'SCRAM-SHA-1'"),
    ({"security.protocol": "SSL", "sasl.username": "u", "sasl.password": "p"},
     "key 'kafka.sasl.username' is set, but kafka.security.protocol is SSL, which does not use SASL; set it to "
     "SASL_SSL or SASL_PLAINTEXT"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
     "key 'kafka.sasl.password' is missing: kafka.sasl.username and kafka.sasl.password go together"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
     "kafka.sasl.mechanism SCRAM-SHA-512 needs kafka.sasl.username and kafka.sasl.password (or "
     "kafka.sasl.jaas.config)"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/x.crt"},
     "key 'kafka.ssl.key.location' is missing: kafka.ssl.certificate.location and kafka.ssl.key.location go "
     "together"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"},
     "key 'kafka.ssl.ca.location' names '/no/such/ca.pem', which does not exist"),
])
def test_contradictory_or_incomplete_sections_are_refused_at_load(section: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(section)
    assert str(caught.value) == f"p.yaml: {message}"


def test_secrets_are_redacted_and_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                      "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "app",
                      "sasl.oauthbearer.client.secret": "canary-oidc-secret", "ssl.keystore.key": "canary-key-text"},
                     value={"subject": "s", "registry": {"url": "https://reg-user:canary-url-pw@registry:8081",
                                                         "basic.auth.user.info": "u:canary-basic-pw"}})
    shown = config.redacted()  # type: ignore[attr-defined]
    assert shown["kafka"]["sasl.oauthbearer.client.secret"] == "***"
    assert shown["kafka"]["ssl.keystore.key"] == "***"
    assert shown["kafka"]["sasl.oauthbearer.client.id"] == "app"
    assert shown["value"]["registry"] == {"url": "https://***@registry:8081", "basic.auth.user.info": "***"}
    text = ("secret canary-oidc-secret, key canary-key-text, url https://reg-user:canary-url-pw@registry:8081, "
            "basic canary-basic-pw, u:canary-basic-pw")
    assert security.mask(text) == text  # parsing a config changes no global state: the loader registers secrets
    security.remember(config.secret_values())  # type: ignore[attr-defined]
    assert security.mask(text) == "secret ***, key ***, url https://***@registry:8081, basic ***, ***"
