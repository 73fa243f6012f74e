"""The local broker's pieces that need no broker."""

from __future__ import annotations

import base64

from ingestion.dev.broker import new_cluster_id


def test_cluster_ids_are_kafkas_shape_and_never_read_as_an_option() -> None:
    ids = [new_cluster_id() for _ in range(2000)]  # one random id in 64 starts with '-'
    assert not [i for i in ids if i.startswith("-")]
    assert {len(i) for i in ids} == {22}
    assert {len(base64.urlsafe_b64decode(i + "==")) for i in ids} == {16}
    assert len(set(ids)) == len(ids)
