"""envs/arm/pixi.toml's linux-aarch64 generations, derived from the facts: one rich platform, feature and
environment per Arm-hosted GPU of data/arm_hosts.toml ([[host]]), served by conda-forge's sbsa
pytorch ([[build]]) and by the matrix's `# [aarch64]` row a solver installs there
(variants/arm_hosts.py serving_row: the one Arm choice, which `mmstack gpus` names too).

Per host: the platform `linux-aarch64-<slug>` declares `__cuda` = the CUDA of that row (the sbsa
build's toolkit: the driver floor), `__cuda_arch` = the host GPU's compute capability and
`__glibc` = the row's c_stdlib_version (the sysroot its packages need); the environment pins
`cuda-version` to that CUDA and mmcv to the row's build string. The platforms are declared from
the highest arch down, as the linux-64 ones (pixi installs the first declared platform a machine
meets: policy._multi_gpu_env_problems cites where). arm_manifest.py holds the file to them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mmstack.facts import arch as archmod
from mmstack.facts.gpus import Facts, version_key
from mmstack.variants import arm_hosts
from mmstack.variants.matrix import Variant

SUBDIR = arm_hosts.PLATFORM  # "linux-aarch64"


@dataclass(frozen=True)
class ArmGen:
    """One Arm-hosted GPU's environment, as pixi.toml must declare it."""

    env: str  # "gh200", "jetson-agx-orin"
    gpu: str  # the gpus.toml / arm_hosts.toml name
    cuda_arch: str  # the GPU's compute capability: the platform's __cuda_arch
    cuda: str  # the serving row's CUDA: the platform's __cuda and cuda-version
    glibc: str  # the serving row's c_stdlib_version: the platform's __glibc
    mmcv_prefix: str  # "cuda130_sm90", "cuda130_all"
    targets: tuple[archmod.Target, ...]  # what that build holds
    tegra: bool  # Jetson's integrated GPU: SASS runs only on its exact compute capability

    @property
    def platform(self) -> str:
        return f"{SUBDIR}-{self.env}"

    def platform_toml(self) -> str:
        return (f'{{ name = "{self.platform}", platform = "{SUBDIR}", cuda = {{ driver = "{self.cuda}", '
                f'arch = "{self.cuda_arch}" }}, glibc = "{self.glibc}" }}')


def env_name(gpu: str) -> str:
    """`NVIDIA GH200` -> `gh200`, `Jetson AGX Orin` -> `jetson-agx-orin` (pixi's environment names)."""
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower().removeprefix("nvidia ")).strip("-")


def expected(facts: Facts, matrix: list[Variant], arm: arm_hosts.ArmHosts | None = None) -> list[ArmGen]:
    """Every [[host]] whose serving row (arm_hosts.serving_row) holds SASS it runs, highest compute
    capability first; a host without one is left out (variants.arm_hosts.problems, run by `mmstack
    check`, names it)."""
    arm = arm or arm_hosts.load()
    tegra = {a.compute_capability for a in facts.architecture if a.tegra}
    out = []
    for host in arm.host:
        row = arm_hosts.serving_row(matrix, host.compute_capability, SUBDIR)
        if row is None or not arm_hosts.sass_runs(facts, host.compute_capability, row):
            continue
        out.append(ArmGen(env=env_name(host.gpu), gpu=host.gpu, cuda_arch=host.compute_capability, cuda=row.cuda or "",
                          glibc=row.c_stdlib_version or "2.28", mmcv_prefix=row.build_string_prefix,
                          targets=row.targets, tegra=host.compute_capability in tegra))
    return sorted(out, key=lambda g: version_key(g.cuda_arch), reverse=True)


def load_rows(facts: Facts, config: Path) -> tuple[list[Variant], list[ArmGen]]:
    """The linux-aarch64 rows of `config` (a conda_build_config.yaml) and the generations derived from
    them; ([], []) where it is missing or does not read (an installed mmstack away from a checkout)."""
    from mmstack.errors import BadInput, CheckFailed
    from mmstack.variants import matrix

    if not Path(config).is_file():
        return [], []
    try:
        rows = matrix.load_matrix(facts, Path(config), SUBDIR)
    except (BadInput, CheckFailed):
        return [], []
    return rows, expected(facts, rows)


def host_choice(gpu: str, cc: str, host: str, rows: list[Variant], gens: list[ArmGen]) -> tuple[archmod.Build | None, str | None]:
    """For a GPU of the Arm hosts (`host` linux-aarch64): the build a solver installs there
    (arm_hosts.serving_row, the build envs/arm/pixi.toml pins) and the Arm environment that pins it (the
    GPU's own, else one of its compute capability); (None, None) for any other GPU or without the rows."""
    if host != SUBDIR or not rows:
        return None, None
    row = arm_hosts.serving_row(rows, cc, SUBDIR)
    if row is None:
        return None, None
    gen = next((g for g in gens if g.gpu == gpu), None) or next((g for g in gens if g.cuda_arch == cc), None)
    env = gen.env if gen is not None and gen.mmcv_prefix == row.build_string_prefix else None
    return archmod.Build(row.build_string_prefix, row.cuda or "", row.targets), env
