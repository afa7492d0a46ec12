"""A Python-level patch to mmcv or mmdet, A/B against the installed package it would change (issue 24).

    python -m mmstack_lab.ops.patch_ab --patch recipes/mmcv/patches/0010-roi-align-half-backward-in-float.patch \
        --ops roi_align --tests tests/test_ops/test_roi_align.py --upstream mmcv-2.2.0.github.tar.gz \
        --device cuda --json > patch_ab.json

For a patch that touches only Python files of mmcv (or of mmdet: `--package mmdet`; a CUDA-source
patch needs a rebuild: the proof's --proposed builds, mmstack_lab.proof.run). The installed package (`import mmcv`
in this interpreter) is copied into an
overlay folder and the patch applied there with `patch -p1` (or reversed there, where the
installed package already carries it: a PROPOSED=1 build); every measurement then runs in a
child process twice, released and patched (the overlay first on PYTHONPATH for its side),
alternating sides so drift hits both:

- times: `bench_ops.py --full --only OPS` on each side, `--rounds` times, medians per row, and
  the patched / released ratio per row (below 1: the patch is faster);
- gradients: for roi_align, deform_conv2d and modulated_deform_conv2d (where --ops names them),
  the gradient of each input and dtype against the same computation in float64 (max and mean
  absolute error), so a patch that changes how gradients accumulate shows what it does to accuracy;
- same (`--same nms`): mmstack_lab.ops.nms_cases on each side, a digest of what nms and batched_nms
  return for each of its random cases; a patch that must not change the results needs equal digests;
- upstream: the named files of upstream's test suite (from the tag archive) through
  `python -m mmstack.verify.upstream_tests`, as the recipe runs them, with the counts per side; a
  patch that fails a test the released package passes is not a candidate;
- detector (`--detector 2,8`): bench_detector.py on each side at those batch sizes; with
  `--detector-processes N`, N ABBA pairs of fresh child processes a batch size instead (mmdet only,
  one side each), their patched / released ratios with a 95% interval for the median.

A candidate's header may carry its own arguments on a line `patch_ab: --ops roi_align --tests ...`
(the command line wins). The patch enters its recipe (recipes/{mmcv,mmdet}/patches/) only after
this has run on a GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from mmstack_lab.paths import child_env

# Per op: the input gradients of each dtype against the same computation in float64 (one script,
# argv: device, dtypes, ops). Each op's leaves are made in float64 and cast per dtype.
GRADS = r"""
import json, sys, torch
from mmcv import ops
device, dtypes, names = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
out = []

def compare(op, shape, run, leaves, grad_out, labels):
    def grads(dtype):
        xs = [t.detach().to(dtype).clone().requires_grad_(True) for t in leaves]
        run(dtype, *xs).backward(grad_out.to(dtype))
        return [x.grad.to(torch.float64) for x in xs]
    ref = grads(torch.float64)
    for name in dtypes:
        for label, g, r in zip(labels, grads(getattr(torch, name)), ref):
            err = (g - r).abs()
            out.append({"op": op, "shape": shape, "dtype": name, "grad_of": label, "grad_max_abs_err": err.max().item(),
                        "grad_mean_abs_err": err.mean().item(), "ref_max_abs": r.abs().max().item()})

if "roi_align" in names:
    torch.manual_seed(0)
    side = 200 if device == "cuda" else 50
    for n_rois, size in ((1000, 7), (100, 14)):
        feats = torch.randn(2, 256, side, side, device=device, dtype=torch.float64)
        xy = torch.rand(n_rois, 2, device=device, dtype=torch.float64) * side * 0.75
        wh = torch.rand(n_rois, 2, device=device, dtype=torch.float64) * side * 0.25 + 1
        bidx = torch.randint(0, 2, (n_rois, 1), device=device).to(torch.float64)
        rois = torch.cat([bidx, xy, xy + wh], 1)
        grad_out = torch.randn(n_rois, 256, size, size, device=device, dtype=torch.float64)
        compare("roi_align", f"2x256x{side}x{side}, {n_rois} rois, {size}x{size}",
                lambda dt, f, r=rois, s=size: ops.roi_align(f, r.to(dt), (s, s), 1.0, 2, "avg", True),
                [feats], grad_out, ["input"])
