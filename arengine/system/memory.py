"""Process memory as the kernel and the allocator see it: resident set, its peak, jemalloc stats.

Read at scrape time; each reader returns nothing rather than raising where the source is missing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

JEMALLOC_STATS = ("allocated", "active", "resident", "retained", "mapped")


def resident_memory(status: Path = Path("/proc/self/status")) -> dict[str, int]:
    """`{"resident": VmRSS, "peak_resident": VmHWM}` in bytes; empty when /proc is unreadable.

    >>> resident_memory()["resident"] > 0
    True
    """
    fields = {"VmRSS:": "resident", "VmHWM:": "peak_resident"}
    try:
        lines = status.read_text().splitlines()
    except OSError:
        return {}
    found: dict[str, int] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] in fields and parts[2] == "kB":
            found[fields[parts[0]]] = int(parts[1]) * 1024
    return found


class Jemalloc:
    """jemalloc's own statistics through `mallctl`, for a process where jemalloc is loaded.

    Example, where jemalloc is the active allocator: `Jemalloc.load().stats()["allocated"]`.
    """

    def __init__(self, mallctl: Callable[..., int]) -> None:
        self._mallctl = mallctl

    @classmethod
    def load(cls) -> Jemalloc | None:
        """The allocator of this process if it exports `mallctl` (jemalloc preloaded), else None."""
        mallctl = getattr(ctypes.CDLL(None), "mallctl", None)
        if mallctl is None:
            return None
        size_p = ctypes.POINTER(ctypes.c_size_t)
        void_p = ctypes.c_void_p
        mallctl.argtypes = [ctypes.c_char_p, void_p, size_p, void_p, ctypes.c_size_t]
        mallctl.restype = ctypes.c_int
        return cls(mallctl)

    def stats(self) -> dict[str, int]:
        """`stats.<name>` in bytes for each of JEMALLOC_STATS, after refreshing jemalloc's epoch."""
        # jemalloc caches its statistics; writing the epoch is what refreshes them.
        epoch = ctypes.c_uint64(1)
        size = ctypes.c_size_t(ctypes.sizeof(epoch))
        self._mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), size)
        found: dict[str, int] = {}
        for name in JEMALLOC_STATS:
            value = ctypes.c_size_t(0)
            size = ctypes.c_size_t(ctypes.sizeof(value))
            key = f"stats.{name}".encode()
            if self._mallctl(key, ctypes.byref(value), ctypes.byref(size), None, 0) == 0:
                found[name] = value.value
        return found
