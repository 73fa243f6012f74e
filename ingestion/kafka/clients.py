"""The project's Kafka clients on confluent-kafka: topics, offsets and consumer groups, with a pipeline's client
settings. Every consumer the project creates comes from `consumer`, every admin client from `admin_client`.

A pipeline's `kafka:` section holds settings for every client. Each client gets only the settings of its role:
librdkafka warns on the screen about a consumer setting given to a producer or an admin client, and the reverse.
Consumers read committed records only (`isolation.level: read_committed`) unless the settings say otherwise, as
the Spark source does (see `stream.source`): records of aborted transactions never land.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ingestion.errors import IngestionError, KafkaUnreachableError, TopicNotFoundError
from ingestion.kafka import access
from ingestion.security import PRODUCER_ONLY

ISOLATION = "isolation.level"
READ_COMMITTED = "read_committed"

# librdkafka's consumer-only and producer-only settings (its CONFIGURATION.md, column C/P).
CONSUMER_ONLY = frozenset({
    "group.id", "group.instance.id", "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
    "group.protocol", "group.remote.assignor", "coordinator.query.interval.ms", "max.poll.interval.ms",
    "enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store", "queued.min.messages",
    "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms", "fetch.message.max.bytes",
    "max.partition.fetch.bytes", "fetch.max.bytes", "fetch.min.bytes", "fetch.error.backoff.ms", ISOLATION,
    "auto.offset.reset", "enable.partition.eof", "check.crcs", "allow.auto.create.topics",
    "consume.callback.max.messages",
})


# librdkafka's own log lines (connection refusals while a broker restarts, ...) go to this logger, shown with -v,
# instead of straight to the screen.
LIBRDKAFKA_LOG = logging.getLogger("ingestion.librdkafka")
log = logging.getLogger(__name__)


def refusals(settings: Mapping[str, Any], topic: str | None = None,
             group: str | None = None) -> contextlib.AbstractContextManager[None]:
    """Inside the block, Kafka's refusal of a request (a KafkaException carrying an authorization, login or TLS
    error) is raised as the KafkaAccessError that names it (`access.from_error`); other errors pass as they are."""
    return _refusals(settings, topic, group)


@contextlib.contextmanager
def _refusals(settings: Mapping[str, Any], topic: str | None, group: str | None) -> Iterator[None]:
    from confluent_kafka import KafkaException

    try:
        yield
    except KafkaException as exc:
        refused = access.from_error(exc.args[0], settings, topic, group) if exc.args else None
        if refused is not None:
            raise refused from None
        raise


def _logged(settings: dict[str, Any]) -> dict[str, Any]:
    return {"logger": LIBRDKAFKA_LOG, **settings}


def for_consumer(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a consumer takes: read_committed by default, no producer settings."""
    return _logged({ISOLATION: READ_COMMITTED, **{k: v for k, v in settings.items() if k not in PRODUCER_ONLY}})


