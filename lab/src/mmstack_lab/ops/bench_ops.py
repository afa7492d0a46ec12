"""Op timings: mmcv (as installed) against torchvision on the same device.

    python -m mmstack_lab.ops.bench_ops --device cuda --repeats 7 --json > ops.json

Each timing is the median of `--repeats` runs of `--iters` calls after warm-up, measured with
CUDA events on the GPU (perf_counter on the CPU). Prints a table, or JSON with --json.
Shapes follow issue 8: roi_align on 2x256x200x200 features with 1000 rois, nms at 1k and 20k
boxes, deform_conv on 2x64x128x128 (3x3), and one 3D op (points_in_boxes_part).
`--full` (issue 24): every mmcv op torchvision also has, at detector sizes, fp32 and fp16 on CUDA,
forward and forward+backward where training runs both (`_full` lists them). Each row says its
dtype and pass; a dtype an op does not take is recorded with its error instead of a time.
`--only roi_align,nms` times only those ops' rows; `--paired` times each row's sides in turns (ABBA
pairs) and adds the torchvision/mmcv ratio's 95% interval.
"""

from __future__ import annotations

import argparse
import json
import statistics

from mmstack_lab.ops.boxes import random_boxes
from mmstack_lab.ops.timing import per_call_us, warm_up


def _timer(device):
    def run(fn, iters, repeats):
        """The median of `repeats` timings after warm-up, µs per call."""
        warm_up(fn)
        return statistics.median(per_call_us(fn, iters, device) for _ in range(repeats))

    return run


