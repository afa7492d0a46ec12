"""Arch strings and the coverage rules.

One notation everywhere: "8.9" (SASS), "12.0+PTX" (SASS plus PTX, torch's TORCH_CUDA_ARCH_LIST
meaning), "9.0a" / "10.0f" (arch- and family-specific SASS). `parse_arch_list` also reads what
people paste: `sm_89`, `compute_89` (PTX only), `-gencode=arch=compute_90,code=sm_90`,
`8.9;9.0`, `"8.6 8.9"`. Conversion to nvcc flags happens in `gencode_flags` alone.

Coverage: what a GPU of compute capability X.Y runs, per kind of target. NVIDIA's CUDA Programming
Guide ("Binary Compatibility", "PTX Compatibility" and, for the suffixes, "Feature Availability":
https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/compute-capabilities.html#feature-availability)
and the CUDA 12.9 announcement of family-specific targets
(https://developer.nvidia.com/blog/nvidia-blackwell-and-nvidia-cuda-12-9-introduce-family-specific-architecture-features/):
  * plain SASS sm_Xy runs on the same major X at minor >= y (sm_80 runs on 8.6; sm_86 not on 8.0;
    sm_90 not on 12.0) -- on the desktop only: "Binary compatibility is supported only for the desktop.
    It is not supported for Tegra" (the guide), so a Tegra GPU (data/gpus.toml's `tegra` rows: 5.3, 6.2,
    7.2, 8.7, 10.1) runs SASS of exactly its own compute capability, and Tegra SASS runs on nothing else;
  * "a" (architecture-specific) SASS sm_Xya runs only on exactly X.y;
  * "f" (family-specific) SASS sm_Xyf runs on its family's members at minor >= y, and the family is the
    toolkit's (data/gpus.toml's [[cuda]] `families`): CUDA 12.9's 10.0 family is {10.0, 10.3} (10.1, Thor
    on the Tegra driver, is a family of its own); 13.4 adds 10.7; never another major;
  * plain PTX compute_Xy is JIT-compiled by the driver for any GPU of equal or higher compute
    capability (Tegra included), and only by a driver at least as new as the toolkit that wrote the PTX;
  * "a" PTX compute_Xya JITs only on exactly X.y; "f" PTX compute_Xyf on the family, as "f" SASS.
The PTX and family rules are measured: NVIDIA's ptxas 11.8..13.5 (PyPI wheels) on a one-kernel PTX for
every (target, GPU) pair, tests/data/facts/ptxas-matrix.json (mmstack_lab.arch.ptxas_matrix); the SASS
rules are the guide's (a driver loading a cubin is not something ptxas answers).
"""

from __future__ import annotations

import difflib
import itertools
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from mmstack.errors import BadInput
from mmstack.facts.gpus import Facts, version_key


@dataclass(frozen=True, order=True)
class Arch:
    """A compute capability, optionally arch-specific ('a') or family-specific ('f')."""

    major: int
    minor: int
    suffix: str = ""  # "", "a" or "f"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}"

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def compute(self) -> str:
        return f"compute_{self.major}{self.minor}{self.suffix}"

    @property
    def plain(self) -> Arch:
        return Arch(self.major, self.minor)


@dataclass(frozen=True, order=True)
class Target:
    """One thing in a fatbin: SASS for an arch, or PTX for a virtual arch."""

    arch: Arch
    kind: str  # "sass" or "ptx"


_DOTTED = re.compile(r"^(\d{1,2})\.(\d)([af]?)(\+ptx)?$", re.I)
_SM = re.compile(r"^(sm|compute|lto)_(\d{1,2})(\d)([af]?)$", re.I)
_GENCODE = re.compile(
    r"-?-gencode[= ]\s*arch=(compute_\d+[af]?),\s*code=(\[[^\]]*\]|[a-z_0-9]+)", re.I
)


def parse_arch(text: str, *, where: str = "arch") -> Arch:
    """One compute capability: '8.9', '9.0a', 'sm_89', '89' is not accepted (ambiguous)."""
    targets = parse_arch_list(text, where=where)
    archs = {t.arch for t in targets}
    if len(archs) != 1:
        raise BadInput(f"{where}: {text!r} is not one compute capability", fix="write it like '8.9'")
    return archs.pop()


