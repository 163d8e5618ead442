"""How many CPUs the process may use, and LibTorch's own thread pools pinned accordingly."""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path


def available_cpus(
    cgroup_root: Path = Path("/sys/fs/cgroup"), proc_self: Path = Path("/proc/self")
) -> int:
    """CPUs this process may run on: the affinity mask, capped by a cgroup CPU quota (rounded up).

    A container on a 64-core host limited to 2 CPUs gets 2.

    >>> available_cpus() >= 1
    True
    """
    cpus = len(os.sched_getaffinity(0))
    quota = _cgroup_quota(cgroup_root, proc_self)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return cpus


def _cgroup_quota(root: Path, proc_self: Path) -> float | None:
    """The CPU quota in CPUs from cgroup v2 (`cpu.max`) or v1 (`cfs_quota_us`), if any."""
    for relative in _cgroup_paths(proc_self):
        v2 = root / relative.lstrip("/") / "cpu.max"
        quota = _read_v2(v2) if v2.is_file() else None
        if quota is not None:
            return quota
    v1 = root / "cpu"
    if (v1 / "cpu.cfs_quota_us").is_file():
        return _read_v1(v1)
    return None


def _cgroup_paths(proc_self: Path) -> list[str]:
    """This process's cgroup v2 path and its ancestors, innermost first (the tightest quota)."""
    try:
        lines = (proc_self / "cgroup").read_text().splitlines()
    except OSError:
        return ["/"]
    path = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), "/")
    parts = [part for part in path.split("/") if part]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _read_v2(path: Path) -> float | None:
    quota, _, period = path.read_text().strip().partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _read_v1(folder: Path) -> float | None:
    quota = int((folder / "cpu.cfs_quota_us").read_text().strip())
    period = int((folder / "cpu.cfs_period_us").read_text().strip())
    return quota / period if quota > 0 and period > 0 else None


@dataclass(frozen=True, slots=True)
class TorchThreads:
    """LibTorch's effective thread settings, as reported by torch itself."""

    intra_op: int
    inter_op: int


def configure_torch(intra_op: int, inter_op: int) -> TorchThreads:
    """Pin LibTorch's intra-op and inter-op pools; call before any torch work.

    torch refuses to change the inter-op pool once it has been used; the effective values are
    returned either way, so callers report what is true rather than what was asked.
    """
    import torch

    torch.set_num_threads(intra_op)
    if torch.get_num_interop_threads() != inter_op:
        # Refused once the pool has started: the effective value returned below tells the truth.
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(inter_op)
    return TorchThreads(intra_op=torch.get_num_threads(), inter_op=torch.get_num_interop_threads())
