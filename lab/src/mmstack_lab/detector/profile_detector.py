"""Where a Faster R-CNN training iteration spends its time: mmdet (on this project's mmcv) and
torchvision, profiled the same way (torch.profiler, CUDA kernels and CPU ops).

    python -m mmstack_lab.detector.profile_detector --device cuda --json > profile.json

For each side, after warm-up, `--iters` iterations run under the profiler. Per iteration it
reports: wall time; the summed time of the CUDA kernels ("gpu_busy"); the part of it spent in
detection-op kernels (RoIAlign, NMS, deformable conv: mmcv's own kernels on the mmdet side,
torchvision's on the other); kernel launches; and the top kernels and CPU ops by self time.
wall - gpu_busy is time the GPU waited for the host (Python, dispatch, synchronisation).
The same steps as mmstack_lab.detector.bench_detector (same batch, model set-up, AMP).
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any

from mmstack_lab.detector import bench_detector as bd, harness

# Kernels of the detection ops either library brings (mmcv: roi_align_forward_cuda_kernel,
# nms_cuda, modulated_deformable_im2col_gpu_kernel, ...; torchvision: vision::ops::...).
DETECTION_OP = re.compile(r"roi_align|roi_pool|nms|deformable|deform_|im2col|col2im|vision::ops", re.I)


def profile_step(step, *, warmup: int, iters: int, device: str) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        step()
    harness.sync(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(iters):
            step()
        harness.sync(device)
        wall = time.perf_counter() - start
    kernels: dict[str, list[float]] = {}
    cpu_ops: dict[str, float] = {}
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(evt.name, [0.0, 0])
            kernels[evt.name][0] += evt.device_time_total if hasattr(evt, "device_time_total") else evt.cuda_time_total
            kernels[evt.name][1] += 1
    for avg in prof.key_averages():
        if avg.self_cpu_time_total > 0:
            cpu_ops[avg.key] = avg.self_cpu_time_total
    busy_us = sum(v[0] for v in kernels.values())
    det_us = sum(v[0] for k, v in kernels.items() if DETECTION_OP.search(k))
    launches = sum(v[1] for v in kernels.values())
    top_k = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:12]
    top_cpu = sorted(cpu_ops.items(), key=lambda kv: -kv[1])[:12]
    per = 1.0 / iters
    return {
        "iters": iters,
        "wall_ms_per_iter": round(wall * 1e3 * per, 3),
        "gpu_busy_ms_per_iter": round(busy_us / 1e3 * per, 3),
        "detection_op_kernels_ms_per_iter": round(det_us / 1e3 * per, 3),
        "other_kernels_ms_per_iter": round((busy_us - det_us) / 1e3 * per, 3),
        "gpu_idle_ms_per_iter": round(wall * 1e3 * per - busy_us / 1e3 * per, 3),
        "kernel_launches_per_iter": round(launches * per, 1),
        "top_kernels": [{"name": k[:160], "ms_per_iter": round(v[0] / 1e3 * per, 3), "calls_per_iter": round(v[1] * per, 1),
                         "detection_op": bool(DETECTION_OP.search(k))} for k, v in top_k],
        "top_cpu_ops_self": [{"name": k[:160], "ms_per_iter": round(v / 1e3 * per, 3)} for k, v in top_cpu],
    }


def run(args) -> dict:
    import torch

    harness.require_device(args, "profile_detector")
    samples = harness.synthetic_batch(args)
    sides: dict[str, dict[str, Any]] = {}
    makers = {
        "mmdet": lambda: bd.mmdet_step(args, samples)[1],
        "torchvision-matched": lambda: bd.torchvision_step(args, samples, "matched")[1],
    }
    for name, make in makers.items():
        try:
            step = make()
        except Exception as exc:  # noqa: BLE001 - a side that cannot run is reported, not fatal
            sides[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
            continue
        sides[name] = profile_step(step, warmup=args.warmup, iters=args.iters, device=args.device)
        del step
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    gap = None
    a, b = sides.get("mmdet", {}), sides.get("torchvision-matched", {})
    if "wall_ms_per_iter" in a and "wall_ms_per_iter" in b:
        gap = {k: round(a[k] - b[k], 3) for k in ("wall_ms_per_iter", "gpu_busy_ms_per_iter",
                                                  "detection_op_kernels_ms_per_iter", "other_kernels_ms_per_iter",
                                                  "gpu_idle_ms_per_iter")}
    return {
        "what": "torch.profiler over training iterations; mmdet - torchvision per iteration in 'gap'",
        **harness.setting(args),
        "versions": {"torch": torch.__version__},
        "results": sides, "gap_mmdet_minus_torchvision": gap,
    }


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser(__doc__.splitlines()[0], warmup=5, iters=10)
    args = harness.parse_args(ap, argv, "profile_detector")
    report = harness.quiet_stdout(run, args, quiet=True)  # the report is JSON with or without --json
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
