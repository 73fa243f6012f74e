"""Background servers the project starts and stops by pid: the pid file, the check that a pid is still the
server it names (pids are reused), readiness on a loopback port, and a stop by that pid alone."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ingestion.errors import IngestionError

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000


def free_port() -> int:
    """A free port on 127.0.0.1 for a server this project starts, below the kernel's ephemeral range where there is
    room: a port the kernel hands out (a bind to port 0) comes from the range its outgoing connections take their
    local ports from, so on a busy machine a connection could hold it by the time the server binds it (a Kafka node
    then exits at its start). Port 0's answer where the range is unknown or starts too low."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    candidates = [random.randrange(LOWEST_PORT, low) for _ in range(20)] if low > LOWEST_PORT + 1000 else []
    for port in [*candidates, 0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken: the next candidate
            return int(sock.getsockname()[1])
    raise OSError("no free port on 127.0.0.1")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child still answers kill(0); its /proc status says so
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@dataclass(frozen=True)
class PidFile:
    """`path` holds the pid; `marker` is a string the server's command line must contain (its own folder), so a
    pid reused by another process is never signalled."""

    path: Path
    marker: str

    def pid(self) -> int | None:
        """The server's pid when it runs (and is really this server), else None."""
        try:
            pid = int(self.path.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            return None
        return pid if self.marker in cmdline and alive(pid) else None

    def write(self, pid: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(str(pid))

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM to the server, SIGKILL after `timeout`; its pid, or None when it was not running."""
        pid = self.pid()
        if pid is None:
            self.path.unlink(missing_ok=True)
            return None
        terminate(pid, timeout)
        self.path.unlink(missing_ok=True)
        return pid


def terminate(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM to `pid`, SIGKILL if it still runs after `timeout` seconds."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float, what: str, log: Path) -> None:
    """Return once 127.0.0.1:`port` accepts a connection; raise when `process` exits first or after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise IngestionError(f"{what} exited with {process.returncode} before it listened on 127.0.0.1:{port}; "
                                 f"see {log}:\n{tail(log)}")
        if port_open(port):
            return
        time.sleep(0.3)
    raise IngestionError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f}s; see {log}:\n{tail(log)}")


def tail(log: Path, lines: int = 15) -> str:
    if not log.is_file():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def process_age() -> float | None:
    """Seconds since this process started (Linux's /proc), None where that cannot be read: a run's log names the
    time it took from the process's start, imports and all."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_ticks = int(fields[19])  # field 22 of stat(5), counted after the command name's field
        uptime = float(Path("/proc/uptime").read_text().split()[0])  # since boot, to the hundredth of a second
        return uptime - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
