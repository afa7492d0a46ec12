"""Which GPUs NVIDIA's own ptxas compiles each kind of PTX for: the evidence behind the PTX JIT rules.

    python -m mmstack_lab.arch.ptxas_targets --nvcc nvcc --ptxas ptxas --ptxas /path/to/13.5/ptxas \\
        > tests/data/facts/ptxas-targets.txt

The driver JIT-compiles a fatbin's PTX with the compiler ptxas is, for the GPU it runs on; a GPU of
compute capability X.Y has all of sm_XY's, sm_XYa's and sm_XYf's features. So PTX written for
`.target sm_ABf` JITs on an X.Y GPU when ptxas compiles it for -arch=sm_XY, sm_XYa or sm_XYf.
The PTX is tests/data/fatbin/kernel.cu through --nvcc (`nvcc -arch=compute_75 -ptx`) with its `.target`
line set to each target and its `.version` to the newest PTX ISA the ptxas reads (13.5's refuses
sm_107f below ISA 9.4). Each ptxas is asked about every sm_ target (plain, a, f; sm_75 and newer) its
`--help` lists, as PTX target and as -arch. tests/test_facts_arch.py compares
mmstack.facts.arch.coverage with every line.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from pathlib import Path

from mmstack_lab.paths import ROOT

KERNEL = ROOT / "tests" / "data" / "fatbin" / "kernel.cu"


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _version(tool: str) -> str:
    m = re.search(r"release (\d+\.\d+), (V[\d.]+)", _run(tool, "--version").stdout)
    return f"{m.group(1)} ({m.group(2)})" if m else "?"


def _targets(ptxas: str) -> list[str]:
    """sm_ targets ptxas --help lists for --gpu-name (plain, a, f), sm_75 and newer."""
    found = set(re.findall(r"\bsm_(\d+[af]?)\b", _run(ptxas, "--help").stdout))
    return sorted((t for t in found if int(t.rstrip("af")) >= 75), key=lambda t: (int(t.rstrip("af")), t))


def _max_isa(ptxas: str, ptx: str, tmp: Path) -> str:
    """The newest `.version` this ptxas accepts (it refuses a newer ISA than it knows)."""
    best = "9.0"
    for minor in range(0, 10):
        v = f"9.{minor}"
        f = tmp / "probe.ptx"
        f.write_text(re.sub(r"^\.version .*$", f".version {v}", ptx, flags=re.M))
        if _run(ptxas, "-arch=sm_75", str(f), "-o", "/dev/null").returncode == 0:
            best = v
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("--ptxas", action="append", required=True)
    args = ap.parse_args()
    nvcc_version = _version(args.nvcc)
    print("# What was read: for which -arch NVIDIA's ptxas compiles PTX written for one target (plain, 'a' or 'f'),")
    print("#   as the driver's JIT does for the GPU it runs on. Written by mmstack_lab.arch.ptxas_targets (its docstring")
    print(f"#   says how), PTX from tests/data/fatbin/kernel.cu by nvcc {nvcc_version} `nvcc -arch=compute_75 -ptx`,")
    print("#   `.target` set to each target. ptxas 13.0 is this machine's; 13.5 is NVIDIA's PyPI wheel")
    print("#   nvidia-cuda-nvcc 13.5.37 (downloaded with pip, run here 2026-12-03; not committed).")
    print("# Format: ptxas release | targets | every sm_ target its --help lists (each tried as PTX .target and as -arch)")
    print("#         ptxas release | PTX .target | the -arch values it compiled that PTX for (every other one refused)")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base = tmp / "base.ptx"
        r = _run(args.nvcc, "-arch=compute_75", "-ptx", str(KERNEL), "-o", str(base))
        if r.returncode:
            raise SystemExit(r.stderr)
        for ptxas in args.ptxas:
            release = _version(ptxas)
            isa = _max_isa(ptxas, base.read_text(), tmp)
            print(f"# ptxas {release}: PTX .version {isa}")
            targets = _targets(ptxas)
            print(f"{release.split()[0]} | targets | {' '.join(f'sm_{t}' for t in targets)}")
            for target in targets:
                ptx = tmp / f"{target}.ptx"
                text = re.sub(r"^\.target .*$", f".target sm_{target}", base.read_text(), flags=re.M)
                ptx.write_text(re.sub(r"^\.version .*$", f".version {isa}", text, flags=re.M))
                ok = [f"sm_{arch}" for arch in targets
                      if _run(ptxas, f"-arch=sm_{arch}", str(ptx), "-o", "/dev/null").returncode == 0]
                print(f"{release.split()[0]} | sm_{target} | {' '.join(ok)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