def parse_arch_list(text: str, *, where: str = "--arch-list") -> tuple[Target, ...]:
    """Parse any common spelling of an arch list into sorted, unique targets."""
    if text is None or not str(text).strip():
        raise BadInput(f"{where}: empty arch list", fix="give archs like '8.6;8.9;9.0+PTX'")
    text = str(text).strip().strip("'\"")
    targets: set[Target] = set()

    def bad(token: str) -> BadInput:
        return BadInput(
            f"{where}: cannot read arch {token!r} in {text!r}{_did_you_mean_arch(token)}",
            fix="use '8.9', '9.0a', '12.0+PTX', 'sm_89', 'compute_89' or -gencode=arch=compute_XY,code=sm_XY",
        )

    # -gencode clauses contain commas, so take them out first.
    def take_gencode(m: re.Match) -> str:
        virtual = _sm_token(m.group(1))
        if virtual is None:
            raise bad(m.group(0))
        codes = m.group(2).strip("[]").split(",")
        for code in codes:
            code = code.strip()
            if not code:
                continue
            t = _sm_token(code)
            if t is None:
                raise bad(code)
            if t.kind == "ptx" and t.arch != virtual.arch:
                raise bad(m.group(0))
            targets.add(t)
        return " "

    rest = _GENCODE.sub(take_gencode, text)
    for token in re.split(r"[;,\s]+", rest):
        token = token.strip()
        if not token:
            continue
        if token.lower() in {"-gencode", "--gencode"}:
            raise bad(token)
        m = _DOTTED.match(token)
        if m:
            arch = Arch(int(m.group(1)), int(m.group(2)), m.group(3).lower())
            targets.add(Target(arch, "sass"))
            if m.group(4):
                if arch.suffix == "a":  # 'f' PTX carries forward within its family: 12.0f+PTX is nvcc 13's default
                    raise BadInput(
                        f"{where}: {token!r}: '+PTX' on an architecture-specific ('a') target runs on {arch.plain} only",
                        fix=f"use '{arch.plain}+PTX' for forward-compatible PTX, or '{arch.plain}f+PTX' for the family",
                    )
                targets.add(Target(arch, "ptx"))
            continue
        if token.lower().startswith("-arch="):
            token = token.split("=", 1)[1]
        t = _sm_token(token)
        if t is None:
            raise bad(token)
        targets.add(t)
    return tuple(sorted(targets))


def _spellings() -> list[str]:
    """Every spelling of every arch some toolkit of the facts targets."""
    from mmstack.facts.gpus import load

    archs = {a for tk in load().cuda for a in (*tk.sass, *tk.arch_specific)}
    return [s for a in archs for s in (a, f"sm_{a.replace('.', '')}", f"compute_{a.replace('.', '')}")]


def _did_you_mean_arch(token: str) -> str:
    """A likely meant spelling: '89' -> '8.9', '120' -> '12.0', 'sm_9x' -> 'sm_90'."""
    t = token.strip().lower()
    guess: str | None
    if re.fullmatch(r"\d{1,3}", t):
        guess = f"{t}.0" if len(t) == 1 else f"{t[:-1]}.{t[-1]}"
    else:
        close = difflib.get_close_matches(t, _spellings(), n=1, cutoff=0.6)
        guess = close[0] if close else None
    return f"; did you mean {guess!r}?" if guess else ""


def _sm_token(token: str) -> Target | None:
    m = _SM.match(token.strip())
    if not m:
        return None
    arch = Arch(int(m.group(2)), int(m.group(3)), m.group(4).lower())
    return Target(arch, "ptx" if m.group(1).lower() == "compute" else "sass")


def format_arch_list(targets) -> str:
    """The canonical string: '8.0;8.6;9.0+PTX'. PTX without SASS reads 'compute_80'."""
    sass = {t.arch for t in targets if t.kind == "sass"}
    ptx = {t.arch for t in targets if t.kind == "ptx"}
    out = []
    for arch in sorted(sass | ptx):
        if arch in sass:
            out.append(f"{arch}+PTX" if arch in ptx else str(arch))
        else:
            out.append(arch.compute)
    return ";".join(out)


def gencode_flags(targets) -> list[str]:
    """The one place arch targets become nvcc flags."""
    flags = []
    for t in sorted(targets):
        code = t.arch.sm if t.kind == "sass" else t.arch.compute
        flags.append(f"-gencode=arch={t.arch.compute},code={code}")
    return flags


# -- coverage --------------------------------------------------------------------------------


class Coverage(str, Enum):
    NATIVE = "native"  # SASS for exactly this compute capability
    LOWER_MINOR = "lower-minor"  # SASS of the same major, lower minor: runs, not tuned
    PTX_JIT = "ptx-jit"  # only PTX: the driver JIT-compiles at first use
    NONE = "none"  # nothing that runs

    @property
    def runs(self) -> bool:
        return self is not Coverage.NONE


