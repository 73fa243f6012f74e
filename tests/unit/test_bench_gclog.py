"""The memory stage's reading of a JVM GC log (benchmarks/gclog.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gclog

LOG = """\
[0.006s][info][gc] Using G1
[1.912s][info][gc] GC(0) Pause Young (Normal) (G1 Evacuation Pause) 24M->6M(384M) 4.101ms
[9.500s][info][gc] GC(1) Pause Young (Concurrent Start) (Metadata GC Threshold) 180M->40M(384M) 12.7ms
[9.501s][info][gc] GC(2) Concurrent Mark Cycle
[9.620s][info][gc] GC(2) Pause Remark 52M->51M(384M) 3.2ms
[12.0s][info][gc] GC(3) Pause Young (Normal) (G1 Evacuation Pause) 900M->300M(1G) 20.0ms
[20.0s][info][gc] GC(4) Pause Young (Mixed) (G1 Evacuation Pause) 800M->120M(1G) 18.0ms
[21.0s][info][gc] GC(5) Pause Full (System.gc()) 512K->256K(1G) 30.0ms
"""


def test_pauses_read_heap_after_and_committed_in_mib() -> None:
    found = gclog.pauses(LOG)
    assert [(kind, after, heap) for _, kind, after, heap in found] == [
        ("Young", 6, 384), ("Young", 40, 384), ("Remark", 51, 384), ("Young", 300, 1024), ("Young", 120, 1024),
        ("Full", 0.25, 1024)]


def test_summary_takes_the_jvm_that_collected_most(tmp_path: Path) -> None:
    (tmp_path / "gc-1.log").write_text("[0.1s][info][gc] GC(0) Pause Young (Normal) 10M->9999M(9999M) 1ms\n")
    (tmp_path / "gc-2.log").write_text(LOG)
    got = gclog.summary(sorted(tmp_path.glob("gc-*.log")))
    assert got == {"gc_pauses": 6, "heap_after_gc_max_mb": 300, "heap_after_gc_max_second_half_mb": 300,
                   "heap_committed_max_mb": 1024}
    assert gclog.summary([tmp_path / "missing.log"]) == {}
