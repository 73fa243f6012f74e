"""The stages of a batch after its decode, written once for every engine (docs/architecture.md#one-batch-pipeline).

    source rows ─> decode ─> Decoded ─> rules' verdict ─> ledger records ─> onError ─> commit ─> BatchResult

A write path (`driver_write`, `spark_write`'s transaction and its cached fallback, each route table's) differs only
in how it decodes a batch and with which engine it commits; it hands the rest to `finish` as values: what the decode
found (`Decoded`) and the two commits to make (`Commits`). So a rule that refuses a batch, the ledger record a commit
carries, `sink.onError: fail`, the order of the commits (quarantine first, then bronze) and the crash tests' fault
points between them, and the batch's outcome are each decided here and only here; a stage added to every batch is
added here once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ingestion import faults
from ingestion.decode.expectations import Counts
from ingestion.delta.ledger import BatchRecord
from ingestion.delta.rs_append import Appended
from ingestion.errors import DecodeError, ExpectationError
from ingestion.stream.batch import BatchResult, Targets, WritePath


def _nothing_failed() -> str | None:
    return None


@dataclass(frozen=True)
class Decoded:
    """What a batch's decode stage found, whichever engine decoded it."""

    stats: Sequence[Mapping[str, Any]]  # per topic partition (`bronze.batch_stats`' form), failures included
    counts: Counts | None = None  # the expectations' counts, when the pipeline has rules
    rule_failure: str | None = None  # the line of the first record a `fail` rule refused
    # The first record that failed to decode, as a line (`record t/0@5: Class: message`): asked only under
    # `sink.onError: fail`, so an engine may compute it lazily (a Spark query).
    first_failure: Callable[[], str | None] = _nothing_failed
    value_bytes: int | None = None  # the batch's value bytes, when the stats do not sum to it

    @property
    def failed(self) -> int:
        """The records that go to quarantine (failed to decode, or refused by a `quarantine` rule)."""
        return sum(int(s["failed"]) for s in self.stats)


@dataclass(frozen=True)
class Commits:
    """The commit engine of one batch: each callable commits its table with the ledger record it is given (and the
    batch's txn); `discard` drops what the engine wrote but did not commit, when a stage refuses the batch."""

    bronze: Callable[[BatchRecord], Appended]
    quarantine: Callable[[BatchRecord], object]
    discard: Callable[[], None] = lambda: None


def finish(targets: Targets, decoded: Decoded, commits: Commits, *, batch_id: int, started: float,
           path: WritePath = WritePath.SPARK, app_id: str | None = None) -> BatchResult:
    """The stages after the decode: a `fail` rule's verdict, the ledger records, `sink.onError: fail`, the commits
    (`commit`) and the outcome. `app_id`: bronze's txnAppId when not the checkpoint's (the start batch's)."""
    if decoded.rule_failure is not None:
        commits.discard()
        raise ExpectationError(decoded.rule_failure)
    record, failed = targets.records(list(decoded.stats), batch_id, app_id, decoded.counts)
    if failed is not None and targets.config.sink.on_error == "fail" and (bad := decoded.first_failure()):
        commits.discard()
        raise DecodeError(f"cannot decode {bad} (sink.onError: fail)")
    quarantine = None if failed is None else (lambda: commits.quarantine(failed))
    appended = commit(batch_id, quarantine, lambda: commits.bronze(record))
    return BatchResult.of(record, decoded.stats, version=appended.version, committed=appended.committed,
                          started=started, path=path, value_bytes=decoded.value_bytes)


Done = TypeVar("Done")


def commit(batch_id: int, quarantine: Callable[[], object] | None, bronze: Callable[[], Done]) -> Done:
    """A batch's commits, whichever engine makes them: quarantine first (when records failed), then bronze, so a
    bronze commit, whose ledger ranges say where a lost checkpoint resumes, always implies its quarantine rows are
    committed; the crash tests' fault points between them (`faults`) are reached here and only here."""
    faults.reached(faults.FaultPoint.BEFORE_COMMIT, batch_id)
    if quarantine is not None:
        quarantine()
        faults.reached(faults.FaultPoint.QUARANTINE_COMMITTED, batch_id)
    done = bronze()
    faults.reached(faults.FaultPoint.AFTER_COMMIT, batch_id)
    return done