@dataclass(frozen=True)
class CoverageResult:
    coverage: Coverage
    target: Target | None  # what the GPU will run


def coverage(gpu: Arch, targets, *, cuda: str | None = None, facts: Facts | None = None) -> CoverageResult:
    """How a GPU of compute capability `gpu` runs a binary holding `targets`; `cuda` is the toolkit that built
    it where known (its 'f' families decide), else every toolkit's families count."""
    if facts is None:
        from mmstack.facts.gpus import load

        facts = load()
    best: tuple[int, Target] | None = None
    for t in targets:
        rank = _rank(gpu, t, facts, cuda)
        if rank and (best is None or rank > best[0] or (rank == best[0] and t.arch > best[1].arch)):
            best = (rank, t)
    if best is None:
        return CoverageResult(Coverage.NONE, None)
    return CoverageResult({3: Coverage.NATIVE, 2: Coverage.LOWER_MINOR, 1: Coverage.PTX_JIT}[best[0]], best[1])


def _rank(gpu: Arch, t: Target, facts: Facts, cuda: str | None) -> int:
    """3 native SASS, 2 lower-minor SASS, 1 PTX JIT, 0 does not run (the rules in the module docstring)."""
    a = t.arch
    exact = (a.major, a.minor) == (gpu.major, gpu.minor)
    if a.suffix == "a":  # architecture-specific: exactly that compute capability
        runs = exact
    elif a.suffix == "f":  # family-specific: the toolkit's family, at or above the target's minor
        runs = str(gpu.plain) in facts.family(str(a.plain), cuda)
    elif t.kind == "sass":  # plain SASS: same major, minor at or below; on Tegra (either side) exactly
        tegra = facts.tegra
        runs = exact or (a.major == gpu.major and a.minor <= gpu.minor
                         and str(gpu.plain) not in tegra and str(a.plain) not in tegra)
    else:  # plain PTX: any equal or newer compute capability
        runs = (a.major, a.minor) <= (gpu.major, gpu.minor)
    if not runs:
        return 0
    if t.kind == "ptx":
        return 1
    return 3 if exact else 2


def unbuildable(targets, toolkit_version: str, facts: Facts) -> list[Target]:
    """Targets the toolkit's nvcc cannot emit."""
    tk = facts.toolkit(toolkit_version)
    known = set(tk.sass) | set(tk.arch_specific)
    return [t for t in targets if str(t.arch) not in known]


def newest_buildable(targets, facts: Facts) -> list[str]:
    """Toolkits (oldest first) that can build every target."""
    return [
        tk.version
        for tk in sorted(facts.cuda, key=lambda t: version_key(t.version))
        if not unbuildable(targets, tk.version, facts)
    ]


# -- which environment serves a GPU -----------------------------------------------------------


@dataclass(frozen=True)
class Serving:
    env: str | None  # the mmstack environment that runs this GPU best, None when none does
    coverage: Coverage  # how that environment's build (or `build`) runs on it (NONE when neither does)
    reason: str
    build: str | None = None  # with no env: the matrix's fat build that runs it ("cuda129_all"), if any

    def as_dict(self) -> dict:
        return {"env": self.env, "coverage": self.coverage.value, "reason": self.reason, "build": self.build}


_ORDER = {Coverage.NONE: 0, Coverage.PTX_JIT: 1, Coverage.LOWER_MINOR: 2, Coverage.NATIVE: 3}


@dataclass(frozen=True)
class Build:
    """A build of the variant matrix that no generation environment takes (the fat `cuda129_all`)."""

    prefix: str  # its build string prefix, "cuda129_all"
    cuda: str
    targets: tuple[Target, ...]


