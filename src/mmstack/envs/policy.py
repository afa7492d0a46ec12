"""The rules `mmstack lock check` enforces: pure functions from (facts, matrix, manifest, lock) to problems.

Two groups:
  * manifest rules: pixi.toml is derived data; each generation's pins (the platform's
    `__cuda`/`__cuda_arch`, `cuda-version`, the pytorch build, the mmcv build string) must be what
    the facts and the variant matrix say.
  * lock rules: a locked environment must be fresh (inputs digests), complete (requested specs
    and every dependency satisfied), traceable (sha256, configured channels), and runnable on its
    generation (CUDA pytorch, a cuda-version that can target the arch, an mmcv whose SASS covers
    the compute capability natively, no driver floor above the generation's CUDA, no PyPI torch
    next to conda mmcv).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from mmstack.envs import pixi_manifest
from mmstack.envs.lockfile import LockedEnv
from mmstack.envs.pixi_manifest import EnvSpec, Manifest
from mmstack.facts import arch as archmod
from mmstack.facts.gpus import Facts, Generation, version_key
from mmstack.variants.matrix import FAT_TAG, Variant, serving_row


@dataclass(frozen=True)
class Problem:
    env: str
    package: str  # "-" when the problem is not about one package
    rule: str
    message: str
    fix: str

    def line(self) -> str:
        return f"{self.env}: {self.package}: {self.message} [{self.rule}] (fix: {self.fix})"


# -- what the facts and the matrix expect of pixi.toml ------------------------------------------


@dataclass(frozen=True)
class Pins:
    """One generation's pins in pixi.toml, derived from the facts and the variant matrix."""

    env: str
    cuda_driver: str | None  # the platform's __cuda (the generation's CUDA); None for cpu
    cuda_arch: str | None  # the platform's __cuda_arch (compute capability)
    cuda_version: str | None  # "12.9.*"
    pytorch_build: str  # "cuda*" or "cpu*"
    pytorch_versions: frozenset[str]  # {"2.9"}
    mmcv_prefixes: frozenset[str]  # {"cuda129_sm89"} or {"cpu"}
    pythons: frozenset[str]  # {"3.11", "3.12"}

    def mmcv_builds(self) -> set[str]:
        """Build-string globs the manifest may use: `cuda129_sm89_*` or `cuda129_sm89_py311_*`."""
        out = {f"{p}_*" for p in self.mmcv_prefixes}
        out |= {f"{p}_py{py.replace('.', '')}_*" for p in self.mmcv_prefixes for py in self.pythons}
        return out

    def toml(self) -> str:
        """The feature block `mmstack lock check` asks for (what a generator would write)."""
        first = sorted(self.mmcv_prefixes)[0]
        lines = [f"[feature.gen-{self.env}.dependencies]"]
        if self.cuda_version:
            lines.append(f'cuda-version = "{self.cuda_version}"')
        lines.append(f'mmcv = {{ version = "2.2.0.*", build = "{first}_*" }}')
        return "\n".join(lines)


def expected_pins(facts: Facts, matrix: list[Variant]) -> dict[str, Pins]:
    out: dict[str, Pins] = {}
    for gen in facts.generation:
        serving = [v for v in matrix if gen.env in v.envs]
        out[gen.env] = Pins(
            env=gen.env,
            cuda_driver=gen.cuda if gen.is_gpu else None,
            cuda_arch=gen.compute_capability if gen.is_gpu else None,
            cuda_version=f"{gen.cuda}.*" if gen.is_gpu else None,
            pytorch_build="cuda*" if gen.is_gpu else "cpu*",
            pytorch_versions=frozenset(v.pytorch for v in serving),
            mmcv_prefixes=frozenset(v.build_string_prefix for v in serving),
            pythons=frozenset(v.python for v in serving),
        )
    return out


def generation_platform_name(env: str) -> str:
    return f"linux-64-{env}"


def manifest_problems(manifest: Manifest, facts: Facts, matrix: list[Variant]) -> list[Problem]:
    """pixi.toml against the facts and the matrix, one Problem per drifted pin; and what mmstack
    cannot lock as pixi would (an environment on several platforms, a pixi floor with known bugs)."""
    problems: list[Problem] = []
    src = manifest.path.name
    if manifest.requires_pixi is not None:
        for bug, why in pixi_manifest.pixi_floor_problems(manifest):
            fixed = next(".".join(map(str, f)) for b, f, _ in pixi_manifest.PIXI_FIXES if b == bug)
            problems.append(Problem("-", "-", "pixi-floor", f"{src}: {bug}: {why}",
                                    f'requires-pixi = ">={fixed}" in [workspace], then `mmstack ci generate`'))
    gens = {g.env for g in facts.generation}
    for spec in manifest.envs.values():
        if spec.name not in gens and is_multi_gpu_env(spec):
            problems += _multi_gpu_env_problems(spec, facts, src)
        elif spec.name not in gens and len(spec.platforms) != 1:
            implicit = " (pixi's implicit default environment: the default feature on every platform)" \
                if spec.name == pixi_manifest.DEFAULT_ENV else ""
            problems.append(Problem(spec.name, "-", "one-platform",
                                    f"{src}: environment resolves to {len(spec.platforms)} platforms"
                                    f" ({', '.join(p.name for p in spec.platforms)}){implicit}; `mmstack lock` locks one",
                                    f"define `{spec.name}` in [environments] with a feature bound to one platform"
                                    if implicit else "bind one of its features to a single platform"))
    for env, pins in expected_pins(facts, matrix).items():
        if env not in manifest.envs:
            problems.append(Problem(env, "-", "manifest-drift", f"{src} has no environment {env!r} (a generation in the facts)",
                                    f"add `{env} = [\"cuda\", \"gen-{env}\"]` to [environments]" if pins.cuda_driver
                                    else f"add `{env} = [\"{env}\"]` to [environments]"))
            continue
        problems += _env_pins(manifest.envs[env], pins, src)
    return problems


