"""Which mmcv build a solver picks for a machine: py-rattler with the machine's virtual packages.

CEP 46 (conda/ceps cep-0046.md): `__cuda_arch` is the lowest compute capability among the
machine's GPUs, `{major}.{minor}`, build string `0`, and absent whenever `__cuda` is absent.
pixi declares the same pair for a rich platform (`cuda = { driver, arch }`: `__cuda` = driver,
`__cuda_arch` = arch; prefix-dev/pixi crates/pixi_manifest/src/toml/platform.rs), conda through
the nvidia-virtual-packages plugin (or CONDA_OVERRIDE_CUDA / CONDA_OVERRIDE_CUDA_ARCH). The solve
is the real one, over real channels; nothing here ranks builds by itself.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mmstack.errors import BadInput, rattler_errors
from mmstack.facts.arch import parse_arch
from mmstack.facts.gpus import UNKNOWN_DRIVER, Facts, version_key

# What a machine declares besides CUDA (pixi.toml's and envs/arm/pixi.toml's rich platforms: glibc 2.28)
GLIBC = "2.28"
LINUX = "5.10"
PLATFORM = "linux-64"


@dataclass(frozen=True)
class Machine:
    """The CUDA virtual packages a machine declares: the driver's CUDA and `__cuda_arch`."""

    cuda: str | None  # `__cuda`: None without an NVIDIA driver
    cuda_arch: str | None  # `__cuda_arch`: None without a GPU, or for a conda that lacks the plugin

    def virtual_packages(self) -> dict[str, str]:
        vps = {"__glibc": GLIBC, "__linux": LINUX, "__unix": "0"}
        if self.cuda:
            vps["__cuda"] = self.cuda
            if self.cuda_arch:  # CEP 46: `__cuda_arch` MUST be absent when `__cuda` is
                vps["__cuda_arch"] = self.cuda_arch
        return vps


@dataclass(frozen=True)
class Answer:
    """The solver's answer for one package: the build it picked, or its refusal in one line."""

    package: str
    version: str | None = None
    build: str | None = None
    build_number: int | None = None
    unsatisfiable: str | None = None

    def as_dict(self) -> dict:
        if self.unsatisfiable is not None:
            return {"unsatisfiable": self.unsatisfiable}
        return {"version": self.version, "build": self.build, "build_number": self.build_number}


def solve(channels: list[str], specs: list[str], machine: Machine, *, package: str = "mmcv",
          platform: str = PLATFORM) -> Answer:
    """Solve `specs` over `channels` (URLs, local ones as file://) for `machine` on the conda subdir
    `platform` (linux-aarch64 for an Arm host); `package`'s build."""
    from rattler import BuildString, GenericVirtualPackage, PackageName, Subdir, Version, solve as rattler_solve

    vps = [GenericVirtualPackage(PackageName(n), Version(v), BuildString("0"))
           for n, v in machine.virtual_packages().items()]
    try:
        records = asyncio.run(rattler_solve(channels, specs, platforms=[Subdir(platform), Subdir("noarch")],
                                            virtual_packages=vps))
    except rattler_errors() as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        return Answer(package, unsatisfiable=" ".join(lines)[:1200] or type(exc).__name__)
    hit = next((r for r in records if r.name.normalized == package), None)
    if hit is None:
        raise BadInput(f"the solution holds no {package}", source=" ".join(specs), fix=f"ask for {package}")
    return Answer(package, str(hit.version), str(hit.build), int(hit.build_number))


def build_prefix(build: str) -> str:
    """`cuda129_sm89_py311_h1234567_400` -> `cuda129_sm89` (the matrix's build_string_prefix)."""
    return build.split("_py")[0]


def mask_hash(build: str) -> str:
    """`cuda129_sm89_py311_h1234567_400` -> `cuda129_sm89_py311_h*_400`: each channel hashes its own way."""
    head, sep, tail = build.rpartition("_h")
    return f"{head}_h*_{tail.split('_', 1)[1]}" if sep and "_" in tail else build


def driver_cuda(facts: Facts, driver: str | None) -> str | None:
    """`__cuda` for an NVIDIA driver version ('575.51.03'): the newest CUDA toolkit whose own driver
    floor (gpus.toml [[cuda]] min_driver) it meets; None without a driver or a floor it meets."""
    if not driver:
        return None
    key = version_key(driver)
    known = [t for t in facts.cuda if t.min_driver != UNKNOWN_DRIVER and version_key(t.min_driver) <= key]
    return max(known, key=lambda t: version_key(t.version)).version if known else None


def machine_for(facts: Facts, gpus: list[dict], environ: Mapping[str, str] | None = None) -> Machine:
    """CEP 46's virtual packages for the GPUs `mmstack detect` found: `__cuda` from the driver (or
    CONDA_OVERRIDE_CUDA), `__cuda_arch` the lowest compute capability among them (or
    CONDA_OVERRIDE_CUDA_ARCH); an empty override removes its package, `__cuda_arch` goes with `__cuda`."""
    env = os.environ if environ is None else environ
    if "CONDA_OVERRIDE_CUDA" in env:
        cuda = env["CONDA_OVERRIDE_CUDA"].strip() or None
    else:
        cuda = driver_cuda(facts, next((g.get("driver") for g in gpus if g.get("driver")), None))
    if "CONDA_OVERRIDE_CUDA_ARCH" in env:
        arch = env["CONDA_OVERRIDE_CUDA_ARCH"].strip() or None
    else:
        ccs = [parse_arch(g["compute_capability"]).plain for g in gpus if g.get("compute_capability")]
        arch = str(min(ccs)) if ccs else None
    return Machine(cuda, arch if cuda else None)


def channel_urls(channels: list[str]) -> list[str]:
    """A local directory as its file:// URL (it must be a channel); a URL or a name as given."""
    out = []
    for c in channels:
        if "://" in c or not (os.sep in c or c.startswith(".") or os.path.isdir(c)):
            out.append(c)
            continue
        path = Path(c).expanduser().resolve()
        if not (path / "noarch" / "repodata.json").is_file():
            raise BadInput(f"{c} is not an indexed conda channel (no noarch/repodata.json)", source="--channel",
                           fix=f"index it (`mmstack channel index {c}`) or pass a channel URL or name (conda-forge)")
        out.append(path.as_uri())
    return out
