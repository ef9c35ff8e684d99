"""What the benchmarks read of a run: percentiles of samples, a process's CPU time, memory, threads and open file
descriptors (/proc)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
MB_PER_MIB = 1024 * 1024 / 1e6  # the targets are in MB (10^6 bytes); /proc counts KiB


def percentile(samples: list[float], q: float) -> float:
    """The q-quantile (0 < q < 1) of `samples`, interpolated between the nearest samples."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=1000, method="inclusive")[round(q * 1000) - 1]


def cpu_seconds(pid: int) -> float:
    """User and system CPU the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def status_field(pid: int | str, key: str) -> int:
    """A number of /proc/PID/status: `VmRSS` or `VmHWM` (KiB), `Threads`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise KeyError(key)


def rss_mib(pid: int | str = "self", key: str = "VmRSS") -> float:
    """The process's resident memory (`VmHWM`: its peak) in MiB."""
    return status_field(pid, key) / 1024


def open_fds(pid: int | str) -> int:
    """The file descriptors the process has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))
