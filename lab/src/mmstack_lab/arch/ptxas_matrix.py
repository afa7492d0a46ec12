"""NVIDIA's ptxas, per toolkit, on a one-kernel PTX for every (PTX target, GPU arch) pair: the measured
evidence behind mmstack.facts.arch's PTX and family rules.

    pip download --no-deps --only-binary=:all: -d /tmp/wheels nvidia-cuda-nvcc-cu11==11.8.* \\
        nvidia-cuda-nvcc-cu12==12.4.* ...   # one `pip download` per toolkit
    python -m mmstack_lab.arch.ptxas_matrix --nvcc nvcc /tmp/wheels/nvidia_cuda_nvcc*.whl \\
        > tests/data/facts/ptxas-matrix.json

Each wheel is unpacked into a temporary directory (nothing of it is kept). The PTX is
tests/data/fatbin/kernel.cu through --nvcc (`nvcc -arch=compute_75 -ptx`) with its `.target` set to each
target and its `.version` to the newest PTX ISA that ptxas reads. Every sm_ target the wheel's
`ptxas --help` lists (plain, 'a', 'f') is tried as PTX `.target` and as `-arch`.

What ptxas answers: can PTX written for target P be compiled for a GPU of arch G. That is what the driver's
JIT does with a fatbin's PTX on the GPU it runs on, so it measures the PTX rules (plain PTX forward to
every newer arch, 'a' PTX on exactly its arch, 'f' PTX on its family, per toolkit). It does not measure
SASS binary compatibility (whether an sm_80 cubin loads on an 8.6 or an 8.7 GPU): the driver decides
that at load time, by the rules of the CUDA Programming Guide that data/gpus.toml cites.

Where the wheel carries the nvcc driver (13.x), `nvcc -arch=sm_XY --dryrun -c kernel.cu` is run for every
plain target and the targets it prints a deprecation warning for are recorded; the 11.x/12.x wheels ship
ptxas without nvcc, so their deprecation lists are not measured here (null).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from mmstack_lab.paths import ROOT

KERNEL = ROOT / "tests" / "data" / "fatbin" / "kernel.cu"
ISAS = [f"{major}.{minor}" for major in range(6, 10) for minor in range(10)]


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _version(tool: Path | str) -> str:
    m = re.search(r"release (\d+\.\d+), (V[\d.]+)", _run(str(tool), "--version").stdout)
    return m.group(2) if m else "?"


def _key(t: str) -> tuple[int, str]:
    return int(re.sub(r"[af]$", "", t)), t


def _targets(ptxas: Path) -> list[str]:
    """sm_ targets ptxas --help lists for --gpu-name (plain, a, f)."""
    found = set(re.findall(r"\bsm_(\d+[af]?)\b", _run(str(ptxas), "--help").stdout))
    return [f"sm_{t}" for t in sorted(found, key=_key)]


def _ptx(base: str, target: str, isa: str) -> str:
    text = re.sub(r"^\.target .*$", f".target {target}", base, flags=re.M)
    return re.sub(r"^\.version .*$", f".version {isa}", text, flags=re.M)


def _max_isa(ptxas: Path, base: str, target: str, tmp: Path) -> str:
    """The newest `.version` this ptxas accepts (it refuses an ISA newer than it knows)."""
    best = ""
    for isa in ISAS:
        f = tmp / "probe.ptx"
        f.write_text(_ptx(base, target, isa))
        if _run(str(ptxas), f"-arch={target}", str(f), "-o", "/dev/null").returncode == 0:
            best = isa
    if not best:
        raise SystemExit(f"{ptxas}: accepts no PTX ISA {ISAS[0]}..{ISAS[-1]} for {target}")
    return best


def _compiles(ptxas: Path, ptx: str, arch: str, tmp: Path) -> bool:
    f = tmp / "t.ptx"
    f.write_text(ptx)
    return _run(str(ptxas), f"-arch={arch}", str(f), "-o", "/dev/null").returncode == 0


def _deprecated(nvcc: Path, targets: list[str]) -> list[str]:
    plain = [t for t in targets if t[-1].isdigit()]
    warned = []
    for t in plain:
        r = _run(str(nvcc), f"-arch={t}", "--dryrun", "-c", str(KERNEL))
        if re.search(r"deprecat|will be removed", r.stderr + r.stdout, re.I):
            warned.append(t)
    return warned


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def measure(wheel: Path, base: str, tmp: Path) -> tuple[str, dict, dict]:
    unpacked = tmp / wheel.stem
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
    bins = {p.name: p for p in unpacked.rglob("*") if p.parent.name == "bin" and p.is_file()}
    for p in bins.values():
        p.chmod(0o755)
    ptxas, nvcc = bins["ptxas"], bins.get("nvcc")
    release = _version(ptxas)  # "V12.9.86"
    toolkit = ".".join(release[1:].split(".")[:2])
    listed = _targets(ptxas)
    isa = _max_isa(ptxas, base, [t for t in listed if t[-1].isdigit()][-1], tmp)
    targets = [t for t in listed if _compiles(ptxas, _ptx(base, t, isa), t, tmp)]  # --help also names dropped ones
    compiles = {}
    for target in targets:
        compiles[target] = [arch for arch in targets if _compiles(ptxas, _ptx(base, target, isa), arch, tmp)]
    name, version = wheel.name.split("-")[:2]
    info = {"file": wheel.name, "package": name.replace("_", "-"), "version": version, "sha256": _sha256(wheel),
            "ptxas": release, "nvcc": _version(nvcc) if nvcc else None}
    row = {"wheel": wheel.name, "ptx_isa": isa, "targets": targets, "compiles": compiles,
           "nvcc_deprecated": _deprecated(nvcc, targets) if nvcc else None}
    return toolkit, info, row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvcc", default="nvcc", help="the nvcc that writes the base PTX")
    ap.add_argument("wheels", nargs="+", type=Path)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        r = _run(args.nvcc, "-arch=compute_75", "-ptx", str(KERNEL), "-o", str(tmp / "base.ptx"))
        if r.returncode:
            raise SystemExit(r.stderr)
        base = (tmp / "base.ptx").read_text()
        wheels, toolkits = [], {}
        for wheel in args.wheels:
            print(f"ptxas_matrix: {wheel.name}", file=sys.stderr)
            toolkit, info, row = measure(wheel, base, tmp)
            wheels.append(info)
            toolkits[toolkit] = row
    doc = {
        "what": "For each toolkit: which -arch NVIDIA's ptxas compiles a one-kernel PTX for, per PTX .target"
                " (compiles[P] lists every G for which `ptxas -arch=G` accepted PTX written for P; every other listed"
                " target refused it)",
        "measures": "the PTX/JIT rule: PTX written for P JIT-compiles on a GPU of arch G when ptxas compiles it for"
                    " sm_G, sm_Ga or sm_Gf (the driver's JIT is this compiler). It gives the 'f' families per toolkit"
                    " (PTX for sm_XYf compiles for the family's members only).",
        "does_not_measure": "SASS binary compatibility (whether an sm_80 cubin loads on an 8.6 GPU, or not on Tegra's"
                            " 8.7): the driver decides that at load time, by the CUDA Programming Guide's rules that"
                            " src/mmstack/data/gpus.toml cites; nor whether a driver is new enough for the PTX ISA.",
        "command": "python -m mmstack_lab.arch.ptxas_matrix --nvcc nvcc <wheels> > tests/data/facts/ptxas-matrix.json",
        "measured": f"{datetime.date.today()}, linux-64 development machine (no GPU is needed: ptxas only compiles)",
        "wheels_from": "pip download --no-deps --only-binary=:all: nvidia-cuda-nvcc-cu11==11.8.* /"
                       " nvidia-cuda-nvcc-cu12==12.N.* / nvidia-cuda-nvcc==13.N.* (PyPI; not committed)",
        "ptx": f"tests/data/fatbin/kernel.cu by nvcc {_version(args.nvcc)} `nvcc -arch=compute_75 -ptx`, .target and"
               " .version (the newest ISA each ptxas reads) replaced",
        "nvcc_deprecated": "targets for which the wheel's own `nvcc -arch=sm_XY --dryrun -c kernel.cu` printed a"
                           " deprecation warning; null where the wheel ships no nvcc (11.x, 12.x)",
        "wheels": wheels,
        "toolkits": toolkits,
    }
    json.dump(doc, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