def is_multi_gpu_env(env: EnvSpec) -> bool:
    """An environment over several platforms that all declare `__cuda` (pixi.toml's `gpu`):
    `mmstack lock` solves it once per platform and `platform_mmcv_problems` holds each one's mmcv."""
    return len(env.platforms) > 1 and all(p.vp("__cuda") for p in env.platforms)


def _multi_gpu_env_problems(env: EnvSpec, facts: Facts, src: str) -> list[Problem]:
    """A multi-generation environment reaches every GPU generation's platform, pins no generation's
    mmcv, and has its platforms declared from the highest `__cuda_arch` down: pixi installs the first
    declared platform a machine meets (prefix-dev/pixi at 2b25fc76, Environment::best_declared_platform,
    crates/pixi_core/src/workspace/environment.rs:164-230, and Workspace::possible_pixi_platforms,
    crates/pixi_manifest/src/workspace.rs:150-202: declaration order, each declared virtual package
    met at a version >= it), so another order gives a machine a lower generation's build."""
    out: list[Problem] = []
    names = [p.name for p in env.platforms]
    missing = [generation_platform_name(g.env) for g in facts.generation
               if g.is_gpu and generation_platform_name(g.env) not in names]
    if missing:
        out.append(Problem(env.name, "-", "manifest-drift",
                           f"{src}: environment {env.name!r} spans {', '.join(names)}; the facts' GPU generations also have"
                           f" {', '.join(missing)}", f"add {', '.join(missing)} to the `platforms` of its feature"))
    archs = [(p.name, p.vp("__cuda_arch")) for p in env.platforms]
    keyed = [version_key(a) if a else (0,) for _, a in archs]
    if any(a <= b for a, b in itertools.pairwise(keyed)):
        want = [n for _, n in sorted(((k, n) for k, (n, _) in zip(keyed, archs, strict=True)), key=lambda x: x[0], reverse=True)]
        order = ", ".join(f"{n} ({a or '-'})" for n, a in archs)
        out.append(Problem(env.name, "-", "platform-order",
                           f"{src}: the platforms of {env.name!r} are declared in the order {order};"
                           " pixi installs the first one a machine meets, so a GPU would get a lower generation's build",
                           f"declare them in workspace.platforms from the highest arch down: {', '.join(want)}"))
    for s in env.specs_named("mmcv"):
        if s.build and "_sm" in s.build:
            out.append(Problem(env.name, "mmcv", "manifest-drift",
                               f"{src}: mmcv build {s.build!r} pins one generation in an environment over several",
                               f'mmcv = "2.2.0.*" in feature {s.feature}: the solver picks per platform'))
    return out