def serving_env(facts: Facts, cc: str, *, segment: str = "", host: str = "", builds: tuple[Build, ...] = (),
                host_build: Build | None = None, host_env: str | None = None) -> Serving:
    """The environment whose build runs a GPU of compute capability `cc`: natively, on lower-minor
    SASS of the same major, through PTX, or none. Each generation environment carries only its own
    SASS (conda_build_config.yaml: one arch per generation), so the rules of `coverage` decide. A GPU
    that only comes in hosts of another platform (`host`, gpus.toml) than every environment's gets none;
    where the caller knows the build a solver installs on that platform (`host_build`, from
    variants/arm_hosts.py serving_row) and the environment that pins it (`host_env`, envs/arm/pixi.toml),
    the answer names them."""
    platforms = sorted({g.platform for g in facts.generation if g.is_gpu})
    if host and host not in platforms and host_build is not None:
        return _host_build(facts, parse_arch(cc, where="compute capability"), host, host_build, host_env, platforms)
    if segment == "jetson":
        return Serving(None, Coverage.NONE, f"Jetson modules run linux-aarch64 (JetPack); mmstack's environments are"
                       f" {', '.join(platforms)}: use NVIDIA's JetPack builds of torch and build mmcv there")
    if host and host not in platforms:
        # No linux-64 environment's build is named here: which build the host takes is the solver's
        # pick on that platform (variants/arm_hosts.py serving_row), which a caller passes as host_build.
        gpu = parse_arch(cc, where="compute capability")
        return Serving(None, Coverage.NONE,
                       f"this GPU only comes in {host} hosts and every installable mmstack environment is"
                       f" {', '.join(platforms)} (the {host} ones, envs/arm/pixi.toml, cannot install until a channel"
                       f" has {host} mmcv builds; none does yet): on that host install a {host} CUDA pytorch"
                       f" (conda-forge builds them) and build mmcv with TORCH_CUDA_ARCH_LIST={gpu}"
                       f" ({cuda_range(facts, str(gpu))})")
    gpu = parse_arch(cc, where="compute capability")
    best: tuple[Coverage, str] | None = None
    for gen in facts.generation:
        if not gen.is_gpu:
            continue
        result = coverage(gpu, (Target(parse_arch(gen.compute_capability), "sass"),), cuda=gen.cuda, facts=facts)
        if result.coverage is not Coverage.NONE and (best is None or _ORDER[result.coverage] > _ORDER[best[0]]):
            best = (result.coverage, gen.env)
    if best is None:
        fat = _best_build(facts, gpu, builds)
        if fat is not None:
            return fat
        last = facts.last_cuda(str(gpu))
        if last is None:
            return Serving(None, Coverage.NONE, f"no mmstack environment carries SASS or PTX that runs on {gpu} ({gpu.sm});"
                           f" build mmcv with TORCH_CUDA_ARCH_LIST={gpu} ({cuda_range(facts, str(gpu))})")
        return Serving(None, Coverage.NONE, f"{_dropped(facts, gpu, last)}: mmcv for it needs TORCH_CUDA_ARCH_LIST={gpu},"
                       f" {cuda_range(facts, str(gpu))} and a pytorch built with such a toolkit")
    cov, env = best
    how = {Coverage.NATIVE: f"native {gpu.sm} SASS",
           Coverage.LOWER_MINOR: f"SASS of {facts.env(env).compute_capability} (same major, lower minor: runs, not tuned)",
           Coverage.PTX_JIT: "PTX JIT"}[cov]
    return Serving(env, cov, f"the {env} environment runs it with {how}")


def _host_build(facts: Facts, gpu: Arch, host: str, b: Build, env: str | None, platforms: list[str]) -> Serving:
    """A GPU of another platform's hosts: the build a solver installs there, and how the GPU runs it."""
    r = coverage(gpu, b.targets, cuda=b.cuda, facts=facts)
    runs = r.target.arch if r.target is not None else gpu
    how = {Coverage.NATIVE: f"native {gpu.sm} SASS", Coverage.LOWER_MINOR: f"{runs.sm} SASS (same major, lower minor:"
           " runs, not tuned)", Coverage.PTX_JIT: f"PTX JIT from {runs.compute}", Coverage.NONE: "nothing it runs"}[r.coverage]
    tk = facts.toolkit(b.cuda)
    driver = f"driver >= {tk.driver}" if tk.driver else f"a CUDA {b.cuda} driver"
    pinned = (f"envs/arm/pixi.toml's {env} environment pins it (pixi install --manifest-path envs/arm/pixi.toml -e {env})"
              if env else "no environment of envs/arm/pixi.toml is this GPU's")
    return Serving(None, r.coverage, build=b.prefix, reason=
                   f"this GPU only comes in {host} hosts and every installable mmstack environment is"
                   f" {', '.join(platforms)}; on {host} a solver installs mmcv {b.prefix} (CUDA {b.cuda},"
                   f" {format_arch_list(b.targets)}; {driver}), which runs it with {how}: {pinned}, and a plain"
                   f" `conda install mmcv` with `__cuda_arch` {gpu} takes the same build; these cannot install until a"
                   f" channel has {host} mmcv builds (none does yet): `mmstack build --target-platform {host}` cross-compiles"
                   " them")


