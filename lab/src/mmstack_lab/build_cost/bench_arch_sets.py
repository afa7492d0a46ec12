"""nvcc cost of a generation's arch set against the fat set, per mmcv CUDA unit.

Compiles real mmcv 2.2.0 units (default: roi_align_cuda.cu and deform_conv_cuda.cu) with this
machine's nvcc for each configuration and prints wall time (median of --repeat), CPU time and the
object size, plus the ratios. The arch lists come from conda_build_config.yaml's rows through
mmstack.facts.arch.gencode_flags (the one place flags are made):

    per-gen       one generation's list (default 9.0, the h100 row)
    per-gen+cmp   per-gen with `-Xfatbin -compress-all` (what recipes/mmcv/build.sh passes to nvcc 12)
    per-gen+size  per-gen+cmp with `--compress-mode=size` (nvcc >= 12.8; build.sh adds it for nvcc 13)
    fat           the fat list of the same CUDA (default the 13.0 row: 7.5;8.0;...;12.0+PTX)
    fat+thr       fat with `--threads 0` (nvcc compiles the archs of one unit in parallel)
    fat+cmp       fat with `-Xfatbin -compress-all` (the recipe's fat build with nvcc 12)
    fat+cmp+thr   fat+cmp with `--threads 0`
    fat+size      fat+cmp with `--compress-mode=size` (rapids-cmake's and the recipe's choice for CUDA 13)

Each row has the object's size and its `.nv_fatbin` bytes per arch (conda_sizes.stored_by_arch: the
device code as stored, compressed where it is), so the device code can be told from host code.
`--config` picks rows (default all).

    python -m mmstack_lab.build_cost.bench_arch_sets --sdist mmcv-2.2.0.tar.gz --torch-include .../torch/include \\
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
from mmstack_lab.build_cost.conda_sizes import stored_by_arch

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
    by_arch = stored_by_arch(out)
    return {"wall_s": wall, "cpu_s": cpu, "bytes": out.stat().st_size, "fatbin_bytes": sum(by_arch.values()),
            "fatbin_by_arch": by_arch}


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
    ap.add_argument("--config", action="append", help="rows to run (default: all; per-gen always runs: the ratios' base)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    gen, fat = gencode_flags(parse_arch_list(args.per_gen)), gencode_flags(parse_arch_list(args.fat))
    cmp, size, thr = ["-Xfatbin", "-compress-all"], ["--compress-mode=size"], ["--threads", "0"]
    configs = {
        "per-gen": gen, "per-gen+cmp": [*gen, *cmp], "per-gen+size": [*gen, *cmp, *size],
        "fat": fat, "fat+thr": [*fat, *thr], "fat+cmp": [*fat, *cmp], "fat+cmp+thr": [*fat, *cmp, *thr],
        "fat+size": [*fat, *cmp, *size],
    }
    if args.config:
        unknown = sorted(set(args.config) - set(configs))
        if unknown:
            print(f"bench_arch_sets.py: --config {unknown[0]} is not one of {', '.join(configs)}", file=sys.stderr)
            return 2
        configs = {k: v for k, v in configs.items() if k == "per-gen" or k in args.config}
    results: dict = {"per_gen": args.per_gen, "fat": args.fat, "units": {}}
    with tempfile.TemporaryDirectory(prefix="mmstack-arch-bench-") as tmp_name:
        tmp = Path(tmp_name)
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
                              "bytes": runs[-1]["bytes"], "fatbin_bytes": runs[-1]["fatbin_bytes"],
                              "fatbin_by_arch": runs[-1]["fatbin_by_arch"], "runs": len(runs)}
            pg = rows["per-gen"]
            for row in rows.values():
                row["wall_vs_per_gen"] = round(row["wall_s"] / pg["wall_s"], 2)
                row["size_vs_per_gen"] = round(row["bytes"] / pg["bytes"], 2)
                row["fatbin_vs_per_gen"] = round(row["fatbin_bytes"] / pg["fatbin_bytes"], 2)
            results["units"][unit] = rows
    print(f"{'unit':24} {'config':12} {'wall s':>7} {'cpu s':>7} {'object':>10} {'fatbin':>10} {'wall x':>7} {'size x':>7}")
    for unit, rows in results["units"].items():
        for name, r in rows.items():
            print(f"{unit:24} {name:12} {r['wall_s']:7.1f} {r['cpu_s']:7.1f} {r['bytes'] / 1e6:8.2f}MB "
                  f"{r['fatbin_bytes'] / 1e6:8.2f}MB {r['wall_vs_per_gen']:7.2f} {r['size_vs_per_gen']:7.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
