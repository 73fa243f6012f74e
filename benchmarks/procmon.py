"""Run a command as a subprocess and watch it: lines with arrival times, wall time, peak memory of its tree.

Memory is sampled from /proc every 0.2 s over the whole process tree (the driver, the Spark JVM it starts, and
the Python workers the JVM forks). Processes are grouped as `jvm` (java), `workers` (Python processes below a
JVM: PySpark's daemon and its workers), `other` (other processes below a JVM) and `driver` (the rest of the
tree: the Python driver and the launcher scripts). For each group the peak of the summed RSS is kept, and for
the workers also the peak of the summed PSS (forked workers share pages with the daemon, which RSS counts once
per process). `total` is the peak of the whole tree at one sample.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

GROUPS = ("driver", "jvm", "workers", "other", "total")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, comm, CPU ticks used: utime + stime) from /proc/<pid>/stat."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # comm is in parentheses and may hold spaces; the fields after it start with state, ppid.
    close = stat.rfind(")")
    comm = stat[stat.find("(") + 1:close]
    fields = stat[close + 2:].split()
    return int(fields[1]), comm, int(fields[11]) + int(fields[12])


def _pss_kb(pid: int) -> int:
    text = _read(f"/proc/{pid}/smaps_rollup")
    if text is None:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def process_tree(root: int) -> dict[int, tuple[int, str, str, int]]:
    """pid -> (ppid, group, comm, CPU ticks) for `root` and all its descendants. Groups: `jvm` (java), `workers` (Python
    below a JVM), `other` (anything else below a JVM: Hadoop's shell commands, jspawnhelper), `driver` (the rest)."""
    parents: dict[int, tuple[int, str, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                parents[int(entry)] = found
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree: dict[int, tuple[int, str, str, int]] = {}
    stack: list[tuple[int, bool]] = [(root, False)]
    while stack:
        pid, under_jvm = stack.pop()
        ppid, comm, ticks = parents.get(pid, (0, "", 0))
        if comm == "java":
            group = "jvm"
        elif under_jvm:
            group = "workers" if comm.startswith("python") else "other"
        else:
            group = "driver"
        tree[pid] = (ppid, group, comm, ticks)
        stack.extend((child, under_jvm or comm == "java") for child in children.get(pid, []))
    return tree


def _memory_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmSize) in kB; zeros when the process is gone."""
    text = _read(f"/proc/{pid}/status")
    rss = size = 0
    for line in (text or "").splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmSize:"):
            size = int(line.split()[1])
    return rss, size


def _same_memory(child: tuple[int, int], parent: tuple[int, int]) -> bool:
    """Figures that can only be the parent's own (same address space size, RSS within 1%, read moments apart)."""
    return child[1] == parent[1] and abs(child[0] - parent[0]) <= max(1024, parent[0] // 100)


@dataclass
class MemoryPeaks:
    """Peak summed RSS per group and peak PSS of the Python workers, in MiB."""

    rss_mb: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0.0))
    workers_pss_mb: float = 0.0
    max_workers: int = 0
    samples: int = 0
    per_process: dict[str, float] = field(default_factory=dict)  # "group pid comm" -> peak RSS MiB
    cpu_ticks: dict[int, tuple[str, int]] = field(default_factory=dict)  # pid -> (group, last CPU ticks seen)
    jvm_series: list[tuple[float, float]] = field(default_factory=list)  # (time.monotonic(), JVM RSS MiB) per sample

    def sample(self, root: int) -> None:
        tree = process_tree(root)
        memory = {pid: _memory_kb(pid) for pid in tree}
        sums = dict.fromkeys(GROUPS, 0)
        pss = workers = 0
        for pid, (ppid, group, comm, ticks) in tree.items():
            self.cpu_ticks[pid] = (group, ticks)
            rss, size = memory[pid]
            # A child spawned with vfork/posix_spawn shares its parent's memory until it execs, and /proc shows
            # the parent's figures for it (a JVM's whole RSS, for each `chmod` Hadoop runs): not counted.
            if ppid in memory and rss and _same_memory((rss, size), memory[ppid]):
                continue
            name = f"{group} {pid} {comm}"
            self.per_process[name] = max(self.per_process.get(name, 0.0), rss / 1024)
            sums[group] += rss
            sums["total"] += rss
            if group == "workers":
                workers += 1
                pss += _pss_kb(pid)
        for group, kb in sums.items():
            self.rss_mb[group] = max(self.rss_mb[group], kb / 1024)
        self.jvm_series.append((time.monotonic(), sums["jvm"] / 1024))
        self.workers_pss_mb = max(self.workers_pss_mb, pss / 1024)
        self.max_workers = max(self.max_workers, workers)
        self.samples += 1

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"peak_{g}_rss_mb": round(v, 1) for g, v in self.rss_mb.items()}
        out["peak_workers_pss_mb"] = round(self.workers_pss_mb, 1)
        out["max_python_workers"] = self.max_workers
        top = sorted(self.per_process.items(), key=lambda kv: -kv[1])[:6]
        out["peak_rss_mb_by_process"] = {name: round(mb, 1) for name, mb in top}
        # CPU seconds per group, as last seen while sampling (a process misses at most its last 0.2 s).
        for group in GROUPS[:-1]:
            ticks = sum(t for g, t in self.cpu_ticks.values() if g == group)
            out[f"cpu_{group}_s"] = round(ticks / TICKS, 1)
        return out