def _best_build(facts: Facts, gpu: Arch, builds: tuple[Build, ...]) -> Serving | None:
    """No generation environment serves `gpu`: the matrix's other build that runs it best (the oldest CUDA of
    the best, for the widest range of drivers), as something the user can install."""
    ranked = [(coverage(gpu, b.targets, cuda=b.cuda, facts=facts), b) for b in builds]
    ranked = [(r, b) for r, b in ranked if r.target is not None]
    if not ranked:
        return None
    r, b = min(ranked, key=lambda rb: (-_ORDER[rb[0].coverage], version_key(rb[1].cuda)))
    runs = r.target.arch if r.target is not None else gpu  # every ranked result has its target
    how = {Coverage.NATIVE: f"native {gpu.sm} SASS", Coverage.LOWER_MINOR: f"{runs.sm} SASS (same major, lower"
           " minor: runs, not tuned)", Coverage.PTX_JIT: f"PTX JIT from {runs.compute}"}[r.coverage]
    tk = facts.toolkit(b.cuda)
    driver = f"driver >= {tk.driver}" if tk.driver else f"a CUDA {b.cuda} driver"
    return Serving(None, r.coverage, build=b.prefix, reason=
                   f"no per-generation environment carries {gpu}; the fat build {b.prefix} (CUDA {b.cuda},"
                   f" {format_arch_list(b.targets)}) runs it with {how}: build it (`mmstack build --all`) or take it"
                   f" from an mmstack channel, then conda install -c CHANNEL -c conda-forge \"mmcv=*={b.prefix}*\""
                   f" \"pytorch=*=cuda*\" \"cuda-version={b.cuda}.*\" ({driver}, or CUDA {tk.major} minor-version"
                   " compatibility)")


def _dropped(facts: Facts, gpu: Arch, last: str) -> str:
    """'Kepler 3.5 (sm_35): no mmstack environment serves it; the last CUDA that targets it is 11.8'."""
    row = facts.arch_row(str(gpu))
    oldest = min(facts.cuda, key=lambda t: t.key)
    before = f", older than every toolkit mmstack knows ({oldest.version}+)" if version_key(last) < oldest.key else ""
    return (f"{row.name if row else 'compute capability'} {gpu} ({gpu.sm}): no mmstack environment serves it;"
            f" the last CUDA that targets it is {last}{before}")


def cuda_range(facts: Facts, cc: str) -> str:
    """The toolkits that target `cc`: 'CUDA >= 12.8' while the newest does, else 'CUDA 5.0..11.8'."""
    first = facts.first_cuda(cc) or "?"
    last = facts.last_cuda(cc)
    return f"CUDA >= {first}" if last is None else f"CUDA {first}..{last}"


# -- the answer `mmstack arch check` gives -----------------------------------------------------


@dataclass(frozen=True)
class Assessment:
    gpu: str
    compute_capability: str
    arch_list: str
    cuda: str | None
    verdict: str  # "native", "lower-minor", "ptx-jit", "will-not-run", "cannot-build", "no-cuda-code"
    ok: bool  # runs (possibly with a warning) and can be built
    warning: bool
    reason: str
    fix: str
    notes: tuple[str, ...] = ()
    files: tuple[dict, ...] = ()  # per CUDA object of a package: path, sass, ptx, verdict

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["notes"], d["files"] = list(self.notes), list(self.files)
        return d


@dataclass(frozen=True)
class _Subject:
    name: str
    cc: Arch
    gpu: object | None  # facts.Gpu when the name is known


