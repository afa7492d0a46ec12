"""GPU-machine seconds per tested package: built and tested there, against built elsewhere and tested there.

    python -m mmstack_lab.proof.gpu_time --before lab/results/h200/recipe-run9 \\
        --cpu lab/results/cpu-dev/proof-cpu-build1 [--after lab/results/h200/<a test-only run>] --json

Reads only the timed.py files the proof writes (standin_time.json, build_time_<tag>.json,
test_time_<tag>.json) and adds them up per stage kind: what the GPU machine spent to put one sm_90
mmcv (with mmstack's and mmdet's packages) through its test section. `before`: the stand-in channel
and the builds with their tests, all on the GPU machine. `after`: the stand-in channel and
`mmstack test` of each carried package (the compile moved to the CPU machine, whose build times
`cpu` reports). A run missing a file gives null for it, never a guess.

`after_over_before` compares like with like only: the packages both runs put through a test
section that passed (the after run's test_<tag>.json), on the same GPU (machine.txt's first line).
Otherwise it is null and `not_compared` says why (recipe-run10 ran on an H100, run 9 on an H200, and
its sm_90 section was cut short).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TypedDict

PACKAGES = ("noarch", "mmengine", "sm90", "mmdet")
# a before run's build tag -> the after run's test tag of the same package (glob)
SAME_PACKAGE = {"noarch": "mmstack", "mmengine": "mmengine", "sm90": "mmcv_cuda*_sm90", "mmdet": "mmdet"}


def _wall(path: Path) -> float | None:
    try:
        return float(json.loads(path.read_text())["wall_s"])
    except (OSError, ValueError, KeyError):
        return None


class RunSeconds(TypedDict):
    """One run's side: its wall seconds per stage and their sum (None where no file was read)."""

    run: str
    seconds: dict[str, float | None]
    total_s: float | None


class CpuRunSeconds(RunSeconds):
    cores: int | None


def _total(parts: dict[str, float | None]) -> float | None:
    vals = [v for v in parts.values() if v is not None]
    return round(sum(vals), 1) if vals else None


def before(run: Path) -> RunSeconds:
    """The GPU machine built (with the tests) and tested everything itself."""
    parts = {"standin": _wall(run / "standin_time.json")}
    parts |= {f"build+test {t}": _wall(run / f"build_time_{t}.json") for t in PACKAGES}
    return {"run": run.name, "seconds": parts, "total_s": _total(parts)}


def after(run: Path) -> RunSeconds:
    """The GPU machine assembled its stand-in channel and tested the carried packages."""
    parts = {"standin": _wall(run / "standin_time.json")}
    for f in sorted(run.glob("test_time_*.json")):
        parts[f"test {f.stem.removeprefix('test_time_')}"] = _wall(f)
    return {"run": run.name, "seconds": parts, "total_s": _total(parts)}


def gpu(run: Path) -> str | None:
    """The run's GPU as machine.txt's first line names it (nvidia-smi's name, cc, driver, memory)."""
    machine = run / "machine.txt"
    return machine.read_text().splitlines()[0].split(",")[0].strip() if machine.is_file() else None


def passed(run: Path, tag: str) -> bool:
    """Whether the after run's `mmstack test` of that package passed its whole section."""
    try:
        doc = json.loads((run / f"test_{tag}.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(doc.get("passed")) and all(p.get("passed") for p in doc.get("packages", [{}]))


def like_for_like(before_run: Path, after_run: Path) -> dict:
    """The packages both runs took through a passing test section on the same GPU, their seconds
    on each side and the ratio; or why there is nothing to compare."""
    why = []
    if gpu(before_run) != gpu(after_run):
        why.append(f"different GPUs ({gpu(before_run)} against {gpu(after_run)})")
    pairs: dict[str, dict[str, float]] = {}
    for build_tag, test_glob in SAME_PACKAGE.items():
        b = _wall(before_run / f"build_time_{build_tag}.json")
        tags = [f.stem.removeprefix("test_time_") for f in sorted(after_run.glob(f"test_time_{test_glob}.json"))]
        if b is None or not tags:
            continue
        if not passed(after_run, tags[0]):
            why.append(f"{tags[0]}: its test section did not pass in {after_run.name}")
            continue
        a = _wall(after_run / f"test_time_{tags[0]}.json")
        if a is None:
            why.append(f"{tags[0]}: no test_time file in {after_run.name}")
            continue
        pairs[build_tag] = {"before": b, "after": a}
    if why or not pairs:
        return {"packages": pairs, "after_over_before": None, "not_compared": why or ["no package in both runs"]}
    total_b = sum(p["before"] for p in pairs.values())
    total_a = sum(p["after"] for p in pairs.values())
    return {"packages": pairs, "after_over_before": round(total_a / total_b, 2), "not_compared": []}


def cpu(run: Path) -> CpuRunSeconds:
    """The CPU machine's side: its stand-in channel and the builds (tests skipped)."""
    parts = {"standin": _wall(run / "standin_time.json")}
    parts |= {f"build {t}": _wall(run / f"build_time_{t}.json") for t in PACKAGES}
    machine = (run / "machine.txt").read_text().splitlines() if (run / "machine.txt").is_file() else []
    cores = next((ln.split(":")[1].strip() for ln in machine if ln.startswith("cores:")), None)
    return {"run": run.name, "cores": int(cores) if cores else None, "seconds": parts, "total_s": _total(parts)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="a run that built and tested on the GPU machine")
    ap.add_argument("--after", type=Path, help="a run that only tested carried packages there")
    ap.add_argument("--cpu", type=Path, help="the CPU machine's build run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    gpu_before = before(args.before)
    gpu_after = after(args.after) if args.after else None
    sides = {"before": gpu_before, "after": gpu_after, "cpu_machine": cpu(args.cpu) if args.cpu else None}
    doc: dict[str, object] = {"what": "GPU-machine wall seconds to put one sm_90 mmcv (and mmstack, mmengine, mmdet) through "
                                      "its test section; sums of the runs' timed.py files", **sides}
    if args.after:
        doc["like_for_like"] = like_for_like(args.before, args.after)
    print(json.dumps(doc, indent=1) if args.json else
          "\n".join(f"{k}: {v['total_s']} s {v['seconds']}" for k, v in sides.items() if v is not None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
