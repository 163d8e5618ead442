"""Allocator detection."""

from __future__ import annotations

from pathlib import Path

from arengine.system.allocator import active_allocator, find_jemalloc


def test_jemalloc_is_seen_in_the_memory_map(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n")
    assert active_allocator(maps) == "jemalloc"
    maps.write_text("7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert active_allocator(maps) == "glibc"
    assert active_allocator(tmp_path / "missing") == "unknown"


def test_find_jemalloc_takes_the_first_existing(tmp_path: Path) -> None:
    library = tmp_path / "libjemalloc.so.2"
    library.write_bytes(b"")
    assert find_jemalloc([str(tmp_path / "nope.so"), str(library)]) == str(library)
    assert find_jemalloc([str(tmp_path / "nope.so")]) is None