def _subject(facts: Facts, gpu_name: str | None, cc: str | None) -> _Subject:
    """The GPU being asked about: a known name, or a compute capability (named or not)."""
    if cc is not None:
        arch = parse_arch(cc, where="--cc")
        if arch.suffix:
            raise BadInput(f"--cc {cc!r}: a GPU's compute capability has no 'a'/'f' suffix", fix=f"--cc {arch.plain}")
        # a compute capability some GPU architecture has, or some toolkit targets (10.7 before its GPU is listed)
        ccs = {a.compute_capability for a in facts.architecture} | {x for tk in facts.cuda for x in tk.sass}
        if str(arch) not in ccs:
            known_ccs = sorted(ccs, key=lambda c: tuple(int(x) for x in c.split(".")))
            raise BadInput(f"--cc {cc!r}: no GPU architecture or CUDA toolkit in the facts has compute capability {arch}",
                           fix=f"use the GPU's compute capability (nvidia-smi --query-gpu=compute_cap --format=csv); "
                               f"known: {', '.join(known_ccs)}")
        known = facts.lookup_gpu(gpu_name) if gpu_name else None
        if known is not None and known.compute_capability != str(arch):
            raise BadInput(f"--gpu {gpu_name!r} is compute capability {known.compute_capability}, not {arch}",
                           fix="drop --cc, or name the GPU it belongs to")
        return _Subject(known.name if known else (gpu_name or f"GPU (--cc {arch})"), arch, known)
    if not gpu_name:
        raise BadInput("name the GPU: --gpu NAME or --cc X.Y", fix="e.g. --gpu 'RTX 4090' or --cc 8.9")
    gpu = facts.find_gpu(gpu_name)
    return _Subject(gpu.name, parse_arch(gpu.compute_capability, where="facts"), gpu)


def _install_hint(facts: Facts, who: _Subject, builds: tuple[Build, ...] = ()) -> str:
    segment, host = getattr(who.gpu, "segment", ""), getattr(who.gpu, "host", "")
    served = serving_env(facts, str(who.cc), segment=segment, host=host, builds=builds)
    if served.env is None and (segment == "jetson" or host):  # another platform than every environment's
        return f"a build that carries {who.cc} SASS: {served.reason}"
    if served.env is None and served.build:
        how = {Coverage.NATIVE: f"native {who.cc.sm} SASS", Coverage.LOWER_MINOR: "lower-minor SASS: runs, not tuned",
               Coverage.PTX_JIT: "PTX JIT"}[served.coverage]
        return (f"mmstack's fat build {served.build} ({how}: conda install -c CHANNEL -c conda-forge"
                f" \"mmcv=*={served.build}*\"; `mmstack gpus` says more)")
    if served.env and served.coverage is Coverage.NATIVE:
        return (f"install the {served.env} environment (`pixi run -e {served.env} verify`, or conda"
                f" \"mmcv=*=cuda*_sm{who.cc.major}{who.cc.minor}*\" from an mmstack channel)")
    base = f"a build that carries {who.cc} SASS (TORCH_CUDA_ARCH_LIST={who.cc}, {cuda_range(facts, str(who.cc))})"
    last = facts.last_cuda(str(who.cc))
    if served.env is None and last:
        return f"{base}. {_dropped(facts, who.cc, last)}"
    if served.env:
        how = {Coverage.LOWER_MINOR: "runs, not tuned", Coverage.PTX_JIT: "PTX JIT"}[served.coverage]
        return f"{base}, or the {served.env} environment ({how})"
    return base


def _dropped_in(facts: Facts, arch: str, tk) -> str | None:
    """The toolkit (at or before `tk`) that dropped `arch` after an older one targeted it."""
    ordered = [t for t in sorted(facts.cuda, key=lambda t: t.key) if t.key <= tk.key]
    for older, newer in itertools.pairwise(ordered):
        if arch in older.sass and arch not in newer.sass:
            return newer.version
    return None


def assess(facts: Facts, *, gpu_name: str | None = None, arch_list: str, cuda: str | None = None,
           cc: str | None = None, builds: tuple[Build, ...] = ()) -> Assessment:
    """Will a build of `arch_list` (with CUDA `cuda`) run on the GPU? Why not, and the fix (`builds`: the
    variant matrix's fat builds, offered where no generation environment serves the GPU)."""
    who = _subject(facts, gpu_name, cc)
    targets = parse_arch_list(arch_list)
    return _verdict(facts, who, targets, cuda=cuda, arch_list=format_arch_list(targets), builds=builds)