@dataclass
class Line:
    at: float  # time.monotonic() when the line arrived
    stream: str
    text: str


class Measured:
    """A running subprocess whose output lines are timestamped and whose process tree is sampled."""

    def __init__(self, cmd: Sequence[str], *, env: Mapping[str, str], log_file: Path, cwd: Path | None = None,
                 on_line: Callable[[Line], None] | None = None, interval: float = 0.2) -> None:
        self.cmd = list(cmd)
        self.lines: list[Line] = []
        self.peaks = MemoryPeaks()
        self.on_line = on_line
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_file, "w")  # closed in wait()
        self._log.write(f"$ {' '.join(self.cmd)}\n")
        self.started = time.monotonic()
        # A session of its own: a Ctrl-C on the benchmark reaches this process only through us, by its pid.
        self.proc = subprocess.Popen(self.cmd, env=dict(env), cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                     start_new_session=True)
        self._lock = threading.Lock()
        self._done = threading.Event()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, "out"), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, "err"), daemon=True)]
        self._sampler = threading.Thread(target=self._sample, args=(interval,), daemon=True)
        for t in [*self._readers, self._sampler]:
            t.start()
        self.ended: float | None = None

    def _read(self, stream: IO[str], name: str) -> None:
        for text in stream:
            line = Line(time.monotonic(), name, text.rstrip("\n"))
            with self._lock:
                self.lines.append(line)
                self._log.write(f"{line.at - self.started:9.3f} {name} {line.text}\n")
            if self.on_line is not None:
                self.on_line(line)

    def _sample(self, interval: float) -> None:
        while not self._done.is_set():
            if self.proc.poll() is None:
                self.peaks.sample(self.proc.pid)
            self._done.wait(interval)

    def signal(self, sig: int = signal.SIGINT) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process (SIGKILL by pid after `timeout`) and its output; return the exit code."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._log.write(f"timeout after {timeout}s: killing pid {self.proc.pid}\n")
            self.proc.kill()
            code = self.proc.wait()
        self.ended = self.ended or time.monotonic()
        self._done.set()
        for t in self._readers:
            t.join(10)
        self._sampler.join(5)
        self._log.write(f"exit code {code}, wall {self.ended - self.started:.2f}s\n")
        self._log.close()
        return code

    @property
    def wall_seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def text(self, stream: str | None = None) -> str:
        with self._lock:
            return "\n".join(x.text for x in self.lines if stream is None or x.stream == stream)

    def tail(self, n: int = 25) -> str:
        with self._lock:
            return "\n".join(x.text for x in self.lines[-n:])