def _env_pins(env: EnvSpec, pins: Pins, src: str) -> list[Problem]:
    out: list[Problem] = []
    name = env.name

    def p(pkg, msg, fix):
        out.append(Problem(name, pkg, "manifest-drift", f"{src}: {msg}", fix))

    # The platform: the solver's __cuda / __cuda_arch.
    if len(env.platforms) != 1:
        p("-", f"environment resolves to {len(env.platforms)} platforms ({', '.join(x.name for x in env.platforms)})",
          f"bind feature gen-{name} to one platform with `platforms = [\"{generation_platform_name(name)}\"]`")
    else:
        plat = env.platforms[0]
        if pins.cuda_driver:
            if plat.vp("__cuda") != pins.cuda_driver or plat.vp("__cuda_arch") != pins.cuda_arch:
                p("__cuda", f"platform {plat.name!r} declares cuda driver {plat.vp('__cuda')!r} arch {plat.vp('__cuda_arch')!r};"
                  f" the facts say CUDA {pins.cuda_driver} on compute capability {pins.cuda_arch}",
                  f'{{ name = "{plat.name}", platform = "{plat.subdir}", cuda = {{ driver = "{pins.cuda_driver}", arch = "{pins.cuda_arch}" }} }}')
        elif plat.vp("__cuda"):
            p("__cuda", f"the CPU environment's platform {plat.name!r} declares __cuda {plat.vp('__cuda')}",
              "bind the cpu feature to the plain linux-64 platform")

    # cuda-version
    cv = env.specs_named("cuda-version")
    if pins.cuda_version:
        ok = [s for s in cv if s.version in (pins.cuda_version, pins.cuda_version[:-2], f"=={pins.cuda_version[:-2]}")]
        if not ok:
            found = ", ".join(s.version for s in cv) or "nothing"
            p("cuda-version", f"cuda-version pins {found}; the facts say {pins.cuda_version}",
              f'cuda-version = "{pins.cuda_version}" in [feature.gen-{name}.dependencies]')
    elif cv:
        p("cuda-version", "the CPU environment pins cuda-version", "remove cuda-version from the cpu features")

    # pytorch: the right build family, and the matrix's version when one is pinned.
    pt = env.specs_named("pytorch")
    if not pt:
        p("pytorch", "pytorch is not requested", f'pytorch = {{ version = "*", build = "{pins.pytorch_build}" }}')
    for s in pt:
        want = pins.pytorch_build[:-1]
        if not (s.build or "").startswith(want):
            p("pytorch", f"pytorch build {s.build or '*'!r} is not a {want} build", f'build = "{pins.pytorch_build}" (feature {s.feature})')
        if s.version not in ("*", "") and pins.pytorch_versions and not any(
                s.version in (v, f"{v}.*", f"=={v}") for v in pins.pytorch_versions):
            p("pytorch", f"pytorch {s.version} is not the matrix's {', '.join(sorted(pins.pytorch_versions))}",
              f'version = "{sorted(pins.pytorch_versions)[0]}.*" (feature {s.feature}), or edit conda_build_config.yaml')

    # mmcv: the matrix's build for this generation.
    mm = env.specs_named("mmcv")
    builds = pins.mmcv_builds()
    if not mm:
        p("mmcv", "mmcv is not requested", pins.toml())
    for s in mm:
        if s.build not in builds:
            p("mmcv", f"mmcv build {s.build!r} is not the matrix's build for {name} ({', '.join(sorted(pins.mmcv_prefixes))})",
              f'mmcv = {{ version = "2.2.0.*", build = "{sorted(builds)[0]}" }}')

    # mmengine: where MMDetection trains, the build that loads its own checkpoints on torch >= 2.6.
    if env.specs_named("mmdet"):
        me = env.specs_named("mmengine")
        if not any((s.build or "").startswith(MMENGINE_BUILD[:-1]) for s in me):
            found = ", ".join(f"build {s.build or '*'!r}" for s in me) or "not requested"
            p("mmengine", f"mmengine is {found}: conda-forge's mmengine cannot load the checkpoints it writes"
              " on torch >= 2.6 (recipes/mmengine/patches/0001)", MMENGINE_TOML)
    return out


# One environment's pins, wherever its manifest is: pixi.toml's generations here, envs/arm/pixi.toml's
# Arm-hosted ones in arm_manifest.py (`src` names the file in each message).
env_pins = _env_pins


# recipes/mmengine's build: mmengine 0.10.7 with safe checkpoint loading (its build string prefix)
MMENGINE_BUILD = "safeload_*"
MMENGINE_TOML = f'mmengine = {{ version = "0.10.7.*", build = "{MMENGINE_BUILD}" }} in [feature.mmdet.dependencies]'


def mmengine_problems(name: str, locked: LockedEnv, relock: str) -> list[Problem]:
    """A locked environment with mmdet must hold recipes/mmengine's build, not conda-forge's."""
    if not locked.by_name("mmdet"):
        return []
    found = locked.by_name("mmengine")
    if found and all(r.build.startswith(MMENGINE_BUILD[:-1]) for r in found):
        return []
    what = ", ".join(r.label for r in found) or "no mmengine"
    return [Problem(name, "mmengine", "mmengine-build",
                    f"{what}: mmdet trains with an mmengine that cannot load its own checkpoints on torch >= 2.6",
                    f"{MMENGINE_TOML}, then {relock}")]


# -- lock rules ----------------------------------------------------------------------------------


def digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def input_digests(env: EnvSpec, facts: Facts, matrix: list[Variant]) -> dict[str, str]:
    """What one environment's lock was solved from, per input file."""
    gen = _gen(facts, env.name)
    if gen is None and is_multi_gpu_env(env):
        # `gpu`: every generation whose platform it spans, and the matrix rows serving any of them
        names = {p.name for p in env.platforms}
        gens = [g for g in facts.generation if generation_platform_name(g.env) in names]
        serving = [v.as_dict() for v in matrix if any(g.env in v.envs for g in gens)]
        return {"mmstack_manifest": env.digest(), "mmstack_matrix": digest(serving),
                "mmstack_facts": digest([_facts_row(g, facts) for g in gens])}
    serving = [v.as_dict() for v in matrix if env.name in v.envs]
    row, tk = _facts_row(gen, facts) if gen is not None else (None, None)
    return {
        "mmstack_manifest": env.digest(),
        "mmstack_matrix": digest(serving),
        "mmstack_facts": digest({"generation": row, "toolkit": tk}),
    }


