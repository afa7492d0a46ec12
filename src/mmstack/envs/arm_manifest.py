"""envs/arm/pixi.toml, the Arm hosts' pixi workspace, held to what arm_platforms.py derives.

The linux-aarch64 environments live in a workspace of their own because pixi checks a lock against
every environment of its workspace: one missing from pixi.lock makes the whole lock outdated
(prefix-dev/pixi at 2b25fc76, crates/pixi_core/src/lock_file/outdated.rs:271-285, called by
`Workspace::update_lock_file`, crates/pixi_core/src/lock_file/update.rs:312-373), so `--locked`
fails for every environment and a plain `pixi run -e <env>` re-solves the missing ones. No channel
has a linux-aarch64 mmcv yet, so these cannot be solved; in the root workspace they broke it.

`check` reads the file with the root manifest's reader (pixi_manifest.load: what mmstack does not
model is refused) and holds it to the root workspace (channels, requires-pixi, the `verify` tasks)
and to the derived generations (platforms in order, one environment per Arm-hosted GPU with its
pins, `default` the CPU environment on the bare platform). A drift is BadInput: one line naming the
file, the field and the fix. `unlocked` says, per environment, why none is locked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from mmstack.envs import arm_platforms, pixi_manifest, policy, portable, toml11
from mmstack.envs.arm_platforms import ArmGen
from mmstack.envs.pixi_manifest import Manifest
from mmstack.errors import BadInput
from mmstack.facts.gpus import Facts
from mmstack.variants.matrix import Variant

MANIFEST = "envs/arm/pixi.toml"  # relative to the repository root
SUBDIR = arm_platforms.SUBDIR
TASK_FEATURES = ("cuda", "cpu")  # features whose `verify` task must be the root manifest's


@dataclass(frozen=True)
class Drift:
    field: str  # the TOML field of envs/arm/pixi.toml
    message: str
    fix: str

    def error(self, more: int = 0) -> BadInput:
        extra = f" (and {more} more: fix this one and run `mmstack lock check` again)" if more else ""
        return BadInput(f"{self.field}: {self.message}{extra}", source=MANIFEST, fix=self.fix)


def check(root: Path, root_manifest: Manifest, facts: Facts, arm_matrix: list[Variant]) -> tuple[Manifest, list[ArmGen]]:
    """The Arm workspace and its generations; BadInput (exit 2) on the first drift."""
    path = Path(root) / MANIFEST
    manifest = pixi_manifest.load(path)  # BadInput for what pixi reads and mmstack does not model
    gens = arm_platforms.expected(facts, arm_matrix)
    drift = problems(manifest, _tasks(path), root_manifest, _tasks(root_manifest.path), gens, arm_matrix)
    if drift:
        raise drift[0].error(len(drift) - 1)
    return manifest, gens


def _tasks(path: Path) -> dict[str, dict]:
    """feature -> its [tasks] table (pixi_manifest does not read tasks)."""
    raw = toml11.loads(Path(path).read_text())
    return {name: dict(body.get("tasks") or {}) for name, body in (raw.get("feature") or {}).items()}


def problems(manifest: Manifest, tasks: dict[str, dict], root: Manifest, root_tasks: dict[str, dict],
             gens: list[ArmGen], arm_matrix: list[Variant]) -> list[Drift]:
    """Every drift of the Arm workspace, first the workspace table's, then each environment's."""
    out: list[Drift] = []
    rel = Path(MANIFEST).parent
    want_channels = [_rebase(c, rel) for c in root.channels]
    if manifest.channel_urls() != root.channel_urls():
        out.append(Drift("workspace.channels", f"{list(manifest.channels)} are other channels than the root pixi.toml's"
                         f" {list(root.channels)} (pixi joins a relative channel to the manifest's directory, {rel}/)",
                         f"channels = {_toml_list(want_channels)}"))
    if manifest.requires_pixi != root.requires_pixi:
        out.append(Drift("workspace.requires-pixi", f"{manifest.requires_pixi!r} is not the root pixi.toml's {root.requires_pixi!r}",
                         f'requires-pixi = "{root.requires_pixi}"'))
    want_plats = [SUBDIR, *(g.platform for g in gens)]
    have_plats = [p.name for p in manifest.platforms]
    by_name = {p.name: p for p in manifest.platforms}
    for g in gens:
        plat = by_name.get(g.platform)
        vps = plat.virtual_packages if plat else {}
        if plat is None or plat.subdir != SUBDIR or \
                (vps.get("__cuda"), vps.get("__cuda_arch"), vps.get("__glibc")) != (g.cuda, g.cuda_arch, g.glibc):
            found = f"declares {', '.join(plat.declared_strings()) or 'nothing'} on {plat.subdir}" if plat else "is not declared"
            out.append(Drift("workspace.platforms", f"{g.platform!r} {found}; the facts say CUDA {g.cuda} (conda-forge's sbsa"
                             f" pytorch), compute capability {g.cuda_arch} ({g.gpu}), glibc {g.glibc}",
                             f"{g.platform_toml()} in workspace.platforms"))
    if SUBDIR not in by_name or not by_name[SUBDIR].is_subdir_platform:
        out.append(Drift("workspace.platforms", f"the bare {SUBDIR!r} platform (the CPU environment's) is not declared",
                         f'"{SUBDIR}" first in workspace.platforms'))
    for name in have_plats:
        if name not in want_plats:
            out.append(Drift("workspace.platforms", f"{name!r} is no platform of this workspace ({SUBDIR} and one per"
                             f" Arm-hosted GPU of src/mmstack/data/{arm_platforms.arm_hosts.ARM_FILE})",
                             "remove it, or add its [[host]] row there"))
    if not out and have_plats != want_plats:
        out.append(Drift("workspace.platforms", f"declared in the order {', '.join(have_plats)}; pixi installs the first"
                         " platform a machine meets", f"declare them from the highest arch down: {', '.join(want_plats)}"))
    for feature in TASK_FEATURES:
        want = root_tasks.get(feature, {}).get("verify")
        if want is not None and tasks.get(feature, {}).get("verify") != want:
            out.append(Drift(f"feature.{feature}.tasks.verify", "is not the root pixi.toml's",
                             f"verify = {_inline(want)}"))
    out += _env_drift(manifest, gens, arm_matrix)
    return out


def _env_drift(manifest: Manifest, gens: list[ArmGen], arm_matrix: list[Variant]) -> list[Drift]:
    out: list[Drift] = []
    want_envs = {pixi_manifest.DEFAULT_ENV: None, "cpu": None, **{g.env: g for g in gens}}
    for name, g in want_envs.items():
        env = manifest.envs.get(name)
        features = '["cpu", "mmdet"]' if g is None else f'["cuda", "gen-{name}", "mmdet"]'
        if env is None:
            out.append(Drift(f"environments.{name}", f"missing ({g.gpu}, {SUBDIR})" if g else "missing (the CPU environment)",
                             f"{name} = {features} in [environments]"))
            continue
        rows = [v for v in arm_matrix if (v.cuda is None if g is None else v.build_string_prefix == g.mmcv_prefix)]
        pins = policy.Pins(env=name, cuda_driver=g.cuda if g else None, cuda_arch=g.cuda_arch if g else None,
                           cuda_version=f"{g.cuda}.*" if g else None, pytorch_build="cuda*" if g else "cpu*",
                           pytorch_versions=frozenset(v.pytorch for v in rows),
                           mmcv_prefixes=frozenset({v.build_string_prefix for v in rows}) or frozenset({"cpu"}),
                           pythons=frozenset(v.python for v in rows))
        want_plat = g.platform if g else SUBDIR
        if [p.name for p in env.platforms] != [want_plat]:
            out.append(Drift(f"environments.{name}", f"resolves to {', '.join(p.name for p in env.platforms) or 'no platform'},"
                             f" not {want_plat}", f"{name} = {features} in [environments]"))
            continue
        for p in policy.env_pins(env, pins, MANIFEST):
            out.append(Drift(f"environments.{name} ({p.package})", p.message.removeprefix(f"{MANIFEST}: "), p.fix))
    for name in manifest.envs:
        if name not in want_envs:
            out.append(Drift(f"environments.{name}", f"is no Arm-hosted GPU of src/mmstack/data/{arm_platforms.arm_hosts.ARM_FILE}",
                             "remove it, or add its [[host]] row there"))
    return out


def _rebase(channel: str, rel: Path) -> str:
    """The root manifest's channel as written from envs/arm/ (a relative path gains ../..)."""
    if "://" not in channel and channel.startswith("."):
        up = "/".join(".." for _ in rel.parts)
        return f"{up}/{channel.removeprefix('./')}"
    return channel


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def _inline(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f'{k} = "{v}"' for k, v in value.items()) + " }"
    return f'"{value}"'


def unlocked(manifest: Manifest, channels: list[str], root: Path) -> dict[str, str]:
    """env -> one line saying why it is not locked here. `mmstack lock` locks the root workspace only;
    where a local channel of the solve has no linux-aarch64 repodata (everything offline here:
    ./channel built for linux-64, the conda-forge subset), that is the reason given."""
    lacking = [c for c in channels if c.startswith("file://")
               and not (Path(unquote(urlparse(c).path)) / SUBDIR / "repodata.json").is_file()]
    out: dict[str, str] = {}
    for name, env in manifest.envs.items():
        plat = env.platforms[0].name if len(env.platforms) == 1 else "-"
        if lacking:
            where = ", ".join(portable.relative(c, root) for c in lacking)
            why = f"no {SUBDIR} repodata in {where}"
        else:
            why = f"`mmstack lock` locks the root workspace only; pixi locks {MANIFEST}"
        out[name] = f"{name} ({plat}): unlocked: {why} (envs/README.md says what a maintainer runs to lock it)"
    return out
