"""The JVM's own view of its heap, from a unified GC log (`-Xlog:gc:file=...`), for the memory stage.

Peak RSS says how much memory the JVM holds, which is mostly the heap it has grown to; G1 grows the heap towards
`-Xmx` as long as collecting more often would cost more, so RSS alone cannot tell a bounded working set from a
leak. Every collection logs the heap before and after it and the heap's committed size:

    [12.345s][info][gc] GC(7) Pause Young (Normal) (G1 Evacuation Pause) 612M->118M(1024M) 9.321ms

The heap after a collection is what survived it: an upper bound on what the pipeline keeps between batches. If
that stays flat while the topic grows 10x, memory is bounded by the batch, whatever the heap grew to.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PAUSE = re.compile(r"\[(?P<at>[\d.]+)s\].*GC\(\d+\) Pause (?P<kind>\w+).*? "
                   r"(?P<before>\d+)(?P<bu>[KMG])->(?P<after>\d+)(?P<au>[KMG])\((?P<heap>\d+)(?P<hu>[KMG])\)")
_MB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}


def pauses(text: str) -> list[tuple[float, str, float, float]]:
    """(seconds since JVM start, kind, heap after MiB, committed heap MiB) per collection pause."""
    out = []
    for m in PAUSE.finditer(text):
        out.append((float(m["at"]), m["kind"], int(m["after"]) * _MB[m["au"]], int(m["heap"]) * _MB[m["hu"]]))
    return out


def summary(paths: list[Path]) -> dict[str, Any]:
    """Heap figures of the JVM that collected most (a launcher JVM may log too): collections, the largest heap
    after a collection overall and in the second half of the run, the largest committed heap."""
    logs = [pauses(p.read_text(errors="replace")) for p in paths if p.is_file()]
    found = max(logs, key=len, default=[])
    if not found:
        return {}
    end = found[-1][0]
    late = [after for at, _, after, _ in found if at >= end / 2] or [found[-1][2]]
    return {"gc_pauses": len(found),
            "heap_after_gc_max_mb": round(max(after for _, _, after, _ in found), 1),
            "heap_after_gc_max_second_half_mb": round(max(late), 1),
            "heap_committed_max_mb": round(max(heap for _, _, _, heap in found), 1)}
