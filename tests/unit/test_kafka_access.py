"""Kafka's refusals as the Java client reports them inside a Spark failure become the same one line as
librdkafka's (the broker-side cases run for real in tests/e2e/test_secured_kafka.py)."""

from __future__ import annotations

from ingestion.kafka import access

SETTINGS = {"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": "canary-access-pw"}

# How Spark's failure text carries the Java client's exception (shortened from a real run).
SPARK_FAILURE = """org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 15.0 failed 1
times, most recent failure: Lost task 1.0 in stage 15.0 (TID 16) (localhost executor driver):
org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access topics: [orders]
\tat org.apache.spark.sql.kafka010.consumer.InternalKafkaConsumer.fetch(KafkaDataConsumer.scala:123)
"""


def test_a_denied_topic_names_the_user_the_topic_and_what_to_grant() -> None:
    refused = access.from_java(SPARK_FAILURE, SETTINGS, "orders", "ingest-orders")
    assert refused is not None and refused.denied == "topic" and refused.resource == "orders"
    assert str(refused) == (
        "Kafka at 127.0.0.1:9093 denied user 'alice' access to topic 'orders' (TopicAuthorizationException): grant "
        "User:alice READ on topic 'orders' (kafka-acls --add --allow-principal User:alice --operation READ --topic "
        "orders)")


def test_a_denied_group_and_a_refused_login() -> None:
    group = access.from_java("org.apache.kafka.common.errors.GroupAuthorizationException: Not authorized to access "
                             "group: ingest-orders", SETTINGS)
    assert group is not None and group.denied == "group" and group.resource == "ingest-orders"
    assert "denied user 'alice' access to consumer group 'ingest-orders'" in str(group)
    assert "or set metrics.commitOffsets: false" in str(group)
    login = access.from_java("java.util.concurrent.ExecutionException: org.apache.kafka.common.errors."
                             "SaslAuthenticationException: Authentication failed during authentication due to invalid "
                             "credentials with SASL mechanism SCRAM-SHA-512", SETTINGS)
    assert login is not None and login.denied == "authentication"
    assert str(login) == (
        "Kafka at 127.0.0.1:9093 refused to authenticate user 'alice' with SASL SCRAM-SHA-512: wrong password, "
        "unknown user, or a mechanism the broker does not enable; check kafka.sasl.username, kafka.sasl.password "
        "and kafka.sasl.mechanism (the broker said: Authentication failed during authentication due to invalid "
        "credentials with SASL mechanism SCRAM-SHA-512)")
    assert "canary-access-pw" not in str(login)


def test_tls_failures_and_other_failures() -> None:
    tls = access.from_java("org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed",
                           {"bootstrap.servers": "h:1", "security.protocol": "SSL"})
    assert tls is not None and tls.denied == "tls"
    assert str(tls).startswith("TLS handshake with Kafka at h:1 failed (SSL handshake failed); check ")
    assert access.from_java("java.lang.OutOfMemoryError: Java heap space", SETTINGS) is None


def test_failure_reason_prefers_our_errors_then_kafkas_refusals() -> None:
    from ingestion.stream.pipeline import failure_reason

    ours = Exception("boom\n  ingestion.errors.DecodeError: topic t partition 0 offset 5: bad\n" + SPARK_FAILURE)
    assert failure_reason(ours) == "topic t partition 0 offset 5: bad"
    assert failure_reason(Exception(SPARK_FAILURE)).startswith(
        "Kafka at ? denied this client (no SASL login: principal ANONYMOUS) access to topic 'orders'")
