"""A pipeline's Kafka client settings, resolved once per command: both clients' spellings of its `kafka:` section,
the bootstrap address and how long to wait for the brokers.

Resolving is where the I/O happens (the environment, the local broker's address file, PEM files read and a private
key decrypted for the Java client), so it is done once, before a JVM starts, and the result handed down: the config
itself stays pure data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ingestion import security
from ingestion.config import PipelineConfig
from ingestion.errors import ConfigError
from ingestion.paths import local_broker_address
from ingestion.units import duration_seconds

DEFAULT_TIMEOUT = 15.0


@dataclass(frozen=True)
class KafkaSettings:
    """What both Kafka clients of a pipeline are given."""

    client: Mapping[str, Any]  # confluent-kafka (librdkafka), `bootstrap.servers` included
    java: Mapping[str, str] = field(default_factory=dict)  # Spark's source (Java client), no `kafka.` prefix
    timeout: float = DEFAULT_TIMEOUT  # seconds a command waits for the brokers (source.brokerTimeout)


def bootstrap_servers(config: PipelineConfig) -> str:
    """From the config, else `$KAFKA_BOOTSTRAP_SERVERS`, else the local dev broker's address file."""
    servers = config.kafka.get("bootstrap.servers") or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    servers = servers or local_broker_address()
    if not servers:
        raise ConfigError(f"{config.file}: no 'kafka.bootstrap.servers', no $KAFKA_BOOTSTRAP_SERVERS and no local "
                          "broker (start one with `ingest kafka start`)")
    return servers


def resolve(config: PipelineConfig) -> KafkaSettings:
    """Both clients' settings of `config` (`security.librdkafka_settings`, `security.java_settings`): a ConfigError
    naming the file and key when a file the section names cannot be read."""
    servers = bootstrap_servers(config)
    try:
        java = security.java_settings(config.kafka)
    except ConfigError as exc:
        raise ConfigError(f"{config.file}: {exc}") from None
    return KafkaSettings(client={**security.librdkafka_settings(config.kafka), "bootstrap.servers": servers},
                         java={**java, "bootstrap.servers": servers},
                         timeout=duration_seconds(config.source.broker_timeout) or DEFAULT_TIMEOUT)
