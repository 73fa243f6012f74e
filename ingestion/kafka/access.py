"""Kafka refusing this client, as one line that names what was refused and what to do about it.

Both clients report the same refusals differently: librdkafka as error codes (TOPIC_AUTHORIZATION_FAILED in a
topic's metadata or on a fetch, GROUP_AUTHORIZATION_FAILED from the group coordinator, _AUTHENTICATION and _SSL to
the error callback while a request waits), Spark's Java client as exceptions in the query's failure
(TopicAuthorizationException, GroupAuthorizationException, SaslAuthenticationException,
SslAuthenticationException). Each becomes a KafkaAccessError whose message never holds a secret: it names the
user, the mechanism and the resource, never a password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ingestion import security
from ingestion.errors import KafkaAccessError

# librdkafka's codes (confluent_kafka.KafkaError) of the refusals below.
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
SASL_AUTHENTICATION_FAILED = 58
AUTHENTICATION = -169  # _AUTHENTICATION
SSL = -181  # _SSL

_JAVA = re.compile(r"org\.apache\.kafka\.common\.errors\.(TopicAuthorization|GroupAuthorization|ClusterAuthorization|"
                   r"SaslAuthentication|SslAuthentication)Exception: ?([^\n]*)")


def who(settings: Mapping[str, Any]) -> str:
    """The client as Kafka sees it: a SASL user, a client certificate, or an anonymous client."""
    user = security.username(settings)
    if user and security.protocol(settings).startswith("SASL_"):
        return f"user {user!r}"
    if security.protocol(settings) == "SSL" and ("ssl.certificate.location" in settings or
                                                 "ssl.keystore.location" in settings or "ssl.keystore.key" in settings):
        return "the client certificate's principal"
    return "this client (no SASL login: principal ANONYMOUS)"


def _principal(settings: Mapping[str, Any]) -> str:
    user = security.username(settings)
    if user and security.protocol(settings).startswith("SASL_"):
        return f"User:{user}"
    if security.protocol(settings) == "SSL":
        return "User:<the certificate's principal>"
    return "User:ANONYMOUS"


def _where(settings: Mapping[str, Any]) -> str:
    return f"Kafka at {settings.get('bootstrap.servers', '?')}"


def topic_denied(settings: Mapping[str, Any], topic: str, reason: str = "TOPIC_AUTHORIZATION_FAILED",
                 operation: str = "READ") -> KafkaAccessError:
    principal = _principal(settings)
    return KafkaAccessError(
        f"{_where(settings)} denied {who(settings)} access to topic {topic!r} ({reason}): grant {principal} "
        f"{operation} on topic {topic!r} (kafka-acls --add --allow-principal {principal} --operation {operation} "
        f"--topic {topic})", denied="topic", resource=topic)


def group_denied(settings: Mapping[str, Any], group: str,
                 reason: str = "GROUP_AUTHORIZATION_FAILED") -> KafkaAccessError:
    principal = _principal(settings)
    return KafkaAccessError(
        f"{_where(settings)} denied {who(settings)} access to consumer group {group!r} ({reason}): grant "
        f"{principal} READ on group {group!r} (kafka-acls --add --allow-principal {principal} --operation READ "
        f"--group {group}), or set metrics.commitOffsets: false to commit no offsets", denied="group",
        resource=group)


def cluster_denied(settings: Mapping[str, Any], what: str, reason: str) -> KafkaAccessError:
    principal = _principal(settings)
    return KafkaAccessError(f"{_where(settings)} denied {who(settings)} {what} ({reason}): grant {principal} "
                            "the right on the cluster, or have an administrator do it", denied="cluster")


def authentication_failed(settings: Mapping[str, Any], detail: str) -> KafkaAccessError:
    mechanism = security.mechanism(settings) or "GSSAPI"
    return KafkaAccessError(
        f"{_where(settings)} refused to authenticate {who(settings)} with SASL {mechanism}: wrong password, unknown "
        f"user, or a mechanism the broker does not enable; check kafka.sasl.username, kafka.sasl.password and "
        f"kafka.sasl.mechanism (the broker said: {_said(detail)})", denied="authentication")


def tls_failed(settings: Mapping[str, Any], detail: str) -> KafkaAccessError:
    return KafkaAccessError(
        f"TLS handshake with {_where(settings)} failed ({_said(detail)}); check kafka.security.protocol, "
        "kafka.ssl.ca.location (the CA that signed the broker's certificate) and, for a client certificate, "
        "kafka.ssl.certificate.location and kafka.ssl.key.location", denied="tls")


def _said(detail: str) -> str:
    """A client's reason without the broker address prefix and the timing librdkafka appends."""
    text = re.sub(r"^\S+://\S+?/\S+: ", "", detail.strip())
    text = re.sub(r" \(after \d+ms in state \w+\)$", "", text)
    return security.mask(text.splitlines()[0] if text else "no reason given")


def from_error(error: Any, settings: Mapping[str, Any], topic: str | None = None,
               group: str | None = None) -> KafkaAccessError | None:
    """The KafkaAccessError of a librdkafka KafkaError, or None when it is not a refusal."""
    code = error.code()
    if code == TOPIC_AUTHORIZATION_FAILED and topic is not None:
        return topic_denied(settings, topic)
    if code == GROUP_AUTHORIZATION_FAILED and group is not None:
        return group_denied(settings, group)
    if code == CLUSTER_AUTHORIZATION_FAILED:
        return cluster_denied(settings, "an operation on the cluster", "CLUSTER_AUTHORIZATION_FAILED")
    if code in (AUTHENTICATION, SASL_AUTHENTICATION_FAILED):
        return authentication_failed(settings, error.str())
    if code == SSL:
        return tls_failed(settings, error.str())
    return None


def from_java(text: str, settings: Mapping[str, Any], topic: str | None = None,
              group: str | None = None) -> KafkaAccessError | None:
    """The KafkaAccessError of a Java Kafka client's refusal found in a Spark failure's text, or None."""
    found = _JAVA.search(text)
    if found is None:
        return None
    kind, detail = found[1], found[2]
    if kind == "TopicAuthorization":
        named = re.search(r"topics: \[([^\]]+)\]", detail)
        return topic_denied(settings, named[1].split(",")[0].strip() if named else topic or "?",
                            "TopicAuthorizationException")
    if kind == "GroupAuthorization":
        named = re.search(r"group: (\S+)", detail)
        return group_denied(settings, named[1] if named else group or "?", "GroupAuthorizationException")
    if kind == "ClusterAuthorization":
        return cluster_denied(settings, "an operation on the cluster", "ClusterAuthorizationException")
    if kind == "SaslAuthentication":
        return authentication_failed(settings, detail)
    return tls_failed(settings, detail)