def _verdict(facts: Facts, who: _Subject, targets, *, cuda: str | None, arch_list: str,
             notes: tuple[str, ...] = (), files: tuple[dict, ...] = (), builds: tuple[Build, ...] = ()) -> Assessment:
    cc = who.cc
    need_cuda = cuda_range(facts, str(cc))
    hint = _install_hint(facts, who, builds)
    common: dict[str, Any] = dict(gpu=who.name, compute_capability=str(cc), arch_list=arch_list, cuda=cuda, files=files)
    notes = tuple(notes)

    if cuda is not None:
        tk, note = facts.resolve_toolkit(cuda)
        notes += (note,) if note else ()
        known = set(tk.sass) | set(tk.arch_specific)
        missing = [t for t in targets if str(t.arch) not in known]
        deprecated = sorted({str(t.arch) for t in targets if str(t.arch) in tk.deprecated}, key=version_key)
        if deprecated:
            notes += (f"CUDA {tk.version}'s nvcc warns that {', '.join(deprecated)} are deprecated",)
        if missing:
            names = ", ".join(t.arch.sm if t.kind == "sass" else t.arch.compute for t in missing)
            able = newest_buildable(targets, facts)
            why = f"CUDA {cuda}'s nvcc cannot target {names}"
            drops = sorted({d for t in missing if (d := _dropped_in(facts, str(t.arch), tk)) is not None}, key=version_key)
            if drops:
                why += " (dropped in CUDA " + ", ".join(drops) + ")"
            return Assessment(
                **common, verdict="cannot-build", ok=False, warning=False, reason=why, notes=notes,
                fix=(f"use CUDA {' or '.join(_ranges(able))}" if able else "drop those archs")
                + f" (the {who.name} needs {need_cuda})",
            )
        if str(cc) not in tk.sass:
            can = [t.version for t in sorted(facts.toolkits_for(str(cc)), key=lambda t: t.key)]
            notes += (f"CUDA {tk.version}'s nvcc cannot emit {cc.sm} itself"
                      + (f" (CUDA {' or '.join(_ranges(can))} can)" if can else ""),)

    result = coverage(cc, targets, cuda=cuda, facts=facts)
    sm = cc.sm
    target = result.target
    if target is None:  # Coverage.NONE: nothing in the build runs on this GPU
        return Assessment(
            **common, verdict="will-not-run", ok=False, warning=False, notes=notes,
            reason=f"{who.name}: compute capability {cc} ({sm}); the build holds {_why_none(facts, cc, targets, cuda)}"
            " (\"no kernel image is available for execution on the device\")",
            fix=f"add {cc} to the arch list (needs {need_cuda}), or {hint}",
        )
    if result.coverage is Coverage.NATIVE:
        return Assessment(**common, verdict="native", ok=True, warning=False, notes=notes,
                          reason=f"SASS for {target.arch} runs natively on {who.name} ({cc})", fix="")
    if result.coverage is Coverage.LOWER_MINOR:
        return Assessment(
            **common, verdict="lower-minor", ok=True, warning=True, notes=notes,
            reason=f"runs on {target.arch} SASS (same major, lower minor), not tuned for {cc}",
            fix=f"add {cc} to the arch list for native code, or {hint}",
        )
    ptx_tk = cuda or "the building toolkit"
    return Assessment(
        **common, verdict="ptx-jit", ok=True, warning=True, notes=notes,
        reason=f"runs only through PTX JIT from {target.arch.compute}: slow first"
        f" start, and the driver must be at least as new as {ptx_tk}",
        fix=f"add {cc} to the arch list (needs {need_cuda}), or {hint}",
    )


def _why_none(facts: Facts, cc: Arch, targets, cuda: str | None) -> str:
    """What the build lacks for `cc`, naming the rule that refuses what it has (Tegra, a family, 'a')."""
    said = [f"no {cc.sm} SASS"]
    same_major = [t for t in targets if t.kind == "sass" and not t.arch.suffix and t.arch.major == cc.major
                  and t.arch.minor < cc.minor]
    if same_major and str(cc) in facts.tegra:
        said.append(f"{', '.join(t.arch.sm for t in same_major)} does not run on Tegra {cc} (binary compatibility is"
                    " desktop-only)")
    elif same_major:
        said.append("its lower-minor SASS is Tegra's (desktop-only binary compatibility)")
    else:
        said[0] += f" (nor {cc.major}.x SASS below it)"
    fam = [t for t in targets if t.arch.suffix == "f" and t.arch.major == cc.major and t.arch.minor <= cc.minor]
    for t in fam:
        members = sorted(facts.family(str(t.arch.plain), cuda), key=version_key)
        said.append(f"{t.arch.sm if t.kind == 'sass' else t.arch.compute} serves the family {{{', '.join(members)}}}"
                    + (f" of CUDA {cuda}" if cuda else "") + f", not {cc}")
    said.append(f"no PTX at or below {cc} that JITs on it")
    return "; ".join(said)


def _ranges(versions: list[str]) -> list[str]:
    """['11.8', '12.0', ..., '12.9'] -> ['11.8..12.9'] (consecutive rows of the facts)."""
    if not versions:
        return []
    return [versions[0] if len(versions) == 1 else f"{versions[0]}..{versions[-1]}"]


