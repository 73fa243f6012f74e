"""One error hierarchy: every failure the project reports is an IngestionError."""

from __future__ import annotations

import re

# A Java exception's line as py4j and Spark show it: `: java.lang.IllegalStateException: why`.
_JAVA_EXCEPTION = re.compile(r":?\s*(?:[a-z][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)\b")


# Where Spark's line of a failed Python function (a foreachBatch's) ends, the Python traceback following it.
_TRACEBACK = "Traceback (most recent call last):"
_PYTHON_EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?")


def _raised(lines: list[str]) -> str | None:
    """The exception line that ends a Python traceback in a message (before Spark's `=== Streaming Query ===`)."""
    found = None
    for line in lines:
        if line.startswith("==="):
            break
        if _PYTHON_EXCEPTION.fullmatch(line):
            found = line
    return found


class IngestionError(Exception):
    """Base class of every error this package raises on purpose."""


class UsageError(IngestionError):
    """The command line is wrong (arguments that contradict or are missing): exit 2, as argparse's own errors."""


def one_line(exc: BaseException) -> str:
    """One line saying why `exc` happened, for a log line or an error message; never fails, whatever `exc` is: its
    first non-empty line (for py4j's wrapper of a Java error, the Java exception's line); else its cause's line;
    else the exception's type name (`TimeoutError()`, a bare `assert`)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            text = str(current)
        except Exception:  # noqa: BLE001 - a broken __str__ must not break the handler that reports it
            text = ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        java = [line for line in lines if _JAVA_EXCEPTION.match(line)]
        if java and lines[0].startswith("An error occurred while calling"):  # py4j's wrapper says nothing
            return java[0].lstrip(": ")
        if lines and lines[0].endswith(_TRACEBACK) and (raised := _raised(lines[1:])) is not None:
            return f"{lines[0].removesuffix(_TRACEBACK).rstrip()} {raised}"  # Spark's line of a Python function's
        if lines:
            return lines[0]
        current = current.__cause__ or current.__context__
    return type(exc).__name__


class ConfigError(IngestionError):
    """A pipeline config file is wrong; the message names the file, the key and the value."""


class SchemaError(IngestionError):
    """An Avro schema cannot be found, parsed or mapped to Spark types."""


class SubjectNotFoundError(SchemaError):
    """The registry (or the schemas/ folder) has no such subject; other registry failures are SchemaErrors."""


class DecodeError(IngestionError):
    """A Kafka record cannot be decoded; the message names topic, partition and offset."""


class ExpectationError(IngestionError):
    """A row broke a data-quality rule whose onViolation is `fail`: the message names the rule, the record (topic,
    partition, offset) and the values of the columns the rule reads."""


class JvmError(IngestionError):
    """A JVM artifact could not be resolved from Maven."""


class BrokerError(IngestionError):
    """The local development Kafka broker could not be started, reached or stopped."""


class CheckpointError(IngestionError):
    """A checkpoint and its table disagree in a way that needs the user's decision."""


class KafkaUnreachableError(IngestionError):
    """No broker answered at the configured address within `source.brokerTimeout` (none runs there, or none can be
    reached): not a refusal, which is a KafkaAccessError."""


class KafkaAccessError(IngestionError):
    """Kafka refused this client: its login (`denied == "authentication"`), the TLS handshake (`"tls"`), or an
    operation on a topic, a consumer group or the cluster (`"topic"`, `"group"`, `"cluster"`). The message names
    what was denied and what to grant; `resource` is the topic or group name."""

    def __init__(self, message: str, *, denied: str, resource: str | None = None) -> None:
        super().__init__(message)
        self.denied = denied
        self.resource = resource


class TopicNotFoundError(IngestionError):
    """A topic does not exist (Kafka said so; a topic the client may not see is a KafkaAccessError). Carries the
    topic, the brokers asked, Kafka's reason and the closest existing names, so callers word their own advice
    (`hint`) without parsing the message."""

    def __init__(self, topic: str, servers: str, *, reason: str = "", closest: tuple[str, ...] = (),
                 hint: str = "create it, or run `ingest onboard <pipeline> --create-topic`") -> None:
        said = f" ({reason})" if reason else ""
        near = f"; closest: {', '.join(closest)}" if closest else ""
        super().__init__(f"topic {topic!r} does not exist on {servers}{said}{near}; {hint}")
        self.topic, self.servers, self.reason, self.closest = topic, servers, reason, closest

    def with_hint(self, hint: str) -> TopicNotFoundError:
        """The same error with other advice at its end."""
        return TopicNotFoundError(self.topic, self.servers, reason=self.reason, closest=self.closest, hint=hint)


class CatalogError(IngestionError):
    """A catalog name cannot be registered: it is taken by a table at another location (both are named)."""
