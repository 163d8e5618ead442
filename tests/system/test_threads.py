"""CPU detection from the affinity mask and fake cgroup trees; torch thread pinning."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arengine.system.threads import available_cpus, configure_torch


def _proc(tmp_path: Path, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    return proc


@pytest.fixture
def many_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))


def test_cgroup_v2_quota_caps_a_64_core_host(tmp_path: Path, many_cpus: None) -> None:
    root = tmp_path / "cg"
    (root / "kubepods" / "pod1").mkdir(parents=True)
    (root / "kubepods" / "pod1" / "cpu.max").write_text("200000 100000\n")
    (root / "cpu.max").write_text("max 100000\n")
    assert available_cpus(root, _proc(tmp_path, "0::/kubepods/pod1\n")) == 2


def test_cgroup_v2_fractional_quota_rounds_up(tmp_path: Path, many_cpus: None) -> None:
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cpu.max").write_text("150000 100000\n")
    assert available_cpus(root, _proc(tmp_path, "0::/\n")) == 2


def test_cgroup_v2_parent_quota_applies(tmp_path: Path, many_cpus: None) -> None:
    root = tmp_path / "cg"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "cpu.max").write_text("max 100000\n")
    (root / "a" / "cpu.max").write_text("300000 100000\n")
    assert available_cpus(root, _proc(tmp_path, "0::/a/b\n")) == 3


def test_cgroup_v1_quota(tmp_path: Path, many_cpus: None) -> None:
    cpu = tmp_path / "cg" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("400000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus(tmp_path / "cg", _proc(tmp_path, "4:cpu:/\n")) == 4


def test_no_quota_means_the_affinity_mask(tmp_path: Path, many_cpus: None) -> None:
    cpu = tmp_path / "cg" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus(tmp_path / "cg", _proc(tmp_path, "4:cpu:/\n")) == 64


def test_affinity_mask_below_the_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cpu.max").write_text("800000 100000\n")
    assert available_cpus(root, _proc(tmp_path, "0::/\n")) == 1


def test_this_machine() -> None:
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


def test_torch_threads_are_reported_as_torch_sees_them() -> None:
    threads = configure_torch(1, 1)
    assert threads.intra_op == 1
    assert threads.inter_op >= 1
