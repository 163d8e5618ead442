"""The CPU's compute limit and a model's FLOPs: what a real-time factor is a fraction of.

    python -m loadtests.roofline

Peak FLOP/s per core = clock x FMA units x SIMD lanes x 2, with the lanes read from the CPU flags
(AVX-512: 16 fp32 lanes, AVX2+FMA: 8) and 2 FMA units assumed (server Xeon and EPYC cores have
two; a VM does not say). `measured_peak` is a one-thread 2000x2000 fp32 matmul: what torch's GEMM
actually reaches, the practical ceiling for the convs and products. bf16 doubles the peak where
the CPU has AVX512-BF16 (a dot product of bf16 pairs per fp32 lane).
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

FMA_UNITS = 2
"""Assumed FMA units per core (not exposed by /proc/cpuinfo)."""


@dataclass(frozen=True, slots=True)
class Cpu:
    """What the roofline needs to know about this machine."""

    name: str
    flags: frozenset[str]
    mhz: float

    @property
    def fp32_lanes(self) -> int:
        if "avx512f" in self.flags:
            return 16
        return 8 if {"avx2", "fma"} <= self.flags else 4

    @property
    def peak_gflops(self) -> float:
        """fp32 GFLOP/s per core from the clock and the flags."""
        return self.mhz / 1e3 * FMA_UNITS * self.fp32_lanes * 2

    @property
    def vector_features(self) -> str:
        wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni")
        extras = ("amx_bf16", "amx_int8", "amx_tile")
        return ", ".join(flag for flag in wanted + extras if flag in self.flags) or "none"

    def line(self) -> str:
        return (
            f"{self.name}, {self.mhz:.0f} MHz, {self.vector_features}; fp32 peak "
            f"{self.peak_gflops:.0f} GFLOP/s per core ({FMA_UNITS} FMA x {self.fp32_lanes} lanes"
            f" x 2), bf16 x2 {'available' if 'avx512_bf16' in self.flags else 'absent'}"
        )


def this_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> Cpu:
    """The first processor of `/proc/cpuinfo`."""
    fields: dict[str, str] = {}
    for line in cpuinfo.read_text().splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return Cpu(
        name=fields.get("model name", platform.processor() or "unknown CPU"),
        flags=frozenset(fields.get("flags", "").split()),
        mhz=float(fields.get("cpu MHz", "0") or 0),
    )


def measured_peak_gflops(size: int = 2000, reps: int = 5) -> float:
    """Best one-thread fp32 GEMM rate, GFLOP/s (thread CPU time)."""
    torch.set_num_threads(1)
    a = torch.randn(size, size)
    a @ a
    best = float("inf")
    for _ in range(reps):
        started = time.thread_time()
        a @ a
        best = min(best, time.thread_time() - started)
    return 2 * size**3 / best / 1e9


def counted_flops(model: nn.Module, example: torch.Tensor) -> float:
    """FLOPs torch's flop counter sees in one forward (matrix products and convs; not FFTs,
    not the fused oneDNN LSTM kernel: callers add those)."""
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model(example)
    return float(counter.get_total_flops())


def roofline_row(name: str, flops_per_audio_s: float, rtf_per_core: float, cpu: Cpu) -> str:
    """A Markdown row: FLOPs per audio second, achieved GFLOP/s per core, share of the peak."""
    achieved = flops_per_audio_s * rtf_per_core / 1e9
    return (
        f"| {name} | {flops_per_audio_s / 1e6:.1f} | {rtf_per_core:.0f}x | {achieved:.1f} | "
        f"{cpu.peak_gflops:.0f} | {achieved / cpu.peak_gflops:.0%} |"
    )


ROOFLINE_HEADER = (
    "| model | MFLOP per audio second | x real time per core | achieved GFLOP/s per core "
    "| peak GFLOP/s per core | share of peak |\n|---|---|---|---|---|---|"
)


def main() -> None:
    cpu = this_cpu()
    print(cpu.line())
    print(f"measured one-thread fp32 GEMM (2000x2000): {measured_peak_gflops():.0f} GFLOP/s")


if __name__ == "__main__":
    main()
