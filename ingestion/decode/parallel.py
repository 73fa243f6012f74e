"""The driver's decode on every core: a large batch of Kafka rows cut into as many parts as the process may use
cores, every part but the first decoded by a worker process, the first in this one, the parts' rows put back in
their order.

Decoding in Python holds the GIL: one process decodes on one core, whatever the machine has. The workers run the
same decoder (`python_decoder.batch_decoder` of the same spec, made once per spec in each worker), so a part's rows
are exactly what this process would have made of them, failures and their reasons included; under
`sink.onError: fail` the first part's failure is raised first, then the next part's, so the record named is the
first that failed in the batch's order. A part travels as Arrow (its Kafka rows there, only the decoder's own
columns back: the Kafka coordinates, key and headers are this process's own), a few milliseconds per 100,000
records against seconds of decoding.

The pool is started once per process (`warm`, called by the launch sequence for an available-now run of `RUN_MIN`
records or more, beside the tables' preparation; a batch that comes before its workers are up is decoded here
alone, not held for them) and lives until the process exits; each worker ends within half a
second of its parent, so a killed run leaves no worker behind. Without the pool (a smaller run, a streaming run's
batches of `sink.directWriteMaxOffsets`), for a batch of fewer than `PARALLEL_MIN` rows, on a machine of one core,
or with `INGEST_DECODE_WORKERS=0`, this process decodes alone.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import pyarrow as pa

from ingestion.decode.spec import DECODER_COLUMNS, DecodeSpec

log = logging.getLogger(__name__)

# This process's part of a batch begun ahead (`begin`) against a worker's: it also commits each batch (about a
# fifth of a batch's decode time, docs/performance.md#the-driver-side-path-on-both-cores).
BEGUN_DRIVER_WEIGHT = 0.72
PARALLEL_MIN = 20_000  # rows of a batch below which this process decodes it alone
RUN_MIN = 250_000  # records of a run below which starting the workers costs about what they save
ORPHAN_CHECK_SECONDS = 0.5  # how often a worker looks for its parent
ENV = "INGEST_DECODE_WORKERS"  # the number of worker processes (default: the cores this process may use, less one)

Decoder = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

_pool: ProcessPoolExecutor | None = None
_warmed = threading.Event()  # every worker of the pool has started and imported the decoders
_pool_lock = threading.Lock()
_decoders: dict[bytes, Decoder] = {}  # in a worker: the decoder of each spec it was sent


def workers() -> int:
    """How many worker processes decode beside this one: `INGEST_DECODE_WORKERS`, else the cores this process
    may run on less one (0 on one core)."""
    wanted = os.environ.get(ENV, "").strip()
    if wanted:
        return max(0, int(wanted))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(0, cores - 1)


def warm() -> None:
    """Start the pool and have each worker import the decoders, on a thread (a worker starts in about a second:
    beside the launch's checks, not in the first large batch)."""
    if workers() == 0:
        return
    threading.Thread(target=_warm, name="warm-decoders", daemon=True).start()


def _warm() -> None:
    try:
        pool = _the_pool()
        for done in [pool.submit(_ready) for _ in range(workers())]:
            done.result()
        _warmed.set()
    except Exception as exc:  # noqa: BLE001 - the first large batch starts it again, or decodes here
        log.debug("decode workers not started ahead: %s", exc)


@dataclass(frozen=True)
class _Begun:
    """A batch whose workers' parts were sent ahead (`begin`): the batch, its spec's key, and its parts."""

    source: pa.RecordBatch
    key: bytes
    parts: list[pa.RecordBatch]
    futures: list[Future[pa.RecordBatch]]


_begun: _Begun | None = None  # the one batch begun ahead, taken by its `decode`


def begin(spec: DecodeSpec, source: pa.RecordBatch) -> None:
    """Send the workers their parts of `source` now, the next batch fetched ahead, so that they decode it while this
    process still commits the batch before it; `decode` of the same batch takes them. Its parts are cut unevenly
    (`BEGUN_DRIVER_WEIGHT`): this process also commits each batch, and with the workers' parts queued ahead they
    have no wait of their own to fill."""
    global _begun
    pool, n = _started(), workers()
    if pool is None or n == 0 or source.num_rows < PARALLEL_MIN:
        return
    key = pickle.dumps(spec)
    parts = _cut(source, n + 1, BEGUN_DRIVER_WEIGHT / (n + BEGUN_DRIVER_WEIGHT))
    try:
        begun = _Begun(source, key, parts, [pool.submit(_decode_part, key, part) for part in parts[1:]])
    except (BrokenProcessPool, RuntimeError):  # the pool stopped: the batch decodes as any other
        return
    with _pool_lock:
        dropped, _begun = _begun, begun
    if dropped is not None:  # begun and never decoded (its batch ended elsewhere than planned)
        for future in dropped.futures:
            future.cancel()


def decode(decoder: Decoder, spec: DecodeSpec, source: pa.RecordBatch) -> pa.RecordBatch:
    """`decoder`'s rows of `source` (the decoder of `spec`), parts of a large batch decoded by the workers (sent
    ahead by `begin`, or now)."""
    global _begun
    n = workers()
    pool = _started()
    if pool is None or n == 0 or source.num_rows < PARALLEL_MIN:
        return _decode_here(decoder, source)
    key = pickle.dumps(spec)
    with _pool_lock:
        begun, _begun = (_begun, None) if _begun is not None and _begun.source is source else (None, _begun)
    if begun is not None and begun.key != key:  # a new schema version since: decoded anew
        for future in begun.futures:
            future.cancel()
        begun = None
    if begun is not None:
        parts, futures = begun.parts, begun.futures
    else:
        parts = _cut(source, n + 1)
        try:
            futures = [pool.submit(_decode_part, key, part) for part in parts[1:]]
        except BrokenProcessPool as exc:  # a worker died (killed, out of memory): this process decodes from now on
            return _without_workers(decoder, source, exc)
    try:
        decoded = [_decode_here(decoder, parts[0])]
        decoded += [_with_passthrough(future.result(), part) for future, part in zip(futures, parts[1:], strict=True)]
    except BrokenProcessPool as exc:
        return _without_workers(decoder, source, exc)
    finally:
        for future in futures:
            future.cancel()
    return pa.Table.from_batches(decoded).combine_chunks().to_batches()[0]


def _without_workers(decoder: Decoder, source: pa.RecordBatch, exc: BaseException) -> pa.RecordBatch:
    global _pool
    log.warning("decode workers stopped (%s); the driver decodes alone", exc)
    with _pool_lock:
        _pool = None
    return _decode_here(decoder, source)


def _decode_here(decoder: Decoder, source: pa.RecordBatch) -> pa.RecordBatch:
    return next(iter(decoder(iter([source]))))


def _cut(source: pa.RecordBatch, parts: int, first_share: float | None = None) -> list[pa.RecordBatch]:
    """`source` in `parts` parts in their order: equal, or the first of `first_share` of the rows and the rest
    equal."""
    first = -(-source.num_rows // parts) if first_share is None else int(source.num_rows * first_share)
    rest = source.num_rows - first
    size = max(1, -(-rest // (parts - 1))) if parts > 1 else max(1, rest)
    return [source.slice(0, first), *(source.slice(start, size) for start in range(first, source.num_rows, size))]


def _with_passthrough(own: pa.RecordBatch, part: pa.RecordBatch) -> pa.RecordBatch:
    """A worker's decoder columns beside the part's Kafka columns (all but the value), as the decoder lays them."""
    passthrough = [name for name in part.schema.names if name != "value"]
    return pa.RecordBatch.from_arrays([*own.columns, *(part.column(name) for name in passthrough)],
                                      names=[*own.schema.names, *passthrough])


def _started() -> ProcessPoolExecutor | None:
    """The pool `warm` started for a run large enough to pay for it, once its workers are up: a batch that comes
    while they still start (a second or two of imports) is decoded here rather than waiting for them."""
    return _pool if _warmed.is_set() else None


def _the_pool() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            # spawn: a worker never inherits this process's threads (the JVM's gateway, Kafka's clients, MLflow's)
            _pool = ProcessPoolExecutor(workers(), mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_worker_started)
            atexit.register(_pool.shutdown, wait=False, cancel_futures=True)
        return _pool


def _worker_started() -> None:
    """In a worker: leave Ctrl-C to the parent, and end once the parent is gone (a SIGKILLed run leaves no worker;
    Linux's parent-death signal would end it with the thread that started it, not with the process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK_SECONDS)
        os._exit(0)

    threading.Thread(target=orphaned, name="parent-watch", daemon=True).start()


def _ready() -> bool:
    """In a worker: the decoders imported, and pyarrow's first array made (it imports pandas, 0.2 to 0.7 s), ahead
    of the first part."""
    from ingestion.decode import python_decoder  # noqa: F401 - imported ahead of the first part

    pa.array([0])
    return True


def _decoder_of(spec_key: bytes) -> Decoder:
    """In a worker: the decoder of a spec, made at its first use and kept."""
    decoder = _decoders.get(spec_key)
    if decoder is None:
        from ingestion.decode import python_decoder

        decoder = _decoders[spec_key] = python_decoder.batch_decoder(pickle.loads(spec_key))
    return decoder


def _decode_part(spec_key: bytes, part: pa.RecordBatch) -> pa.RecordBatch:
    """In a worker: the decoder's own columns of one part (its Kafka columns stay with the caller)."""
    decoded = _decode_here(_decoder_of(spec_key), part)
    return decoded.select(list(DECODER_COLUMNS))
