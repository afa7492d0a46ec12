"""The matrix's linux-aarch64 rows against data/arm_hosts.toml: each CUDA row is built against a
CUDA conda-forge builds sbsa pytorch for, a fat row holds that build's arch list, and every Arm-hosted
GPU of the file (a gpus.toml GPU whose host is linux-aarch64) runs the build a solver picks for it
(`serving_row`) from SASS.

`serving_row` is the one place the Arm choice is made: what a plain `conda install mmcv` (or a pixi
platform declaring `__cuda_arch`) takes on a machine, by the recipe's rules (recipes/mmcv: a
per-generation build needs `__cuda_arch` in its `cuda_arch_spec`, `>=<min>,<next major>`; the highest
build number wins). envs/arm/pixi.toml's pins (envs/arm_platforms.py) and `mmstack gpus` both name it;
tests/test_arm_selection.py holds it to py-rattler's real solve per host."""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mmstack.facts import arch as archmod
from mmstack.facts.datafile import load_model
from mmstack.facts.gpus import Facts
from mmstack.variants.matrix import FAT_TAG, Variant, serving_row as matrix_serving_row

ARM_FILE = "arm_hosts.toml"
PLATFORM = "linux-aarch64"
Url = str


class Build(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    arm_variant: Literal["sbsa", "tegra"]
    cuda: str = Field(pattern=r"^(None|\d+\.\d+)$")
    arch_list: str
    c_stdlib_version: str = Field(pattern=r"^\d+\.\d+$")
    source: Url = Field(pattern=r"^https://")
    note: str = ""


class Host(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    gpu: str
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    arm_variant: Literal["sbsa", "tegra"]
    source: Url = Field(pattern=r"^https://")


class ArmHosts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    build: tuple[Build, ...]
    host: tuple[Host, ...]

    def sbsa(self, cuda: str | None) -> Build | None:
        return next((b for b in self.build if b.arm_variant == "sbsa" and b.cuda == (cuda or "None")), None)


@functools.cache
def load() -> ArmHosts:
    return load_model(ARM_FILE, ArmHosts)


def serving_row(rows: list[Variant], cuda_arch: str, platform: str = PLATFORM) -> Variant | None:
    """The CUDA row of `platform` a solver installs on a machine of this `__cuda_arch`
    (variants/matrix.py serving_row over that platform's rows)."""
    return matrix_serving_row([v for v in rows if v.platform == platform], cuda_arch)


def sass_runs(facts: Facts, cuda_arch: str, v: Variant) -> bool:
    """Whether the GPU runs `v`'s SASS (exactly its own, or a lower minor of its major), not PTX by JIT."""
    cov = archmod.coverage(archmod.parse_arch(cuda_arch), v.targets, cuda=v.cuda, facts=facts).coverage
    return cov in (archmod.Coverage.NATIVE, archmod.Coverage.LOWER_MINOR)


def hosts_of(v: Variant, rows: list[Variant], arm: ArmHosts | None = None) -> list[str]:
    """The Arm hosts of the file whose `serving_row` is `v` (the same build string prefix)."""
    arm = arm or load()
    out = []
    for h in arm.host:
        pick = serving_row(rows, h.compute_capability)
        if pick is not None and pick.build_string_prefix == v.build_string_prefix:
            out.append(h.gpu)
    return out


def problems(matrix: list[Variant], facts: Facts, arm: ArmHosts | None = None) -> list[str]:
    """One line per disagreement between the aarch64 rows of `matrix` and the file; [] when they agree."""
    arm = arm or load()
    out = []
    rows = [v for v in matrix if v.platform == PLATFORM]
    for v in rows:
        build = arm.sbsa(v.cuda)
        if build is None:
            out.append(f"{v.key}: conda-forge builds no sbsa pytorch for CUDA {v.cuda or 'None'} ({ARM_FILE} [[build]])")
            continue
        if v.c_stdlib_version is not None and v.c_stdlib_version != build.c_stdlib_version:
            out.append(f"{v.key}: c_stdlib_version {v.c_stdlib_version}, conda-forge's sbsa pytorch for CUDA "
                       f"{v.cuda or 'None'} has {build.c_stdlib_version}")
        if v.arch_tag == FAT_TAG and v.targets != archmod.parse_arch_list(build.arch_list):
            out.append(f"{v.key}: the fat row holds {v.arch_list}, conda-forge's sbsa list for CUDA {v.cuda} is "
                       f"{build.arch_list}")
    for host in arm.host:
        gpu = facts.lookup_gpu(host.gpu)
        if gpu is None or gpu.host != PLATFORM or gpu.compute_capability != host.compute_capability:
            out.append(f"{host.gpu}: not a gpus.toml GPU of host {PLATFORM} and compute capability "
                       f"{host.compute_capability}")
            continue
        pick = serving_row(rows, host.compute_capability)
        if pick is None:
            out.append(f"{host.gpu} ({host.compute_capability}): no {PLATFORM} CUDA row installs there")
        elif not sass_runs(facts, host.compute_capability, pick):
            out.append(f"{host.gpu} ({host.compute_capability}): a solver takes {pick.build_string_prefix}"
                       f" ({pick.arch_list}), which holds no SASS it runs (only PTX by JIT)")
    return out
