"""How the op benchmarks time a call (bench_ops, nms_anatomy): a few calls to warm up, then
timings of `iters` calls each, in microseconds per call: between two CUDA events on the GPU (the
device synchronised before the first and after the second), by perf_counter on the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable

WARMUP_CALLS = 3


def warm_up(fn: Callable[[], object], seconds: float = 0.0) -> None:
    """WARMUP_CALLS calls, then more until `seconds` have passed (an idle GPU's clocks and the host's
    take a moment to rise: h100/perf-run15's first rows of small calls ran 1.4x slower than the same
    call a second later)."""
    for _ in range(WARMUP_CALLS):
        fn()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()


def per_call_us(fn: Callable[[], object], iters: int, device: str) -> float:
    """One timing: `iters` calls of fn, µs per call (CUDA events where device is "cuda")."""
    if device == "cuda":
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3 / iters
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t) * 1e6 / iters