def for_admin(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings an admin client takes: neither consumer nor producer settings."""
    return _logged({k: v for k, v in settings.items() if k not in CONSUMER_ONLY and k not in PRODUCER_ONLY})


def for_producer(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a producer takes: no consumer settings."""
    return _logged({k: v for k, v in settings.items() if k not in CONSUMER_ONLY})


def admin_client(settings: Mapping[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(for_admin(settings))


def consumer(settings: Mapping[str, Any], group: str, **overrides: Any) -> Any:
    """A confluent-kafka Consumer in `group` that never commits offsets (the project commits explicitly) and
    reads committed records unless the settings or `overrides` say otherwise. The project's consumers are assigned
    partitions and never use their group; librdkafka still looks the group up, and a refusal of it arrives as an
    error event that their loops ignore (`raise_refusal`)."""
    from confluent_kafka import Consumer

    return Consumer({**for_consumer(settings), "group.id": group, "enable.auto.commit": False, **overrides})


def partitions(settings: Mapping[str, Any], topic: str, timeout: float = 30.0) -> list[int]:
    """The topic's partitions, asked of the brokers within `timeout` seconds. Raises KafkaAccessError when Kafka
    refuses the login, the TLS handshake or the topic, TopicNotFoundError when the topic does not exist, and
    KafkaUnreachableError naming the address when no broker answers."""
    servers = settings.get("bootstrap.servers")
    admin, meta = _metadata(settings, topic, timeout)
    found = meta.topics.get(topic)
    if found is not None and found.error is not None and found.error.code() == access.TOPIC_AUTHORIZATION_FAILED:
        # Not "does not exist": Kafka answers so for a topic the client may not describe, whether it exists or not.
        raise access.topic_denied(settings, topic)
    if found is None or found.error is not None:
        reason = found.error.str() if found is not None and found.error is not None else ""
        raise TopicNotFoundError(topic, str(servers), reason=reason, closest=_closest_topics(admin, topic))
    return sorted(found.partitions)


def list_topics(settings: Mapping[str, Any], timeout: float, *, names: Iterable[str] = (),
                pattern: str | None = None) -> dict[str, list[int]]:
    """Topic -> partitions from one metadata request: the `names` given (one missing from the answer is asked
    alone, which raises the error `partitions` gives: not found with the closest names, or the refusal), and with
    a `pattern` the topics it matches anywhere in the name, as Spark's subscribePattern finds them
    (Regex.findFirstIn over the admin client's listTopics; anchor with ^...$ for whole names), sorted by name;
    internal topics (`__...`) are left out, as listTopics leaves them out."""
    _, meta = _metadata(settings, None, timeout)
    listed = {t: sorted(m.partitions) for t, m in meta.topics.items() if m.error is None}
    found: dict[str, list[int]] = {}
    for name in names:
        found[name] = listed[name] if name in listed else partitions(settings, name, timeout)
    if pattern is not None:
        matcher = re.compile(pattern)
        found.update({t: listed[t] for t in sorted(listed) if not t.startswith("__") and matcher.search(t)})
    return found


def _metadata(settings: Mapping[str, Any], topic: str | None, timeout: float) -> tuple[Any, Any]:
    """(admin client, cluster metadata) of one topic or (None) of all, within `timeout` seconds; a refusal of the
    login or the handshake is a KafkaAccessError, no answer a KafkaUnreachableError naming the address."""
    from confluent_kafka import KafkaException

    servers = settings.get("bootstrap.servers")
    refused: list[Any] = []  # librdkafka reports a refused login or handshake to the error callback only
    admin = admin_client({**settings, "socket.connection.setup.timeout.ms": int(max(1.0, timeout) * 1000),
                          "error_cb": refused.append})
    deadline = time.monotonic() + timeout
    while True:
        try:
            return admin, admin.list_topics(topic, timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        except KafkaException as exc:
            admin.poll(0)  # serves the error callback
            for error in refused:
                denied = access.from_error(error, settings, topic)
                if denied is not None:
                    raise denied from None
            if time.monotonic() >= deadline:
                error = exc.args[0] if exc.args else exc
                reason = error.str() if hasattr(error, "str") else str(error)
                raise KafkaUnreachableError(f"no Kafka broker answered at {servers} within {timeout:.0f}s ({reason}); "
                                            "check kafka.bootstrap.servers and that the brokers run") from None


def _closest_topics(admin: Any, topic: str) -> tuple[str, ...]:
    """The existing topics nearest to a missing one (a courtesy: none when they cannot be listed)."""
    try:
        names = sorted(t for t in admin.list_topics(timeout=5.0).topics if not t.startswith("__"))
    except Exception:  # noqa: BLE001 - the suggestion is a courtesy; the error is that the topic is missing
        return ()
    return tuple(difflib.get_close_matches(topic, names, n=3, cutoff=0.6))


def check_access(settings: Mapping[str, Any], topic: str, found: list[int], timeout: float) -> None:
    """The topic (with its partitions `found`) may be read: a fetch at the end of its first partition, as the ACL
    of a fetch is READ, not the DESCRIBE that metadata needs. KafkaAccessError naming what to grant otherwise."""
    if found:
        _probe_read(settings, topic, found[0], timeout)


def check_group(settings: Mapping[str, Any], group: str, timeout: float) -> None:
    """Offsets may be committed to `group` (READ on it): commit to it an offset of a topic that does not exist;
    Kafka checks READ on the group before anything else and answers GROUP_AUTHORIZATION_FAILED, or refuses the
    partition (unknown topic, or a topic the client may not read) and writes nothing, not even the group. Listing
    the group's offsets would check DESCRIBE only. The commit is a consumer's, as every group commit of the project
    is (`GroupCommitter`: not the admin client's, whose coordinator requests abort the process under broker
    faults)."""
    import uuid

    from confluent_kafka import KafkaError

    probe = f"ingest-group-check-{uuid.uuid4().hex}"
    # librdkafka retries a partition's UNKNOWN_TOPIC_OR_PART twice, retry.backoff.ms (100 ms) apart and more: the
    # check took 0.30-0.40 s, most of it waiting to be told again what it knew; 10 ms apart, 0.05 s.
    with GroupCommitter(settings, group, timeout, **{"retry.backoff.ms": 10, "retry.backoff.max.ms": 20}) as committer:
        error = committer.send({probe: {0: 0}})
    # The partition's own refusal is the answer that the group may be used: the topic does not exist.
    if error is None or error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, access.TOPIC_AUTHORIZATION_FAILED):
        return
    if error.code() == access.GROUP_AUTHORIZATION_FAILED:
        raise access.group_denied(settings, group)
    refused = access.from_error(error, settings, group=group)
    if refused is not None:
        raise refused
    raise IngestionError(f"cannot check consumer group {group!r} at {settings.get('bootstrap.servers')}: "
                         f"{error.str()}")


def _probe_read(settings: Mapping[str, Any], topic: str, partition: int, timeout: float) -> None:
    """Fetch at the end of one partition: end of partition (allowed) or TOPIC_AUTHORIZATION_FAILED (denied)."""
    from confluent_kafka import OFFSET_END, KafkaError, TopicPartition

    # The broker holds a fetch at the end for fetch.wait.max.ms (500 ms) before it answers empty: the probe asks it
    # to answer at once.
    client = consumer(settings, "ingest-access-check", **{"enable.partition.eof": True, "fetch.wait.max.ms": 0})
    try:
        # With the partition's leader known, the offset look-up is sent at once; without, librdkafka retries it on a
        # 500 ms timer (docs/performance.md#fixed-costs-tables-before-the-jvm-and-a-faster-kafka-probe).
        client.list_topics(topic, timeout=min(timeout, 5.0))
        client.assign([TopicPartition(topic, partition, OFFSET_END)])
        # A refused fetch is answered at once; an allowed one reaches the end at once. No answer at all is not a
        # refusal (the metadata came): it is left to the pipeline's own reads.
        deadline = time.monotonic() + min(timeout, 5.0)
        while time.monotonic() < deadline:
            msg = client.poll(0.2)
            if msg is None:
                continue
            error = msg.error()
            if error is None or error.code() == KafkaError._PARTITION_EOF:
                return
            raise_refusal(error, settings, topic)
        log.debug("read check of %s/%d: no answer within %.0fs", topic, partition, min(timeout, 5.0))
    finally:
        client.close()


def raise_refusal(error: Any, settings: Mapping[str, Any], topic: str) -> bool:
    """Raise the KafkaAccessError of a consumer's error event; True when the event is the group coordinator's
    refusal, which does not matter: the project's consumers are assigned partitions and never use their group
    (librdkafka still looks it up). False for any other error."""
    if error.code() == access.GROUP_AUTHORIZATION_FAILED:
        return True
    refused = access.from_error(error, settings, topic)
    if refused is not None:
        raise refused
    return False


def create_topic(settings: Mapping[str, Any], topic: str, partitions: int, replication: int = 1, *,
                 validate_only: bool = False) -> bool:
    """Create `topic` (`validate_only`: have the brokers check that they would, creating nothing); False when it
    already exists."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin_client(settings)
    try:
        admin.create_topics([NewTopic(topic, partitions, replication)], validate_only=validate_only)[topic].result(30)
        return True
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        if exc.args and exc.args[0].code() in (access.TOPIC_AUTHORIZATION_FAILED,
                                               access.CLUSTER_AUTHORIZATION_FAILED):
            raise access.topic_denied(settings, topic, exc.args[0].name(), operation="CREATE") from None
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        reason = f"{error.str()} ({error.name()})" if error is not None else str(exc)
        raise IngestionError(f"cannot create topic {topic!r} with {partitions} partitions, replication "
                             f"{replication}: {reason}") from None


def watermarks(settings: Mapping[str, Any], topic: str) -> dict[int, tuple[int, int]]:
    """Per partition of one topic: (earliest offset, end offset), the end being the offset the next record will
    get; the topic's partitions are asked first (`partitions`)."""
    return watermarks_of(settings, {topic: partitions(settings, topic)})[topic]


def watermarks_of(settings: Mapping[str, Any],
                  topics: Mapping[str, Iterable[int]]) -> dict[str, dict[int, tuple[int, int]]]:
    """`watermarks` of the given partitions of several topics, from one consumer (no metadata request of ours: a
    pipeline's partitions are known from its one listing)."""
    from confluent_kafka import TopicPartition

    if not topics:
        return {}
    client = consumer(settings, "ingest-watermarks")
    try:
        with refusals(settings, next(iter(topics))):
            return {t: {p: _watermark(client, TopicPartition(t, p)) for p in parts} for t, parts in topics.items()}
    finally:
        client.close()


# Answers of a partition whose leader is moving or not elected yet (a topic created a moment ago, a broker
# restarting): asked again until WATERMARK_TIMEOUT.
_LEADER_MOVING = frozenset({"NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PART",
                            "NOT_LEADER_OR_FOLLOWER"})
WATERMARK_TIMEOUT = 30.0


def _watermark(client: Any, partition: Any) -> tuple[int, int]:
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + WATERMARK_TIMEOUT
    while True:
        try:
            low, high = client.get_watermark_offsets(partition, timeout=max(1.0, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            code = exc.args[0].name() if exc.args and hasattr(exc.args[0], "name") else ""
            if code not in _LEADER_MOVING or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# A commit's answer that says the group's coordinator could not be reached or has moved (or its write did not
# reach the offsets topic's replicas): the committer's consumer is replaced before the next commit.
_COORDINATOR_ERRORS = frozenset({
    "_WAIT_COORD", "_TRANSPORT", "_TIMED_OUT", "_TIMED_OUT_QUEUE", "_ALL_BROKERS_DOWN", "_DESTROY_BROKER",
    "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "REQUEST_TIMED_OUT",
    "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
})


class GroupCommitter:
    """Commits of offsets to one consumer group (per topic, the next offset to read per partition), as a consumer
    commit would, by one consumer that never joins the group (never subscribed: Kafka takes its commit as an
    admin's, generation -1, refused only while the group has members).

    Not the admin client's alter_consumer_group_offsets: librdkafka (to 2.16 at least) aborts the whole process
    when a coordinator-targeted admin request (AlterConsumerGroupOffsets, DescribeConsumerGroups,
    ListConsumerGroupOffsets) cannot be sent to a coordinator that has just gone away (`rdkafka_queue.h:
    rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed`; librdkafka issue 4605, fix proposed
    in pull request 5397): a pipeline committing every batch aborted so while the brokers of its cluster were
    killed and restarted, however its futures were awaited. A consumer's commit goes through its group handle
    instead, and fails as an error.

    One owner: every call holds the committer's lock, so the consumer is never used by two threads at once and is
    closed (`close`) only when no call is inside it. One commit at a time: a commit is sent only once the one
    before it has its answer. librdkafka holds a commit sent while the coordinator is away and sends it when one is
    found, after any commit sent meanwhile, so the group could end on the older offset.

    A commit waits at most `timeout` seconds, all told: for the answer of a commit that did not end in time
    before it (then nothing new is sent: the error is that it still waits), for the consumer to be replaced, and
    for its own answer. librdkafka holds a commit for a missing coordinator (session.timeout.ms) and waits for a
    request's answer (socket.timeout.ms) half that time each, so a commit rarely outlives the call that sent it. After a
    commit that timed out or was answered with a coordinator's error, the consumer is closed (nothing inside it
    then) and a new one sent the next commit: it looks up the coordinator and connects at once, where the old one
    would wait out its coordinator query interval and reconnect backoff toward a broker that came back.
    """

    def __init__(self, settings: Mapping[str, Any], group: str, timeout: float = 30.0, **tuning: Any) -> None:
        self.settings = settings
        self.group = group
        self.timeout = timeout
        self._tuning = tuning  # librdkafka settings of this committer's consumer only (the group check's backoff)
        self._lock = threading.Lock()
        self._client: Any = None
        self._answer: tuple[Any, list[Any]] | None = None  # (error, partitions) of the commit inside, once answered
        self._inside = False  # a commit was sent and has no answer yet
        self._replace = False  # the consumer is closed and a new one opened before the next commit
        self._closed = False
        self.replaced = 0  # consumers closed and replaced after a coordinator's error or a timeout

    def __enter__(self) -> GroupCommitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def commit(self, offsets: Mapping[str, Mapping[int, int]]) -> None:
        """Commit `offsets`. KafkaAccessError when Kafka refuses the group or a topic (named with the client of
        `settings`); a KafkaException for any other error, IngestionError when no answer came in time."""
        topic = next(iter(sorted(offsets)), None)
        with refusals(self.settings, topic, self.group):
            error = self.send(offsets)
            if error is not None:
                raise _kafka_exception(error)

    def send(self, offsets: Mapping[str, Mapping[int, int]]) -> Any:
        """Commit `offsets` and return the first error of the answer (the request's, else a partition's), or None
        when every partition was committed. A refusal of the group's coordinator look-up is that error too.
        IngestionError when no answer came within the timeout (this commit's, or the one before it, which still
        waits: then this one was not sent)."""
        from confluent_kafka import TopicPartition

        wanted = [TopicPartition(t, int(p), int(o)) for t, parts in sorted(offsets.items())
                  for p, o in sorted(parts.items())]
        if not wanted:
            return None
        with self._lock:
            if self._closed:
                raise IngestionError(f"the commits to consumer group {self.group!r} are closed")
            deadline = time.monotonic() + self.timeout
            if self._inside:  # the commit before this one did not end in time: its answer first
                refused = self._wait(deadline)
                if refused is not None:
                    return refused
                if self._inside:
                    raise self._no_answer("the commit before it")
                self._replace = True
            if self._replace:
                self._close_client()
                self.replaced += 1
            client = self._open()
            self._answer = None
            client.commit(offsets=wanted, asynchronous=True)
            self._inside = True
            refused = self._wait(deadline)
            if refused is not None:
                return refused
            if self._inside:
                # The commit still waits inside the consumer, which is kept (closing it now would wait for its
                # requests to a broker that went away): its answer is waited for by the next commit.
                raise self._no_answer("a commit")
            assert self._answer is not None
            error, partitions = self._answer
            found = next((tp.error for tp in partitions or () if tp.error is not None), error)
            self._replace = found is not None and found.name() in _COORDINATOR_ERRORS
        return found

    def _wait(self, deadline: float) -> Any:
        """Serve the consumer until the commit inside has its answer or `deadline` passes; the error event of a
        refused coordinator look-up, login or handshake (the commit would only wait), else None."""
        while self._inside:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            event = self._client.poll(min(left, 0.05))  # serves the commit's callback; returns error events
            error = event.error() if event is not None else None
            if error is not None and (error.code() == access.GROUP_AUTHORIZATION_FAILED or
                                      access.from_error(error, self.settings, group=self.group) is not None):
                return error
        return None

    def _no_answer(self, which: str) -> IngestionError:
        return IngestionError(f"no answer to {which} to consumer group {self.group!r} at "
                              f"{self.settings.get('bootstrap.servers')} within {self.timeout:.0f}s")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the consumer, once no call is inside it; later commits raise IngestionError."""
        with self._lock:
            self._closed = True
            self._close_client()

    def _open(self) -> Any:
        if self._client is None:
            # librdkafka holds a commit for an unknown coordinator session.timeout.ms at most, and waits for a
            # request's answer socket.timeout.ms: half the commit's timeout each, which also bounds `close` with
            # a commit still inside. The coordinator is asked again every second (librdkafka's default: every
            # 10 minutes while it answers) and a broker that went away reconnected within a second (at most
            # 10 s by default).
            ms = max(2000, int(self.timeout * 500))
            self._client = consumer(self.settings, self.group, **{
                "session.timeout.ms": ms, "heartbeat.interval.ms": max(1, min(3000, ms // 3)),
                "socket.timeout.ms": ms, "coordinator.query.interval.ms": 1000, "reconnect.backoff.max.ms": 1000,
                "on_commit": self._answered, **self._tuning})
        return self._client

    def _answered(self, error: Any, partitions: list[Any]) -> None:  # on the owner's thread, inside poll/close
        self._answer = (error, partitions)
        self._inside = False

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()
        self._answer = None
        self._inside = False
        self._replace = False


def _kafka_exception(error: Any) -> Exception:
    from confluent_kafka import KafkaException

    return KafkaException(error)


def commit_group_offsets(settings: Mapping[str, Any], group: str, offsets: Mapping[str, Mapping[int, int]],
                         timeout: float = 30) -> None:
    """Set `group`'s committed offsets once (per topic, the next offset to read per partition) with a
    `GroupCommitter` of its own. KafkaAccessError when Kafka refuses the group or a topic."""
    with GroupCommitter(settings, group, timeout) as committer:
        committer.commit(offsets)


def committed_offsets(settings: Mapping[str, Any], group: str, topic: str, found: list[int] | None = None,
                      timeout: float = 30) -> dict[int, int]:
    """`group`'s committed offset per partition of `topic` (partitions without a commit are left out).
    KafkaAccessError when Kafka refuses to describe the group."""
    from confluent_kafka import TopicPartition

    found = partitions(settings, topic) if found is None else found
    # A consumer's OffsetFetch, not the admin client's list_consumer_group_offsets, whose error paths have crashed
    # processes in librdkafka (a test process polling it across a broker restart died with SIGSEGV). The consumer
    # is never subscribed, so it does not join the group.
    client = consumer(settings, group)
    try:
        with refusals(settings, topic, group):
            result = client.committed([TopicPartition(topic, p) for p in found], timeout=timeout)
    finally:
        client.close()
    return {tp.partition: tp.offset for tp in result if tp.offset >= 0}


def first_unread(settings: Mapping[str, Any], topic: str, positions: Mapping[int, int],
                 timeout: float = 10.0) -> dict[int, tuple[int, int] | None]:
    """Per partition, the (offset, timestamp ms) of the first record a read_committed consumer gets at or after
    `positions[partition]`, or None when there is none: what lies between the position and the end offset is then
    only transaction markers and aborted records (a transactional producer always ends a partition with a
    marker). Partitions that did not answer within `timeout` seconds are left out."""
    from confluent_kafka import KafkaError, TopicPartition

    if not positions:
        return {}
    client = consumer(settings, "ingest-first-unread", **{"enable.partition.eof": True,
                                                          "auto.offset.reset": "earliest"})
    found: dict[int, tuple[int, int] | None] = {}
    try:
        client.assign([TopicPartition(topic, p, o) for p, o in positions.items()])
        deadline = time.monotonic() + timeout
        while len(found) < len(positions) and time.monotonic() < deadline:
            msg = client.poll(0.5)
            partition = msg.partition() if msg is not None else None
            if msg is None or partition is None or partition in found or partition not in positions:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    found[partition] = None
                else:
                    raise_refusal(error, settings, topic)
                continue
            found[partition] = (int(msg.offset()), int(msg.timestamp()[1]))
            client.pause([TopicPartition(topic, partition)])
    finally:
        client.close()
    return found
