"""Time from process start to first op, split into torch init, `import mmcv.ops`, first kernel.

    python -m mmstack_lab.overhead.bench_startup --device cuda --runs 5 --json

Each run is a fresh interpreter (so the CUDA context, module imports and, for a PTX-only build,
the driver's JIT are all paid again); medians over runs. Set CUDA_CACHE_DISABLE=1 to measure a
cold JIT for PTX-only builds (the driver otherwise caches JIT output in ~/.nv/ComputeCache).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
dev = sys.argv[1]
if dev == "cuda":
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter()
import mmcv.ops
t2 = time.perf_counter()
feats = torch.randn(1, 16, 32, 32, device=dev)
rois = torch.tensor([[0, 1.0, 1.0, 20.0, 20.0]], device=dev)
mmcv.ops.roi_align(feats, rois, (7, 7), 1.0, 2, "avg", True)
if dev == "cuda":
    torch.cuda.synchronize()
t3 = time.perf_counter()
print(json.dumps({"torch_init_s": t1 - t0, "import_mmcv_ops_s": t2 - t1, "first_kernel_s": t3 - t2, "total_s": t3 - t0}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs = []
    for _ in range(args.runs):
        out = subprocess.run([args.python, "-c", CHILD, args.device], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    if args.json:
        print(json.dumps({"device": args.device, "runs": runs, "median": med}, indent=2))
    else:
        for k, v in med.items():
            print(f"{k:<20}{v * 1e3:10.1f} ms")


if __name__ == "__main__":
    main()
