"""Where CUDA nms spends its time: mmcv 2.2.0's kernels as released and with recipe patch 0008,
step by step, beside torchvision's nms on the same boxes (issue 24).
(The patch entered the recipe after this ran it on the H200: lab/results/h200/nms-anatomy-2.)

    python -m mmstack_lab.ops.nms_anatomy --sdist mmcv-2.2.0.tar.gz --json > nms_anatomy.json

Builds two small torch extensions from the sdist's own CUDA sources (pytorch/cuda/nms_cuda.cu
and common/cuda/nms_cuda_kernel.cuh, unchanged, compiled for this GPU's arch): one from the
released sources, one after applying the patch (--patch) to them. Each exposes mmcv's
launcher (`nms`, what `mmcv.ops.nms` calls) and its steps alone: the sort, the IoU-mask kernel,
the keep-gathering kernel and the final masked_select. Then, for each size:

- times (CUDA events, median of --repeats timings of enough calls to fill ~--target-ms each,
  after warm-up): torchvision.ops.nms; each launcher; each step; and what mmcv.ops.nms adds on
  top of its launcher (`torch.cat((boxes[inds], scores[inds, None]), 1)`);
- checks that both launchers keep exactly the same indices on --trials random inputs per size
  and IoU threshold (uniform and clustered boxes; sizes that are and are not multiples of 64),
  and counts where torchvision's kept set differs (it rounds the IoU test differently).

Boxes are mmstack_lab.ops.boxes' (bench_ops.py's): corners uniform in 800 px, sides 8-208 px, scores uniform.
`pytorch_cuda_helper.hpp` is replaced by a shim holding only what the nms sources use (ATen,
the CUDA context and guard, common_cuda_helper.hpp), so a torch wheel without THC's legacy
headers builds it too; the nms code itself is the sdist's.
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

from mmstack_lab.ops.boxes import random_boxes
from mmstack_lab.ops.timing import per_call_us, warm_up
from mmstack_lab.paths import ROOT

PATCH = ROOT / "recipes" / "mmcv" / "patches" / "0008-nms-gather-keep-per-word.patch"
CSRC = "mmcv/ops/csrc"

SHIM = """#ifndef PYTORCH_CUDA_HELPER
#define PYTORCH_CUDA_HELPER
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include "common_cuda_helper.hpp"
using at::Half;
using at::Tensor;
#endif
"""

BINDING = r"""
#include <torch/extension.h>
#include "nms_cuda.cu"

#ifndef GATHER_KEEP_THREADS
#define GATHER_THREADS(col_blocks) min(col_blocks, THREADS_PER_BLOCK)
#else
#define GATHER_THREADS(col_blocks) GATHER_KEEP_THREADS
#endif

// the launcher's steps, each alone (same launch configuration as NMSCUDAKernelLauncher)
std::vector<at::Tensor> sort_step(at::Tensor boxes, at::Tensor scores) {
  auto order_t = std::get<1>(scores.sort(0, /*descending=*/true));
  return {order_t, boxes.index_select(0, order_t)};
}

at::Tensor mask_step(at::Tensor boxes_sorted, double iou_threshold, int64_t offset) {
  at::cuda::CUDAGuard device_guard(boxes_sorted.device());
  int boxes_num = boxes_sorted.size(0);
  const int col_blocks = (boxes_num + threadsPerBlock - 1) / threadsPerBlock;
  const int col_blocks_alloc = GET_BLOCKS(boxes_num, threadsPerBlock);
  at::Tensor mask = at::empty({boxes_num, col_blocks}, boxes_sorted.options().dtype(at::kLong));
  dim3 blocks(col_blocks_alloc, col_blocks_alloc);
  dim3 threads(threadsPerBlock);
  nms_cuda<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      boxes_num, (float)iou_threshold, (int)offset, boxes_sorted.data_ptr<float>(),
      (unsigned long long*)mask.data_ptr<int64_t>());
  AT_CUDA_CHECK(cudaGetLastError());
  return mask;
}

