"""One self-describing summary.json from what a GPU-proof run (mmstack_lab.proof.run) left in its results folder.

    python -m mmstack_lab.proof.gpu_proof_summary lab/results/h200/recipe-run1 > .../summary.json

Reads the files the script wrote (machine.txt, standin.json, build_<tag>.json, build_time_<tag>.json,
units_<tag>.json, rattler-build-<tag>.log, channel_files.txt, verify_installed_<tag>.json,
arch_check_ptx.json, ops_sm90.json, detector_sm90.json, profile_sm90.json, ops_full_sm90.json,
detector_bs*_sm90.json, stages_bs*_sm90.json, bench_ladder_sm90.json, nms_anatomy.json) and derives nothing
that is not in them: build wall/CPU, the compile's parallel limit max(unit CPU-s / cores, longest
unit) and how far the compile span is from it, .conda sizes, the sandbox test time (from the
rattler-build log's timestamps: the package's "Artifact:" line to the end of its tests), each
ladder level's status, L4 per op, and the detector numbers. Missing files give nulls.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from mmstack_lab.common.result_logs import log_exists, read_log

# runs before the stand-in builders moved into the lab name no builder in their standin.json
_OLD_BUILDER = "tests/support/bootstrap_cuda.py"


def stand_in_note(built_by: str | None) -> str:
    return ("Built by the real rattler-build engine from recipes/mmcv, against a STAND-IN channel "
            f"({built_by or _OLD_BUILDER}) assembled on the device from its own CPython, torch, "
            "nvidia-* libraries and CUDA toolkit: conda-forge is not reachable there.")


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _what(machine: str) -> str:
    """How the run was made: the stage driver writes whether its builds ran their tests; the retired
    scripts/gpu-proof.sh (every run before it) built and tested on the GPU machine."""
    if "test sections in the builds: no" in machine:
        return ("recipes/mmcv built for CUDA by rattler-build (`mmstack build --no-test`) on the CPU machine, its test "
                "section run on the GPU (`mmstack test`), installed with py-rattler and checked with `mmstack verify` "
                "(mmstack_lab.proof.run)")
    if "test sections in the builds: yes" in machine:
        return ("recipes/mmcv built for CUDA by rattler-build (`mmstack build`), tested in its sandbox on the GPU, "
                "installed with py-rattler and checked with `mmstack verify` (mmstack_lab.proof.run)")
    return ("recipes/mmcv built for CUDA by rattler-build (`mmstack build`), tested in its sandbox on the GPU, "
            "installed with py-rattler and checked with `mmstack verify` (scripts/gpu-proof.sh)")


def _cores(machine: str) -> int | None:
    m = re.search(r"^cores: (\d+)", machine, re.M)
    return int(m.group(1)) if m else None


def sandbox_test_seconds(log: Path, package: str) -> float | None:
    """Seconds from the package's archive line ('Archive written to ...') to the log's last line."""
    if not log_exists(log):
        return None
    lines = read_log(log).splitlines()
    stamps = [(i, line[:8]) for i, line in enumerate(lines) if re.match(r"\d\d:\d\d:\d\d ", line)]
    start = next((i for i, line in enumerate(lines)
                  if ("Artifact:" in line or "Archive written to" in line) and f"/{package}-" in line), None)
    if start is None:
        return None
    t0 = datetime.strptime(lines[start][:8], "%H:%M:%S")
    t1 = datetime.strptime(stamps[-1][1], "%H:%M:%S")
    return (t1 - t0).total_seconds() % 86400


def _level(report: dict[str, Any], name: str) -> dict[str, Any]:
    """One level of a `mmstack verify --json` report ({} where the report has no such level)."""
    return next((lv for lv in report.get("levels", []) if lv["level"] == name), {})


def sandbox_ladder(log: Path) -> dict | None:
    """The `mmstack verify ... --json` report the recipe's test printed, parsed out of the log."""
    if not log_exists(log):
        return None
    lines = read_log(log).splitlines()
    start = next((i for i, line in enumerate(lines) if re.search(r"\+ mmstack verify .*--json", line)), None)
    if start is None:
        return None
    body: list[str] = []
    data = None
    for line in lines[start + 1:]:
        m = re.match(r"\d\d:\d\d:\d\d \[(\w+)\] (.*)", line)
        if not m or m.group(1) != "info":
            break
        if not body and m.group(2) != "{":
            continue  # verify's progress lines (stderr, in the same log) come before its JSON
        if m.group(2).startswith("mmstack-result "):
            continue  # the one-line record `mmstack test` reads (stderr), interleaved with the JSON
        body.append(m.group(2))
        if m.group(2) == "}":
            try:
                data = json.loads("\n".join(body))
                break
            except ValueError:
                continue
    if data is None:  # the log ended, or another line came, before verify's JSON was whole
        return None
    command = re.sub(r"^\S+ \[\w+\] \+ ", "", lines[start])
    levels = {lv["level"]: {"status": lv["status"], "seconds": lv.get("seconds"), "reason": lv.get("reason")}
              for lv in data.get("levels", [])}
    ev = _level(data, "L4").get("evidence") or {}
    ops = [{"op": o["op"], "device": o.get("device"), "status": o.get("status"), "reference": o.get("reference"),
            "max_error": o.get("max_error"), "reason": (o.get("reason") or "")[:200] or None}
           for o in ev.get("ops", [])]
    first_failed = next((o["op"] for o in ops if o["status"] not in ("pass", "run-only", "skip")), None)
    return {"command": command, "ok": data.get("ok"), "python": data.get("python"), "levels": levels,
            "l2_evidence": next((lv.get("evidence") for lv in data.get("levels", []) if lv["level"] == "L2"), None),
            "l4_device": ev.get("device"), "l4_mode": ev.get("mode"), "l4_torchvision": ev.get("torchvision"),
            "l4_coverage": ev.get("coverage"), "l4_first_failed_op": first_failed, "l4_ops": ops}


