"""`mmstack doctor` and `mmstack detect`."""

from __future__ import annotations

from mmstack import report
from mmstack.facts.gpus import load
from mmstack.verify.doctor import assign_envs, detect_gpus, findings, fingerprint


def run_doctor(*, as_json: bool) -> int:
    """Exit 1 when a finding is a FAIL (warnings alone exit 0)."""
    fp = fingerprint()
    problems = findings(fp, load())
    if as_json:
        report.print_json({"fingerprint": fp, "findings": [f.as_dict() for f in problems]})
    else:
        torch, mmcv = fp["torch"], fp["mmcv"]
        archs = mmcv.get("ext_archs") or {}
        rows = [
            ("GPU(s)", "; ".join(f"{g['name']} ({g['compute_capability']})" for g in fp["gpus"]) or
             f"none ({'; '.join(fp['gpu_notes'])})"),
            ("driver", fp["driver"] or "-"),
            ("torch", f"{torch.get('torch_version') or torch.get('torch_error') or '-'}, CUDA {torch.get('torch_cuda') or '-'},"
                      f" cuDNN {torch.get('cudnn') or '-'}, CXX11 ABI {torch.get('cxx11_abi')}"),
            ("nvcc", (fp["nvcc"] or {}).get("version") or "-"),
            ("gcc", (fp["gcc"] or {}).get("version") or "-"),
            ("glibc", fp["glibc"] or "-"),
            ("OS", f"{fp['os']} (kernel {fp['kernel']})"),
            ("Python", f"{fp['python']['version']} {fp['python']['executable']}"),
            ("mmcv", f"{mmcv.get('version') or mmcv.get('error') or '-'} {mmcv.get('file') or ''}".strip()),
            ("mmcv _ext", archs.get("error") or
             (f"SASS {', '.join(archs.get('sass', [])) or '-'}; PTX {', '.join(archs.get('ptx', [])) or '-'}" if archs else "-")),
        ] + [(k, v if v is not None else "-") for k, v in fp["env"].items() if k in ("CUDA_HOME", "LD_LIBRARY_PATH")]
        report.print_table(["", "found"], rows, title="mmstack doctor")
        if problems:
            report.print_table(["", "problem", "fix"], [(report.status_style(f.severity), f.what, f.fix) for f in problems])
        else:
            report.info("no problems found")
    return 1 if any(f.severity == "FAIL" for f in problems) else 0


def run_detect(*, as_json: bool, channels: list[str] | None = None) -> int:
    """Exit 0 with GPUs that have an environment, or with none (use cpu); 1 if a GPU has none."""
    gpus, source, notes = detect_gpus()
    gpus = assign_envs(gpus, load())
    envs = sorted({g["environment"] for g in gpus if g["environment"]})
    suggest = [f"pixi run -e {e} verify" for e in envs] if gpus else ["pixi run -e cpu verify"]
    solver = _solver_facts(gpus, channels or [])
    if as_json:
        report.print_json({"gpus": gpus, "source": source, "notes": notes,
                           "environments": envs if gpus else ["cpu"], "suggest": suggest, **solver})
    elif gpus:
        report.print_table(["#", "GPU", "CC", "driver", "environment", "runs", "run"],
                           [(g["index"], g["name"], g["compute_capability"], g["driver"], g["environment"] or "none",
                             g["runs"], g["command"] or g["reason"]) for g in gpus],
                           title=f"local GPUs (from {source})")
    else:
        report.console().print(f"no NVIDIA GPU found ({'; '.join(notes)}); use the cpu environment: {suggest[0]}",
                               highlight=False, markup=False, soft_wrap=True)
    if not as_json:
        for line in _solver_lines(solver):
            report.console().print(line, highlight=False, markup=False, soft_wrap=True)
    return 1 if any(not g["environment"] for g in gpus) else 0


def _solver_facts(gpus: list[dict], channels: list[str]) -> dict:
    """This machine's CEP 46 virtual packages (`__cuda`, `__cuda_arch`) and, given channels, the mmcv
    build the solver installs over them."""
    from mmstack.commands.facts_cmds import solver_pick
    from mmstack.variants import selection

    facts = load()
    machine = selection.machine_for(facts, gpus)
    out: dict = {"virtual_packages": {k: v for k, v in machine.virtual_packages().items() if k.startswith("__cuda")}}
    if channels:
        out["solver"] = solver_pick(facts, machine, channels)
    return out


def _solver_lines(solver: dict) -> list[str]:
    from mmstack.commands.facts_cmds import solver_pick_lines

    vps = solver["virtual_packages"]
    arch = vps.get("__cuda_arch")
    lines = [f"__cuda_arch: {arch} (the lowest compute capability of the GPUs, CEP 46)" if arch
             else "__cuda_arch: absent (no GPU, or no __cuda)",
             f"__cuda: {vps.get('__cuda') or 'absent'} (the driver's CUDA)"]
    if "solver" in solver:
        lines += solver_pick_lines(solver["solver"])
    else:
        lines.append("which mmcv build the solver installs: pass --channel ./channel --channel conda-forge")
    return lines
