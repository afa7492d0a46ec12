"""Where an mmcv compile unit's CPU goes: header parsing against code generation, per unit.

    python -m mmstack_lab.build_cost.unit_anatomy --src MMCV_TREE --torch-python PY --arch 90 \
        --units pytorch/nms.cpp pytorch/cuda/nms_cuda.cu ... --json OUT.json

Each unit is compiled with the recipe's build flags (mmcv_unit_flags.json, copied from torch's
build.ninja) and timed in CPU seconds (user+sys of the compiler and its children, os.wait4),
not wall time. A .cpp unit runs three ways: preprocess only (-E; its lines counted by the
header they come from), parse only (-fsyntax-only) and the full compile, and once more with
gcc's -ftime-report (its phases). A .cu unit runs once with nvcc --time (its phases: host
preprocessing, cudafe++ and the host gcc against device preprocessing, cicc and ptxas).
--floor adds each kind's header floor: a unit that only includes mmcv's helper header
(pytorch_cpp_helper.hpp, pytorch_cuda_helper.hpp), the cost every unit pays before its own code.
"""

from __future__ import annotations

import argparse
import csv
import importlib.resources
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLOOR = {".cpp": '#include "pytorch_cpp_helper.hpp"\n', ".cu": '#include "pytorch_cuda_helper.hpp"\n'}
# nvcc --time phase names: host side (what gcc and cudafe++ do with the whole unit for the
# host object) against device side (what cicc and ptxas do for the GPU code)
HOST_PHASES = ("gcc (preprocessing 4)", "cudafe++", "gcc (compiling)")
DEVICE_PHASES = ("gcc (preprocessing 1)", "cicc", "ptxas", "fatbinary", "nvlink")


class Failed(Exception):
    pass


def flags() -> dict:
    return json.loads(importlib.resources.files(__package__).joinpath("mmcv_unit_flags.json").read_text())


def toolchain(python: str, cuda_home: Path) -> dict[str, str]:
    """The {placeholders} of mmcv_unit_flags.json but src: torch's install dir, its prefix, the
    Python include dir of the interpreter `python`, the CUDA toolkit and its headers."""
    code = (
        "import importlib.util, sys, sysconfig; s = importlib.util.find_spec('torch');"
        "print(s.submodule_search_locations[0]); print(sys.prefix); print(sysconfig.get_paths()['include']);"
        "n = importlib.util.find_spec('nvidia'); print(n.submodule_search_locations[0] if n else '')"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise Failed(f"--torch-python {python}: no torch there ({last})")
    torch, prefix, include, nvidia = out.stdout.split("\n")[:4]
    # the CUDA libraries' headers torch's ATen/cuda headers include (cusparse.h ...): the host
    # env's targets include in the recipe's build, torch's nvidia-* wheels beside a PyPI torch
    libs = sorted(p.parent for p in Path(nvidia).glob("*/include/cusparse.h")) if nvidia else []
    # torch's cpp_extension runs CUDA_HOME's nvcc; the build's -I of the toolkit's headers
    return {
        "torch": torch,
        "prefix": prefix,
        "python_include": include,
        "cuda_home": str(cuda_home),
        "cuda_include": str(cuda_home / "targets" / "x86_64-linux" / "include"),
        "cuda_libs_include": str(libs[0] if libs else cuda_home / "targets" / "x86_64-linux" / "include"),
    }


def cpu_run(cmd: list[str], env: dict[str, str] | None = None, stdout=subprocess.DEVNULL) -> tuple[float, str]:
    """Run cmd; (user+sys CPU seconds of it and its children, stderr). Raises Failed on rc != 0."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise Failed(f"{cmd[0]} failed (rc {proc.returncode}) on {cmd[-1]}: {text.strip()[-400:]}")
    return round(usage.ru_utime + usage.ru_stime, 3), text


def command(kind: str, src: Path, out: Path, values: dict[str, str], arch: str) -> list[str]:
    f = flags()
    tool = shutil.which("g++") if kind == ".cpp" else str(Path(values["cuda_home"]) / "bin" / "nvcc")
    if tool is None or not Path(tool).is_file():
        raise Failed("g++ not on PATH" if kind == ".cpp" else f"{tool} missing: set --cuda-home")
    subst = dict(values, dep=str(out) + ".d", out=str(out), arch=arch, gcc=shutil.which("gcc") or "gcc")
    subst["in"] = str(src)
    tokens = f["cxx"] if kind == ".cpp" else f["cuda"] + f["nvcc_profile"]
    return [tool] + [re.sub(r"\{(\w+)\}", lambda m: subst[m.group(1)], t) for t in tokens]


def nvcc_env() -> dict[str, str]:
    env = dict(os.environ)
    env["NVCC_APPEND_FLAGS"] = " ".join([env.get("NVCC_APPEND_FLAGS", "")] + flags()["nvcc_append"]).strip()
    return env


def line_origins(ii: Path, roots: dict[str, str]) -> dict[str, int]:
    """Lines of a preprocessed file by where they came from (linemarkers), blank lines not counted."""
    counts = dict.fromkeys([*roots, "system"], 0)
    where = "system"
    with ii.open(errors="replace") as fh:
        for line in fh:
            if line.startswith("# ") and '"' in line:
                path = line.split('"')[1]
                where = next((k for k, root in roots.items() if path.startswith(root)), "system")
            elif line.strip():
                counts[where] += 1
    return counts


def time_report(text: str, top: int = 8) -> dict:
    """gcc -ftime-report: the 'phase ...' rows and the `top` costliest other rows (usr+sys s)."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\s*(.+?)\s*:\s*([\d.]+)\s*\(\s*\d+%\)\s*([\d.]+)\s*\(", line)
        if m:
            rows[m.group(1)] = round(float(m.group(2)) + float(m.group(3)), 2)
    phases = {k: v for k, v in rows.items() if k.startswith("phase ")}
    other = sorted(((v, k) for k, v in rows.items() if not k.startswith("phase ") and k != "TOTAL"), reverse=True)
    return {"phases_s": phases, "top_s": {k: v for v, k in other[:top]}}


