"""One security section, two Kafka clients; and what is secret.

A pipeline's `kafka:` section is written the way confluent-kafka (librdkafka) users write it: `security.protocol`,
`sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`, `ssl.certificate.location`,
`ssl.key.location`, ... Two clients read it:

* confluent-kafka (`librdkafka_settings`): every setting except the Java-only ones (JAVA_ONLY, which librdkafka
  refuses when a client is made), plus what it can take from them: the user name and password of a PLAIN or SCRAM
  `sasl.jaas.config`, the CA of a PEM truststore, the key and certificates of a PEM keystore.
* Spark's Kafka source, the Java client (`java_settings`, given to Spark as `kafka.<key>`): every setting except
  librdkafka's own (LIBRDKAFKA_ONLY), plus the Java spelling of them: `sasl.jaas.config` (ScramLoginModule or
  PlainLoginModule with the user name and password; OAuthBearerLoginModule for `sasl.oauthbearer.method: oidc`),
  a PEM truststore of the CA (`ssl.truststore.type: PEM` with `ssl.truststore.location`, the CA file), a PEM
  keystore with the client's key and certificate chain (`ssl.keystore.type: PEM`, `ssl.keystore.key`,
  `ssl.keystore.certificate.chain`, read on the driver and given inline). A Java setting written in the section
  wins over the derived one.

Secret values (passwords, keys, JAAS lines, basic-auth user info) are remembered when a config is loaded, and
`mask` replaces them with `***` in any text: the command line runs every message it prints through it.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path

from ingestion.errors import ConfigError, one_line

# Setting names whose values are secret (case-insensitive), in every section that holds client settings.
SECRET_KEY = re.compile(r"password|secret|jaas|token|credentials|key\.pem|keystore\.key|ssl_key|private\.key|"
                        r"basic\.auth\.user\.info|oauthbearer\.config", re.I)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_CALLBACK = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"

# Settings only the Java client knows: librdkafka refuses them ("No such configuration property", or "Java JAAS
# configuration is not supported" / "Java TrustStores are not supported").
JAVA_ONLY = frozenset({
    "sasl.jaas.config", "sasl.client.callback.handler.class", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.clock.skew.seconds", "sasl.oauthbearer.expected.audience", "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.header.urlencode", "sasl.oauthbearer.jwt.retriever.class",
    "sasl.oauthbearer.jwt.validator.class", "ssl.keystore.type", "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.protocol", "ssl.enabled.protocols", "ssl.provider", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.engine.factory.class", "security.providers",
    "default.api.timeout.ms", "max.poll.records", "client.dns.lookup", "exclude.internal.topics", "metric.reporters",
    "metrics.num.samples", "metrics.recording.level", "metrics.sample.window.ms", "auto.include.jmx.reporter",
    "receive.buffer.bytes", "send.buffer.bytes",
})
JAVA_ONLY_PREFIXES = ("ssl.truststore.", "sasl.login.", "sasl.oauthbearer.jwks.endpoint.")

# Settings only librdkafka knows, or that the Java client gets in its own spelling (see java_settings).
LIBRDKAFKA_ONLY = frozenset({
    "sasl.username", "sasl.password", "sasl.mechanisms", "sasl.kerberos.principal", "sasl.kerberos.keytab",
    "sasl.oauthbearer.config", "enable.sasl.oauthbearer.unsecure.jwt", "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope",
    "sasl.oauthbearer.extensions", "sasl.oauthbearer.grant.type", "sasl.oauthbearer.metadata.authentication.type",
    "ssl.ca.location", "ssl.ca.pem", "ssl.ca.certificate.stores", "ssl.crl.location", "ssl.certificate.location",
    "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem", "enable.ssl.certificate.verification",
    "ssl.providers", "ssl.engine.location", "ssl.engine.id", "ssl.curves.list", "ssl.sigalgs.list",
    "https.ca.location", "https.ca.pem",
    "debug", "log_level", "log.connection.close", "statistics.interval.ms", "api.version.request",
    "broker.address.family", "socket.keepalive.enable", "socket.nagle.disable", "enable.partition.eof",
})
LIBRDKAFKA_ONLY_PREFIXES = ("sasl.oauthbearer.assertion.", "sasl.oauthbearer.client.credentials.")

# librdkafka's producer settings: the project's consumers and admin clients are given none of them.
PRODUCER_ONLY = frozenset({
    "transactional.id", "transaction.timeout.ms", "enable.idempotence", "enable.gapless.guarantee",
    "queue.buffering.max.messages", "queue.buffering.max.kbytes", "queue.buffering.max.ms", "linger.ms",
    "message.send.max.retries", "retries", "queue.buffering.backpressure.threshold",
    "compression.codec", "compression.type", "batch.num.messages", "batch.size", "delivery.report.only.error",
    "sticky.partitioning.linger.ms", "acks", "request.required.acks", "request.timeout.ms", "message.timeout.ms",
    "delivery.timeout.ms", "partitioner", "compression.level",
})

# [proto://]host:port, [IPv6]:port (a zone id too)
_HOST_PORT = re.compile(r"(?i:(?:PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL)://)?(\[[0-9A-Fa-f:.%\w]+\]|[A-Za-z0-9_.-]+)"
                        r":([0-9]{1,5})")
_QUIET = logging.getLogger("ingestion.security.librdkafka")  # librdkafka's warnings while probing settings
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
_FILE_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
              "ssl.truststore.location")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+?))(?=\s|;|$)')

_SECRETS: set[str] = set()


@functools.cache
def _client_settings(file: str) -> frozenset[str]:
    return frozenset((resources.files("ingestion") / "data" / file).read_text().split())


def librdkafka_names() -> frozenset[str]:
    """librdkafka's setting names (2.15's CONFIGURATION.md)."""
    return _client_settings("librdkafka-properties.txt")


def java_names() -> frozenset[str]:
    """The setting names of Kafka's Java clients (consumer, producer and admin of kafka-clients 3.9 and 4.1:
    `ConsumerConfig.configNames()` and its siblings)."""
    return _client_settings("java-client-properties.txt")


def known_settings() -> frozenset[str]:
    """Every setting name librdkafka or Kafka's Java clients accept."""
    return librdkafka_names() | java_names()