def _facts_row(gen: Generation, facts: Facts) -> tuple[dict, dict | None]:
    """The fields of a generation and its toolkit that steer the solve and the rules (not prose or sources)."""
    row = {"env": gen.env, "compute_capability": gen.compute_capability, "cuda": gen.cuda}
    tk = None
    if gen.is_gpu:
        t = facts.toolkit(gen.cuda)
        tk = {"version": t.version, "sass": list(t.sass), "min_driver": t.min_driver}
    return row, tk


_DIGEST_FILES = {"mmstack_manifest": "pixi.toml", "mmstack_matrix": "conda_build_config.yaml",
                 "mmstack_facts": "src/mmstack/data/gpus.toml"}


def _gen(facts: Facts, env: str) -> Generation | None:
    return next((g for g in facts.generation if g.env == env), None)


def lock_problems(*, env: EnvSpec, locked: LockedEnv, facts: Facts, matrix: list[Variant],
                  channels: list[str], stored_digests: dict[str, str] | None,
                  channel_index: ChannelIndex | None = None) -> list[Problem]:
    """Everything wrong with one locked environment."""
    out: list[Problem] = []
    name = env.name
    relock = f"mmstack lock --env {name}"

    # Fresh: the inputs it was solved from are the inputs now.
    if stored_digests is not None:
        now = input_digests(env, facts, matrix)
        for key, value in now.items():
            if stored_digests.get(key) != value:
                out.append(Problem(name, "-", "stale-lock",
                                   f"{_DIGEST_FILES[key]} changed for this environment since it was locked", relock))
    plat = _locked_platform(env, locked)
    out += _platform_definition(env, locked, relock)

    # Complete and minimal, as pixi's satisfiability check walks it: every requested spec and every
    # dependency is satisfied inside the lock, one record per name, nothing unreachable.
    out += _duplicates(locked, relock)
    out += _unsatisfied(env, locked, relock)
    out += _closure(locked, plat, relock)
    out += _unreachable(env, locked, plat, relock)

    # Traceable: sha256 and a configured channel for every record.
    bases = [c.rstrip("/") + "/" for c in channels]
    foreign: dict[str, list] = {}  # one line per unconfigured channel, not per package
    for pkg in locked.packages:
        if not pkg.sha256:
            out.append(Problem(name, pkg.name, "missing-sha256", f"{pkg.label} has no sha256", relock))
        if not any(pkg.url.startswith(b) for b in bases):
            foreign.setdefault(pkg.url.rsplit("/", 2)[0] + "/", []).append(pkg)
        elif channel_index is not None:
            known = channel_index.sha256(pkg.url)
            if known is not None and pkg.sha256 and known != pkg.sha256:
                out.append(Problem(name, pkg.name, "sha256-mismatch",
                                   f"{pkg.label}: the lock says sha256 {pkg.sha256[:12]}…, the channel's repodata {known[:12]}…",
                                   relock))
            elif known is None and channel_index.covers(pkg.url):
                out.append(Problem(name, pkg.name, "unknown-channel",
                                   f"{pkg.label} is not in its channel's repodata ({pkg.file_name})", relock))

    for base, pkgs in foreign.items():
        others = f" and {len(pkgs) - 1} more" if len(pkgs) > 1 else ""
        out.append(Problem(name, pkgs[0].name, "unknown-channel",
                           f"{pkgs[0].label}{others} come from {base}, not a configured channel ({', '.join(bases)})",
                           f"{relock}, or pass the --channel list it was locked with"))

    # PyPI torch next to conda mmcv: two torches, and mmcv's _ext linked against the other one.
    pypi = {n.lower().replace("_", "-") for n, _ in locked.pypi}
    if locked.by_name("mmcv") and pypi & {"torch", "mmcv"}:
        which = "torch" if "torch" in pypi else "mmcv"
        out.append(Problem(name, which, "pypi-torch",
                           f"PyPI {which} next to conda mmcv: mmcv._ext is built against conda-forge's pytorch",
                           f"remove {which} from pypi-dependencies; take pytorch from conda-forge"))

    out += mmengine_problems(name, locked, relock)
    gen = _gen(facts, name)
    if gen is not None:
        out += _generation_rules(gen, locked, facts, matrix, relock)
    return out


# -- pixi's satisfiability rules (pixi_core/src/lock_file/outdated.rs, satisfiability/) ----------
#
# What pixi checks before it trusts a lock (`pixi install --locked` fails, plain `pixi install`
# re-solves, when one fails). envs/README.md lists each rule with the check here and its test.

PIXI_DEFAULT_OPTIONS = {"strategy": "highest", "channel-priority": "strict",
                        "pypi-prerelease-mode": "if-necessary-or-explicit"}


def _base_url(url: str) -> str:
    return url.rstrip("/") + "/"