def status_rc(res: Path, line: str) -> int | None:
    """The exit status STATUS gives for a step ("sm90 build rc=0"), the last one if repeated."""
    text = (res / "STATUS").read_text() if (res / "STATUS").is_file() else ""
    found = re.findall(rf"^\d\d:\d\d:\d\d {re.escape(line)} rc=(\d+)$", text, re.M)
    return int(found[-1]) if found else None


def _not_returned(rc: int, what: str) -> dict:
    return {"command_rc": rc, "results_returned": False,
            "note": f"STATUS says {what} rc={rc}; its result files did not come back from the device"}


def build_summary(res: Path, tag: str, cores: int | None, sizes: dict[str, int]) -> dict | None:
    built = _json(res / f"build_{tag}.json")
    timed = _json(res / f"build_time_{tag}.json")
    units = _json(res / f"units_{tag}.json")
    if built is None and timed is None:
        rc = status_rc(res, f"{tag} build")
        return None if rc is None else _not_returned(rc, f"{tag} build")
    out: dict = {"command_wall_s": timed and timed["wall_s"], "command_cpu_s": timed and timed["cpu_s"],
                 "command_rc": timed and timed["rc"],
                 "command_note": "the whole `mmstack build` (solve, host/build envs, compile, package, sandbox tests)"}
    pkgs = []
    for p in (built or {}).get("packages", []):
        name = Path(p["path"]).name
        pkgs.append({"name": p["name"], "build_string": p["build_string"], "file": name,
                     "conda_bytes": sizes.get(name), "build_and_test_s": p["seconds"],
                     "test_results": p.get("test_results", []),
                     "variant": {k: p["variant"].get(k) for k in ("python", "pytorch", "cuda_compiler_version",
                                                                   "mmcv_arch_list", "arch_tag") if k in p["variant"]}})
    out["packages"] = pkgs
    if units:
        longest = units["longest"][0] if units["longest"] else {"unit": None, "s": 0}
        limit = max(units["unit_cpu_s"] / cores, longest["s"]) if cores else None
        out["compile"] = {
            "units": units["units"], "unit_cpu_s": units["unit_cpu_s"], "span_s": units["span_s"],
            "longest_unit": longest, "next_units": units["longest"][1:6], "cores": cores,
            "parallel_limit_s": round(limit, 1) if limit else None,
            "span_over_limit": round(units["span_s"] / limit, 3) if limit else None,
            "note": "span = first unit start to last unit end in ninja's log; limit = max(unit CPU-s / cores, longest unit)",
        }
    log = res / f"rattler-build-{tag}.log"
    text = read_log(log) if log_exists(log) else ""
    tests_run = ("Testing commands:" in text) if log_exists(log) else None  # None: no log came back
    name = pkgs[0]["name"] if pkgs else "mmcv"
    out["sandbox_test_s"] = sandbox_test_seconds(log, name) if tests_run else None
    out["sandbox_ladder"] = sandbox_ladder(log)
    failed = re.search(r"error: (mmcv-\S+): Test failed: \"([^\\\n]{0,160})", (res / f"build_{tag}.err").read_text(errors="replace")
                       if (res / f"build_{tag}.err").is_file() else "")
    out["tests_run"] = tests_run
    out["tests_failed"] = {"package": failed.group(1), "first_line": failed.group(2)} if failed else None
    out["landed_in_channel"] = bool(pkgs)
    return out


