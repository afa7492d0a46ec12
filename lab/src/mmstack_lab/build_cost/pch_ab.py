"""A/B of a precompiled pytorch_cpp_helper.hpp for mmcv's C++ units: CPU-seconds and same objects.

    python -m mmstack_lab.build_cost.pch_ab --src MMCV_TREE --torch-python PY \
        --units pytorch/nms.cpp pytorch/cpu/roi_align.cpp ... --rounds 2 --json OUT.json

64 of mmcv's C++ units start with `#include "pytorch_cpp_helper.hpp"` (torch/types.h). gcc
uses a `pytorch_cpp_helper.hpp.gch` found beside that header when it was built with the same
flags (else it reads the header, and -Winvalid-pch says so). This tool copies the tree's csrc,
builds the .gch once with the units' own flags (mmcv_unit_flags.json), then compiles every
unit without it (A) and with it (B) in ABBA order, `--rounds` times, timing CPU seconds (user+sys
of g++ and its children). Each unit's A and B objects are compared byte for byte and, if they
differ, by their disassembly and section contents (objdump -d, objdump -s).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from mmstack_lab.build_cost.unit_anatomy import Failed, command, cpu_run, emit, toolchain, versions

HEADER = Path("mmcv/ops/csrc/common/pytorch_cpp_helper.hpp")


def pch_command(cmd: list[str], header: Path, gch: Path) -> list[str]:
    """The unit command turned into the header's: -x c++-header, no unit, no dep file, -o the .gch."""
    out: list[str] = []
    i = 0
    while i < len(cmd):
        if cmd[i] in ("-MF", "-o", "-c"):  # the token after -c is the unit
            i += 2
            continue
        if cmd[i] != "-MMD":
            out.append(cmd[i])
        i += 1
    return [*out[:1], "-x", "c++-header", *out[1:], str(header), "-o", str(gch)]


def same_code(a: Path, b: Path) -> dict:
    """Byte-identical, else whether disassembly and section contents agree (nvcc's temp names aside)."""
    if a.read_bytes() == b.read_bytes():
        return {"identical_bytes": True, "same_code_and_data": True}

    def dump(obj: Path, flag: str) -> list[str]:
        text = subprocess.run(["objdump", flag, str(obj)], capture_output=True, text=True, check=True).stdout
        # nvcc names a unit's static initialiser after its temporary file (tmpxft_<pid>_...): any
        # two compiles of one .cu differ there and nowhere else
        text = re.sub(r"tmpxft_[0-9a-f]+_[0-9a-f]+", "tmpxft", text)
        return [
            line
            for line in text.splitlines()
            if not line.strip().endswith("file format elf64-x86-64") and str(obj) not in line
        ]

    return {
        "identical_bytes": False,
        "same_code_and_data": dump(a, "-d") == dump(b, "-d") and dump(a, "-s") == dump(b, "-s"),
    }


def ab(src_tree: Path, units: list[str], tools: dict[str, str], rounds: int) -> dict:
    values = dict(tools)
    with tempfile.TemporaryDirectory(prefix="pch-ab-") as tmp:
        work = Path(tmp)
        tree = work / "src"
        shutil.copytree(src_tree / "mmcv" / "ops" / "csrc", tree / "mmcv" / "ops" / "csrc")
        values["src"] = str(tree)
        header = tree / HEADER
        gch = header.with_name(header.name + ".gch")
        off = work / "off.gch"
        for unit in units:
            if not (tree / "mmcv" / "ops" / "csrc" / unit).is_file():
                raise Failed(f"--units {unit}: no such file under mmcv/ops/csrc")
        probe = command(".cpp", tree / "mmcv" / "ops" / "csrc" / units[0], work / "probe.o", values, "")
        pch_cpu, _ = cpu_run(pch_command(probe, header, off))
        pch_bytes = off.stat().st_size
        # gcc -H marks a used precompiled header with '!'
        off.rename(gch)
        _, trace = cpu_run([*probe, "-fsyntax-only", "-H"])
        gch.rename(off)
        if f"! {gch}" not in trace:
            raise Failed(f"{units[0]}: gcc did not use {gch.name} (no '! ...gch' in -H)")
        times: dict[str, dict[str, list[float]]] = {u: {"A": [], "B": []} for u in units}
        objs: dict[str, dict[str, Path]] = {u: {} for u in units}
        order = "ABBA" * rounds
        for step, side in enumerate(order):
            # A: no .gch beside the header; B: the .gch there
            if side == "B" and off.exists():
                off.rename(gch)
            if side == "A" and gch.exists():
                gch.rename(off)
            for unit in units:
                obj = work / f"{Path(unit).stem}.{side}{step}.o"
                cmd = [*command(".cpp", tree / "mmcv" / "ops" / "csrc" / unit, obj, values, ""), "-Winvalid-pch"]
                cpu, err = cpu_run(cmd)
                if "gch" in err:
                    raise Failed(f"{unit}: gcc did not use the .gch: {err.strip()[:300]}")
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
        "order": order,
        "pch": {"header": str(HEADER), "cpu_s": pch_cpu, "bytes": pch_bytes},
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
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--cuda-home", type=Path, default=Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")))
    ap.add_argument(
        "--units", nargs="+", required=True, help=".cpp paths under mmcv/ops/csrc that include the header first"
    )
    ap.add_argument("--rounds", type=int, default=1, help="ABBA repetitions")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not (args.src / HEADER).is_file():
        print(f"--src {args.src}: no {HEADER} there; give the extracted mmcv sdist", file=sys.stderr)
        return 2
    try:
        data = ab(args.src.resolve(), args.units, toolchain(args.torch_python, args.cuda_home), args.rounds)
    except Failed as exc:
        print(f"pch_ab: {exc}", file=sys.stderr)
        return 2
    data = {"versions": versions(args.torch_python, args.cuda_home), **data}
    emit(data, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