def bench(device: str, repeats: int, iters: int, *, full: bool = False, only: set[str] | None = None,
          paired: bool = False, nms_sizes: tuple[int, ...] | None = None) -> list[dict]:
    """Issue 8's rows; with `full`, issue 24's side-by-side set (see `_full`); `only`: these ops.

    `paired`: each row's two sides take turns, `repeats` pairs of timings (the side timed first alternating,
    ABBA), so the machine's drift falls on both; the row adds the pairs' torchvision/mmcv ratios, their median
    and its 95% interval. `nms_sizes`: the box counts of --full's nms rows (default: 100 to 100k on CUDA)."""
    import torch
    from mmcv import ops

    try:
        import torchvision.ops as tvops
    except (ImportError, OSError, RuntimeError) as exc:  # optional; a build not matching torch raises RuntimeError
        tvops = None
        tv_reason = f"torchvision not importable: {exc}"
    run = _timer(device)
    rows = []

    def add(name, shape, mm, tv, *, dtype="float32", passes="forward"):
        if only and name not in only:
            return
        row = {"op": name, "shape": shape, "dtype": dtype, "pass": passes}
        if paired and tv is not None and tvops is not None:
            try:
                row.update(_paired(mm, tv, iters, repeats, device))
                rows.append(row)
                return
            except (RuntimeError, NotImplementedError):  # a dtype a side does not take: timed apart below
                pass
        try:
            row["mmcv_us"] = run(mm, iters, repeats)
        except (RuntimeError, NotImplementedError) as exc:  # a dtype the op does not take on this device
            row["mmcv"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        if tv is not None and tvops is not None:
            row["torchvision_us"] = run(tv, iters, repeats)
            if "mmcv_us" in row:
                row["ratio_tv_over_mmcv"] = row["torchvision_us"] / row["mmcv_us"]
        elif tvops is None:
            row["torchvision"] = tv_reason
        rows.append(row)

    if full:
        _full(add, ops, tvops, device, nms_sizes)
        return rows

    torch.manual_seed(0)
    feats = torch.randn(2, 256, 200, 200, device=device)
    boxes, _ = random_boxes(1000, 1, device)
    boxes = boxes / 4  # feature-map scale
    bidx = torch.randint(0, 2, (1000, 1), device=device).float()
    rois = torch.cat([bidx, boxes], 1)
    add("roi_align", "2x256x200x200, 1000 rois, 7x7",
        lambda: ops.roi_align(feats, rois, (7, 7), 1.0, 2, "avg", True),
        (lambda: tvops.roi_align(feats, rois, (7, 7), 1.0, 2, True)) if tvops else None)

    for n in (1000, 20000):
        b, s = random_boxes(n, 2, device)
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


def tv_nms_dets(tvops, boxes, scores, iou_threshold: float, idxs=None):
    """torchvision's nms (its batched_nms with `idxs`) with what `mmcv.ops.nms` (`batched_nms`) returns
    besides the indices: the kept rows of boxes and scores, (k, 5), made as mmcv makes them (one cat, one
    index_select)."""
    import torch

    keep = tvops.nms(boxes, scores, iou_threshold) if idxs is None else tvops.batched_nms(boxes, scores, idxs, iou_threshold)
    return torch.cat((boxes, scores.reshape(-1, 1)), dim=1).index_select(0, keep), keep


PAIRED_WARMUP_S = 0.5  # each side of a paired row runs this long before its first pair


def _paired(mm, tv, iters: int, repeats: int, device: str) -> dict:
    """`repeats` ABBA pairs of timings (µs per call): each side's median, the ratio of medians as unpaired
    rows give it, and the pairs' torchvision/mmcv ratios with their median's 95% interval."""
    from mmstack_lab.common.pair_stats import ratio_summary

    warm_up(mm, seconds=PAIRED_WARMUP_S)
    warm_up(tv, seconds=PAIRED_WARMUP_S)
    pairs = []
    for i in range(repeats):
        order = (("mmcv", mm), ("torchvision", tv)) if i % 2 == 0 else (("torchvision", tv), ("mmcv", mm))
        pair = {side: per_call_us(fn, iters, device) for side, fn in order}
        pair["ratio"] = pair["torchvision"] / pair["mmcv"]
        pairs.append(pair)
    mm_us = statistics.median(p["mmcv"] for p in pairs)
    tv_us = statistics.median(p["torchvision"] for p in pairs)
    return {"mmcv_us": mm_us, "torchvision_us": tv_us, "ratio_tv_over_mmcv": tv_us / mm_us, "pairs": pairs,
            **ratio_summary([p["ratio"] for p in pairs])}


def _full(add, ops, tvops, device: str, nms_sizes: tuple[int, ...] | None = None) -> None:
    """Issue 24: every mmcv op torchvision also has, at the sizes detectors use, fp32 and fp16.

    nms and batched_nms (80 classes) at 100 to 100k boxes (mmcv's nms also returns the kept boxes
    with their scores: `mmcv.ops.nms` as users call it), and nms_indices: the compiled op alone
    (`ext_module.nms`, kept indices, what torchvision's nms returns), and nms_dets / batched_nms_dets:
    `mmcv.ops.nms` / `batched_nms` against torchvision's followed by the same dets (`tv_nms_dets`); roi_align (7x7 box head, 14x14 mask head)
    and roi_pool, forward and forward+backward; deform_conv2d and modulated_deform_conv2d (DCNv2:
    torchvision's deform_conv2d with a mask) forward and forward+backward; box
    IoU (mmcv's bbox_overlaps, torchvision's box_iou); sigmoid focal loss (mmcv takes class
    indices, torchvision one-hot targets; both reduce to the mean).
    """
    import importlib

    import torch

    nms_ext = importlib.import_module("mmcv.ops.nms").ext_module  # `mmcv.ops.nms` the name is the function
    torch.manual_seed(0)
    sizes = nms_sizes or ((100, 1000, 10000, 100000) if device == "cuda" else (100, 1000))
    for n in sizes:
        b, s = random_boxes(n, 2, device)
        idx = torch.randint(0, 80, (n,), device=device)
        add("nms", f"{n} boxes, iou 0.5", lambda b=b, s=s: ops.nms(b, s, 0.5),
            (lambda b=b, s=s: tvops.nms(b, s, 0.5)) if tvops else None)
        add("batched_nms", f"{n} boxes, 80 classes, iou 0.5",
            lambda b=b, s=s, i=idx: ops.batched_nms(b, s, i, {"type": "nms", "iou_threshold": 0.5}),
            (lambda b=b, s=s, i=idx: tvops.batched_nms(b, s, i, 0.5)) if tvops else None)
        # the same work as torchvision's nms: the compiled op mmcv's nms calls, kept indices only
        add("nms_indices", f"{n} boxes, iou 0.5", lambda b=b, s=s: nms_ext.nms(b, s, iou_threshold=0.5, offset=0),
            (lambda b=b, s=s: tvops.nms(b, s, 0.5)) if tvops else None)
        # the same work as mmcv's batched_nms: torchvision's, then the kept rows' dets made as mmcv makes them
        add("batched_nms_dets", f"{n} boxes, 80 classes, iou 0.5",
            lambda b=b, s=s, i=idx: ops.batched_nms(b, s, i, {"type": "nms", "iou_threshold": 0.5}),
            (lambda b=b, s=s, i=idx: tv_nms_dets(tvops, b, s, 0.5, idxs=i)) if tvops else None)
        # the same work as mmcv's nms: torchvision's kept indices, then the kept rows' dets made as mmcv makes them
        add("nms_dets", f"{n} boxes, iou 0.5", lambda b=b, s=s: ops.nms(b, s, 0.5),
            (lambda b=b, s=s: tv_nms_dets(tvops, b, s, 0.5)) if tvops else None)

    dtypes = (torch.float32, torch.float16) if device == "cuda" else (torch.float32,)
    feat_side = 200 if device == "cuda" else 50
    for dtype in dtypes:
        name = str(dtype).removeprefix("torch.")
        feats = torch.randn(2, 256, feat_side, feat_side, device=device, dtype=dtype)
        for n_rois, out, head in ((1000, 7, "box head"), (100, 14, "mask head")):
            boxes, _ = random_boxes(n_rois, 1, device)
            boxes = boxes * (feat_side / 800)
            bidx = torch.randint(0, 2, (n_rois, 1), device=device).float()
            rois = torch.cat([bidx, boxes], 1).to(dtype)
            shape = f"2x256x{feat_side}x{feat_side}, {n_rois} rois, {out}x{out} ({head})"
            add("roi_align", shape, lambda f=feats, r=rois, o=out: ops.roi_align(f, r, (o, o), 1.0, 2, "avg", True),
                (lambda f=feats, r=rois, o=out: tvops.roi_align(f, r, (o, o), 1.0, 2, True)) if tvops else None,
                dtype=name)
            g = feats.detach().clone().requires_grad_(True)
            add("roi_align", shape,
                lambda g=g, r=rois, o=out: ops.roi_align(g, r, (o, o), 1.0, 2, "avg", True).sum().backward(),
                (lambda g=g, r=rois, o=out: tvops.roi_align(g, r, (o, o), 1.0, 2, True).sum().backward()) if tvops else None,
                dtype=name, passes="forward+backward")
            if head == "box head":
                add("roi_pool", shape, lambda f=feats, r=rois, o=out: ops.roi_pool(f, r, (o, o), 1.0),
                    (lambda f=feats, r=rois, o=out: tvops.roi_pool(f, r, (o, o), 1.0)) if tvops else None, dtype=name)

        side = 128 if device == "cuda" else 32
        x = torch.randn(2, 64, side, side, device=device, dtype=dtype)
        weight = torch.randn(64, 64, 3, 3, device=device, dtype=dtype)
        offset = torch.randn(2, 18, side, side, device=device, dtype=dtype)
        dcn = ops.DeformConv2d(64, 64, 3, padding=1, bias=False).to(device=device, dtype=dtype)
        with torch.no_grad():
            dcn.weight.copy_(weight)
        shape = f"2x64x{side}x{side}, 3x3"
        add("deform_conv2d", shape, lambda x=x, o=offset, m=dcn: m(x, o),
            (lambda x=x, o=offset, w=weight: tvops.deform_conv2d(x, o, w, padding=(1, 1))) if tvops else None, dtype=name)
        xg = x.detach().clone().requires_grad_(True)
        wg = weight.detach().clone().requires_grad_(True)
        add("deform_conv2d", shape, lambda xg=xg, o=offset, m=dcn: m(xg, o).sum().backward(),
            (lambda xg=xg, wg=wg, o=offset: tvops.deform_conv2d(xg, o, wg, padding=(1, 1)).sum().backward()) if tvops else None,
            dtype=name, passes="forward+backward")
        # modulated (DCNv2): torchvision's deform_conv2d with mask=; every input takes a gradient on
        # both sides (mmcv's backward computes them all anyway)
        mask = torch.rand(2, 9, side, side, device=device, dtype=dtype)
        add("modulated_deform_conv2d", shape, lambda x=x, o=offset, m=mask, w=weight: ops.modulated_deform_conv2d(x, o, m, w, None, 1, 1),
            (lambda x=x, o=offset, m=mask, w=weight: tvops.deform_conv2d(x, o, w, padding=(1, 1), mask=m)) if tvops else None,
            dtype=name)
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, offset, mask, weight)]
        add("modulated_deform_conv2d", shape,
            lambda t=leaves: ops.modulated_deform_conv2d(t[0], t[1], t[2], t[3], None, 1, 1).sum().backward(),
            (lambda t=leaves: tvops.deform_conv2d(t[0], t[1], t[3], padding=(1, 1), mask=t[2]).sum().backward()) if tvops else None,
            dtype=name, passes="forward+backward")

        a, _ = random_boxes(1000, 3, device)
        c, _ = random_boxes(1000, 4, device)
        a, c = a.to(dtype), c.to(dtype)
        add("box_iou", "1000x1000 boxes", lambda a=a, c=c: ops.bbox_overlaps(a, c),
            (lambda a=a, c=c: tvops.box_iou(a, c)) if tvops else None, dtype=name)

        logits = torch.randn(20000, 80, device=device, dtype=dtype)
        labels = torch.randint(0, 80, (20000,), device=device)
        onehot = torch.nn.functional.one_hot(labels, 80).to(dtype)
        add("sigmoid_focal_loss", "20000 anchors x 80 classes",
            lambda lg=logits, lb=labels: ops.sigmoid_focal_loss(lg, lb, 2.0, 0.25, None, "mean"),
            (lambda lg=logits, t=onehot: tvops.sigmoid_focal_loss(lg, t, 0.25, 2.0, "mean")) if tvops else None,
            dtype=name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--full", action="store_true", help="issue 24's set: every op torchvision also has, sizes, fp32/fp16")
    ap.add_argument("--only", default="", help="comma-separated op names: time only these rows")
    ap.add_argument("--paired", action="store_true",
                    help="the sides take turns, --repeats ABBA pairs a row, with the ratio's 95%% interval")
    ap.add_argument("--nms-sizes", default="", help="comma-separated box counts for --full's nms rows, e.g. 100,1000")
    args = ap.parse_args()
    only = {x for x in args.only.split(",") if x} or None
    try:
        nms_sizes = tuple(int(x) for x in args.nms_sizes.split(",") if x) or None
    except ValueError:
        nms_sizes = None
    if args.nms_sizes and (not nms_sizes or min(nms_sizes) < 1):
        ap.exit(2, f"bench_ops: --nms-sizes {args.nms_sizes!r}: give positive box counts, e.g. 100,1000\n")
    rows = bench(args.device, args.repeats, args.iters, full=args.full, only=only, paired=args.paired,
                 nms_sizes=nms_sizes)
    if args.json:
        print(json.dumps({"device": args.device, "repeats": args.repeats, "iters": args.iters, "paired": args.paired,
                          "set": "full" if args.full else "issue 8", "ops": rows}, indent=2))
        return
    print(f"{'op':<22}{'shape':<50}{'dtype':<9}{'pass':<18}{'mmcv us':>10}{'tv us':>10}{'tv/mmcv':>9}")
    for r in rows:
        nan = float("nan")
        print(f"{r['op']:<22}{r['shape']:<50}{r['dtype']:<9}{r['pass']:<18}{r.get('mmcv_us', nan):>10.1f}"
              f"{r.get('torchvision_us', nan):>10.1f}{r.get('ratio_tv_over_mmcv', nan):>9.2f}")


if __name__ == "__main__":
    main()
