"""Detector training speed: mmdet Faster R-CNN (on this project's mmcv) against torchvision's.

    python -m mmstack_lab.detector.bench_detector --device cuda --json > detector.json
    python -m mmstack_lab.detector.bench_detector --device cpu --image-size 128 --iters 2 --repeats 3
    python -m mmstack_lab.detector.bench_detector --device cuda --batch-size 8 --repeats 10 --paired --json
    python -m mmstack_lab.detector.bench_detector --device cuda --batch-size 8 --iters 10 --repeats 2 --processes 10 --json

Sequential by default: each side is built, warmed up and timed in one block, then the next, so
drift of the machine between blocks lands on one side. `--paired` (mmdet and torchvision-matched
only) builds both in one process and alternates their timings ABBA; its ratio is the median of the
per-pair ratios, but the two models then share one caching allocator and one Python heap (on the
H200 mmdet's rate dropped in pairs: lab/results/h200/detector-retime/, docs/mmdet.md).
`--processes N` runs each side in fresh child processes instead, N ABBA pairs of them, and gives the
median of the pair ratios with a 95% interval. Every result names its command and its host's CPU.

Both sides train ResNet-50-FPN Faster R-CNN from random weights on the same fixed synthetic
batch (src/mmstack/verify/train_detector.py makes it), with SGD and, on CUDA, float16 autocast with a
dynamic loss scale (mmengine's AmpOptimWrapper; torch.autocast + GradScaler for torchvision).
After `--warmup` iterations, each of `--repeats` timings runs `--iters` iterations; the
reported it/s is the median. `ratio` = mmdet it/s / torchvision it/s (> 1: mmdet is faster).

torchvision is built twice:
- "stock": the brief's `fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None)`; without
  pretrained weights torchvision trains all five ResNet stages with ordinary BatchNorm.
- "matched": the same builder's parts set up like mmdet's faster-rcnn_r50_fpn_1x_coco: stem and
  layer1 frozen (3 trainable stages), BatchNorm kept in eval mode while training with its affine
  weights trained in the trainable stages (mmdet's `norm_eval=True` with `norm_cfg`
  `requires_grad=True`), zero-init residuals, 1000 RPN proposals per image in training. The ratio
  against this one compares implementations, not configurations; each side's `setup` (trainable
  tensors and values, BatchNorm layers in train mode) shows that they agree, but for torchvision's
  box regressor's row for the background class (4 x 1,025 values, TV_BACKGROUND_BOX_VALUES).
  Until 2026-12-04 "matched" used torchvision's FrozenBatchNorm2d, which freezes the affine
  weights too: mmdet then trained 84 BatchNorm tensors (50,176 values) that torchvision did not,
  and every H200 result before that date compares those two setups.
Both get min_size = max_size = image size, so torchvision does not resize the batch (its default
would upscale 128 px images to 800).

A side that cannot run (torchvision absent or not importable beside this torch, mmdet or mmcv's
ops missing) is reported with its reason instead of a number, and the ratio is then null.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

from mmstack_lab.common.hostinfo import host
from mmstack_lab.common.pair_stats import ratio_summary
from mmstack_lab.detector import harness
from mmstack_lab.detector.harness import require_stack, sync, td
from mmstack_lab.paths import child_env

SIDES = ("mmdet", "torchvision-matched")  # what --paired and --processes compare
# torchvision's FastRCNNPredictor regresses a box for the background class too (1,024 inputs + bias)
TV_BACKGROUND_BOX_VALUES = 4 * (1024 + 1)


def _timing(step, losses: list, *, iters: int, device: str) -> float:
    """One timing: `iters` iterations between two synchronisations; it/s."""
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        losses.append(step())
    sync(device)
    return iters / (time.perf_counter() - start)


def _summary(rates: list[float], losses: list[float]) -> dict:
    return {
        "iters_per_s": statistics.median(rates),
        "iters_per_s_all": rates,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses_finite": all(math.isfinite(loss) for loss in losses),
        # Speed of a diverging run means little: say so next to the number.
        "loss_fell": losses[-1] < losses[0],
    }


def _time(step, *, warmup: int, iters: int, repeats: int, device: str) -> dict:
    losses = [step() for _ in range(warmup)]
    rates = [_timing(step, losses, iters=iters, device=device) for _ in range(repeats)]
    return _summary(rates, losses)


def mmdet_step(args, samples):
    """(model, step): one mmdet training iteration on the fixed batch, returning the loss."""
    side = harness.mmdet_side(args, samples)

    def step() -> float:
        loss = side.model.train_step(side.data, side.optim)["loss"]
        return float(loss.detach() if hasattr(loss, "detach") else loss)

    return side.model, step


def bench_mmdet(args, samples) -> dict:
    try:
        require_stack()
    except td.DetectorStepUnavailable as exc:
        return {"skipped": str(exc)}
    model, step = mmdet_step(args, samples)
    return _timed(args, step, framework="mmdet", setup=training_setup(model), config=str(td.resolve_config(args.model)),
                  deformable_ops=td.deformable_ops(model), amp=harness.amp(args), versions=require_stack())


def _timed(args, step, **about) -> dict:
    """A side's timings (warm-up, then --repeats timings of --iters), `about` it, and its peak memory on CUDA."""
    import torch

    result = _time(step, warmup=args.warmup, iters=args.iters, repeats=args.repeats, device=args.device)
    peak = torch.cuda.max_memory_allocated(args.device) / 2**20 if harness.cuda(args) else None
    return {**result, **about, "max_memory_mib": peak}


