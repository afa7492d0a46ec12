"""STAND-IN BUILDER (development and CI only): a small local conda channel shaped like conda-forge + ./channel, for lock tests.

Real .conda packages (made by py-rattler-build's `assemble_package`, empty of files) indexed with
`rattler.index`, so the solver sees exactly what it would see on conda-forge:

- pytorch `cuda129_generic_py311_h…_200` builds needing `__cuda` and `cuda-version >=12.9,<13`,
  `cuda130_…` builds needing cuda-version 13, and `cpu_generic_py311_h…_200` builds
  (pytorch-cpu-feedstock's build strings);
- cuda-version 12.8, 12.9, 13.0 with conda-forge's `constrains: __cuda >=<major>`;
- cuda-arch, one per version of conda-forge's metapackage (STAND-IN, built like conda-forge's recipe:
  noarch generic, `constrains: __cuda_arch <version>.*`; tests/data/solver_selection/cuda-arch-versions.toml);
- one mmcv 2.2.0 per variant of a conda_build_config.yaml matrix, with the matrix's build strings
  (`cuda129_sm89_py311_h…_402`, `cuda129_all_py311_h…_102`, `cpu_py311_h…_2` at build number 2), `__cuda >=<major>` and
  cuda-version in its run requirements for CUDA builds, pinned to the matrix's pytorch; a
  per-generation build also `cuda-arch >=<cuda_arch_min>` (cuda-arch's run-export) and `__cuda_arch >=<min>,<next major>`,
  its build number the matrix's (the recipe's base + 100 x mmcv_priority), as recipes/mmcv renders them;
- python, mmstack and the tooling (typer, rich, pydantic, pyelftools, tomli, py-rattler,
  py-rattler-build, ruamel.yaml, pytest, ruff, matplotlib-base) so the repository's pixi.toml solves whole.

Nothing here is a product default. `build_channel(dest, packages)` writes and indexes a channel.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import tomllib

from mmstack_lab.paths import ROOT

CUDA_ARCH_VERSIONS = ROOT / "tests" / "data" / "solver_selection" / "cuda-arch-versions.toml"
# recipes/mmstack, mmengine and mmdet: `python_min | default("3.10")`, run `python >={{ python_min }}`
# (tests/test_build_render.py holds the packages below to the recipes' render)
NOARCH_PYTHON_MIN = "3.10"
STAND_IN = "STAND-IN (mmstack_lab.standin.fake_channel)"

# Fixed timestamp: the same inputs give byte-identical packages.
_TS = datetime(2025, 11, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Pkg:
    name: str
    version: str
    build: str  # without the `_h<hash>_<n>` tail when `hashed`
    subdir: str = "linux-64"
    depends: tuple[str, ...] = ()
    constrains: tuple[str, ...] = ()
    build_number: int = 0
    hashed: bool = True
    noarch: Literal["python", "generic"] | None = None

    @property
    def build_string(self) -> str:
        if not self.hashed:
            return self.build
        h = hashlib.sha256(repr((self.name, self.version, self.build, self.depends)).encode()).hexdigest()[:7]
        return f"{self.build}_h{h}_{self.build_number}" if self.build else f"h{h}_{self.build_number}"


def _py(py: str) -> str:
    major, minor = py.split(".")
    return f"python >={py},<{major}.{int(minor) + 1}.0a0"


def _cuda_tag(cuda: str) -> str:
    return "cuda" + cuda.replace(".", "")


def _cuda_range(cuda: str) -> str:
    return f"cuda-version >={cuda},<{int(cuda.split('.')[0]) + 1}"


def cuda_arch_packages() -> list[Pkg]:
    """STAND-IN cuda-arch: conda-forge's versions and its recipe's run constraint (the run-export
    acts at build time only; the mmcv builds below carry what it exports)."""
    spec = tomllib.loads(CUDA_ARCH_VERSIONS.read_text())
    return [Pkg("cuda-arch", v, "", subdir="noarch", noarch="generic",
                constrains=tuple(c.format(version=v) for c in spec["run_constraints"])) for v in spec["versions"]]


def mmcv_depends(v, *, cuda_arch_guard: bool = True, cuda_arch_bound: bool = True) -> tuple[str, ...]:
    """One mmcv build's run requirements as recipes/mmcv renders them (plus the run-exports that
    matter to a solve: cuda-version's, cuda-arch's). `cuda_arch_guard=False` leaves the dependency on
    `__cuda_arch` out: CEP 46's recipe pattern alone, which a solver without `__cuda_arch` does not hold back.
    `cuda_arch_bound=False` writes it as the recipe did before its upper bound, `__cuda_arch >=<min>`."""
    torch = f"pytorch >={v.pytorch},<{v.pytorch}.999"
    if v.cuda is None:
        return (_py(v.python), torch, "numpy")
    deps: tuple[str, ...] = (_py(v.python), torch, f"__cuda >={v.cuda.split('.')[0]}", _cuda_range(v.cuda), "numpy")
    if v.arch_min:
        spec = v.cuda_arch_spec if cuda_arch_bound else f">={v.arch_min}"
        deps += (f"cuda-arch >={v.arch_min}",) + ((f"__cuda_arch {spec}",) if cuda_arch_guard else ())
    return deps


def standard_packages(matrix, *, pythons=("3.11", "3.12"), cuda_versions=("12.8", "12.9", "13.0"),
                      extra: tuple[Pkg, ...] = (), cuda_arch_guard: bool = True, subdir: str = "linux-64",
                      cuda_arch_bound: bool = True) -> list[Pkg]:
    """The channel for the repository's pixi.toml: runtime, tooling, and mmcv per matrix variant; every
    package that is not noarch is built for `subdir` (linux-aarch64 for envs/arm/pixi.toml's rows)."""
    pkgs: list[Pkg] = cuda_arch_packages()
    for py in pythons:
        tag = py.replace(".", "")
        pkgs.append(Pkg("python", f"{py}.9", f"{tag}_cpython", depends=("__glibc >=2.17,<3.0.a0",)))
    for cv in cuda_versions:
        major = cv.split(".")[0]
        pkgs.append(Pkg("cuda-version", cv, "", subdir="noarch", noarch="generic",
                        constrains=(f"__cuda >={major}", f"cudatoolkit {cv}|{cv}.*")))
    torch_versions = sorted({v.pytorch for v in matrix})
    torch_cudas = sorted({v.cuda for v in matrix if v.cuda})
    for tv in torch_versions:
        for py in pythons:
            tag = py.replace(".", "")
            common = (_py(py), "__glibc >=2.17,<3.0.a0", "numpy >=1.23")
            pkgs.append(Pkg("pytorch", f"{tv}.0", f"cpu_generic_py{tag}", build_number=200, depends=common,
                            constrains=("pytorch-gpu <0.0a0",)))
            for cuda in torch_cudas:
                pkgs.append(Pkg("pytorch", f"{tv}.0", f"{_cuda_tag(cuda)}_generic_py{tag}", build_number=200,
                                depends=(*common, "__cuda", _cuda_range(cuda)), constrains=("pytorch-cpu <0.0a0",)))
    for py in pythons:
        pkgs.append(Pkg("numpy", "2.3.4", f"py{py.replace('.', '')}", depends=(_py(py),)))
    for v in matrix:
        if v.python not in pythons:
            continue
        tag = v.python.replace(".", "")
        # recipes/mmcv: the build number is the matrix's (cpu 0 < fat 100 < per-generation by arch)
        # recipes/mmcv's run constraint: a CUDA mmcv with a CUDA pytorch, the CPU one with a CPU pytorch
        # rows of two pytorch minors share the prefix; the hash (of the depends: the pytorch pin)
        # tells them apart, as the recipe's variant hash does
        pkgs.append(Pkg("mmcv", "2.2.0", f"{v.build_string_prefix}_py{tag}",
                        depends=mmcv_depends(v, cuda_arch_guard=cuda_arch_guard, cuda_arch_bound=cuda_arch_bound), build_number=v.build_number,
                        constrains=(f"pytorch * {'cpu' if v.cuda is None else 'cuda'}*",)))
    # recipes/mmdet's build (patched for mmcv 2.2) and conda-forge's unpatched one, which the
    # `mmcv22_*` build pin must keep out. Ours run on the recipes' python_min (NOARCH_PYTHON_MIN) and later.
    pkgs.append(Pkg("mmdet", "3.3.0", "mmcv22_pyh", subdir="noarch", noarch="python",
                    depends=(f"python >={NOARCH_PYTHON_MIN}", "mmcv >=2.0.0rc4,<2.3.0", "mmengine >=0.7.1,<1.0.0 safeload_*",
                             "numpy")))
    pkgs.append(Pkg("mmdet", "3.3.0", "pyh", subdir="noarch", noarch="python", build_number=1,
                    depends=("python >=3.8", "mmcv >=2.0.0rc4,<2.2.0", "mmengine >=0.7.1,<1.0.0", "numpy")))
    # recipes/mmengine's build (safe checkpoint loading) and conda-forge's, which mmdet's pin keeps out
    pkgs.append(Pkg("mmengine", "0.10.7", "safeload_pyh", subdir="noarch", noarch="python",
                    depends=(f"python >={NOARCH_PYTHON_MIN}", "numpy")))
    pkgs.append(Pkg("mmengine", "0.10.7", "pyh", subdir="noarch", noarch="python", build_number=1,
                    depends=("python >=3.8", "numpy")))
    pkgs.append(Pkg("mmstack", "0.1.0", "pyh", subdir="noarch", noarch="python",
                    depends=(f"python >={NOARCH_PYTHON_MIN}", "typer >=0.12", "rich >=13", "pydantic >=2.5", "pyelftools >=0.31",
                             "jinja2 >=3.1", "tomli >=2")))
    for name, ver in (("typer", "0.12.5"), ("rich", "13.9.4"), ("pydantic", "2.9.2"), ("pyelftools", "0.31"), ("jinja2", "3.1.6"),
                      ("tomli", "2.5.0"), ("ruamel.yaml", "0.18.6"), ("pytest", "8.3.3")):
        pkgs.append(Pkg(name, ver, "pyh", subdir="noarch", noarch="python", depends=("python >=3.9",)))
    for name, ver in (("py-rattler", "0.28.0"), ("py-rattler-build", "0.73.0"), ("matplotlib-base", "3.10.8")):
        pkgs.append(Pkg(name, ver, "py311", depends=(_py("3.11"),)))
    pkgs.append(Pkg("ruff", "0.6.9", "", depends=("__glibc >=2.17,<3.0.a0",)))
    pkgs.extend(extra)
    return [dataclasses.replace(p, subdir=subdir) if p.subdir == "linux-64" and p.noarch is None else p for p in pkgs]


def build_channel(dest: Path, packages: list[Pkg]) -> Path:
    """Write every package as a .conda into dest/<subdir>/, index the channel, return dest."""
    from rattler.index import index_fs
    from rattler_build import assemble_package

    dest = Path(dest)
    for sub in sorted({"linux-64", "noarch", *(p.subdir for p in packages)}):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    for p in packages:
        assemble_package(
            name=p.name, version=p.version, target_platform=p.subdir, build_string=p.build_string,
            output_dir=str(dest / p.subdir), files=[], depends=list(p.depends), constrains=list(p.constrains),
            build_number=p.build_number, noarch=p.noarch, compression_level=1, timestamp=_TS,
            detect_prefix=False, license="BSD-3-Clause", summary=f"{STAND_IN}: mmstack test stand-in for {p.name}",
        )
    asyncio.run(index_fs(dest, write_zst=False, write_shards=False))
    return dest


def url(dest: Path) -> str:
    return Path(dest).resolve().as_uri()
