"""One listener per session hands each query's events to that query's listener only."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ingestion.runtime.listener import ProgressRouter


class Seen:
    def __init__(self) -> None:
        self.progress: list[int] = []
        self.idle = 0

    def onQueryProgress(self, event: Any) -> None:
        self.progress.append(event.progress.batchId)

    def onQueryIdle(self, event: Any) -> None:
        self.idle += 1


def _progress(name: str, query_id: str, batch_id: int) -> Any:
    return SimpleNamespace(progress=SimpleNamespace(name=name, id=query_id, batchId=batch_id))


def test_events_reach_the_listener_of_their_query_only() -> None:
    router, orders, payments = ProgressRouter(), Seen(), Seen()
    router.add("orders", orders)  # type: ignore[arg-type]
    router.add("payments", payments)  # type: ignore[arg-type]
    router.onQueryProgress(_progress("orders", "id-1", 0))
    router.onQueryProgress(_progress("payments", "id-2", 0))
    router.onQueryProgress(_progress("orders", "id-1", 1))
    router.onQueryProgress(_progress("someone-elses", "id-3", 7))  # a query no pipeline runs: nobody hears it
    assert (orders.progress, payments.progress) == ([0, 1], [0])
    # Idle events name the query by id: the id its progress events carried.
    router.onQueryIdle(SimpleNamespace(id="id-2"))
    router.onQueryIdle(SimpleNamespace(id="id-unknown"))
    assert (orders.idle, payments.idle) == (0, 1)


def test_a_removed_pipeline_hears_nothing_and_a_new_listener_replaces_the_old() -> None:
    router, old, new = ProgressRouter(), Seen(), Seen()
    router.add("orders", old)  # type: ignore[arg-type]
    router.onQueryProgress(_progress("orders", "id-1", 0))
    router.remove("orders")
    router.onQueryProgress(_progress("orders", "id-1", 1))
    router.onQueryIdle(SimpleNamespace(id="id-1"))
    assert (old.progress, old.idle) == ([0], 0)
    router.add("orders", old)  # type: ignore[arg-type]
    router.add("orders", new)  # type: ignore[arg-type]
    router.onQueryProgress(_progress("orders", "id-9", 2))
    assert (old.progress, new.progress) == ([0], [2])