def pixi_env_problems(env: EnvSpec, locked: LockedEnv, channel_urls: list[str]) -> list[Problem]:
    """The environment-level rules (satisfiability/environment.rs, `verify_environment_satisfiability`):
    the same channels in the same order, no platform the environment does not have, and the solve
    options pixi.toml implies (mmstack refuses the keys that would change them)."""
    out: list[Problem] = []
    relock = f"mmstack lock --env {env.name}"
    want = [_base_url(c) for c in channel_urls]
    have = [_base_url(c) for c in locked.channels]
    if have != want:
        how = "extended" if want[:len(have)] == have else "changed"
        out.append(Problem(env.name, "-", "pixi-channels",
                           f"pixi.lock's channels {have} are not pixi.toml's {want} ({how}: pixi calls the lock outdated)",
                           relock))
    names = {p.name for p in env.platforms}
    subdirs = {p.subdir for p in env.platforms}
    extra = sorted(n for n, sub, _ in locked.other_platforms if n not in names and sub not in subdirs)
    if locked.platform and locked.platform not in names and locked.subdir not in subdirs:  # "": no packages locked
        extra.insert(0, locked.platform)
    if extra:
        out.append(Problem(env.name, "-", "pixi-platforms",
                           f"pixi.lock has platform(s) {', '.join(extra)} that the environment does not have", relock))
    for key, value in locked.options:
        default = PIXI_DEFAULT_OPTIONS.get(key)
        if default is not None and value != default:
            out.append(Problem(env.name, "-", "pixi-solve-options",
                               f"locked with {key} {value}; pixi.toml implies {default}", relock))
    return out


def pixi_lock_problems(manifest: Manifest, locked: dict[str, LockedEnv]) -> list[Problem]:
    """Every pixi satisfiability rule mmstack models, for a whole pixi.lock (`read_pixi_lock` with
    the manifest's platforms): environments missing or extra, then per environment the
    environment-level rules and the record rules (`lock_problems` runs the same record rules)."""
    out: list[Problem] = []
    for name, env in manifest.envs.items():
        relock = f"mmstack lock --env {name}"
        if name not in locked:
            out.append(Problem(name, "-", "missing-lock", f"{name} is not in pixi.lock", relock))
            continue
        lk = locked[name]
        plat = _locked_platform(env, lk)
        out += pixi_env_problems(env, lk, manifest.pixi_lock_channels())
        out += _platform_definition(env, lk, relock)
        out += _duplicates(lk, relock)
        out += _unsatisfied(env, lk, relock)
        out += _closure(lk, plat, relock)
        out += _unreachable(env, lk, plat, relock)
    for extra in sorted(set(locked) - set(manifest.envs)):
        out.append(Problem(extra, "-", "stale-lock", f"pixi.lock has {extra!r}, pixi.toml has no such environment", "mmstack lock"))
    return out


def _platform_definition(env: EnvSpec, locked: LockedEnv, relock: str) -> list[Problem]:
    """pixi's PlatformDefinitionChanged: the locked platform of that name has the manifest's subdir
    and customised virtual packages (after pixi's alignment of `p1`, `p2`, ... by identity)."""
    if not locked.platform:  # locked with no packages, for no platform: nothing to compare
        return []
    match = [p for p in env.platforms if p.name == locked.platform]
    if len(env.platforms) == 1 and not match:
        match = list(env.platforms)
    if not match:
        return []
    plat = match[0]
    if locked.platform == plat.name and pixi_manifest.platform_identity(locked.subdir, locked.virtual_packages) == plat.identity():
        return []
    return [Problem(env.name, "-", "stale-lock",
                    f"locked on platform {locked.platform} ({locked.subdir}) [{', '.join(locked.virtual_packages)}], pixi.toml declares"
                    f" {plat.name} ({plat.subdir}) [{', '.join(plat.lock_strings())}]", relock)]


def _duplicates(locked: LockedEnv, relock: str) -> list[Problem]:
    """pixi's DuplicateEntry: one record per package name."""
    seen: dict[str, int] = {}
    for p in locked.packages:
        seen[p.name] = seen.get(p.name, 0) + 1
    return [Problem(locked.name, n, "pixi-duplicate", f"pixi.lock has {k} records of {n}", relock)
            for n, k in sorted(seen.items()) if k > 1]


def _unreachable(env: EnvSpec, locked: LockedEnv, plat, relock: str) -> list[Problem]:
    """pixi's TooManyCondaPackages: every locked record is reached from pixi.toml's specs through
    `depends` (a dependency a virtual package meets reaches nothing)."""
    from rattler import MatchSpec
    from rattler.exceptions import InvalidMatchSpecError

    by_name = {p.name: p for p in locked.packages}
    stack = [MatchSpec(s.match_spec.split("::", 1)[-1]).name.normalized for s in env.specs]
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        for dep in by_name[name].depends:
            try:
                stack.append(MatchSpec(dep).name.normalized)
            except InvalidMatchSpecError:
                continue  # _closure reports it
    extra = sorted(set(by_name) - seen)
    if not extra:
        return []
    return [Problem(locked.name, extra[0], "pixi-too-many-packages",
                    f"pixi.lock has {len(extra)} record(s) nothing in pixi.toml needs: {', '.join(extra[:5])}"
                    + (" …" if len(extra) > 5 else ""), relock)]


