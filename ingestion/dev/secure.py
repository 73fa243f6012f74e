"""The secured side of the local development broker (`ingest kafka start --secure`): TLS material, users, ACLs.

Everything is generated in the broker's folder the first time and kept afterwards:

* `tls/ca.pem` and `tls/ca.key`: a throw-away certificate authority; `tls/broker.pem`: the broker's key (PKCS#8)
  and certificate chain, valid for 127.0.0.1 and localhost, so both clients verify the host name.
* `credentials/<user>` (mode 0600): the passwords of `admin` (super user: the broker itself and the tests'
  administration) and `ingest` (the pipeline user); SCRAM-SHA-256 and SCRAM-SHA-512 credentials are written into
  the metadata when the storage is formatted (`--add-scram`), PLAIN ones into the listeners' JAAS settings.

Listeners, all on 127.0.0.1: SASL_SSL (the bootstrap address), SASL_PLAINTEXT, SSL with client certificates
required (the principal is the certificate's CN), and the KRaft controller in plaintext. Authorization is KRaft's
StandardAuthorizer: nothing is allowed without an ACL, except to the super users.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISMS = (*SCRAM_MECHANISMS, "PLAIN")
LISTENERS = ("SASL_SSL", "SASL_PLAINTEXT", "SSL")  # the client listeners, the first one is the bootstrap address
ADMIN, PIPELINE_USER = "admin", "ingest"
# The controller listener is plaintext on loopback; its principal (ANONYMOUS) must be a super user for the broker
# and the controller of this one node to talk to each other.
SUPER_USERS = (f"User:{ADMIN}", "User:ANONYMOUS")


@dataclass(frozen=True)
class SecureSetup:
    """The TLS material, users and listener addresses of one secured broker folder."""

    home: Path

    @property
    def tls(self) -> Path:
        return self.home / "tls"

    @property
    def ca_file(self) -> Path:
        return self.tls / "ca.pem"

    @property
    def broker_pem(self) -> Path:
        return self.tls / "broker.pem"

    @property
    def listeners_file(self) -> Path:
        return self.home / "listeners.json"

    def password(self, user: str) -> str:
        return (self.home / "credentials" / user).read_text().strip()

    def listeners(self) -> dict[str, str]:
        """Listener name -> address of the last start."""
        if not self.listeners_file.is_file():
            return {}
        return dict(json.loads(self.listeners_file.read_text()))

    def prepare(self) -> None:
        """The CA, the broker's certificate and the built-in users' passwords, made once."""
        for user in (ADMIN, PIPELINE_USER):
            file = self.home / "credentials" / user
            if not file.is_file():
                _write_private(file, secrets.token_hex(16))
        if not self.broker_pem.is_file():
            ca_key, ca_cert = _new_ca()
            _write_private(self.tls / "ca.key", _key_pem(ca_key))
            self.ca_file.write_bytes(_cert_pem(ca_cert))
            key, cert = _issue(ca_key, ca_cert, "kafka-broker", server=True)
            _write_private(self.broker_pem, _key_pem(key) + _cert_pem(cert).decode() + _cert_pem(ca_cert).decode())

    def format_arguments(self) -> list[str]:
        """`kafka-storage format` arguments that create the SCRAM credentials of the built-in users."""
        args: list[str] = []
        for user in (ADMIN, PIPELINE_USER):
            for mechanism in SCRAM_MECHANISMS:
                args += ["--add-scram", f"{mechanism}=[name={user},password={self.password(user)}]"]
        return args

    def properties(self, ports: Mapping[str, int], controller_port: int) -> list[str]:
        """The broker settings of the secured listeners, the authorizer and the super users."""
        plain_users = " ".join(f'user_{u}="{self.password(u)}"' for u in (ADMIN, PIPELINE_USER))
        lines = [
            "listeners=" + ",".join([*(f"{n}://127.0.0.1:{ports[n]}" for n in LISTENERS),
                                     f"CONTROLLER://127.0.0.1:{controller_port}"]),
            "advertised.listeners=" + ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in LISTENERS),
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,"
            "CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            "sasl.enabled.mechanisms=" + ",".join(MECHANISMS),
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.broker_pem}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.ca_file}",
            "listener.name.ssl.ssl.client.auth=required",
            # The principal of a client certificate is its CN (User:<CN>), as most clusters map it.
            "ssl.principal.mapping.rules=RULE:^CN=([^,]+).*$/$1/,DEFAULT",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found=false",
            "super.users=" + ";".join(SUPER_USERS),
        ]
        for listener in ("sasl_ssl", "sasl_plaintext"):
            login = f'username="{ADMIN}" password="{self.password(ADMIN)}" ' if listener == "sasl_plaintext" else ""
            lines.append(f"listener.name.{listener}.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
                         f"PlainLoginModule required {login}{plain_users};")
            for mechanism in SCRAM_MECHANISMS:
                lines.append(f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config="
                             "org.apache.kafka.common.security.scram.ScramLoginModule required;")
        return lines

    def client_settings(self, user: str = ADMIN, *, password: str | None = None, listener: str = "SASL_SSL",
                        mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
        """confluent-kafka settings for `user` on one of the listeners (librdkafka's keys, as a pipeline's
        `kafka:` section holds them)."""
        settings: dict[str, Any] = {"bootstrap.servers": self.listeners()[listener], "security.protocol": listener}
        if listener.startswith("SASL"):
            settings.update({"sasl.mechanism": mechanism, "sasl.username": user,
                             "sasl.password": self.password(user) if password is None else password})
        if listener.endswith("SSL"):
            settings["ssl.ca.location"] = str(self.ca_file)
        return settings

    def client_certificate(self, name: str, *, key_password: str | None = None,
                           pkcs8: bool = True) -> tuple[Path, Path]:
        """A client certificate for the SSL listener (principal User:<name>), signed by the CA: (certificate
        file, key file). The key is encrypted with `key_password` when given; `pkcs8=False` writes it in the
        traditional (PKCS#1 'RSA PRIVATE KEY') form instead of PKCS#8."""
        from cryptography.hazmat.primitives import serialization

        ca_key = serialization.load_pem_private_key((self.tls / "ca.key").read_bytes(), None)
        ca_cert = _load_cert(self.ca_file.read_bytes())
        key, cert = _issue(ca_key, ca_cert, name, server=False)
        folder = self.tls / "clients"
        cert_file, key_file = folder / f"{name}.crt", folder / f"{name}.key"
        folder.mkdir(parents=True, exist_ok=True)
        cert_file.write_bytes(_cert_pem(cert) + _cert_pem(ca_cert))
        _write_private(key_file, _key_pem(key, key_password, pkcs8=pkcs8))
        return cert_file, key_file


def describe(setup: SecureSetup) -> str:
    """What a user needs to know to point a pipeline at the secured broker (no password: where to read it)."""
    listeners = setup.listeners()
    return "\n".join([
        "listeners: " + ", ".join(f"{name} {address}" for name, address in listeners.items()),
        f"users: {ADMIN} (super user), {PIPELINE_USER} (every topic; consumer groups ingest-*); passwords in "
        f"{setup.home / 'credentials'}/",
        "a pipeline's kafka: section for it (export INGEST_KAFKA_PASSWORD=$(cat "
        f"{setup.home / 'credentials' / PIPELINE_USER})):",
        "kafka:",
        f"  bootstrap.servers: {listeners.get('SASL_SSL', '')}",
        "  security.protocol: SASL_SSL",
        "  sasl.mechanism: SCRAM-SHA-512",
        f"  sasl.username: {PIPELINE_USER}",
        "  sasl.password: ${INGEST_KAFKA_PASSWORD}",
        f"  ssl.ca.location: {setup.ca_file}",
    ])


def add_user(admin: Any, user: str, password: str, mechanisms: Iterable[str] = SCRAM_MECHANISMS) -> None:
    """Create or update a SCRAM user through an admin client of a super user."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    for mechanism in mechanisms:  # one request per mechanism: Kafka refuses two changes of a user in one
        info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 4096)
        upsert = UserScramCredentialUpsertion(user, info, password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)


def grant(admin: Any, principal: str, resource: str, name: str, operations: Iterable[str], *,
          prefixed: bool = False) -> None:
    """Allow `principal` (User:<name>) the `operations` (READ, WRITE, DESCRIBE, CREATE, ALL, ...) on a resource
    (TOPIC, GROUP, CLUSTER) named `name` (or every name starting with it, `prefixed`)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    bindings = [AclBinding(ResourceType[resource], name, pattern, principal, "*", AclOperation[op],
                           AclPermissionType.ALLOW) for op in operations]
    for future in admin.create_acls(bindings).values():
        future.result(30)


def default_acls(admin: Any) -> None:
    """The pipeline user's rights on the development broker: every topic (read, write, create) and the consumer
    groups whose names start with `ingest-` (the pipelines' default groups)."""
    grant(admin, f"User:{PIPELINE_USER}", "TOPIC", "*", ("READ", "WRITE", "DESCRIBE", "CREATE"))
    grant(admin, f"User:{PIPELINE_USER}", "GROUP", "ingest-", ("READ", "DESCRIBE"), prefixed=True)


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _new_ca() -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ingest development CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _issue(ca_key: Any, ca_cert: Any, common_name: str, *, server: bool) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
               .not_valid_after(now + dt.timedelta(days=3650))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                     else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _key_pem(key: Any, password: str | None = None, *, pkcs8: bool = True) -> str:
    from cryptography.hazmat.primitives import serialization

    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    form = serialization.PrivateFormat.PKCS8 if pkcs8 else serialization.PrivateFormat.TraditionalOpenSSL
    return key.private_bytes(serialization.Encoding.PEM, form, encryption).decode()


def _cert_pem(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def _load_cert(data: bytes) -> Any:
    from cryptography import x509

    return x509.load_pem_x509_certificate(data)
