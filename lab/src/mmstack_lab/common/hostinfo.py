"""What a benchmark result says about the host it ran on (launch-bound GPU runs depend on the CPU)."""

from __future__ import annotations

import os
import platform


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def host() -> dict:
    """CPU model and the cores this process may use; no host name, no paths."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_name(), "cpu_cores": cores, "python": platform.python_version()}