def _unsatisfied(env: EnvSpec, locked: LockedEnv, relock: str) -> list[Problem]:
    from rattler import MatchSpec

    out = []
    for spec in env.specs:
        ms = MatchSpec(spec.match_spec.split("::", 1)[-1])
        found = locked.by_name(ms.name.normalized)
        if not found:
            out.append(Problem(env.name, spec.name, "spec-unsatisfied",
                               f"pixi.toml requests {spec.match_spec} (feature {spec.feature}); the lock has no {spec.name}", relock))
        elif not any(_matches(ms, p) for p in found):
            out.append(Problem(env.name, spec.name, "spec-unsatisfied",
                               f"pixi.toml requests {spec.match_spec} (feature {spec.feature}); the lock has {found[0].label}", relock))
    return out


def _matches(ms, pkg) -> bool:
    if pkg.record is not None:
        return ms.matches(pkg.record)
    return False


def _locked_platform(env: EnvSpec, locked: LockedEnv):
    """The manifest platform the environment was read for: its only one, else the one of the
    locked platform's name (a multi-platform environment, read for its first platform); None if
    none matches."""
    if len(env.platforms) == 1:
        return env.platforms[0]
    return next((p for p in env.platforms if p.name == locked.platform), None)


def _closure(locked: LockedEnv, plat, relock: str) -> list[Problem]:
    """Every `depends` of every record is met by another record or by a declared virtual package."""
    from rattler import MatchSpec, Version, VersionSpec
    from rattler.exceptions import InvalidMatchSpecError

    # The platform's virtual packages: the manifest's, else (a multi-platform environment, whose
    # v4-v6 lock records none) pixi's defaults for the locked subdir, as pixi assumes them.
    vps = dict(plat.virtual_packages) if plat else {n: v for n, v, _ in pixi_manifest.subdir_defaults(locked.subdir)}
    for s in locked.virtual_packages:
        n, _, v = s.partition("=")
        if n == "__archspec":  # pixi writes `__archspec=0=x86_64`: the microarch, not a version floor
            continue
        vps[n] = v.split("=")[0]
    vps.setdefault("__unix", "0")
    vps.setdefault("__archspec", "1")
    out = []
    by_name: dict[str, list] = {}
    for p in locked.packages:
        by_name.setdefault(p.name, []).append(p)
    for pkg in locked.packages:
        for dep in pkg.depends:
            try:
                ms = MatchSpec(dep)
            except InvalidMatchSpecError:
                out.append(Problem(locked.name, pkg.name, "missing-dependency", f"{pkg.label}: cannot parse dependency {dep!r}", relock))
                continue
            dname = ms.name.normalized
            if dname.startswith("__"):
                have = vps.get(dname)
                ok = have is not None and (ms.version is None or VersionSpec(str(ms.version)).matches(Version(have)))
                if not ok:
                    out.append(Problem(locked.name, pkg.name, "missing-dependency",
                                       f"{pkg.label} needs {dep}; the environment's platform declares "
                                       f"{dname + '=' + have if have else 'no ' + dname}",
                                       relock if dname != "__cuda" else "lock it on a platform with a cuda driver (a GPU environment)"))
                continue
            cands = by_name.get(dname, [])
            if not any(_matches(ms, c) for c in cands):
                have = f"; the lock has {cands[0].label}" if cands else "; nothing in the lock provides it"
                out.append(Problem(locked.name, pkg.name, "missing-dependency", f"{pkg.label} needs {dep}{have}", relock))
    return out


_MMCV_BUILD = re.compile(r"^cuda(?P<cuda>\d+)_(?P<tag>all|sm[0-9a-z]+(?:_[0-9]+[af]?)*)_py\d+_")


def mmcv_archs(build: str, matrix: list[Variant]) -> tuple[str | None, tuple[archmod.Target, ...] | None]:
    """(CUDA version, arch targets) an mmcv build string says it carries; (None, ()) for a cpu build.

    `cuda129_sm89_py311_h…` -> ("12.9", SASS 8.9); `cuda129_sm80_86_…` -> 8.0 and 8.6;
    `cuda129_all_…` -> the matrix's fat list for CUDA 12.9. (None, None) when unreadable.
    """
    if build.startswith("cpu"):
        return None, ()
    m = _MMCV_BUILD.match(build)
    if not m:
        return None, None
    digits = m.group("cuda")
    cuda = f"{digits[:-1]}.{digits[-1]}"
    tag = m.group("tag")
    if tag == FAT_TAG:
        fat = [v for v in matrix if v.cuda == cuda and v.arch_tag == FAT_TAG]
        return cuda, (fat[0].targets if fat else None)
    targets = []
    for part in tag[2:].split("_"):
        mm = re.fullmatch(r"(\d+)(\d)([af]?)", part)
        if not mm:
            return cuda, None
        targets.append(archmod.Target(archmod.Arch(int(mm.group(1)), int(mm.group(2)), mm.group(3)), "sass"))
    return cuda, tuple(targets)


