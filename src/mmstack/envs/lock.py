"""The lock stage: solve each environment of pixi.toml with py-rattler, render pixi.lock and
envs/<env>.conda-lock.yml from the same solve, and find what `mmstack lock check` gates CI on
(commands/lock_cmds.py holds the commands' bodies: what they print and their exit codes).

Data flow (docs/architecture.md): facts + variant matrix -> pixi.toml (checked, not trusted) -> solve ->
pixi.lock + envs/. The solve assumes the virtual packages a machine of the generation has:
`__cuda` at the generation's CUDA (the driver floor the environment pins), `__cuda_arch` at its
compute capability, `__glibc`/`__linux` from the platform entry (pixi's defaults 2.28 / 4.18),
`__unix`, `__archspec`. Rules live in policy.py, file formats in lockfile.py, the manifest
reader in pixi_manifest.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mmstack import report
from mmstack.builder.reach import require_indexed
from mmstack.envs import arm_manifest, lockfile, pixi_manifest, policy
from mmstack.envs.lockfile import LockedEnv
from mmstack.envs.pixi_manifest import EnvSpec, Manifest, Platform
from mmstack.errors import BadInput, CheckFailed, rattler_errors
from mmstack.facts.gpus import Facts, load as load_facts
from mmstack.variants import matrix as variants

DEFAULT_ARCHSPEC = "x86_64"
Writer = Callable[[Path], None]  # writes one file's content to the path it is given (lockfile.write_atomically)


@dataclass
class Inputs:
    root: Path
    manifest: Manifest
    facts: Facts
    matrix: list[variants.Variant]
    channels: list[str]  # URLs the solve uses and the check accepts


def load_inputs(root: Path, facts: Facts | None, config: Path | None, channels: list[str] | None) -> Inputs:
    root = Path(root)
    manifest = pixi_manifest.load(root / pixi_manifest.MANIFEST)
    facts = facts or load_facts()
    matrix = variants.load_matrix(facts, Path(config) if config else root / variants.CONFIG_FILE)
    urls = [pixi_manifest.channel_url(c, Path.cwd()) for c in channels] if channels else manifest.channel_urls()
    return Inputs(root, manifest, facts, matrix, urls)


def arm_workspace_lines(inputs: Inputs, config: Path | None) -> list[str]:
    """envs/arm/pixi.toml (the Arm hosts' own workspace: arm_manifest.py says why) held to the facts
    and the `# [aarch64]` rows, BadInput on a drift; then one line per environment saying why it is
    not locked here. Nothing is solved or written for it: `mmstack lock` locks the root workspace."""
    if not (inputs.root / arm_manifest.MANIFEST).is_file():
        return [f"{arm_manifest.MANIFEST}: none in this tree; the Arm hosts' environments are not checked"]
    cfg = Path(config) if config else inputs.root / variants.CONFIG_FILE
    arm_matrix = variants.load_matrix(inputs.facts, cfg, arm_manifest.SUBDIR)
    manifest, _ = arm_manifest.check(inputs.root, inputs.manifest, inputs.facts, arm_matrix)
    head = f"{arm_manifest.MANIFEST}: {len(manifest.envs)} {arm_manifest.SUBDIR} environments agree with the facts and the matrix"
    if (manifest.root / lockfile.PIXI_LOCK).is_file():  # written by `pixi lock --manifest-path envs/arm/pixi.toml`
        return [head, f"{arm_manifest.MANIFEST}: its {lockfile.PIXI_LOCK} (pixi's) is not checked by `mmstack lock check` yet"]
    return [head, *arm_manifest.unlocked(manifest, inputs.channels, inputs.root).values()]


def selected_envs(manifest: Manifest, envs: list[str] | None) -> list[str]:
    if not envs:
        return list(manifest.envs)
    for e in envs:
        manifest.env(e)  # BadInput for an unknown name
    return list(dict.fromkeys(envs))


# -- solving -----------------------------------------------------------------------------------


def virtual_packages(env: EnvSpec, plat: Platform, facts: Facts) -> dict[str, str]:
    """Name -> version (for __archspec: the microarchitecture) the solve assumes for this env."""
    vps = dict(plat.virtual_packages)
    gen = next((g for g in facts.generation if g.env == env.name), None)
    if gen is not None and gen.is_gpu:
        vps["__cuda"] = gen.cuda
        vps["__cuda_arch"] = gen.compute_capability
    if plat.subdir.startswith(("linux", "osx")):
        vps.setdefault("__unix", "0")
    vps.setdefault("__archspec", DEFAULT_ARCHSPEC)
    return vps


def _generic(vps: dict[str, str]):
    from rattler import BuildString, GenericVirtualPackage, PackageName, Version

    out = []
    for name, value in vps.items():
        if name == "__archspec":  # version 1, the microarchitecture in the build string (rattler's form)
            out.append(GenericVirtualPackage(PackageName(name), Version("1"), BuildString(value)))
        else:
            out.append(GenericVirtualPackage(PackageName(name), Version(value), BuildString("0")))
    return out


def solve_env(env: EnvSpec, facts: Facts, channels: list[str], *, gateway=None) -> tuple[Platform, list]:
    """Solve one environment of one platform; a failure is a CheckFailed naming the env and the solver's reason.

    Pass one rattler Gateway for several environments: it caches repodata between solves.
    """
    if len(env.platforms) != 1:
        raise BadInput(f"environment {env.name!r} resolves to {len(env.platforms)} platforms", source=pixi_manifest.MANIFEST,
                       fix="bind one of its features to a single platform")
    plat = env.platforms[0]
    return plat, solve_platform(env, plat, facts, channels, gateway=gateway)


def env_platforms(env: EnvSpec) -> tuple[Platform, ...]:
    """The platforms `mmstack lock` solves an environment on: its one platform, or every platform of
    an environment whose platforms all declare `__cuda` (policy.is_multi_gpu_env: pixi.toml's `gpu`)."""
    return env.platforms if len(env.platforms) == 1 or policy.is_multi_gpu_env(env) else ()


def solve_platform(env: EnvSpec, plat: Platform, facts: Facts, channels: list[str], *, gateway=None) -> list:
    """The records of `env` solved on `plat`, with that platform's virtual packages (its own
    `__cuda`/`__cuda_arch`, as GenericVirtualPackages); a failure is a CheckFailed naming both."""
    from rattler import Subdir, solve

    if env.pypi:
        raise BadInput(f"environment {env.name!r} has pypi-dependencies ({', '.join(env.pypi)}); `mmstack lock` solves conda packages only",
                       source=pixi_manifest.MANIFEST, fix="take them from conda-forge, or lock this environment with pixi")
    require_indexed(channels)
    specs = [s.match_spec for s in env.specs]
    try:
        records = asyncio.run(solve(
            channels, specs, platforms=[Subdir(plat.subdir), Subdir("noarch")], gateway=gateway,
            virtual_packages=_generic(virtual_packages(env, plat, facts)),
        ))
    except rattler_errors() as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        reason = " ".join(lines[:6])[:600] or type(exc).__name__
        where = env.name if len(env.platforms) == 1 else f"{env.name} on {plat.name}"
        raise CheckFailed(f"{where}: cannot solve: {reason}",
                          fix="check the channels (--channel for a mirror or local channel) and the pins in pixi.toml") from None
    return records


def locked_env(env: str, plat: Platform, channels: list[str], records) -> LockedEnv:
    """One environment's solved records as the LockedEnv the lockfiles are written from."""
    return LockedEnv(name=env, platform=plat.name, subdir=plat.subdir, virtual_packages=tuple(plat.lock_strings()),
                     channels=tuple(channels),
                     packages=tuple(sorted((lockfile.Locked.from_record(r) for r in records), key=lambda x: x.name)))


# -- envs/<env>.yml ------------------------------------------------------------------------------


def render_env_yml(env: EnvSpec, facts: Facts, platform: Platform | None = None) -> str:
    """environment.yml for conda/mamba users (channels and the direct pins of pixi.toml).

    An environment over several GPU platforms (pixi.toml's `gpu`) has one for itself (no generation
    pinned: a solver with `__cuda_arch` picks) and one per `platform`, the source of that platform's
    conda-lock file (envs/<env>.<platform>.yml, .conda-lock.yml, .virtual-packages.yml: the three
    files every lock has, so whatever checks `<stem>.conda-lock.yml` against `<stem>.yml` holds)."""
    gen = next((g for g in facts.generation if g.env == env.name), None)
    which = platform.name if platform is not None else None
    stem = f"{env.name}.{which}" if which else env.name
    lines = [f"# {env.name}{' on ' + which if which else ''}: generated by `mmstack lock` from pixi.toml;"
             " `mmstack lock check` fails when it drifts."]
    if policy.is_multi_gpu_env(env) and platform is None:
        cuda = ", ".join(sorted({p.vp("__cuda") or "" for p in env.platforms}))
        lines += [
            "# No generation pinned: a solver that knows __cuda_arch (conda with nvidia-virtual-packages, pixi)"
            " installs the mmcv build of this machine's GPUs (CEP 46, docs/solver.md).",
            f"# Needs an NVIDIA driver for CUDA >= {cuda} (__cuda). Locked once per platform, each from its own yml:",
        ]
        lines += [f"#   envs/{env.name}.{p.name}.yml and .conda-lock.yml (__cuda_arch {p.vp('__cuda_arch') or '-'})"
                  for p in env.platforms]
    else:
        lines += [
            f"# Exact builds and hashes: envs/{stem}.conda-lock.yml (`conda-lock install`).",
            f"# Current? conda-lock lock --check-input-hash -f envs/{stem}.yml -p {(platform or env.platforms[0]).subdir}"
            f" --virtual-package-spec envs/{stem}.virtual-packages.yml --lockfile envs/{stem}.conda-lock.yml",
        ]
    if platform is not None:
        drv, arch = platform.vp("__cuda"), platform.vp("__cuda_arch")
        lines.append(f"# For a machine whose __cuda_arch (its GPUs' lowest compute capability) reaches {arch} and no higher"
                     f" platform of {env.name} (pixi's pick there); needs an NVIDIA driver for CUDA >= {drv} (__cuda).")
        lines.append(f"# Solving without a GPU: CONDA_OVERRIDE_CUDA={drv} CONDA_OVERRIDE_CUDA_ARCH={arch}.")
    elif gen is not None and gen.is_gpu:
        lines.append(f"# Needs an NVIDIA driver for CUDA >= {gen.cuda} (__cuda); GPUs of compute capability"
                     f" {gen.compute_capability} ({gen.summary}).")
        lines.append(f"# Solving without a GPU: CONDA_OVERRIDE_CUDA={gen.cuda}.")
    lines += ["# Run from the repository root so ./channel resolves.", f"name: mmstack-{env.name}", "channels:"]
    lines += [f"  - {c}" for c in env.channels]
    lines.append("dependencies:")
    for s in env.specs:
        lines.append(f"  - {_conda_spec(s)}")
    return "\n".join(lines) + "\n"


def yml_platforms(env: EnvSpec) -> list[Platform | None]:
    """The envs/*.yml an environment has: its own (None), and one per platform of a multi-GPU one."""
    return [None, *env.platforms] if policy.is_multi_gpu_env(env) else [None]


def conda_lock_hash(env: EnvSpec, plat: Platform, facts: Facts) -> str:
    """The content_hash conda-lock computes for `conda-lock lock -f envs/<env>.yml -p <subdir>
    --virtual-package-spec envs/<env>.virtual-packages.yml` (lockfile.conda_lock_content_hash)."""
    return lockfile.conda_lock_content_hash(specs=[_conda_spec(s) for s in env.specs], channels=list(env.channels),
                                            subdir=plat.subdir, virtual_packages=virtual_packages(env, plat, facts))


def _conda_spec(s) -> str:
    """`mmcv=2.2.0=cuda129_sm89_*`, `python=3.11`, `py-rattler>=0.28` (conda's spellings)."""
    ver = s.version or "*"
    chan = f"{s.channel}::" if s.channel else ""
    if s.build:
        v = ver[:-2] if ver.endswith(".*") else ver
        return f"{chan}{s.name}={v}={s.build}"
    if ver == "*":
        return f"{chan}{s.name}"
    if ver.endswith(".*") and not any(ch in ver for ch in "<>=!,|"):
        return f"{chan}{s.name}={ver[:-2]}"
    return f"{chan}{s.name}{ver}" if ver[0] in "<>=!" else f"{chan}{s.name} {ver}"


# -- mmstack lock: the stage's steps (commands/lock_cmds.py runs them and reports) -------------------


def env_ymls(inputs: Inputs) -> dict[Path, Writer]:
    """envs/<env>.yml of every environment, rendered from pixi.toml (written with the locks, or alone)."""
    return {lockfile.env_yml_path(inputs.root, e, p.name if p else None):
            lockfile.text_writer(render_env_yml(inputs.manifest.envs[e], inputs.facts, p))
            for e in inputs.manifest.envs for p in yml_platforms(inputs.manifest.envs[e])}


# env -> one (platform, channels pixi.lock records, records) per platform it is solved on
Solved = dict[str, list[tuple[Platform, list[str], list]]]


def solve_envs(inputs: Inputs, names: list[str], *, on_env: Callable[[int, int, str], None] | None = None) -> Solved:
    """Solve `names` with one rattler Gateway (repodata cached between solves); `on_env(i, n, name)`
    before each solve, one info line after it."""
    from rattler import Gateway

    # pixi.lock records pixi.toml's channels as pixi resolves them (pixi compares them with the
    # manifest's: a lock with other channels is outdated); --channel changes where the solve reads
    # from, as a mirror does for pixi.
    lock_channels = inputs.manifest.pixi_lock_channels()
    gateway = Gateway()
    solved: Solved = {}
    for i, name in enumerate(names, 1):
        env = inputs.manifest.envs[name]
        t0 = time.perf_counter()
        if on_env is not None:
            on_env(i, len(names), name)
        plats = env_platforms(env)
        if not plats:
            plats = (solve_env(env, inputs.facts, inputs.channels, gateway=gateway)[0],)  # BadInput: several platforms
        solved[name] = [(plat, lock_channels, solve_platform(env, plat, inputs.facts, inputs.channels, gateway=gateway))
                        for plat in plats]
        if len(solved[name]) == 1:
            ((plat, _, records),) = solved[name]
            on = f"on {plat.name}, {len(records)} packages"
        else:
            on = f"on {len(solved[name])} platforms, packages " + ", ".join(f"{plat.name} {len(records)}"
                                                                           for plat, _, records in solved[name])
        report.info(f"[{i}/{len(names)}] {name}: {len(env.specs)} specs {on} in {time.perf_counter() - t0:.2f}s")
    return solved


def lock_files(inputs: Inputs, solved: Solved, old: dict[str, tuple[LockedEnv, ...]],
               ymls: dict[Path, Writer]) -> tuple[dict[Path, Writer], Solved]:
    """Every file `mmstack lock` writes (pixi.lock, each solved env's conda-lock.yml and virtual
    package spec, per platform for an environment on several, `ymls`) and every environment
    pixi.lock then holds: those not re-solved keep their locked records and the platforms they were
    solved on (`old`: lockfile.read_pixi_lock_platforms; CheckFailed where pixi.toml moved one)."""
    root = inputs.root
    lock_path = root / lockfile.PIXI_LOCK
    all_envs = dict(solved)
    for name, prevs in old.items():
        if name in all_envs or name not in inputs.manifest.envs:
            continue
        kept_env = []
        for prev in prevs:
            kept = next((p for p in inputs.manifest.platforms if p.name == prev.platform), None)
            if kept is None or kept.identity() != pixi_manifest.platform_identity(prev.subdir, prev.virtual_packages):
                raise CheckFailed(f"{name}: locked on platform {prev.platform!r}, which pixi.toml no longer declares",
                                  fix="re-lock every environment: `mmstack lock` without --env")
            kept_env.append((kept, list(prev.channels), [p.record for p in prev.packages]))
        all_envs[name] = kept_env
    seen: dict[str, Platform] = {}
    for name, per_env in all_envs.items():
        for plat, _, _ in per_env:
            if seen.setdefault(plat.name, plat).declared != plat.declared:
                raise CheckFailed(f"platform {plat.name!r} changed in pixi.toml; environments locked on the old one would be"
                                  f" mixed with {name!r}", fix="re-lock every environment: `mmstack lock` without --env")

    files = dict(ymls)
    lf = lockfile.build_pixi_lock(all_envs, inputs.manifest.lock_aliases())
    files[lock_path] = lockfile.pixi_lock_writer(lf, root)
    for name, per_env in solved.items():
        env = inputs.manifest.envs[name]
        digests = policy.input_digests(env, inputs.facts, inputs.matrix)
        several = len(per_env) > 1
        for plat, chans, records in per_env:
            locked = locked_env(name, plat, chans, records)
            # What conda-lock writes for `conda-lock lock -f envs/<env>.yml`: the yml's channels as spelled
            # there and the yml as the source (pixi.toml, conda-lock cannot parse).
            vps = virtual_packages(env, plat, inputs.facts)
            which = plat.name if several else None
            doc = lockfile.conda_lock_document(env=locked, channels=list(env.channels),
                                               sources=[lockfile.env_yml_path(root, name, which).name], digests=digests,
                                               content_hash=conda_lock_hash(env, plat, inputs.facts), root=root)
            files[lockfile.conda_lock_path(root, name, which)] = lockfile.text_writer(lockfile.dump_yaml(doc))
            files[lockfile.vp_spec_path(root, name, which)] = lockfile.text_writer(
                f"# conda-lock --virtual-package-spec for {name}{' on ' + plat.name if several else ''}:"
                " what `mmstack lock` solved with.\n"
                + lockfile.dump_yaml(lockfile.conda_lock_virtual_package_spec(plat.subdir, vps)))
    return files, all_envs


# -- mmstack lock check -----------------------------------------------------------------------------


# One rule for a tree without pixi.lock, shared by `mmstack lock check` and `mmstack check`: a
# pixi.lock is optional (this repository commits none; envs/README.md says why). Without one there
# is nothing locked to check: both commands check pixi.toml and envs/*.yml, say NO_LOCK, and pass
# on those. `--require-lock` (for a tree that commits its lock) makes the absence a failure.
NO_LOCK = "no pixi.lock: nothing locked to check (`mmstack lock` writes one)"


def collect_problems(*, root: Path = Path("."), envs: list[str] | None = None, channels: list[str] | None = None,
                     facts: Facts | None = None, config: Path | None = None,
                     require_lock: bool = False) -> tuple[list[policy.Problem], str]:
    """All problems (manifest drift, env ymls, locks) and a one-line summary of what was checked."""
    inputs = load_inputs(root, facts, config, channels)
    problems = policy.manifest_problems(inputs.manifest, inputs.facts, inputs.matrix)
    arm = arm_workspace_lines(inputs, config)
    root = inputs.root
    names = selected_envs(inputs.manifest, envs)

    for name in inputs.manifest.envs:
        if envs and name not in names:
            continue
        for plat in yml_platforms(inputs.manifest.envs[name]):
            path = lockfile.env_yml_path(root, name, plat.name if plat else None)
            want = render_env_yml(inputs.manifest.envs[name], inputs.facts, plat)
            if not path.is_file():
                problems.append(policy.Problem(name, "-", "env-yml-drift", f"envs/{path.name} is missing", "mmstack lock --yml-only"))
            elif path.read_text() != want:
                problems.append(policy.Problem(name, "-", "env-yml-drift", f"envs/{path.name} differs from what pixi.toml gives",
                                               "mmstack lock --yml-only"))

    lock_path = root / lockfile.PIXI_LOCK
    if not lock_path.is_file():
        if require_lock:
            problems.append(policy.Problem("-", "-", "missing-lock", "no pixi.lock (--require-lock)", "mmstack lock"))
        return problems, "\n".join([f"pixi.toml and envs/*.yml agree with the facts and the matrix ({len(names)} environments);"
                                     f" {NO_LOCK}", *arm])

    per_platform = lockfile.read_pixi_lock_platforms(lock_path, inputs.manifest.platforms)
    locked = {name: envs[0] for name, envs in per_platform.items()}
    index = policy.ChannelIndex(inputs.channels)
    for name in names:
        env = inputs.manifest.envs[name]
        if name not in locked:
            problems.append(policy.Problem(name, "-", "missing-lock", f"{name} is not in pixi.lock", f"mmstack lock --env {name}"))
            continue
        if policy.is_multi_gpu_env(env):  # each platform: its records, its conda-lock file, its arch's mmcv
            problems += _platform_problems(inputs, env, per_platform[name], index)
        else:
            problems += _env_lock_problems(inputs, env, locked[name], lockfile.conda_lock_path(root, name), index)
        problems += policy.pixi_env_problems(env, locked[name], inputs.manifest.pixi_lock_channels())
    if not envs:
        for extra in sorted(set(locked) - set(inputs.manifest.envs)):
            problems.append(policy.Problem(extra, "-", "stale-lock", f"pixi.lock has {extra!r}, pixi.toml has no such environment", "mmstack lock"))
    return problems, "\n".join([f"{len(names)} environments locked and consistent with pixi.toml, the facts and the matrix", *arm])


def _env_lock_problems(inputs: Inputs, env: EnvSpec, locked: LockedEnv, cl_path: Path,
                       index: policy.ChannelIndex) -> list[policy.Problem]:
    """One locked environment (one platform of it) against its conda-lock file and the lock rules."""
    out: list[policy.Problem] = []
    stored = None
    if cl_path.is_file():
        cl = lockfile.read_conda_lock(cl_path)
        stored = cl.digests
        out += policy.conda_lock_problems(env.name, locked, cl)
    else:
        out.append(policy.Problem(env.name, "-", "conda-lock-mismatch", f"envs/{cl_path.name} is missing",
                                  f"mmstack lock --env {env.name}"))
    out += policy.lock_problems(env=env, locked=locked, facts=inputs.facts, matrix=inputs.matrix,
                                channels=inputs.channels, stored_digests=stored, channel_index=index)
    return out


def _platform_problems(inputs: Inputs, env: EnvSpec, locked: tuple[LockedEnv, ...],
                       index: policy.ChannelIndex) -> list[policy.Problem]:
    """An environment over several GPU platforms (pixi.toml's `gpu`): every platform locked, each
    one's records and conda-lock file checked as an environment's, and its mmcv held to its arch
    (policy.platform_mmcv_problems)."""
    out: list[policy.Problem] = []
    by_name = {lk.platform: lk for lk in locked}
    for plat in env.platforms:
        lk = by_name.get(plat.name)
        if lk is None:
            out.append(policy.Problem(env.name, "-", "missing-lock", f"{env.name} is not locked on platform {plat.name}",
                                      f"mmstack lock --env {env.name}"))
            continue
        out += _env_lock_problems(inputs, env, lk, lockfile.conda_lock_path(inputs.root, env.name, plat.name), index)
        mmcv = lk.by_name("mmcv")
        if not mmcv:
            out.append(policy.Problem(env.name, "mmcv", "mmcv-platform-arch", f"{plat.name}: no mmcv locked",
                                      f"mmstack lock --env {env.name}"))
        for m in mmcv:
            out += policy.platform_mmcv_problems(env.name, plat, m.build, inputs.matrix)
    return out


def check_locks_for_check_command(root: Path) -> str:
    """`mmstack check`'s stage: pixi.toml and envs/ against facts + matrix, and any pixi.lock present."""
    problems, summary = collect_problems(root=root)
    if problems:
        more = f" (and {len(problems) - 1} more; run `mmstack lock check`)" if len(problems) > 1 else ""
        first = problems[0]
        raise CheckFailed(f"{first.env}: {first.package}: {first.message} [{first.rule}]{more}", fix=first.fix)
    return summary
