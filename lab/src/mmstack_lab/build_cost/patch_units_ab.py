"""A/B of a source patch on mmcv compile units: CPU-seconds in ABBA order and the same objects.

    python -m mmstack_lab.build_cost.patch_units_ab --src MMCV_TREE --torch-python PY \
        --patch recipes/mmcv/patches/0016-....patch --units pytorch/cuda/nms_cuda.cu ... --json OUT.json

A is the tree as given, B a copy with the patch applied (patch -p1). Each unit is compiled with
the recipe's flags (mmcv_unit_flags.json, as unit_anatomy does) on both sides, ABBA `--rounds`
times, timed in CPU seconds (user+sys of the compiler and its children). Each unit's A and B
objects are compared byte for byte, else by disassembly and section contents.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from mmstack_lab.build_cost.pch_ab import same_code
from mmstack_lab.build_cost.unit_anatomy import Failed, command, cpu_run, emit, nvcc_env, toolchain, versions


def compile_unit(tree: Path, unit: str, obj: Path, tools: dict[str, str], arch: str) -> float:
    src = tree / "mmcv" / "ops" / "csrc" / unit
    cmd = command(src.suffix, src, obj, dict(tools, src=str(tree)), arch)
    return cpu_run(cmd, env=nvcc_env() if src.suffix == ".cu" else None)[0]


def ab(src_tree: Path, patch: Path, units: list[str], tools: dict[str, str], arch: str, rounds: int) -> dict:
    for unit in units:
        if not (src_tree / "mmcv" / "ops" / "csrc" / unit).is_file():
            raise Failed(f"--units {unit}: no such file under mmcv/ops/csrc")
    with tempfile.TemporaryDirectory(prefix="patch-units-ab-") as tmp:
        work = Path(tmp)
        trees = {"A": src_tree, "B": work / "B"}
        shutil.copytree(src_tree, trees["B"], symlinks=True)
        applied = subprocess.run(
            ["patch", "-p1", "-s", "-d", str(trees["B"]), "-i", str(patch.resolve())], capture_output=True, text=True
        )
        if applied.returncode != 0:
            raise Failed(f"--patch {patch.name} does not apply: {(applied.stdout + applied.stderr).strip()[:300]}")
        times: dict[str, dict[str, list[float]]] = {u: {"A": [], "B": []} for u in units}
        objs: dict[str, dict[str, Path]] = {u: {} for u in units}
        order = "ABBA" * rounds
        for step, side in enumerate(order):
            for unit in units:
                obj = work / f"{unit.replace('/', '__')}.{side}{step}.o"
                cpu = compile_unit(trees[side], unit, obj, tools, arch)
                times[unit][side].append(cpu)
                objs[unit].setdefault(side, obj)
                print(f"{side} {unit}: {cpu} s", file=sys.stderr)
        rows = {}
        for unit in units:
            a, b = statistics.median(times[unit]["A"]), statistics.median(times[unit]["B"])
            rows[unit] = {
                "cpu_s": times[unit],
                "median_A_s": round(a, 2),
                "median_B_s": round(b, 2),
                "saving": round(1 - b / a, 3),
                **same_code(objs[unit]["A"], objs[unit]["B"]),
            }
    a_sum = sum(r["median_A_s"] for r in rows.values())
    b_sum = sum(r["median_B_s"] for r in rows.values())
    return {
        "patch": patch.name,
        "arch": arch,
        "order": order,
        "units": rows,
        "summary": {
            "median_A_s": round(a_sum, 2),
            "median_B_s": round(b_sum, 2),
            "saving": round(1 - b_sum / a_sum, 3),
            "all_same_code_and_data": all(r["same_code_and_data"] for r in rows.values()),
            "all_identical_bytes": all(r["identical_bytes"] for r in rows.values()),
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, required=True, help="mmcv source tree (the sdist with the recipe's patches)")
    ap.add_argument("--patch", type=Path, required=True, help="the patch to judge (-p1 against --src)")
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--cuda-home", type=Path, default=Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")))
    ap.add_argument("--arch", default="90")
    ap.add_argument("--units", nargs="+", required=True, help="paths under mmcv/ops/csrc")
    ap.add_argument("--rounds", type=int, default=1, help="ABBA repetitions")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not (args.src / "mmcv" / "ops" / "csrc").is_dir():
        print(f"--src {args.src}: no mmcv/ops/csrc there; give the extracted mmcv sdist", file=sys.stderr)
        return 2
    if not args.patch.is_file():
        print(f"--patch {args.patch}: no such file", file=sys.stderr)
        return 2
    try:
        tools = toolchain(args.torch_python, args.cuda_home)
        data = ab(args.src.resolve(), args.patch, args.units, tools, args.arch, args.rounds)
    except Failed as exc:
        print(f"patch_units_ab: {exc}", file=sys.stderr)
        return 2
    data = {"versions": versions(args.torch_python, args.cuda_home), **data}
    emit(data, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
