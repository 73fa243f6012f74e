"""The ring of scheduler pools `run --all`'s batches take in turn (stream/batch_pools.py)."""

from __future__ import annotations

from ingestion.stream import batch_pools
from ingestion.stream.batch_pools import BatchPools


def test_pool_names_sort_in_the_rings_order_whatever_its_size() -> None:
    # Spark's FAIR scheduler breaks ties by pool name: the ring's order must be the names' order.
    for size in (1, 2, 9, 10, 11, 100, 101, 1000):
        names = batch_pools.names(size)
        assert len(names) == size and len(set(names)) == size
        assert names == sorted(names), size
    assert batch_pools.names(0) == ["batches-0"]
    assert batch_pools.names(100)[:2] == ["batches-00", "batches-01"]


def test_batches_take_the_pools_in_turn_and_come_round_again() -> None:
    pools = BatchPools(3)
    assert [pools.take() for _ in range(7)] == ["batches-0", "batches-1", "batches-2", "batches-0", "batches-1",
                                                "batches-2", "batches-0"]


def test_run_all_declares_the_ring_beside_a_pool_per_pipeline() -> None:
    from ingestion.stream import pipeline

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

    targets = [Named("a"), Named("b")]
    assert pipeline.run_all_pools(targets) == ["pipeline-a", "pipeline-b", "batches-0", "batches-1"]  # type: ignore[arg-type]