for op in ("deform_conv2d", "modulated_deform_conv2d"):
    if op not in names:
        continue
    torch.manual_seed(0)
    side = 128 if device == "cuda" else 24
    x = torch.randn(2, 64, side, side, device=device, dtype=torch.float64)
    offset = torch.randn(2, 18, side, side, device=device, dtype=torch.float64) * 2
    mask = torch.rand(2, 9, side, side, device=device, dtype=torch.float64)
    weight = torch.randn(64, 64, 3, 3, device=device, dtype=torch.float64) / 24
    grad_out = torch.randn(2, 64, side, side, device=device, dtype=torch.float64)
    shape = f"2x64x{side}x{side}, 3x3"
    if op == "deform_conv2d":
        compare(op, shape, lambda dt, x, o, w: ops.deform_conv2d(x, o, w, 1, 1), [x, offset, weight], grad_out,
                ["input", "offset", "weight"])
    else:
        compare(op, shape, lambda dt, x, o, m, w: ops.modulated_deform_conv2d(x, o, m, w, None, 1, 1),
                [x, offset, mask, weight], grad_out, ["input", "offset", "mask", "weight"])
print(json.dumps(out))
"""


class Overlay(NamedTuple):
    """The installed package copied aside with the patch applied forward (side "patched") or, where
    the installed package already carries it (a PROPOSED=1 build), reversed (side "released").
    `base`, where set, is the other side's copy: the installed package without the recipe's later
    patches that touch the patch's files (they must come off before it can)."""

    path: Path
    side: str
    base: Path | None = None


