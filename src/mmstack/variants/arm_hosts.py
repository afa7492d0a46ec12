"""The matrix's linux-aarch64 rows against data/arm_hosts.toml: each CUDA row is built against a
CUDA conda-forge builds sbsa pytorch for, a fat row holds that build's arch list, and every Arm-hosted
GPU of the file (a gpus.toml GPU whose host is linux-aarch64) runs the row it names from SASS."""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mmstack.facts import arch as archmod
from mmstack.facts.datafile import load_model
from mmstack.facts.gpus import Facts
from mmstack.variants.matrix import FAT_TAG, Variant

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
    row: str
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
        cc = archmod.parse_arch(host.compute_capability)
        served = [v for v in rows if v.arch_tag == host.row and v.cuda is not None]
        runs = [v for v in served if archmod.coverage(cc, v.targets, cuda=v.cuda, facts=facts).coverage in
                (archmod.Coverage.NATIVE, archmod.Coverage.LOWER_MINOR)]
        if not runs:
            out.append(f"{host.gpu} ({host.compute_capability}): no {PLATFORM} row {host.row!r} holds SASS it runs")
    return out