def ladder_summary(res: Path, tag: str, stem: str = "verify_installed") -> dict | None:
    data = _json(res / f"{stem}_{tag}.json")
    if data is None:
        rc = status_rc(res, f"verify {tag}") if stem == "verify_installed" else None
        return None if rc is None else _not_returned(rc, f"verify {tag}")
    levels = {}
    for lv in data.get("levels", []):
        levels[lv["level"]] = {"status": lv["status"], "seconds": lv.get("seconds"), "reason": lv.get("reason")}
    l2, l4, l5 = (_level(data, name) for name in ("L2", "L4", "L5"))
    return {"ok": data.get("ok"), "python": data.get("python"), "seconds": data.get("seconds"), "levels": levels,
            "l2_evidence": l2.get("evidence"), "l4_per_op": l4.get("evidence"), "l5_evidence": l5.get("evidence")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    res = Path(argv[0])
    machine = (res / "machine.txt").read_text() if (res / "machine.txt").is_file() else ""
    cores = _cores(machine)
    sizes = {}
    for line in ((res / "channel_files.txt").read_text().splitlines() if (res / "channel_files.txt").is_file() else []):
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            sizes[Path(parts[1]).name] = int(parts[0])
    standin = _json(res / "standin.json") or {}
    summary = {
        "what": _what(machine),
        "stand_in": stand_in_note(standin.get("built_by")),
        "run": res.name,
        "machine": [line for line in machine.splitlines() if line.strip()],
        "stand_in_channel": {k: standin.get(k) for k in ("python", "base_python", "torch", "torch_cuda", "toolkit", "nvcc",
                                                         "cuda_distributions", "left_out", "seconds", "step_seconds")}
        | {"packages": len(standin.get("packages", [])),
           "bytes": sum(p["bytes"] for p in standin.get("packages", []))},
        # NVCC_EXTRA: nvcc flags the run appended to build.sh's own (issue 24 item 3's fat builds)
        "nvcc_extra": (res / "nvcc_extra.txt").read_text().strip() if (res / "nvcc_extra.txt").is_file() else None,
        "builds": {tag: build_summary(res, tag, cores, sizes) for tag in ("noarch", "sm90", "mmdet", "ptx", "fat", "sm90nt", "mmdetnt")},
        "installed_prefix_ladder": {tag: ladder_summary(res, tag) for tag in ("sm90", "ptx")},
        "installed_prefix_l4_complete": {tag: ladder_summary(res, tag, "l4complete") for tag in ("sm90", "ptx")},
        "arch_check": {"ptx": _json(res / "arch_check_ptx.json"), "sm90": _json(res / "arch_check_sm90.json")},
        "fatbin": {tag: _json(res / f"fatbin_{tag}.json") for tag in ("sm90", "ptx")},
        "ops_vs_torchvision": _json(res / "ops_sm90.json"),
        "detector_vs_torchvision": _json(res / "detector_sm90.json"),
        "detector_profile": _json(res / "profile_sm90.json"),
        # issue 24 and issue 20 item 3 (stages bench, ladderbench, nmsanatomy)
        "ops_full_vs_torchvision": _json(res / "ops_full_sm90.json"),
        "detector_by_batch_size": {bs: _json(res / f"detector_bs{bs}_sm90.json") for bs in ("2", "8", "16")},
        "detector_stages_by_batch_size": {bs: _json(res / f"stages_bs{bs}_sm90.json") for bs in ("2", "8", "16")},
        "bench_ladder": _json(res / "bench_ladder_sm90.json"),
        "nms_anatomy": _json(res / "nms_anatomy.json"),
    }
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