at::Tensor gather_step(at::Tensor mask) {
  at::cuda::CUDAGuard device_guard(mask.device());
  int boxes_num = mask.size(0);
  const int col_blocks = (boxes_num + threadsPerBlock - 1) / threadsPerBlock;
  at::Tensor keep_t = at::zeros({boxes_num}, mask.options().dtype(at::kBool));
  gather_keep_from_mask<<<1, GATHER_THREADS(col_blocks), col_blocks * sizeof(unsigned long long),
                          at::cuda::getCurrentCUDAStream()>>>(
      keep_t.data_ptr<bool>(), (unsigned long long*)mask.data_ptr<int64_t>(), boxes_num);
  AT_CUDA_CHECK(cudaGetLastError());
  return keep_t;
}

at::Tensor nms(at::Tensor boxes, at::Tensor scores, double iou_threshold, int64_t offset) {
  return NMSCUDAKernelLauncher(boxes, scores, (float)iou_threshold, (int)offset);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("nms", &nms);
  m.def("sort", &sort_step);
  m.def("mask", &mask_step);
  m.def("gather", &gather_step);
}
"""


def sources(sdist: Path, dest: Path, patch: Path | None) -> Path:
    """The sdist's mmcv/ops/csrc under dest (patched with `patch` if given), plus the shim."""
    with tarfile.open(sdist) as tf:
        top = tf.getnames()[0].split("/")[0]
        members = [m for m in tf.getmembers() if m.name.startswith(f"{top}/{CSRC}/")]
        tf.extractall(dest, members=members, filter="data")
    src = dest / top
    if patch is not None:
        tool = ["patch", "-p1", "-s", "-i"] if shutil.which("patch") else ["git", "apply", "-p1"]
        subprocess.run([*tool, str(patch)], cwd=src, check=True)
    (dest / "shim").mkdir()
    (dest / "shim" / "pytorch_cuda_helper.hpp").write_text(SHIM)
    (dest / "binding.cu").write_text(BINDING)
    return src


def build(name: str, sdist: Path, patch: Path | None, work: Path, arch: str):
    from torch.utils import cpp_extension

    d = work / name
    d.mkdir(parents=True)
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{arch[:-1]}.{arch[-1]}"
    src = sources(sdist, d, patch)
    c = src / CSRC
    t = time.monotonic()
    mod = cpp_extension.load(
        name=name, sources=[str(d / "binding.cu")], build_directory=str(d), verbose=False,
        extra_include_paths=[str(d / "shim"), str(c / "pytorch" / "cuda"), str(c / "common" / "cuda"), str(c / "common")],
        extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"])
    return mod, round(time.monotonic() - t, 1)


def timer(fn, repeats: int, target_ms: float) -> dict:
    """CUDA events: `repeats` timings, each of as many calls (1-200) as fill about target_ms."""
    import torch

    warm_up(fn)
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t, 1e-6)
    iters = max(1, min(200, int(target_ms / 1e3 / one)))
    samples = [per_call_us(fn, iters, "cuda") for _ in range(repeats)]
    return {"median_us": round(statistics.median(samples), 2), "min_us": round(min(samples), 2),
            "iters": iters, "repeats": repeats}


def check(orig, patched, tvnms, sizes, trials: int) -> list[dict]:
    import torch

    rows = []
    for n in sizes:
        for clustered in (False, True):
            for thr in (0.3, 0.5, 0.7):
                same, tv_diff, kept = 0, 0, []
                for t in range(trials):
                    b, s = random_boxes(n, 1000 * n + 10 * t + int(clustered), "cuda", clustered=clustered)
                    a, p = orig.nms(b, s, thr, 0), patched.nms(b, s, thr, 0)
                    same += bool(torch.equal(a, p))
                    kept.append(int(p.numel()))
                    if tvnms is not None:
                        tv = tvnms(b, s, thr)
                        tv_diff += len(set(tv.tolist()) ^ set(p.tolist()))
                rows.append({"n": n, "clustered": clustered, "iou": thr, "trials": trials, "identical": same,
                             "kept_median": statistics.median(kept),
                             "torchvision_symmetric_difference": tv_diff if tvnms is not None else None})
    return rows


