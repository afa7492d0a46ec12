"""Environment fingerprint, the problems it shows, and local GPU detection.

`fingerprint()` gathers (I/O at the edge); `findings(fp, facts)` is a pure function of it, so each
rule is tested with a hand-written fingerprint. torch and mmcv are imported in a child process
(the ladder's), so a crashing import is a finding rather than the doctor's own crash.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mmstack.facts.arch import Coverage, serving_env
from mmstack.facts.compat import coverage_message, driver_compat, environment_for, ext_coverage, install_hint
from mmstack.facts.gpus import Facts

# -- detect: which GPUs are here ---------------------------------------------------------------


def _nvml() -> list[dict]:
    import pynvml  # nvidia-ml-py, the `detect` extra

    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            gpus.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                         "compute_capability": f"{major}.{minor}", "driver": driver,
                         "memory_mib": pynvml.nvmlDeviceGetMemoryInfo(h).total // (1 << 20)})
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi() -> list[dict]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise FileNotFoundError("nvidia-smi not on PATH")
    out = subprocess.run([exe, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError((out.stderr or out.stdout).strip().splitlines()[0] if (out.stderr or out.stdout).strip()
                           else f"nvidia-smi exited {out.returncode}")
    gpus = []
    for i, line in enumerate(ln for ln in out.stdout.splitlines() if ln.strip()):
        name, cc, driver = (p.strip() for p in line.rsplit(",", 2))
        gpus.append({"index": i, "name": name, "compute_capability": cc, "driver": driver})
    return gpus


def detect_gpus() -> tuple[list[dict], str, list[str]]:
    """(GPUs, where they came from, why each source failed). NVML first, then nvidia-smi."""
    notes = []
    for source, probe in (("nvml", _nvml), ("nvidia-smi", _nvidia_smi)):
        try:
            gpus = probe()
        except Exception as exc:  # noqa: BLE001 - no library, no driver, no binary: try the next
            notes.append(f"{source}: {type(exc).__name__}: {exc}".strip().rstrip(":"))
            continue
        return gpus, source, notes
    return [], "none", notes


def assign_envs(gpus: list[dict], facts: Facts) -> list[dict]:
    """Each GPU with the environment that serves it (None when none does).

    The compute capability NVML / nvidia-smi report decides; the name only fills it in when the
    driver did not report one, so a GPU the facts do not know by name still gets its environment."""
    from mmstack.envs import arm_platforms
    from mmstack.variants.matrix import CONFIG_FILE

    out = []
    arm: tuple[list, list] | None = None  # the Arm hosts' rows, read once where a GPU of theirs is seen
    for g in gpus:
        known = facts.lookup_gpu(g["name"]) if g.get("name") else None
        cc = g.get("compute_capability")
        if not (isinstance(cc, str) and re.fullmatch(r"\d{1,2}\.\d", cc)):
            cc = known.compute_capability if known else None
        if cc is None:
            out.append({**g, "compute_capability": g.get("compute_capability"), "known_as": None, "environment": None,
                        "runs": "unknown", "reason": "neither the driver nor the facts give this GPU's compute capability",
                        "command": None})
            continue
        segment = known.segment if known is not None and known.compute_capability == cc else ""
        host = known.host if segment and known else ""
        if host == arm_platforms.SUBDIR and arm is None:
            arm = arm_platforms.load_rows(facts, Path(CONFIG_FILE))
        host_build, host_env = arm_platforms.host_choice(known.name if known else "", cc, host, *(arm or ([], [])))
        served = serving_env(facts, cc, segment=segment, host=host, host_build=host_build, host_env=host_env)
        out.append({**g, "compute_capability": cc,
                    "known_as": known.name if known is not None and known.compute_capability == cc else None,
                    "environment": served.env, "runs": served.coverage.value, "reason": served.reason,
                    "command": f"pixi run -e {served.env} verify" if served.env else None})
    return out


# -- doctor: fingerprint ---------------------------------------------------------------------------


def _run(cmd: list[str]) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _nvcc() -> dict | None:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    exe = shutil.which("nvcc") or (cuda_home and shutil.which(os.path.join(cuda_home, "bin", "nvcc")))
    if not exe:
        return None
    text = _run([exe, "--version"]) or ""
    m = re.search(r"release (\d+\.\d+)", text)
    return {"path": exe, "version": m.group(1) if m else None}


def _gcc() -> dict | None:
    cxx = os.environ.get("CXX") or "g++"
    for exe in (cxx, "gcc"):
        path = shutil.which(exe)
        version = path and _run([path, "-dumpfullversion", "-dumpversion"])
        if version:
            return {"path": path, "version": version}
    return None


def _os_release() -> str:
    try:
        with open("/etc/os-release") as f:
            fields = dict(line.rstrip().split("=", 1) for line in f if "=" in line)
        return fields.get("PRETTY_NAME", "").strip('"') or platform.platform()
    except OSError:
        return platform.platform()


def fingerprint(*, python: str | None = None, timeout: float = 120.0) -> dict:
    from mmstack.verify.ladder import _ext_listing, libstdcxx_linkage
    from mmstack.verify.launcher import run_parts

    gpus, source, notes = detect_gpus()
    runs, _ = run_parts(["doctor"], python=python or sys.executable, timeout=timeout)
    child = runs["doctor"]
    py = dict(child.evidence)
    if not child.done:
        py["crash"] = {**child.failure(), "diagnosis_text": child.failure_text("doctor", timeout)}
    glibc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    return {
        "gpus": gpus,
        "gpu_source": source,
        "gpu_notes": notes,
        "driver": (gpus[0]["driver"] if gpus else None) or py.get("driver"),
        "python": {"executable": py.get("python", python or sys.executable), "version": py.get("python_version")},
        "torch": {k: py.get(k) for k in ("torch_version", "torch_cuda", "cudnn", "cxx11_abi", "cuda_available",
                                         "devices", "torch_arch_list", "torch_error")},
        "mmcv": {"version": py.get("mmcv_version"), "file": py.get("mmcv_file"), "error": py.get("mmcv_error"),
                 "ext_archs": _ext_listing(py.get("ext_path")) if py.get("ext_path") else None,
                 "libstdcxx": libstdcxx_linkage(py.get("ext_path"))},
        "crash": py.get("crash"),
        "nvcc": _nvcc(),
        "gcc": _gcc(),
        "glibc": glibc.split()[-1] if glibc else None,
        "os": _os_release(),
        "kernel": platform.release(),
        "env": {k: os.environ.get(k) for k in ("CUDA_HOME", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
                                               "TORCH_CUDA_ARCH_LIST", "CONDA_PREFIX", "PIXI_ENVIRONMENT_NAME")},
    }


# -- doctor: findings (pure) -----------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    severity: str  # "FAIL" or "WARN"
    what: str
    fix: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def findings(fp: dict, facts: Facts) -> list[Finding]:
    """Problems a fingerprint shows, each with its fix."""
    out: list[Finding] = []
    torch, gpus, mmcv = fp.get("torch") or {}, fp.get("gpus") or [], fp.get("mmcv") or {}
    torch_cuda, driver = torch.get("torch_cuda"), fp.get("driver")
    envs = {g["name"]: environment_for(facts, name=g["name"], cc=g.get("compute_capability")) for g in gpus}
    first_env = next((e for e in envs.values() if e), None)
    install = install_hint(first_env) or "`mmstack detect` names the environment"

    if fp.get("crash"):
        from mmstack.verify.diagnose import diagnose

        d = diagnose(fp["crash"]["diagnosis_text"], {"install": install})
        out.append(Finding("FAIL", f"importing torch/mmcv crashed: {d.cause}", d.fix))
    for g in gpus:
        if not envs[g["name"]]:
            out.append(Finding("WARN", f"no mmstack environment serves {g['name']} ({g.get('compute_capability')})",
                               "see `mmstack gpus` for the supported generations"))
    nvcc, gcc = fp.get("nvcc") or {}, fp.get("gcc") or {}
    if nvcc.get("version") and gcc.get("version"):
        try:
            tk = facts.toolkit(nvcc["version"])
        except Exception:  # noqa: BLE001 - a toolkit the facts do not list
            tk = None
        host = int(gcc["version"].split(".")[0])
        if tk and host > tk.max_gcc:
            out.append(Finding("FAIL", f"nvcc {tk.version} accepts host gcc <= {tk.max_gcc}; {gcc['path']} is gcc {gcc['version']}",
                               f"install gcc {tk.max_gcc} (conda-forge gxx_linux-64={tk.max_gcc}) and point NVCC_CCBIN /"
                               f" CUDAHOSTCXX at it, or use a newer CUDA toolkit"))
    if nvcc.get("version") and torch_cuda and nvcc["version"].split(".")[0] != torch_cuda.split(".")[0]:
        out.append(Finding("WARN", f"nvcc is CUDA {nvcc['version']} but torch was built with CUDA {torch_cuda}:"
                           " building mmcv here fails (torch.utils.cpp_extension rejects a major mismatch)",
                           f"use a CUDA {torch_cuda.split('.')[0]}.x nvcc (conda: cuda-nvcc={torch_cuda}) to build"))
    if gpus and torch.get("torch_version") and not torch_cuda:
        out.append(Finding("FAIL", f"torch {torch['torch_version']} is a CPU build on a machine with {gpus[0]['name']}",
                           f"install a CUDA build of torch and mmcv ({install})"))
    if torch_cuda and driver:
        c = driver_compat(facts, driver=driver, runtime_cuda=torch_cuda)
        if not c.ok and c.mode == "too-old":
            out.append(Finding("FAIL", c.message, f"install NVIDIA driver >= {c.needed}, or a torch for an older CUDA"))
        elif c.mode == "minor-compat":
            full = facts.toolkit(torch_cuda).driver
            out.append(Finding("WARN", c.message, f"a driver >= {full} gives full support" if full else
                               f"the driver CUDA {torch_cuda} ships with gives full support (its version is unknown to"
                               " the facts: see that release's notes)"))
    archs = mmcv.get("ext_archs") or {}
    if gpus and torch_cuda and archs and "error" not in archs:
        sass, ptx = archs.get("sass", []), archs.get("ptx", [])
        if not sass and not ptx:
            out.append(Finding("FAIL", "mmcv's _ext holds no CUDA code (a CPU build of mmcv) on a GPU machine",
                               f"install the CUDA build of mmcv ({install})"))
        else:
            for g in gpus:
                cov = ext_coverage(g["compute_capability"], sass, ptx)
                msg = coverage_message(g["name"], g["compute_capability"], cov, sass, ptx)
                hint = install_hint(envs[g["name"]]) or install
                if cov.coverage is Coverage.NONE:
                    out.append(Finding("FAIL", msg, f"install the mmcv build for it ({hint})"))
                elif cov.coverage is Coverage.PTX_JIT:
                    out.append(Finding("WARN", msg + ": slow first start", f"install native SASS ({hint})"))
    if mmcv.get("libstdcxx") == "static":
        out.append(Finding("FAIL", "mmcv's _ext carries its own static libstdc++ beside torch's shared one: two C++"
                           " runtimes in one process (get_compiler_version segfaults)",
                           "rebuild mmcv with a g++ that links libstdc++ dynamically (`readelf -d` must list"
                           f" libstdc++.so.6), or install the mmstack build ({install})"))
    ld = (fp.get("env") or {}).get("LD_LIBRARY_PATH") or ""
    shadow = [d for d in ld.split(":") if d and re.search(r"cuda|cudnn|nvidia", d, re.I)]
    if shadow and (fp.get("env") or {}).get("CONDA_PREFIX"):
        out.append(Finding("WARN", f"LD_LIBRARY_PATH puts {', '.join(shadow)} ahead of the environment's own CUDA libraries",
                           "unset LD_LIBRARY_PATH inside conda/pixi environments"))
    if mmcv.get("error"):
        out.append(Finding("FAIL", f"mmcv does not import: {mmcv['error']}", "run `mmstack verify` for the diagnosis"))
    return out