def unknown_setting(key: str) -> str | None:
    """Why `key` of a `kafka:` section is no client's setting (with the closest names), or None when a client
    knows it: found at load, instead of as librdkafka's 'No such configuration property' when a client is made."""
    if key in known_settings():
        return None
    close = difflib.get_close_matches(key, sorted(known_settings()), n=3, cutoff=0.75)
    return ("neither librdkafka nor Kafka's Java client has this setting" +
            (f"; closest: {', '.join(close)}" if close else ""))


def is_secret(key: str) -> bool:
    return bool(SECRET_KEY.search(key))


def remember(values: Iterable[str]) -> None:
    """Secret values to mask wherever this process prints text (see `mask`): as they are, as a JAAS line quotes
    them, and as py4j's debug log (`ingest -v`) writes the strings it sends to the JVM."""
    for value in values:
        if len(value) >= 4:
            for form in (value, _escape(value)):
                _SECRETS.add(form)
                _SECRETS.add(form.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n"))


def secret_values(settings: Mapping[str, str]) -> list[str]:
    """The values of every secret-looking setting, and their parts (`user:password`, a JAAS line's password, the
    user info of a URL)."""
    found: list[str] = []
    for key, value in settings.items():
        for userinfo in re.findall(r"(?<=://)[^/@\s]+(?=@)", value) if key == "url" else []:
            found += [userinfo, userinfo.partition(":")[2]]
        if not is_secret(key):
            continue
        found.append(value)
        if key == "basic.auth.user.info" and ":" in value:
            found.append(value.split(":", 1)[1])
        if key == "sasl.jaas.config":
            found += [v for k, v in jaas_options(value).items() if is_secret(k) or k == "clientSecret"]
    return found


def redact_url(url: str) -> str:
    """A URL with its user info (`https://user:password@host`) replaced by '***'."""
    return re.sub(r"(?<=://)[^/@\s]+@", "***@", url)


def mask(text: str) -> str:
    """`text` with every remembered secret value replaced by '***'."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "***")
    return text


def java_only(key: str, settings: Mapping[str, str]) -> bool:
    """True for a setting librdkafka does not take. `ssl.keystore.location` and `ssl.keystore.password` are
    librdkafka's too (a PKCS#12 file), unless `ssl.keystore.type` names another format (JKS, PEM)."""
    if key in ("ssl.keystore.location", "ssl.keystore.password"):
        return settings.get("ssl.keystore.type", "PKCS12").upper() != "PKCS12"
    return (key in JAVA_ONLY or key.startswith(JAVA_ONLY_PREFIXES)
            or (key in java_names() and key not in librdkafka_names()))  # fetch.max.wait.ms, say


def librdkafka_only(key: str) -> bool:
    return (key in LIBRDKAFKA_ONLY or key.startswith(LIBRDKAFKA_ONLY_PREFIXES)
            or (key in librdkafka_names() and key not in java_names()))  # fetch.wait.max.ms, say


def mechanism(settings: Mapping[str, str]) -> str | None:
    value = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")
    return value.strip().upper() if value else None


def protocol(settings: Mapping[str, str]) -> str:
    return settings.get("security.protocol", "PLAINTEXT").strip().upper()


def username(settings: Mapping[str, str]) -> str | None:
    """The SASL user name, from `sasl.username` or a JAAS line."""
    return settings.get("sasl.username") or jaas_options(settings.get("sasl.jaas.config", "")).get("username")


def librdkafka_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings a confluent-kafka client takes."""
    out = {k: v for k, v in settings.items() if not java_only(k, settings)}
    jaas = jaas_options(settings.get("sasl.jaas.config", ""))
    if mechanism(settings) in LOGIN_MODULES and "username" in jaas:
        out.setdefault("sasl.username", jaas["username"])
        out.setdefault("sasl.password", jaas.get("password", ""))
    if settings.get("ssl.truststore.type", "").upper() == "PEM" and "ssl.ca.location" not in settings:
        if "ssl.truststore.location" in settings:
            out["ssl.ca.location"] = settings["ssl.truststore.location"]
        elif "ssl.truststore.certificates" in settings:
            out.setdefault("ssl.ca.pem", settings["ssl.truststore.certificates"])
    if settings.get("ssl.keystore.type", "").upper() == "PEM" and "ssl.key.location" not in settings:
        if "ssl.keystore.location" in settings:  # one file with the key and the certificate chain
            out["ssl.key.location"] = out["ssl.certificate.location"] = settings["ssl.keystore.location"]
        elif "ssl.keystore.key" in settings:
            out.setdefault("ssl.key.pem", settings["ssl.keystore.key"])
            out.setdefault("ssl.certificate.pem", settings.get("ssl.keystore.certificate.chain", ""))
    if settings.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def java_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings Spark's Kafka source (the Java client) takes, without the `kafka.` prefix. Raises ConfigError
    naming the key when a file it names cannot be read."""
    out = {k: v for k, v in settings.items() if not librdkafka_only(k)}
    if "security.protocol" in settings:
        out["security.protocol"] = protocol(settings)
    chosen = mechanism(settings)
    if chosen:
        out["sasl.mechanism"] = chosen
    if "sasl.jaas.config" not in settings:
        out.update(_derived_login(settings, chosen))
    if not any(k in settings for k in ("ssl.truststore.location", "ssl.truststore.certificates")):
        out.update(_derived_truststore(settings))
    if not any(k in settings for k in ("ssl.keystore.key", "ssl.keystore.type")):
        keystore = _derived_keystore(settings)
        if "ssl.keystore.key" in keystore:
            out.pop("ssl.key.password", None)  # the key is handed over decrypted (see pkcs8)
        out.update(keystore)
    if settings.get("ssl.endpoint.identification.algorithm", "").lower() == "none":
        out["ssl.endpoint.identification.algorithm"] = ""  # the Java client's spelling of "no host name check"
    return out


def check(settings: Mapping[str, str]) -> str | None:
    """What is contradictory or missing in a `kafka:` section, as a message naming the key; None when nothing."""
    given = protocol(settings)
    if given not in PROTOCOLS:
        return f"key 'kafka.security.protocol' must be one of {list(PROTOCOLS)}, got {settings['security.protocol']!r}"
    chosen = mechanism(settings)
    if chosen is not None and chosen not in MECHANISMS:
        return f"key 'kafka.sasl.mechanism' must be one of {list(MECHANISMS)}, got {chosen!r}"
    servers = settings.get("bootstrap.servers")
    if servers is not None and not _servers_ok(servers):
        return (f"key 'kafka.bootstrap.servers' must be host:port pairs (a port up to 65535, as PLAINTEXT://host:port "
                f"too) separated by commas, such as broker1:9092,broker2:9092, got {servers!r}")
    credentials = [k for k in ("sasl.username", "sasl.password", "sasl.jaas.config", "sasl.mechanism",
                               "sasl.mechanisms") if k in settings]
    if credentials and not given.startswith("SASL_"):  # the default, PLAINTEXT, too: they would be ignored
        unset = "" if "security.protocol" in settings else " (unset: the default)"
        return (f"key 'kafka.{credentials[0]}' is set, but kafka.security.protocol is {given}{unset}, which does not "
                "use SASL; set it to SASL_SSL or SASL_PLAINTEXT")
    if given.startswith("SASL_"):
        kerberos = any(k.startswith("sasl.kerberos.") for k in settings) or \
            "Krb5LoginModule" in settings.get("sasl.jaas.config", "")
        if chosen is None and not kerberos:  # both clients would try Kerberos (GSSAPI), their default, and fail
            return (f"key 'kafka.sasl.mechanism' is needed with kafka.security.protocol {given}: set it to one of "
                    f"{[m for m in MECHANISMS if m != 'GSSAPI']} (or GSSAPI for Kerberos)")
        if ("sasl.username" in settings) != ("sasl.password" in settings):
            missing = "sasl.password" if "sasl.username" in settings else "sasl.username"
            return f"key 'kafka.{missing}' is missing: kafka.sasl.username and kafka.sasl.password go together"
        if chosen in LOGIN_MODULES and "sasl.username" not in settings and "sasl.jaas.config" not in settings:
            return (f"kafka.sasl.mechanism {chosen} needs kafka.sasl.username and kafka.sasl.password (or "
                    "kafka.sasl.jaas.config)")
    for one, other in (("ssl.certificate.location", "ssl.key.location"), ("ssl.certificate.pem", "ssl.key.pem")):
        if (one in settings) != (other in settings):
            missing = other if one in settings else one
            return f"key 'kafka.{missing}' is missing: kafka.{one} and kafka.{other} go together"
    for key in _FILE_KEYS:
        path = settings.get(key)
        if path and path != "probe" and not os.path.exists(path):
            return f"key 'kafka.{key}' names {path!r}, which does not exist"
    return _librdkafka_refusal(settings)


def _servers_ok(servers: str) -> bool:
    """Whether a bootstrap list is host:port pairs both clients read (empty items between commas are skipped)."""
    found = [_HOST_PORT.fullmatch(item.strip()) for item in servers.split(",") if item.strip()]
    return bool(found) and all(m is not None and int(m.group(2)) <= 65535 for m in found)


def _librdkafka_refusal(settings: Mapping[str, str]) -> str | None:
    """What librdkafka refuses among the client's settings (a value that is no number, out of range, not a
    boolean), as a message naming the key; None when it takes them. A consumer is made and closed with no broker to
    reach (about 2 ms); the security settings, checked above and read from files, are left out."""
    from confluent_kafka import Consumer, KafkaException

    probe = {k: v for k, v in librdkafka_settings(settings).items()  # as the consumer is given them
             if not k.startswith(("ssl.", "sasl.", "security.")) and k != "bootstrap.servers"
             and k not in PRODUCER_ONLY}
    try:
        Consumer({"group.id": "ingest-check", **probe}, logger=_QUIET).close()
    except (KafkaException, ValueError, TypeError) as exc:
        error = exc.args[0] if exc.args else exc
        reason = " ".join((error.str() if hasattr(error, "str") else str(error)).split())
        named = next((n for n in sorted(settings, key=len, reverse=True)
                      if re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])", reason)), None)
        if named is None:
            return f"key 'kafka' holds a setting librdkafka refuses: {reason}"
        value = "'***'" if is_secret(named) else repr(settings[named])
        return f"key 'kafka.{named}' is refused by librdkafka ({reason}), got {value}"
    return None


def jaas_line(module: str, options: Mapping[str, str]) -> str:
    """A JAAS configuration line: `<module> required key="value" ...;` with quotes and backslashes escaped."""
    return " ".join([module, "required", *(f'{k}="{_escape(v)}"' for k, v in options.items())]) + ";"


def jaas_options(line: str) -> dict[str, str]:
    """The options of a JAAS configuration line (`username`, `password`, ...), unescaped."""
    found = re.match(r"\s*\S+\s+(?:required|requisite|sufficient|optional)\s+(.*)", line, re.S)
    if found is None:
        return {}
    return {m[1]: re.sub(r"\\(.)", r"\1", m[2]) if m[2] is not None else m[3]
            for m in _JAAS_OPTION.finditer(found[1])}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _derived_login(settings: Mapping[str, str], chosen: str | None) -> dict[str, str]:
    """The Java login settings for librdkafka's credentials: PLAIN and SCRAM from the user name and password,
    OAUTHBEARER from `sasl.oauthbearer.method: oidc` and its client id, secret, scope and extensions."""
    if chosen in LOGIN_MODULES and "sasl.username" in settings:
        return {"sasl.jaas.config": jaas_line(LOGIN_MODULES[chosen], {"username": settings["sasl.username"],
                                                                       "password": settings.get("sasl.password", "")})}
    if chosen == "OAUTHBEARER" and settings.get("sasl.oauthbearer.method", "").lower() == "oidc":
        options = {"clientId": settings.get("sasl.oauthbearer.client.id", ""),
                   "clientSecret": settings.get("sasl.oauthbearer.client.secret", "")}
        if settings.get("sasl.oauthbearer.scope"):
            options["scope"] = settings["sasl.oauthbearer.scope"]
        for pair in filter(None, settings.get("sasl.oauthbearer.extensions", "").split(",")):
            name, _, value = pair.partition("=")
            options[f"extension_{name.strip()}"] = value.strip()
        derived = {"sasl.jaas.config": jaas_line(OAUTH_MODULE, options)}
        if "sasl.login.callback.handler.class" not in settings:
            derived["sasl.login.callback.handler.class"] = OAUTH_CALLBACK
        return derived
    return {}


def _read(key: str, path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"key 'kafka.{key}' names {path!r}, which cannot be read ({exc.strerror})") from None


def _derived_truststore(settings: Mapping[str, str]) -> dict[str, str]:
    """The Java truststore of librdkafka's CA settings: the PEM file itself (`ssl.ca.location`, read by the Java
    client wherever it runs, as a JKS truststore would be), or the certificates inline (`ssl.ca.pem`, or the
    certificate files of an `ssl.ca.location` folder, which the Java client cannot read as one store). `probe` is
    the system's CAs, which the Java client uses by default too."""
    if settings.get("ssl.ca.pem"):
        return {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": settings["ssl.ca.pem"]}
    location = settings.get("ssl.ca.location")
    if not location or location == "probe":
        return {}
    if os.path.isdir(location):
        texts = [_read("ssl.ca.location", str(f)) for f in sorted(Path(location).iterdir()) if f.is_file()]
        found = "".join(t for t in texts if "-----BEGIN CERTIFICATE-----" in t)
        return {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": found} if found else {}
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": location}


def _derived_keystore(settings: Mapping[str, str]) -> dict[str, str]:
    """The Java keystore of a client certificate: PEM with the certificate chain and a PKCS#8 key, or librdkafka's
    PKCS#12 keystore file."""
    cert = settings.get("ssl.certificate.pem") or (
        _read("ssl.certificate.location", settings["ssl.certificate.location"])
        if "ssl.certificate.location" in settings else None)
    key = settings.get("ssl.key.pem") or (
        _read("ssl.key.location", settings["ssl.key.location"]) if "ssl.key.location" in settings else None)
    if cert and key:
        chain = "".join(re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\s*", cert, re.S))
        return {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain or cert,
                "ssl.keystore.key": pkcs8(key, settings.get("ssl.key.password"))}
    if "ssl.keystore.location" in settings:
        return {"ssl.keystore.type": "PKCS12"}
    return {}


def pkcs8(key: str, password: str | None) -> str:
    """The private key of a PEM text as an unencrypted PKCS#8 PEM, the form Spark's Java client reads: Kafka's
    3.x client with Java 17 reads no PBES2-encrypted key (what OpenSSL 3 and `cryptography` write; 'PBES2
    SecretKeyFactory not available'), nor the traditional 'RSA PRIVATE KEY' / 'EC PRIVATE KEY' forms librdkafka
    also takes. The key is decrypted in memory on the driver and handed to the Java client only as
    `ssl.keystore.key`, a setting Kafka's client never prints."""
    plain = re.search(r"-----BEGIN PRIVATE KEY-----.*?-----END PRIVATE KEY-----\s*", key, re.S)
    if plain:
        remember([plain[0], plain[0].strip()])
        return plain[0]
    from cryptography.hazmat.primitives import serialization

    block = re.search(r"-----BEGIN ([A-Z ]*PRIVATE KEY)-----.*?-----END \1-----\s*", key, re.S)
    if block is None:
        raise ConfigError("key 'kafka.ssl.key.location' (or ssl.key.pem) holds no PEM private key")
    try:
        loaded = serialization.load_pem_private_key(block[0].encode(), password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        reason = one_line(exc)
        raise ConfigError(f"the private key of kafka.ssl.key.location cannot be read ({reason}); is "
                          "kafka.ssl.key.password right?") from None
    text = loaded.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    remember([text, text.strip()])
    return text
