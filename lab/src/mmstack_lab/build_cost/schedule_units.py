"""Replay measured compile-unit times through ninja's scheduler for different source orders.

    python -m mmstack_lab.build_cost.schedule_units lab/results/h200/recipe-run1/units_sm90.json \
        --sdist mmcv-2.2.0.tar.gz --cores 16 > schedule.json

ninja starts ready jobs in build-file order on N job slots; with every unit ready at once that is
greedy list scheduling, so the compile span of an order is the replay of the unit times in that
order. Orders replayed: setuptools' (sorted by path), recipes/mmcv/patches/0007's
LONGEST_UNITS_FIRST (read from the patch), and longest-processing-time first over all units.
units_*.json names units by object file only (pytorch/nms.cpp and cpu/nms.cpp are both nms.o):
a name shared by several sources gives its longest time to the .cu source, then in path order.
The replay of the order a build used can be checked against that build's measured span.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import os
import re
import tarfile
from pathlib import Path

from mmstack_lab.paths import ROOT

PATCH = ROOT / "recipes" / "mmcv" / "patches" / "0007-longest-compile-units-first.patch"
GLOBS = (r"mmcv/ops/csrc/pytorch/[^/]+\.cpp", r"mmcv/ops/csrc/pytorch/cpu/[^/]+\.cpp",
         r"mmcv/ops/csrc/pytorch/cuda/[^/]+\.cu", r"mmcv/ops/csrc/pytorch/cuda/[^/]+\.cpp")


def sources(sdist: Path) -> list[str]:
    """The CUDA build's op sources (mmcv setup.py's four globs), paths inside the sdist."""
    with tarfile.open(sdist) as tf:
        names = [m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name]
    return sorted(n for n in names if any(re.fullmatch(g, n) for g in GLOBS))


def unit_times(units_json: Path, srcs: list[str]) -> dict[str, float]:
    measured: dict[str, list[float]] = {}
    for row in json.loads(units_json.read_text())["longest"]:
        measured.setdefault(row["unit"], []).append(row["s"])
    by_obj: dict[str, list[str]] = {}
    for s in srcs:
        by_obj.setdefault(os.path.splitext(os.path.basename(s))[0] + ".o", []).append(s)
    times = {}
    for obj, paths in by_obj.items():
        for path, t in zip(sorted(paths, key=lambda p: (not p.endswith(".cu"), p)),
                           sorted(measured.get(obj, []), reverse=True), strict=False):  # fewer times than paths: the rest keep none
            times[path] = t
    missing = [s for s in srcs if s not in times]
    if missing:
        raise SystemExit(f"error: {units_json} has no time for {', '.join(missing[:5])}")
    return times


def replay(order: list[str], times: dict[str, float], cores: int) -> float:
    slots = [0.0] * cores
    end = 0.0
    for path in order:
        start = heapq.heappop(slots)
        end = max(end, start + times[path])
        heapq.heappush(slots, start + times[path])
    return end


def patch_order(srcs: list[str], patch: Path) -> list[str]:
    listed = re.findall(r"^\+    '([^']+)',", patch.read_text(), re.M)

    def key(path: str):
        name = os.path.basename(path)
        return (listed.index(name) if name in listed else len(listed), not name.endswith(".cu"), path)

    return sorted(srcs, key=key)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("units", type=Path, help="units_*.json from mmstack_lab.build_cost.ninja_units --top 1000")
    ap.add_argument("--sdist", type=Path, required=True)
    ap.add_argument("--cores", type=int, required=True)
    ap.add_argument("--patch", type=Path, default=PATCH, help="the 0007 patch whose order to replay")
    args = ap.parse_args(argv)
    srcs = sources(args.sdist)
    times = unit_times(args.units, srcs)
    total = sum(times.values())
    limit = max(total / args.cores, max(times.values()))
    orders = {
        "setuptools (sorted by path)": sorted(srcs),
        "patch 0007": patch_order(srcs, args.patch),
        "longest first, all units": sorted(srcs, key=lambda p: -times[p]),
    }
    rows = {name: {"span_s": round(replay(o, times, args.cores), 1),
                   "span_over_limit": round(replay(o, times, args.cores) / limit, 3),
                   "first": [os.path.basename(p) for p in o[:4]]} for name, o in orders.items()}
    print(json.dumps({
        "what": "replay of measured unit times through ninja's in-order scheduling (a simulation, not a build)",
        "units_from": str(args.units), "cores": args.cores,
        "patch_sha256": hashlib.sha256(args.patch.read_bytes()).hexdigest(), "units": len(srcs), "unit_cpu_s": round(total, 1),
        "limit_s": round(limit, 1), "orders": rows,
    }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
