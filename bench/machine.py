"""The machine a benchmark ran on, printed by every bench so its numbers can be compared."""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
from datetime import datetime


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "? GiB"


def _filesystem(path: str) -> str:
    """The type and device of the filesystem holding `path` (`df -T`), where available."""
    try:
        out = (
            subprocess.run(
                ["df", "-PT", path], capture_output=True, text=True, timeout=5, check=True
            )
            .stdout.splitlines()[-1]
            .split()
        )
        return f"{out[1]} on {out[0]}"
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def describe() -> str:
    """One line: date, CPU model and count, RAM, OS, Python, filesystem of the temp folder."""
    tmp = tempfile.gettempdir()
    return (
        f"machine: {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, {_cpu_model()}, "
        f"{os.cpu_count()} CPUs, {_ram_gib()} RAM, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, temp {tmp} on {_filesystem(tmp)}, "
        f"load {os.getloadavg()[0]:.2f}"
    )


def print_machine() -> None:
    print(describe(), flush=True)