def time_size(n: int, orig, patched, tvnms, args) -> dict:
    """One size: every variant and step timed on the same boxes."""
    import torch

    b, s = random_boxes(n, n, "cuda")
    order, sorted_b = orig.sort(b, s)
    mask = orig.mask(sorted_b, args.iou, 0)
    keep = patched.gather(mask)
    inds = orig.nms(b, s, args.iou, 0)
    calls = {
        "torchvision_nms": (lambda: tvnms(b, s, args.iou)) if tvnms is not None else None,
        "released_launcher": lambda: orig.nms(b, s, args.iou, 0),
        "patched_launcher": lambda: patched.nms(b, s, args.iou, 0),
        "step_sort": lambda: orig.sort(b, s),
        "step_mask": lambda: orig.mask(sorted_b, args.iou, 0),
        "step_gather_released": lambda: orig.gather(mask),
        "step_gather_patched": lambda: patched.gather(mask),
        "step_masked_select": lambda: order.masked_select(keep),
        # what mmcv.ops.nms does after its launcher returns
        "mmcv_wrapper_extra": lambda: torch.cat((b[inds], s[inds].reshape(-1, 1)), dim=1),
    }
    timed = {name: timer(fn, args.repeats, args.target_ms) for name, fn in calls.items() if fn is not None}
    row: dict[str, object] = {"n": n, "kept": int(inds.numel()), **timed}
    med = {k: v["median_us"] for k, v in timed.items()}
    if tvnms is not None:
        row["ratio_tv_over_released"] = round(med["torchvision_nms"] / med["released_launcher"], 3)
        row["ratio_tv_over_patched"] = round(med["torchvision_nms"] / med["patched_launcher"], 3)
    row["gather_speedup"] = round(med["step_gather_released"] / med["step_gather_patched"], 2)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=Path, required=True, help="mmcv-2.2.0.tar.gz (PyPI)")
    ap.add_argument("--patch", type=Path, default=PATCH)
    ap.add_argument("--sizes", default="100,1000,10000,100000")
    ap.add_argument("--check-sizes", default="1,63,64,65,129,1000,4097,20000")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--target-ms", type=float, default=50.0)
    ap.add_argument("--iou", type=float, default=0.5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not args.sdist.is_file():
        print(f"nms_anatomy: --sdist {args.sdist}: no such file; pass mmcv-2.2.0.tar.gz", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("nms_anatomy: no CUDA device: this benchmark times CUDA kernels", file=sys.stderr)
        return 2
    cap = torch.cuda.get_device_capability()
    arch = f"{cap[0]}{cap[1]}"
    try:
        from torchvision.ops import nms as tvnms
    except (ImportError, OSError, RuntimeError):
        tvnms = None
    work = Path(tempfile.mkdtemp(prefix="nms_anatomy-"))
    try:
        orig, orig_s = build("mmcv_nms_released", args.sdist, None, work, arch)
        patched, patched_s = build("mmcv_nms_patch0008", args.sdist, args.patch, work, arch)
        checks = check(orig, patched, tvnms, [int(x) for x in args.check_sizes.split(",")], args.trials)
        timings = []
        for n in (int(x) for x in args.sizes.split(",")):
            timings.append(time_size(n, orig, patched, tvnms, args))
            torch.cuda.empty_cache()  # the 100k-box mask is 1.25 GB
        doc = {
            "what": "mmcv 2.2.0 CUDA nms, released vs recipe patch 0008, step by step, beside torchvision.ops.nms",
            "device": torch.cuda.get_device_name(), "capability": f"{cap[0]}.{cap[1]}",
            "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "torchvision": __import__("torchvision").__version__ if tvnms is not None else None,
            "patch": args.patch.name, "patch_sha256": hashlib.sha256(args.patch.read_bytes()).hexdigest(),
            "build_s": {"released": orig_s, "patched": patched_s},
            "iou": args.iou, "timing": "CUDA events; median of repeats, each over `iters` calls (~target_ms)",
            "boxes": "corners uniform in 800 px, sides 8-208 px, scores uniform (bench_ops.py)",
            "timings": timings, "checks": checks,
            "all_identical": all(c["identical"] == c["trials"] for c in checks),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        for r in doc["timings"]:
            print(r["n"], {k: (v["median_us"] if isinstance(v, dict) else v) for k, v in r.items() if k != "n"})
        print("identical:", doc["all_identical"])
    return 0 if doc["all_identical"] else 1


if __name__ == "__main__":
    os.environ.setdefault("MAX_JOBS", "2")
    sys.exit(main())