def training_setup(model) -> dict:
    """What a side trains, to compare across sides: trainable tensors and values, and how many
    BatchNorm layers are in train mode (updating running statistics) out of how many."""
    import torch

    trainable = [p for p in model.parameters() if p.requires_grad]
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    return {"trainable_tensors": len(trainable), "trainable_values": sum(p.numel() for p in trainable),
            "batchnorm_layers": len(norms), "batchnorm_in_train_mode": sum(m.training for m in norms)}


def torchvision_step(args, samples, variant: str):
    """(model, step): one torchvision Faster R-CNN training iteration on the same batch, returning the loss."""
    import torch

    tv = harness.torchvision_side(args, samples, variant)

    def step() -> float:
        tv.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=tv.device_type, dtype=torch.float16, enabled=tv.amp):
            losses = tv.model(tv.images, tv.targets)
            loss = sum(losses.values())
        tv.scaler.scale(loss).backward()
        tv.scaler.step(tv.optimizer)
        tv.scaler.update()
        return float(loss.detach())

    return tv.model, step


def bench_torchvision(args, samples, variant: str) -> dict:
    try:
        import torch
        import torchvision
    except Exception as exc:  # noqa: BLE001 - one built for another torch fails in odd ways
        return {"skipped": f"torchvision does not import: {type(exc).__name__}: {exc}"}

    model, step = torchvision_step(args, samples, variant)
    return _timed(args, step, framework=f"torchvision-{variant}", setup=training_setup(model), amp=harness.amp(args),
                  versions={"torch": torch.__version__, "torchvision": torchvision.__version__})