def assess_package(facts: Facts, listings, *, package: str, gpu_name: str | None = None,
                   cc: str | None = None, builds: tuple[Build, ...] = ()) -> Assessment:
    """Will a package (its CUDA objects, read by mmstack.facts.fatbin) run on the GPU?

    Every object carrying CUDA code must run, and within an object every kernel bundle (fatbin container:
    a translation unit's kernels) must, since the runtime loads a kernel from its own bundle only: an
    object's verdict is its weakest bundle's, the package's its weakest object's, and the reason names
    the bundles that would fail. Bundles that define no kernel (device-link stubs) are not judged."""
    who = _subject(facts, gpu_name, cc)
    cuda_objects = [lst for lst in listings if lst.sass or lst.ptx]
    if not cuda_objects:
        where = f"{len(listings)} shared object(s)" if listings else "no shared object"
        return Assessment(
            gpu=who.name, compute_capability=str(who.cc), arch_list="", cuda=None, verdict="no-cuda-code",
            ok=False, warning=False, reason=f"{package}: {where}, none with CUDA code (a CPU build): it never uses the GPU",
            fix=f"install a CUDA build: {_install_hint(facts, who, builds)}",
        )
    def targets_of(sass, ptx) -> tuple[Target, ...]:
        return tuple([Target(parse_arch(a), "sass") for a in sass] + [Target(parse_arch(a), "ptx") for a in ptx])

    files, assessed = [], []
    for lst in cuda_objects:
        bundles = [b for b in getattr(lst, "bundles", ()) if not b.empty]
        judged = [(coverage(who.cc, targets_of(b.sass, b.ptx), facts=facts).coverage, targets_of(b.sass, b.ptx), b)
                  for b in bundles]
        if not judged:  # nothing but stubs (or a listing without bundles): the object's union decides
            judged = [(coverage(who.cc, targets_of(lst.sass, lst.ptx), facts=facts).coverage,
                       targets_of(lst.sass, lst.ptx), None)]
        worst = min(judged, key=lambda w: _ORDER[w[0]])
        failing = [b for c, _, b in judged if c is Coverage.NONE and b is not None]
        files.append({"path": lst.path, "sass": list(lst.sass), "ptx": list(lst.ptx), "verdict": worst[0].value,
                      "bundles": [{"label": b.label, "sass": list(b.sass), "ptx": list(b.ptx), "kernels": list(b.kernels),
                                   "verdict": c.value} for c, _, b in judged if b is not None],
                      "failing_bundles": [b.label for b in failing]})
        assessed.append((worst[0], worst[1], lst, failing, len(judged)))
    cov, targets, weakest, failing, n_bundles = min(assessed, key=lambda w: _ORDER[w[0]])  # the first of the weakest
    a = _verdict(facts, who, targets, cuda=None, arch_list=format_arch_list(targets), files=tuple(files), builds=builds)
    others = len(cuda_objects) - 1
    label = weakest.path.split("!")[-1]
    prefix = f"{label} (the weakest of {len(cuda_objects)} CUDA objects): " if others else f"{label}: "
    if failing:
        def name(b) -> str:
            kernels = ", ".join(b.kernels[:3]) + (f" and {len(b.kernels) - 3} more" if len(b.kernels) > 3 else "")
            return f"{b.label} ({kernels + '; ' if kernels else ''}SASS [{', '.join(b.sass) or '-'}], PTX [{', '.join(b.ptx) or '-'}])"
        listed = "; ".join(name(b) for b in failing[:5]) + (f"; and {len(failing) - 5} more" if len(failing) > 5 else "")
        prefix += f"{len(failing)} of {n_bundles} kernel bundles have no code for {who.cc}: {listed}. The first: "
    can = [t.version for t in sorted(facts.toolkits_for(str(who.cc)), key=lambda t: t.key)]
    built_by = f"built by CUDA {' or '.join(_ranges(can))}" if can else "built by a toolkit that targets it"
    mmcv = f"; for mmcv: {_install_hint(facts, who, builds)}"
    fix = {
        Coverage.NONE: f"install a build of this package that carries {who.cc} SASS ({built_by}){mmcv}",
        Coverage.PTX_JIT: f"runs; for native code install a build with {who.cc} SASS ({built_by}){mmcv}",
        Coverage.LOWER_MINOR: f"runs; for code tuned to {who.cc} install a build with {who.cc} SASS ({built_by})",
        Coverage.NATIVE: "",
    }[cov]
    return Assessment(**{**a.__dict__, "reason": prefix + a.reason, "fix": fix})
