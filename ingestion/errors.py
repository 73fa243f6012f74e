"""One error hierarchy: every failure the project reports is an IngestionError."""

from __future__ import annotations


class IngestionError(Exception):
    """Base class of every error this package raises on purpose."""


class UsageError(IngestionError):
    """The command line is wrong (arguments that contradict or are missing): exit 2, as argparse's own errors."""


class ConfigError(IngestionError):
    """A pipeline config file is wrong; the message names the file, the key and the value."""


class SchemaError(IngestionError):
    """An Avro schema cannot be found, parsed or mapped to Spark types."""


class SubjectNotFoundError(SchemaError):
    """The registry (or the schemas/ folder) has no such subject; other registry failures are SchemaErrors."""


class DecodeError(IngestionError):
    """A Kafka record cannot be decoded; the message names topic, partition and offset."""


class JvmError(IngestionError):
    """A JVM artifact could not be resolved from Maven."""


class BrokerError(IngestionError):
    """The local development Kafka broker could not be started, reached or stopped."""


class CheckpointError(IngestionError):
    """A checkpoint and its table disagree in a way that needs the user's decision."""


class KafkaAccessError(IngestionError):
    """Kafka refused this client: its login (`denied == "authentication"`), the TLS handshake (`"tls"`), or an
    operation on a topic, a consumer group or the cluster (`"topic"`, `"group"`, `"cluster"`). The message names
    what was denied and what to grant; `resource` is the topic or group name."""

    def __init__(self, message: str, *, denied: str, resource: str | None = None) -> None:
        super().__init__(message)
        self.denied = denied
        self.resource = resource


class TopicNotFoundError(IngestionError):
    """The pipeline's topic does not exist (Kafka said so; a topic the client may not see is a KafkaAccessError)."""


class CatalogError(IngestionError):
    """A catalog name cannot be registered: it is taken by a table at another location (both are named)."""