def _patch(dest: Path, patch: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(["patch", "-p1", "--batch", *flags, "-d", str(dest), "-i", str(patch.resolve())],
                          capture_output=True, text=True)


def _touched(patch: Path) -> set[str]:
    return {line[6:].split("\t")[0] for line in patch.read_text().splitlines() if line.startswith("+++ b/")}


def later_overlapping(patch: Path) -> list[Path]:
    """A recipe patch's (recipes/<name>/patches/) later patches that touch one of its files, or one
    of theirs, in the recipe's order: what has to come off the installed package before it can."""
    if patch.parent.name != "patches":
        return []
    files, later = _touched(patch), []
    for p in sorted(patch.parent.glob("0*.patch")):
        if p.name > patch.name and _touched(p) & files:
            later.append(p)
            files |= _touched(p)
    return later


def overlay(patch: Path, dest: Path, python: str, package: str = "mmcv") -> Overlay:
    """The installed package (mmcv or mmdet) copied under dest/ with the patch applied, or reversed
    where the installed package already carries it; the other side is the installed package. A
    recipe patch that later recipe patches build on (0006 under 0009) is reversed from a copy
    without those (dest/base, reversed newest first), and that copy is the patched side."""
    src = Path(subprocess.run([python, "-c", f"import {package}, os; print(os.path.dirname({package}.__file__))"],
                              capture_output=True, text=True, check=True).stdout.strip())
    shutil.copytree(src, dest / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    forward = _patch(dest, patch, "--dry-run", "--forward")
    if not forward.returncode:
        _patch(dest, patch, "--forward")
        return Overlay(dest, "patched")
    if not _patch(dest, patch, "--dry-run", "--reverse").returncode:
        _patch(dest, patch, "--reverse")
        return Overlay(dest, "released")
    later = later_overlapping(patch)
    if later:
        base = dest / "base"
        shutil.copytree(src, base / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        for p in reversed(later):
            done = _patch(base, p, "--reverse")
            if done.returncode:
                raise SystemExit(f"{p}: does not come off the installed {package} ({src}): {done.stdout.strip()}")
        shutil.rmtree(dest / package)
        shutil.copytree(base / package, dest / package, symlinks=True)
        if not _patch(dest, patch, "--dry-run", "--reverse").returncode:
            _patch(dest, patch, "--reverse")
            return Overlay(dest, "released", base)
    raise SystemExit(f"{patch}: does not apply to the installed {package} ({src}): {forward.stdout.strip()} {forward.stderr.strip()}")


def _env(side: str, over: Overlay) -> dict:
    env = child_env()  # the children run lab modules (bench_ops, bench_detector) in the prefix's python
    path = over.path if side == over.side else over.base
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _child(cmd: list[str], side: str, over: Overlay, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(side, over), **kw)


def _mmcv_us(row: dict, side: str) -> float:
    """A bench_ops row's mmcv time; a row it could not time (a dtype the op does not take) has none to compare."""
    if "mmcv_us" not in row:
        raise RuntimeError(f"bench_ops timed no mmcv {row['op']} {row['shape']} {row['dtype']} {row['pass']} "
                           f"on the {side} side: {row.get('mmcv')}")
    return float(row["mmcv_us"])


def times(python: str, over: Overlay, device: str, ops: str, rounds: int, repeats: int, iters: int) -> list[dict]:
    runs: dict[str, list[list[dict]]] = {"released": [], "patched": []}
    for _ in range(rounds):
        for side in ("released", "patched"):
            done = _child([python, "-m", "mmstack_lab.ops.bench_ops", "--device", device, "--full", "--only", ops, "--json",
                           "--repeats", str(repeats), "--iters", str(iters)], side, over, check=True)
            runs[side].append(json.loads(done.stdout)["ops"])
    rows = []
    for i, row in enumerate(runs["released"][0]):
        key = {k: row[k] for k in ("op", "shape", "dtype", "pass")}
        rel = [_mmcv_us(r[i], "released") for r in runs["released"]]
        pat = [_mmcv_us(r[i], "patched") for r in runs["patched"]]
        tv = [r[i]["torchvision_us"] for r in runs["released"] + runs["patched"] if r[i].get("torchvision_us")]
        out = dict(key, released_us=[round(x, 1) for x in rel], patched_us=[round(x, 1) for x in pat])
        out["released_median_us"], out["patched_median_us"] = statistics.median(rel), statistics.median(pat)
        out["patched_over_released"] = round(out["patched_median_us"] / out["released_median_us"], 3)
        if tv:
            out["torchvision_median_us"] = statistics.median(tv)
            out["torchvision_over_patched"] = round(out["torchvision_median_us"] / out["patched_median_us"], 3)
        rows.append(out)
    return rows


GRAD_OPS = ("roi_align", "deform_conv2d", "modulated_deform_conv2d")  # the ops GRADS knows


def each_side(python: str, over: Overlay, script: str, *args: str, timeout: float | None = None) -> dict:
    """`python -c script args...` released and patched; per side, its last stdout line as JSON. A side
    that exits non-zero raises with the end of its stderr."""
    out = {}
    for side in ("released", "patched"):
        done = _child([python, "-c", script, *args], side, over, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{side} side exited {done.returncode}: {done.stderr[-1500:]}")
        out[side] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def grads(python: str, over: Overlay, device: str, ops: list[str]) -> dict:
    dtypes = "float16,float32" if device == "cuda" else "float32"
    return each_side(python, over, GRADS, device, dtypes, ",".join(ops))


SAME = {"nms": "mmstack_lab.ops.nms_cases",  # --same: what has a case-by-case digest module
        "rpn_proposals": "mmstack_lab.detector.rpn_proposal_cases",
        "rpn_targets": "mmstack_lab.detector.rpn_target_cases"}


def same(python: str, over: Overlay, device: str, ops: list[str], cases: int) -> dict:
    """Each op's case digests on both sides: identical when every case returned the same. A side that
    exits non-zero is recorded (not identical, with the end of its stderr), so the timings already
    taken still come back."""
    out: dict[str, dict] = {}
    for op in ops:
        sides = {}
        for side in ("released", "patched"):
            done = _child([python, "-m", SAME[op], "--device", device, "--cases", str(cases), "--json"], side, over)
            if done.returncode != 0:
                out[op] = {"module": SAME[op], "cases": cases, "identical": False,
                           "error": f"{side} side exited {done.returncode}: {done.stderr.strip()[-1500:]}"}
                break
            sides[side] = json.loads(done.stdout)
        if op in out:
            continue
        rel, pat = sides["released"], sides["patched"]
        differ = [i for i, (a, b) in enumerate(zip(rel["case_digests"], pat["case_digests"], strict=True)) if a != b]
        out[op] = {"module": SAME[op], "cases": cases, "identical": rel["digest"] == pat["digest"],
                   "differing_cases": differ[:20], "n_differing": len(differ), "digest": {"released": rel["digest"],
                   "patched": pat["digest"]}, "summary": {"released": rel["summary"], "patched": pat["summary"]}}
    return out


def upstream(python: str, over: Overlay, archive: Path, tests: list[str], work: Path) -> dict:
    """Upstream's test files on each side, through mmstack.verify.upstream_tests (as the recipe runs them)."""
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        members = [m for m in tar.getmembers() if m.name.startswith(f"{top}/tests/")]
        tar.extractall(work, members=members, filter="data")
    root = work / top
    out = {}
    for side in ("released", "patched"):
        report = work / f"upstream-{side}.json"
        done = _child([python, "-m", "mmstack.verify.upstream_tests", *tests, "--json", str(report)], side, over, cwd=root)
        doc = json.loads(report.read_text()) if report.is_file() else {}
        out[side] = {"exit": done.returncode, "counts": doc.get("counts"), "failed": doc.get("failed"),
                     "skip_reasons": doc.get("skip_reasons"), "error": None if doc else done.stderr.strip()[-400:]}
    return out


def detector_processes(python: str, over: Overlay, device: str, batches: list[int], pairs: int, repeats: int,
                       iters: int = 10, warmup: int = 5) -> list[dict]:
    """--detector-processes N: at each batch size, N pairs of fresh child processes, one per side (bench_detector
    --only mmdet: build, warm up, time --detector-repeats x --iters), ABBA (the released side first in even pairs);
    each pair's patched / released ratio, their median and its distribution-free 95% interval. Two adjacent
    children share the host's drift, which the in-process design (each side's whole bench_detector, one after
    the other) does not cancel: on the H100 hosts torchvision itself moved 3-30% between its sides."""
    from mmstack_lab.common.pair_stats import ratio_summary

    rows = []
    for bs in batches:
        row: dict = {"batch_size": bs, "pairs": [], "child_seconds": []}
        cmd = [python, "-m", "mmstack_lab.detector.bench_detector", "--device", device, "--batch-size", str(bs),
               "--repeats", str(repeats), "--iters", str(iters), "--warmup", str(warmup), "--only", "mmdet", "--json"]
        for i in range(pairs):
            order = ("released", "patched") if i % 2 == 0 else ("patched", "released")
            pair: dict = {"first": order[0]}
            for side in order:
                start = time.perf_counter()
                done = _child(cmd, side, over)
                row["child_seconds"].append(round(time.perf_counter() - start, 1))
                try:
                    res = json.loads(done.stdout)["results"]["mmdet"]
                    pair[side] = float(res["iters_per_s"])
                except (ValueError, KeyError, TypeError):
                    row["error"] = f"{side} child (pair {i + 1}) exited {done.returncode}: {done.stderr.strip()[-400:]}"
                    break
                pair[f"{side}_losses_finite"] = res.get("losses_finite")
            if "error" in row:
                break
            pair["ratio"] = pair["patched"] / pair["released"]
            row["pairs"].append(pair)
        ratios = [p["ratio"] for p in row["pairs"]]
        if ratios and "error" not in row:
            row.update(ratio_summary(ratios))
            ci = row["ratio_median_ci95"]
            row.update(released_iters_per_s=statistics.median(p["released"] for p in row["pairs"]),
                       patched_iters_per_s=statistics.median(p["patched"] for p in row["pairs"]),
                       verdict=("no interval (fewer than 6 pairs)" if ci is None else "patched faster" if ci[0] > 1
                                else "patched slower" if ci[1] < 1 else "not resolved (interval spans 1)"))
        rows.append(row)
    return rows


def detector(python: str, over: Overlay, device: str, batches: list[int], repeats: int) -> list[dict]:
    """bench_detector.py on each side at each batch size: mmdet's it/s released and patched."""
    rows = []
    for bs in batches:
        row: dict = {"batch_size": bs}
        for side in ("released", "patched"):
            done = _child([python, "-m", "mmstack_lab.detector.bench_detector", "--device", device, "--batch-size", str(bs),
                           "--repeats", str(repeats), "--json"], side, over)
            try:
                res = json.loads(done.stdout)["results"]
            except (ValueError, KeyError):
                row[side] = {"error": done.stderr.strip()[-400:]}
                continue
            row[side] = {name: {k: r.get(k) for k in ("iters_per_s", "iters_per_s_all", "loss_first", "loss_last",
                                                        "losses_finite", "skipped") if k in r}
                         for name, r in res.items()}
        mm = [row.get(side, {}).get("mmdet", {}).get("iters_per_s") for side in ("released", "patched")]
        if all(mm):
            row["mmdet_patched_over_released"] = round(mm[1] / mm[0], 3)
        rows.append(row)
    return rows


def diff_sha256(text: str) -> str:
    """A patch's diff, from its first `--- a/` line: its header may be edited after the run that measured it."""
    return hashlib.sha256(text[text.index("\n--- a/") + 1:].encode()).hexdigest()


def header_args(patch: Path) -> list[str]:
    """A candidate names its own A/B in its header: a line `patch_ab: --ops ... --tests ...`."""
    import shlex

    for line in patch.read_text().splitlines():
        if line.startswith(("--- ", "diff ")):
            break
        if line.startswith("patch_ab:"):
            return shlex.split(line.removeprefix("patch_ab:"))
    return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patch", type=Path, required=True)
    ap.add_argument("--package", default="mmcv", choices=("mmcv", "mmdet"), help="the installed package the patch is to")
    ap.add_argument("--ops", default="roi_align", help='bench_ops.py --only for the timings ("": none)')
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--upstream", type=Path, help="mmcv's GitHub tag archive (upstream's tests/)")
    ap.add_argument("--tests", nargs="*", default=[], help="upstream test files, e.g. tests/test_ops/test_roi_align.py")
    ap.add_argument("--same", default="", help=f"ops whose results must not change, case by case: {','.join(SAME)}")
    ap.add_argument("--cases", type=int, default=1000, help="random cases per --same op")
    ap.add_argument("--detector", default="", help="batch sizes for bench_detector.py on each side, e.g. 2,8")
    ap.add_argument("--detector-repeats", type=int, default=3)
    ap.add_argument("--detector-processes", type=int, default=0, metavar="N",
                    help="time --detector's batch sizes as N ABBA pairs of fresh child processes, one side each "
                    "(0: each side's whole bench_detector in turn, with torchvision beside it)")
    ap.add_argument("--detector-iters", type=int, default=10, help="iterations per timing (--detector-processes)")
    ap.add_argument("--detector-warmup", type=int, default=5, help="warm-up iterations (--detector-processes)")
    ap.add_argument("--json", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    if not args.patch.is_file():
        print(f"{args.patch}: no such patch file; --patch names a recipes/{{mmcv,mmdet}}/{{patches,proposed}}/*.patch", file=sys.stderr)
        return 2
    # the patch header's `patch_ab:` line gives defaults; the command line wins
    args = ap.parse_args(header_args(args.patch) + argv)
    unknown = [op for op in args.same.split(",") if op and op not in SAME]
    if unknown:
        print(f"patch_ab: --same {args.same}: no case module for {','.join(unknown)}; known: {','.join(SAME)}", file=sys.stderr)
        return 2
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="patch-ab-") as tmp:
        over = overlay(args.patch, Path(tmp) / "overlay", python, args.package)
        result = {"what": f"released (installed) {args.package} against the same with a Python-level patch applied",
                  "package": args.package, "patch": args.patch.name, "patch_sha256": hashlib.sha256(args.patch.read_bytes()).hexdigest(),
                  "patch_diff_sha256": diff_sha256(args.patch.read_text()),
                  "installed_carries_patch": over.side == "released", "device": args.device, "rounds": args.rounds, "repeats": args.repeats, "iters": args.iters}
        if over.base is not None:  # both sides without the recipe's later patches on the same files
            result["both_sides_without"] = [p.name for p in later_overlapping(args.patch)]
        probe = ("import torch, mmcv; print(torch.__version__, mmcv.__version__, torch.cuda.get_device_name() if "
                 "torch.cuda.is_available() else '-'); print(torch.get_num_threads())")
        versions, threads = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.splitlines()
        result["versions"] = versions.split()
        result["torch_threads"] = int(threads)  # CPU timings depend on it (OMP_NUM_THREADS)
        result["times"] = times(python, over, args.device, args.ops, args.rounds, args.repeats, args.iters) if args.ops else []
        grad_ops = [op for op in args.ops.split(",") if op in GRAD_OPS]
        if grad_ops:
            result["grads"] = grads(python, over, args.device, grad_ops)
        if args.same:
            result["same"] = same(python, over, args.device, [op for op in args.same.split(",") if op], args.cases)
        if args.upstream and args.tests:
            result["upstream"] = upstream(python, over, args.upstream, args.tests, Path(tmp) / "upstream")
        if args.detector and args.detector_processes > 0:
            result["detector_processes"] = detector_processes(
                python, over, args.device, [int(b) for b in args.detector.split(",")], args.detector_processes,
                args.detector_repeats, args.detector_iters, args.detector_warmup)
        elif args.detector:
            result["detector"] = detector(python, over, args.device, [int(b) for b in args.detector.split(",")],
                                          args.detector_repeats)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in result["times"]:
            print(f"{r['op']:<12}{r['shape']:<48}{r['dtype']:<9}{r['pass']:<18}"
                  f"{r['released_median_us']:>10.1f}{r['patched_median_us']:>10.1f}{r['patched_over_released']:>7.2f}")
        for side, g in result.get("grads", {}).items():
            print(side, [(x["op"], x["dtype"], x.get("grad_of", "input"), f"{x['grad_max_abs_err']:.3g}") for x in g])
        for op, s in result.get("same", {}).items():
            print(op, "cases", s["cases"], "identical" if s["identical"] else s.get("error") or
                  f"{s['n_differing']} differ: {s['differing_cases']}")
        for side, u in result.get("upstream", {}).items():
            print(side, u["counts"], u["failed"])
        for row in result.get("detector", []):
            print("detector batch", row["batch_size"], row.get("mmdet_patched_over_released"))
        for row in result.get("detector_processes", []):
            print("detector batch", row["batch_size"], "pairs", len(row["pairs"]), row.get("ratio_median_of_pairs"),
                  row.get("ratio_median_ci95"), row.get("verdict") or row.get("error"))
    return 0 if all(s["identical"] for s in result.get("same", {}).values()) else 1


if __name__ == "__main__":
    sys.exit(main())
