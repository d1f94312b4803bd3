"""How many notebooks to grade at once, and how many torch threads each grading gets.

One grading keeps about one core busy: the grader (checks) and the student's process (cells,
adapter calls) mostly take turns. Where the machine's count of cores is not what this process
may use (a container's CPU quota, Binder's 2 GB of memory on a many-core host), the cgroup's
limits are what count, so they are read as well as ``os.cpu_count()``.
"""

from __future__ import annotations

import os
from pathlib import Path

# Peak resident memory of one grading, grader and student's process together: 0.67 GB (notebook 12) to
# 1.17 GB (notebook 13) measured on the solutions, sampled every 50 ms; room left for heavier student code.
GRADING_MEMORY = 1536 * 2**20


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def usable_cpus() -> int:
    """Cores this process may use: its affinity, capped by a cgroup v2 CPU quota ("200000 100000" = 2)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = (_read("/sys/fs/cgroup/cpu.max") or "max").split()
    if quota[0] != "max" and len(quota) == 2:
        cpus = min(cpus, max(1, int(quota[0]) // int(quota[1])))
    return max(1, cpus)


def available_memory() -> int | None:
    """Bytes this process could still use: the kernel's MemAvailable, capped by a cgroup's limit."""
    free = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            free = int(line.split()[1]) * 1024
    limit, used = _read("/sys/fs/cgroup/memory.max"), _read("/sys/fs/cgroup/memory.current")
    if limit and limit.isdigit() and used and used.isdigit():
        free = min(free or 2**63, int(limit) - int(used))
    return free


def default_workers(share: float = 0.5) -> int:
    """Gradings at once: ``share`` of the usable cores, at most what memory holds, at least one.

    A student's progress check takes half the cores, so JupyterLab and the kernel they are working in stay
    responsive; a dedicated grading machine can take them all (``share=1``).
    """
    by_cpu = int(usable_cpus() * share)
    memory = available_memory()
    by_memory = memory // GRADING_MEMORY if memory is not None else by_cpu
    return max(1, min(by_cpu, by_memory))


def threads_per_grading(workers: int) -> int:
    """Torch threads for each of ``workers`` gradings at once, so that together they fill the cores, no more."""
    return max(1, usable_cpus() // max(1, workers))