def _cuda_floor(locked: LockedEnv) -> tuple[str, str] | None:
    """The highest `__cuda >=X` any record asks for (depends or constrains), and which record."""
    best: tuple[tuple[int, ...], str, str] | None = None
    for pkg in locked.packages:
        for dep in (*pkg.depends, *pkg.constrains):
            m = re.match(r"^__cuda\s*>=?\s*([\d.]+)", dep.strip())
            if m:
                key = version_key(m.group(1).rstrip("."))
                if best is None or key > best[0]:
                    best = (key, m.group(1), pkg.label)
    return (best[1], best[2]) if best else None


def _generation_rules(gen: Generation, locked: LockedEnv, facts: Facts, matrix: list[Variant], relock: str) -> list[Problem]:
    out: list[Problem] = []
    name = gen.env

    def p(pkg, rule, msg, fix):
        out.append(Problem(name, pkg, rule, msg, fix))

    torch = locked.by_name("pytorch")
    mmcv = locked.by_name("mmcv")
    if not gen.is_gpu:
        for t in torch:
            if t.build.startswith("cuda"):
                p("pytorch", "cuda-pytorch-in-cpu-env", f"{t.label} is a CUDA build in the CPU environment", relock)
        for m in mmcv:
            if not m.build.startswith("cpu"):
                p("mmcv", "mmcv-coverage", f"{m.label} is not the CPU build", relock)
        return out

    cc = archmod.parse_arch(gen.compute_capability, where="facts")
    if not torch:
        p("pytorch", "cpu-pytorch", "no pytorch in the environment", f"request pytorch (build cuda*), then {relock}")
    for t in torch:
        if not t.build.startswith("cuda"):
            p("pytorch", "cpu-pytorch", f"{t.label} is a CPU build; the {name} environment needs a CUDA build",
              f'pytorch = {{ build = "cuda*" }} in feature cuda, then {relock}')

    # cuda-version: a toolkit whose nvcc can target the generation.
    cv = locked.by_name("cuda-version")
    if not cv:
        p("cuda-version", "cuda-version-arch", "no cuda-version in the environment", f'cuda-version = "{gen.cuda}.*", then {relock}')
    for c in cv:
        ver = ".".join(c.version.split(".")[:2])
        tk = next((t for t in facts.cuda if t.version == ver), None)
        if tk is None:
            p("cuda-version", "cuda-version-arch", f"cuda-version {c.version}: the facts know no CUDA {ver}",
              f'pin cuda-version = "{gen.cuda}.*" or add CUDA {ver} to the facts')
        elif gen.compute_capability not in tk.sass:
            first = facts.first_toolkit_for(gen.compute_capability)
            p("cuda-version", "cuda-version-arch",
              f"cuda-version {c.version} cannot target compute capability {gen.compute_capability} (sm_{gen.compute_capability.replace('.', '')})",
              f'cuda-version = "{gen.cuda}.*" (needs >= {first.version if first else "?"})')

    # The driver floor the environment implies must not exceed the generation's CUDA.
    floor = _cuda_floor(locked)
    if floor and version_key(floor[0]) > version_key(gen.cuda):
        p(floor[1].split()[0], "driver-floor",
          f"{floor[1]} needs __cuda >={floor[0]}, above the generation's CUDA {gen.cuda}"
          f" (driver >= {facts.toolkit(gen.cuda).min_driver})",
          f'pin cuda-version = "{gen.cuda}.*", then {relock}')
    declared = locked.vp("__cuda")
    if declared and version_key(declared) > version_key(gen.cuda):
        p("__cuda", "driver-floor", f"locked assuming __cuda={declared}, above the generation's CUDA {gen.cuda}",
          f'cuda = {{ driver = "{gen.cuda}", arch = "{gen.compute_capability}" }}, then {relock}')

    # mmcv: its SASS must cover the generation natively.
    if not mmcv:
        p("mmcv", "mmcv-coverage", "no mmcv in the environment", f"request the matrix's mmcv build, then {relock}")
    for m in mmcv:
        cuda, targets = mmcv_archs(m.build, matrix)
        if targets is None:
            p("mmcv", "mmcv-coverage", f"cannot tell the arch set of {m.label} from its build string",
              "use the matrix's build strings (cuda129_sm89_py311_h…, cuda129_all_py311_h…)")
            continue
        if cuda is None:
            p("mmcv", "mmcv-coverage", f"{m.label} is the CPU build; {name} needs sm_{gen.compute_capability.replace('.', '')}", relock)
            continue
        cov = archmod.coverage(cc, targets)
        if cov.coverage is not archmod.Coverage.NATIVE:
            p("mmcv", "mmcv-coverage",
              f"{m.label} carries {archmod.format_arch_list(targets)}: {cov.coverage.value} on compute capability {cc}"
              + (" (no kernel image for this GPU)" if cov.coverage is archmod.Coverage.NONE else ""),
              f"pin the mmcv build for {name} in feature gen-{name}, then {relock}")
    return out