def nvcc_phases(csv_text: str) -> dict[str, float]:
    """nvcc --time CSV: milliseconds per phase name (summed over archs)."""
    phases: dict[str, float] = {}
    for row in csv.reader(io.StringIO(csv_text)):
        if len(row) < 8 or row[-1].strip() != "ms":
            continue
        name = row[1].strip()
        phases[name] = round(phases.get(name, 0.0) + float(row[-2]), 1)
    return phases


def cpp_unit(src: Path, work: Path, values: dict[str, str], arch: str) -> dict:
    obj = work / (src.stem + ".o")
    cmd = command(".cpp", src, obj, values, arch)
    ii = work / (src.stem + ".ii")
    pre_s, _ = cpu_run([*command(".cpp", src, ii, values, arch), "-E"])
    roots = {"torch": values["torch"], "mmcv": values["src"], "cuda": values["cuda_include"]}
    lines = line_origins(ii, roots)
    ii.unlink()
    parse_s, _ = cpu_run([*cmd, "-fsyntax-only"])
    full_s, _ = cpu_run(cmd)
    # -ftime-report's own bookkeeping makes that compile slower: its phases are shares, not the unit's CPU
    report_s, report = cpu_run([*cmd, "-ftime-report"])
    return {
        "cpu_s": {"preprocess": pre_s, "parse": parse_s, "full": full_s, "full_with_time_report": report_s},
        "parse_share": round(parse_s / full_s, 3),
        "lines": lines,
        "torch_line_share": round(lines["torch"] / max(1, sum(lines.values())), 3),
        "time_report": time_report(report),
        "object_bytes": obj.stat().st_size,
    }


def cu_unit(src: Path, work: Path, values: dict[str, str], arch: str) -> dict:
    obj = work / (src.stem + ".o")
    times = work / (src.stem + ".time.csv")
    cmd = command(".cu", src, obj, values, arch)
    cpu_s, _ = cpu_run([*cmd, "--time", str(times)], env=nvcc_env())
    phases = nvcc_phases(times.read_text())
    total = sum(phases.values()) or 1.0
    host = sum(v for k, v in phases.items() if k in HOST_PHASES)
    device = sum(v for k, v in phases.items() if k in DEVICE_PHASES)
    return {
        "cpu_s": {"full": cpu_s},
        "phases_ms": phases,
        "host_share": round(host / total, 3),
        "device_share": round(device / total, 3),
        "object_bytes": obj.stat().st_size,
    }


def header_unit(spec: str, work: Path) -> Path:
    """`@name.cu=<a.h>,"b.hpp"`: a unit of only those includes (what a lighter helper would cost)."""
    name, _, includes = spec[1:].partition("=")
    path = work / "header_units" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(f"#include {inc.strip()}\n" for inc in includes.split(",") if inc.strip()))
    return path


