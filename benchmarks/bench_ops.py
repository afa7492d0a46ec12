"""Op timings: mmcv (as installed) against torchvision on the same device.

    python benchmarks/bench_ops.py --device cuda --repeats 7 --json > ops.json

Each timing is the median of `--repeats` runs of `--iters` calls after warm-up, measured with
CUDA events on the GPU (perf_counter on the CPU). Prints a table, or JSON with --json.
Shapes follow issue 8: roi_align on 2x256x200x200 features with 1000 rois, nms at 1k and 20k
boxes, deform_conv on 2x64x128x128 (3x3), and one 3D op (points_in_boxes_part).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def _timer(device):
    import torch

    def run(fn, iters, repeats):
        for _ in range(3):
            fn()
        samples = []
        for _ in range(repeats):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                for _ in range(iters):
                    fn()
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end) * 1e3 / iters)  # microseconds
            else:
                t = time.perf_counter()
                for _ in range(iters):
                    fn()
                samples.append((time.perf_counter() - t) * 1e6 / iters)
        return statistics.median(samples)

    return run


def _boxes(n, device, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 800
    wh = torch.rand(n, 2, generator=g) * 200 + 8
    boxes = torch.cat([xy, xy + wh], 1)
    scores = torch.rand(n, generator=g)
    return boxes.to(device), scores.to(device)


def bench(device: str, repeats: int, iters: int) -> list[dict]:
    import torch
    from mmcv import ops

    try:
        import torchvision.ops as tvops
    except (ImportError, OSError, RuntimeError) as exc:  # optional; a build not matching torch raises RuntimeError
        tvops = None
        tv_reason = f"torchvision not importable: {exc}"
    run = _timer(device)
    rows = []

    def add(name, shape, mm, tv):
        row = {"op": name, "shape": shape, "mmcv_us": run(mm, iters, repeats)}
        if tv is not None and tvops is not None:
            row["torchvision_us"] = run(tv, iters, repeats)
            row["ratio_tv_over_mmcv"] = row["torchvision_us"] / row["mmcv_us"]
        elif tvops is None:
            row["torchvision"] = tv_reason
        rows.append(row)

    torch.manual_seed(0)
    feats = torch.randn(2, 256, 200, 200, device=device)
    boxes, _ = _boxes(1000, device, 1)
    boxes = boxes / 4  # feature-map scale
    bidx = torch.randint(0, 2, (1000, 1), device=device).float()
    rois = torch.cat([bidx, boxes], 1)
    add("roi_align", "2x256x200x200, 1000 rois, 7x7",
        lambda: ops.roi_align(feats, rois, (7, 7), 1.0, 2, "avg", True),
        (lambda: tvops.roi_align(feats, rois, (7, 7), 1.0, 2, True)) if tvops else None)

    for n in (1000, 20000):
        b, s = _boxes(n, device, 2)
        add("nms", f"{n} boxes, iou 0.5",
            lambda b=b, s=s: ops.nms(b, s, 0.5),
            (lambda b=b, s=s: tvops.nms(b, s, 0.5)) if tvops else None)

    x = torch.randn(2, 64, 128, 128, device=device)
    weight = torch.randn(64, 64, 3, 3, device=device)
    offset = torch.randn(2, 18, 128, 128, device=device)
    dcn = ops.DeformConv2d(64, 64, 3, padding=1, bias=False).to(device)
    with torch.no_grad():
        dcn.weight.copy_(weight)
    add("deform_conv", "2x64x128x128, 3x3",
        lambda: dcn(x, offset),
        (lambda: tvops.deform_conv2d(x, offset, weight, padding=(1, 1))) if tvops else None)

    if device == "cuda":  # points_in_boxes_part is CUDA-only in mmcv 2.2
        pts = torch.rand(2, 20000, 3, device=device) * 40
        centers = torch.rand(2, 100, 3, device=device) * 40
        sizes = torch.rand(2, 100, 3, device=device) * 4 + 1
        yaw = torch.rand(2, 100, 1, device=device)
        boxes3d = torch.cat([centers, sizes, yaw], 2)
        add("points_in_boxes_part", "2x20000 points, 100 boxes", lambda: ops.points_in_boxes_part(pts, boxes3d), None)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = bench(args.device, args.repeats, args.iters)
    if args.json:
        print(json.dumps({"device": args.device, "repeats": args.repeats, "iters": args.iters, "ops": rows}, indent=2))
        return
    print(f"{'op':<22}{'shape':<34}{'mmcv us':>10}{'tv us':>10}{'tv/mmcv':>9}")
    for r in rows:
        tv = r.get("torchvision_us")
        print(f"{r['op']:<22}{r['shape']:<34}{r['mmcv_us']:>10.1f}{(tv or float('nan')):>10.1f}"
              f"{r.get('ratio_tv_over_mmcv', float('nan')):>9.2f}")


if __name__ == "__main__":
    main()