def conda_lock_problems(env: str, pixi: LockedEnv, conda_lock) -> list[Problem]:
    """The conda-lock file must hold the same records as pixi.lock's environment."""
    fix = f"mmstack lock --env {env}"
    a = {p.name: p for p in pixi.packages}
    b = {p.name: p for p in conda_lock.packages}
    where = conda_lock.path.name
    out = []
    for n in sorted(set(a) | set(b)):
        if n not in b:
            out.append(Problem(env, n, "conda-lock-mismatch", f"pixi.lock has {a[n].label}; {where} has no {n}", fix))
        elif n not in a:
            out.append(Problem(env, n, "conda-lock-mismatch", f"{where} has {b[n].label}; pixi.lock has no {n}", fix))
        elif (a[n].version, a[n].build, a[n].url, a[n].sha256) != (b[n].version, b[n].build, b[n].url, b[n].sha256):
            what = "sha256" if (a[n].version, a[n].build) == (b[n].version, b[n].build) else "version/build"
            out.append(Problem(env, n, "conda-lock-mismatch",
                               f"{what} differs: pixi.lock {a[n].label} {(a[n].sha256 or '')[:12]}, {where} {b[n].label} {(b[n].sha256 or '')[:12]}", fix))
    return out


class ChannelIndex:
    """sha256 by package URL for the configured local (file://) channels: checkable offline."""

    def __init__(self, channels: list[str]):
        from urllib.parse import unquote, urlparse

        self._sha: dict[str, str] = {}
        self._bases: list[str] = []
        for c in channels:
            if not c.startswith("file://"):
                continue
            base = c.rstrip("/") + "/"
            root = Path(unquote(urlparse(base).path))
            found = False
            for sub in sorted(p for p in root.glob("*/repodata.json")):
                try:
                    data = json.loads(sub.read_text())
                except (OSError, ValueError):
                    continue
                found = True
                for key in ("packages", "packages.conda"):
                    for fn, rec in (data.get(key) or {}).items():
                        if rec.get("sha256"):
                            self._sha[f"{base}{sub.parent.name}/{fn}"] = rec["sha256"]
            if found:
                self._bases.append(base)

    def covers(self, url: str) -> bool:
        return any(url.startswith(b) for b in self._bases)

    def sha256(self, url: str) -> str | None:
        return self._sha.get(url)


# -- one environment over several platforms (pixi.toml's `gpu`): each platform's mmcv for its arch ----


def platform_mmcv_problems(env: str, platform: pixi_manifest.Platform, mmcv_build: str,
                           matrix: list[Variant]) -> list[Problem]:
    """CEP 46 per platform: where the platform declares `__cuda_arch`, its locked mmcv must be the build
    a solver takes there (variants/matrix.py serving_row over the rows of a CUDA major the platform's
    `__cuda` takes: the highest-ranked build whose `__cuda_arch` range the arch meets), and the GPU must
    run its SASS without JIT; with `__cuda` alone a fat build; without `__cuda` the CPU build."""
    vps = platform.virtual_packages
    cuda, arch = vps.get("__cuda"), vps.get("__cuda_arch")
    prefix = mmcv_build.split("_py")[0]
    label = f"{platform.name} (__cuda {cuda or '-'}, __cuda_arch {arch or '-'})"
    relock = "mmstack lock"

    def problem(message: str, fix: str) -> list[Problem]:
        return [Problem(env, "mmcv", "mmcv-platform-arch", f"{label}: {message}", fix)]

    if cuda is None:
        if prefix != "cpu":
            return problem(f"mmcv {mmcv_build} is a CUDA build on a platform without __cuda", f"{relock} (the CPU build)")
        return []
    majors = [v for v in matrix if v.cuda and int(v.cuda.split(".")[0]) <= int(cuda.split(".")[0])]
    if arch is None:
        if prefix not in {v.build_string_prefix for v in majors if v.arch_tag == FAT_TAG}:
            return problem(f"mmcv {mmcv_build} is not a fat build, and the platform declares no __cuda_arch "
                           "(its per-generation builds need it)", f"{relock} (the fat build)")
        return []
    gpu = archmod.parse_arch(arch)
    best = serving_row(majors, arch)
    if best is None:
        return problem(f"no CUDA build of the matrix installs on __cuda_arch {arch}",
                       "add a conda_build_config.yaml row for it, or declare the platform's arch the matrix serves")
    if prefix != best.build_string_prefix:
        return problem(f"mmcv {mmcv_build}: the solver's choice for __cuda_arch {arch} is {best.build_string_prefix} "
                       "(the highest build number whose __cuda_arch range it meets)",
                       f"{relock}; check the channel holds {best.build_string_prefix}")
    cov = archmod.coverage(gpu, tuple(t for t in best.targets if t.kind == "sass"))
    if cov.coverage not in (archmod.Coverage.NATIVE, archmod.Coverage.LOWER_MINOR):
        return problem(f"{best.build_string_prefix} holds no SASS compute capability {arch} runs ({best.arch_list})",
                       "add a per-generation row for this arch to conda_build_config.yaml")
    return []
