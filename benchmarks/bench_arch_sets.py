"""nvcc cost of a generation's arch set against the fat set, per mmcv CUDA unit.

Compiles real mmcv 2.2.0 units (default: roi_align_cuda.cu and deform_conv_cuda.cu) with this
machine's nvcc for each configuration and prints wall time (median of --repeat), CPU time and the
object size, plus the ratios. The arch lists come from conda_build_config.yaml's rows through
mmstack.facts.arch.gencode_flags (the one place flags are made):

    per-gen   one generation's list (default 9.0, the h100 row)
    fat       the fat list of the same CUDA (default the 13.0 row: 7.5;8.0;...;12.0+PTX)
    fat+thr   fat with `--threads 0` (nvcc compiles the archs of one unit in parallel)
    fat+cmp   fat with `-Xfatbin -compress-all`

    python benchmarks/bench_arch_sets.py --sdist mmcv-2.2.0.tar.gz --torch-include .../torch/include \\
        --include /path/cusparse/include --include /path/cublas/include --include /path/cusolver/include

A CPU torch wheel lacks two headers that only CUDA builds of torch generate
(c10/cuda/impl/cuda_cmake_macros.h, THC/THCAtomics.cuh); `--shim-cpu-torch` writes one-line
stand-ins into a temporary include dir so the units compile for this measurement only. Nothing
here is linked or shipped.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path

from mmstack.facts.arch import gencode_flags, parse_arch_list

UNITS = ("roi_align_cuda.cu", "deform_conv_cuda.cu")
PER_GEN = "9.0"
FAT = "7.5;8.0;8.6;9.0;10.0;11.0;12.0+PTX"  # conda_build_config.yaml, CUDA 13.0 "all" row
SHIMS = {
    "c10/cuda/impl/cuda_cmake_macros.h": "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n",
    "THC/THCAtomics.cuh": "#pragma once\n#include <ATen/cuda/Atomic.cuh>\n",
}


def compile_once(src: Path, out: Path, flags: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(["nvcc", "-c", str(src), "-o", str(out), *flags], capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"nvcc failed on {src.name}: {proc.stderr.strip().splitlines()[-1]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "bytes": out.stat().st_size}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", required=True, type=Path)
    ap.add_argument("--torch-include", required=True, type=Path)
    ap.add_argument("--include", action="append", default=[], help="extra include dirs (cusparse, cublas, ...)")
    ap.add_argument("--unit", action="append", help=f"units under ops/csrc/pytorch/cuda (default: {', '.join(UNITS)})")
    ap.add_argument("--per-gen", default=PER_GEN)
    ap.add_argument("--fat", default=FAT)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--shim-cpu-torch", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    configs = {
        "per-gen": gencode_flags(parse_arch_list(args.per_gen)),
        "fat": gencode_flags(parse_arch_list(args.fat)),
        "fat+thr": [*gencode_flags(parse_arch_list(args.fat)), "--threads", "0"],
        "fat+cmp": [*gencode_flags(parse_arch_list(args.fat)), "-Xfatbin", "-compress-all"],
    }
    results: dict = {"per_gen": args.per_gen, "fat": args.fat, "units": {}}
    with tempfile.TemporaryDirectory(prefix="mmstack-arch-bench-") as tmp:
        tmp = Path(tmp)
        with tarfile.open(args.sdist) as tar:
            tar.extractall(tmp, filter="data")
        root = next(tmp.glob("mmcv-*")) / "mmcv" / "ops" / "csrc"
        includes = [args.torch_include, args.torch_include / "torch/csrc/api/include", root / "common",
                    root / "common/cuda", *map(Path, args.include), Path(sysconfig.get_paths()["include"])]
        if args.shim_cpu_torch:
            for rel, text in SHIMS.items():
                (tmp / "shim" / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / "shim" / rel).write_text(text)
            includes.insert(0, tmp / "shim")
        base = [f"-I{p}" for p in includes] + [
            "-DMMCV_WITH_CUDA", "-std=c++17", "-O3", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr",
            "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
            "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]
        for unit in args.unit or UNITS:
            src = root / "pytorch" / "cuda" / unit
            rows = {}
            for name, flags in configs.items():
                runs = []
                for i in range(args.repeat):
                    print(f"[{unit}] {name} run {i + 1}/{args.repeat}", file=sys.stderr, flush=True)
                    runs.append(compile_once(src, tmp / f"{name}.o", base + flags))
                rows[name] = {"wall_s": round(statistics.median(r["wall_s"] for r in runs), 1),
                              "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 1),
                              "bytes": runs[-1]["bytes"], "runs": len(runs)}
            pg = rows["per-gen"]
            for row in rows.values():
                row["wall_vs_per_gen"] = round(row["wall_s"] / pg["wall_s"], 2)
                row["size_vs_per_gen"] = round(row["bytes"] / pg["bytes"], 2)
            results["units"][unit] = rows
    print(f"{'unit':24} {'config':8} {'wall s':>7} {'cpu s':>7} {'object':>10} {'wall x':>7} {'size x':>7}")
    for unit, rows in results["units"].items():
        for name, r in rows.items():
            print(f"{unit:24} {name:8} {r['wall_s']:7.1f} {r['cpu_s']:7.1f} {r['bytes'] / 1e6:8.2f}MB "
                  f"{r['wall_vs_per_gen']:7.2f} {r['size_vs_per_gen']:7.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