def bench_paired(args, samples) -> dict:
    """--paired: mmdet and torchvision-matched built side by side in this process, each warmed up,
    then their timings alternate in ABBA order (mmdet, tv, tv, mmdet, ...), so the machine's drift
    (CPU clocks, other tenants: at batch 2 both models are launch-bound) hits both sides alike.
    The ratio is the median of the per-pair ratios, each pair two adjacent timings."""
    try:
        require_stack()
        import torchvision  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a side that cannot run is reported, not timed
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    mm_model, mm = mmdet_step(args, samples)
    tv_model, tv = torchvision_step(args, samples, "matched")
    steps = dict(zip(SIDES, (mm, tv), strict=True))
    setups = dict(zip(SIDES, (training_setup(mm_model), training_setup(tv_model)), strict=True))
    losses = {name: [step() for _ in range(args.warmup)] for name, step in steps.items()}
    rates: dict[str, list[float]] = {name: [] for name in steps}
    pairs = []
    for i in range(args.repeats):
        order = SIDES if i % 2 == 0 else SIDES[::-1]
        pair = {name: _timing(steps[name], losses[name], iters=args.iters, device=args.device) for name in order}
        for name, rate in pair.items():
            rates[name].append(rate)
        pairs.append({"first": order[0], **pair})
    return {
        "order": "ABBA: pair i times mmdet first where i is even, torchvision first where odd",
        "sides": {name: {**_summary(rates[name], losses[name]), "setup": setups[name]} for name in steps},
        **_pair_ratios(pairs),
    }


def _pair_ratios(pairs: list[dict]) -> dict:
    """Each pair's mmdet / torchvision ratio (added to the pair), their median, range and interval."""
    for pair in pairs:
        pair["ratio"] = pair["mmdet"] / pair["torchvision-matched"]
    return {"pairs": pairs, **ratio_summary([p["ratio"] for p in pairs])}


def bench_processes(args, argv: list[str]) -> dict:
    """--processes N: N pairs of child processes (this script with --only SIDE), ABBA, each child
    building its one model, warming it up and timing --repeats timings of --iters iterations (its
    median is its rate). No state is shared between the sides, and the machine's drift hits both.
    Every child of a side must import the same versions (each side's `versions`), or none is reported."""
    import subprocess

    base, skip = [], False  # the parent's arguments less its own mode flags
    for a in argv:
        if skip or a in ("--json", "--paired") or a.startswith("--processes="):
            skip = False
        elif a == "--processes":
            skip = True
        else:
            base.append(a)
    pairs: list[dict] = []
    sides: dict[str, list[dict]] = {s: [] for s in SIDES}
    seconds: list[float] = []
    for i in range(args.processes):
        order = SIDES if i % 2 == 0 else SIDES[::-1]
        pair = {"first": order[0]}
        for side in order:
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "mmstack_lab.detector.bench_detector", *base, "--only", side,
                                   "--json"], capture_output=True, text=True, env=child_env())
            seconds.append(round(time.perf_counter() - start, 1))
            if done.returncode != 0:
                return {"skipped": f"{side} child exited {done.returncode}: {done.stderr.strip()[-400:]}"}
            result = json.loads(done.stdout)["results"][side]
            if "skipped" in result:
                return {"skipped": f"{side}: {result['skipped']}"}
            if sides[side] and result["versions"] != sides[side][0]["versions"]:
                return {"skipped": f"{side}: child {len(sides[side]) + 1} imported {result['versions']}, "
                                   f"child 1 {sides[side][0]['versions']}"}
            sides[side].append(result)
            pair[side] = result["iters_per_s"]
            print(f"processes: pair {i + 1}/{args.processes} {side}: {result['iters_per_s']:.3f} it/s, "
                  f"child {seconds[-1]} s", file=sys.stderr, flush=True)  # gpu-proof's .err shows progress
        pairs.append(pair)
    return {
        "order": "ABBA over fresh processes: pair i runs mmdet's child first where i is even, torchvision's where odd",
        "sides": {s: {"iters_per_s": statistics.median(r["iters_per_s"] for r in rs),
                      "iters_per_s_all": [r["iters_per_s"] for r in rs],
                      "losses_finite": all(r["losses_finite"] for r in rs),
                      "loss_fell": all(r["loss_fell"] for r in rs),
                      "max_memory_mib": max((r["max_memory_mib"] or 0) for r in rs) or None,
                      "versions": rs[0]["versions"], "setup": rs[0]["setup"]} for s, rs in sides.items()},
        **_pair_ratios(pairs),
        "child_seconds": seconds,
    }