def anatomy(
    src_tree: Path, units: list[str], tools: dict[str, str], arch: str, floor: bool, objects: Path | None = None
) -> dict:
    values = dict(tools, src=str(src_tree))
    csrc = src_tree / "mmcv" / "ops" / "csrc"
    result: dict = {"units": {}, "floor": {}}
    with tempfile.TemporaryDirectory(prefix="unit-anatomy-") as tmp:
        work = Path(tmp)
        for unit in units:
            path = header_unit(unit, work) if unit.startswith("@") else csrc / unit
            if not path.is_file() or path.suffix not in FLOOR:
                raise Failed(f"--units {unit}: no such .cpp/.cu under {csrc} (give paths relative to mmcv/ops/csrc)")
            run = cpp_unit if path.suffix == ".cpp" else cu_unit
            key = "header_units" if unit.startswith("@") else "units"
            result.setdefault(key, {})[unit] = run(path, work, values, arch)
            print(f"{unit}: {result[key][unit]['cpu_s']}", file=sys.stderr)
            if objects is not None and key == "units":
                objects.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(work / (path.stem + ".o"), objects / (unit.replace("/", "__") + ".o"))
        kinds = {Path(u).suffix for u in units if not u.startswith("@")} if floor else set()
        for kind in sorted(kinds):
            path = work / f"floor{kind}"
            path.write_text(FLOOR[kind])
            run = cpp_unit if kind == ".cpp" else cu_unit
            result["floor"][kind] = dict(run(path, work, values, arch), source=FLOOR[kind].strip())
            print(f"floor{kind}: {result['floor'][kind]['cpu_s']}", file=sys.stderr)
    result["summary"] = summary(result)
    return result


def summary(result: dict) -> dict:
    """Per kind: the units' CPU, and the share of it the header floor alone costs."""
    out = {}
    for kind in (".cpp", ".cu"):
        rows = {u: r for u, r in result["units"].items() if u.endswith(kind)}
        if not rows:
            continue
        full = {u: r["cpu_s"]["full"] for u, r in rows.items()}
        entry: dict = {"units": len(rows), "cpu_s": round(sum(full.values()), 1)}
        if kind in result["floor"]:
            f = result["floor"][kind]["cpu_s"]["full"]
            entry["floor_cpu_s"] = f
            entry["floor_share_per_unit"] = {u: round(min(1.0, f / s), 3) for u, s in full.items()}
            entry["floor_share"] = round(min(1.0, f * len(rows) / sum(full.values())), 3)
        if kind == ".cpp":
            entry["parse_share"] = round(sum(r["cpu_s"]["parse"] for r in rows.values()) / sum(full.values()), 3)
        else:
            entry["host_share"] = round(sum(r["host_share"] * full[u] for u, r in rows.items()) / sum(full.values()), 3)
        out[kind] = entry
    return out


def emit(data: dict, path: Path | None) -> None:
    """The result as JSON: written whole to PATH (through a temp file, so a killed run leaves none
    half-written), or printed."""
    text = json.dumps(data, indent=2)
    if path is None:
        print(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)


def versions(python: str, cuda_home: Path) -> dict[str, str]:
    def first(cmd: list[str], pattern: str) -> str:
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
        m = re.search(pattern, out)
        return m.group(1) if m else "?"

    return {
        "gcc": first(["gcc", "--version"], r"\) (\S+)"),
        "nvcc": first([str(cuda_home / "bin" / "nvcc"), "--version"], r"release \S+ V(\S+)"),
        "torch": first([python, "-c", "import torch; print(torch.__version__)"], r"(\S+)"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, required=True, help="mmcv source tree (the sdist with the recipe's patches)")
    ap.add_argument("--torch-python", default=sys.executable, help="the Python whose torch the units build against")
    ap.add_argument("--arch", default="90", help="CUDA arch of the .cu units (90: compute_90 PTX + sm_90 SASS)")
    ap.add_argument(
        "--units",
        nargs="+",
        required=True,
        help='paths under mmcv/ops/csrc (pytorch/nms.cpp ...), or @name.cu=<a.h>,"b.hpp": a unit of only those includes',
    )
    ap.add_argument("--floor", action="store_true", help="also time each kind's helper-header-only unit")
    ap.add_argument("--cuda-home", type=Path, default=Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")))
    ap.add_argument("--objects", type=Path, help="keep each unit's object file here (to compare builds)")
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args(argv)
    if not (args.src / "mmcv" / "ops" / "csrc").is_dir():
        print(f"--src {args.src}: no mmcv/ops/csrc there; give the extracted mmcv sdist", file=sys.stderr)
        return 2
    try:
        tools = toolchain(args.torch_python, args.cuda_home)
        data = anatomy(args.src.resolve(), args.units, tools, args.arch, args.floor, args.objects)
    except Failed as exc:
        print(f"unit_anatomy: {exc}", file=sys.stderr)
        return 2
    data = {"arch": args.arch, "versions": versions(args.torch_python, args.cuda_home), **data}
    emit(data, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