def _header(args, argv: list[str]) -> dict:
    return {"command": " ".join(["python -m mmstack_lab.detector.bench_detector", *argv]), "host": host(),
            **harness.setting(args), "iters": args.iters, "repeats": args.repeats}


def run(args, argv: list[str] | None = None) -> dict:
    import torch

    argv = list(sys.argv[1:] if argv is None else argv)
    harness.require_device(args, "bench_detector")
    harness.default_image_size(args)
    if args.processes:  # each child makes its own batch
        return {**_header(args, argv), "processes": bench_processes(args, argv)}
    samples = harness.synthetic_batch(args)
    if args.paired:
        return {**_header(args, argv), "paired": bench_paired(args, samples)}
    sides = {}
    benches = {
        "mmdet": lambda: bench_mmdet(args, samples),
        "torchvision-matched": lambda: bench_torchvision(args, samples, "matched"),
        "torchvision-stock": lambda: bench_torchvision(args, samples, "stock"),
    }
    for name, bench in benches.items():
        if args.only and name != args.only:
            continue
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(args.device)
        sides[name] = bench()

    def ratio(tv: str):
        a, b = sides.get("mmdet", {}).get("iters_per_s"), sides.get(tv, {}).get("iters_per_s")
        return a / b if a and b else None

    return {
        **_header(args, argv),
        "results": sides,
        "ratio": ratio("torchvision-matched"),
        "ratio_vs_stock": ratio("torchvision-stock"),
    }


def _print_table(report: dict) -> None:
    if "paired" in report or "processes" in report:
        paired = report.get("paired") or report["processes"]
        if "skipped" in paired:
            print(f"paired: skipped: {paired['skipped']}")
            return
        for p in paired["pairs"]:
            print(f"  mmdet {p['mmdet']:8.3f} it/s  torchvision-matched {p['torchvision-matched']:8.3f} it/s  "
                  f"ratio {p['ratio']:.3f} ({p['first']} first)")
        ci = paired["ratio_median_ci95"]
        print(f"  median of pair ratios: {paired['ratio_median_of_pairs']:.3f}"
              + (f", 95% interval {ci[0]:.3f}-{ci[1]:.3f}" if ci else ", too few pairs for a 95% interval"))
        return
    print(
        f"{report['model']} on {report['device_name']}, batch {report['batch_size']}x"
        f"{report['image_size']}px, amp={report['amp']}, median of {report['repeats']}x"
        f"{report['iters']} iterations after {report['warmup']} warm-up"
    )
    for name, side in report["results"].items():
        if "skipped" in side:
            print(f"  {name:22s} skipped: {side['skipped']}")
        else:
            print(
                f"  {name:22s} {side['iters_per_s']:8.3f} it/s   loss {side['loss_first']:.3f} -> "
                f"{side['loss_last']:.3f}" + ("" if side["loss_fell"] else "  (loss did not fall)")
            )
    for key, label in (("ratio", "matched"), ("ratio_vs_stock", "stock")):
        value = report[key]
        print(f"  mmdet / torchvision-{label}: " + (f"{value:.3f}" if value else "n/a"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_arguments(parser, warmup=5, iters=10, iters_help="iterations per timing",
                          model_help="mmdet side (train_detector.MODELS)")
    parser.add_argument("--repeats", type=int, default=5)
    harness.add_training_arguments(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--paired", action="store_true",
                      help="mmdet and torchvision-matched only, in one process, --repeats timings alternating "
                           "(ABBA); ratio per pair")
    mode.add_argument("--processes", type=int, default=0, metavar="N",
                      help="N pairs of child processes, one side each, ABBA, each timing --repeats x --iters; "
                           "ratio per pair")
    mode.add_argument("--only", choices=("mmdet", "torchvision-matched", "torchvision-stock"),
                      help="time this side alone (the children of --processes)")
    parser.add_argument("--json", action="store_true")
    args = harness.parse_args(parser, argv, "bench_detector")
    report = harness.quiet_stdout(run, args, argv, quiet=args.json)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
