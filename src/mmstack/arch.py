"""Arch strings and the coverage rules.

One notation everywhere: "8.9" (SASS), "12.0+PTX" (SASS plus PTX, torch's TORCH_CUDA_ARCH_LIST
meaning), "9.0a" / "10.0f" (arch- and family-specific SASS). `parse_arch_list` also reads what
people paste: `sm_89`, `compute_89` (PTX only), `-gencode=arch=compute_90,code=sm_90`,
`8.9;9.0`, `"8.6 8.9"`. Conversion to nvcc flags happens in `gencode_flags` alone.

Coverage (NVIDIA's CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility",
https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#binary-compatibility):
  * SASS for X.y runs on GPUs of the same major X at minor >= y (sm_80 runs on 8.6; sm_86 does
    not run on 8.0; sm_90 does not run on 12.0).
  * "a" (arch-specific) SASS runs only on exactly that compute capability; "f" (family) SASS
    runs on the same major at minor >= y; neither carries forward to a newer major.
  * PTX is JIT-compiled by the driver for any GPU of equal or higher compute capability, and
    only by a driver at least as new as the toolkit that wrote the PTX. "a"/"f" PTX does not
    carry forward.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from .errors import BadInput
from .facts import Facts, version_key


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
    def plain(self) -> "Arch":
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
            f"{where}: cannot read arch {token!r} in {text!r}",
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
                if arch.suffix:
                    raise BadInput(
                        f"{where}: {token!r}: '+PTX' on an arch-specific target does not carry forward",
                        fix=f"use '{arch.plain}+PTX' for forward-compatible PTX",
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


def coverage(gpu: Arch, targets) -> CoverageResult:
    """How a GPU of compute capability `gpu` runs a binary holding `targets`."""
    best: tuple[int, Target] | None = None
    for t in targets:
        rank = _rank(gpu, t)
        if rank and (best is None or rank > best[0] or (rank == best[0] and t.arch > best[1].arch)):
            best = (rank, t)
    if best is None:
        return CoverageResult(Coverage.NONE, None)
    return CoverageResult({3: Coverage.NATIVE, 2: Coverage.LOWER_MINOR, 1: Coverage.PTX_JIT}[best[0]], best[1])


def _rank(gpu: Arch, t: Target) -> int:
    a = t.arch
    if t.kind == "sass":
        if a.suffix == "a":
            return 3 if (a.major, a.minor) == (gpu.major, gpu.minor) else 0
        if a.major != gpu.major or a.minor > gpu.minor:
            return 0
        return 3 if a.minor == gpu.minor else 2
    # PTX: forward to any equal-or-newer compute capability; a/f PTX stays put.
    if a.suffix:
        return 1 if (a.major, a.minor) == (gpu.major, gpu.minor) else 0
    return 1 if (a.major, a.minor) <= (gpu.major, gpu.minor) else 0


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


# -- the answer `mmstack arch check` gives -----------------------------------------------------


@dataclass(frozen=True)
class Assessment:
    gpu: str
    compute_capability: str
    arch_list: str
    cuda: str | None
    verdict: str  # "native", "lower-minor", "ptx-jit", "will-not-run", "cannot-build"
    ok: bool  # runs (possibly with a warning) and can be built
    warning: bool
    reason: str
    fix: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def assess(facts: Facts, *, gpu_name: str, arch_list: str, cuda: str | None = None) -> Assessment:
    """Will a build of `arch_list` (with CUDA `cuda`) run on `gpu_name`? Why not, and the fix."""
    gpu = facts.find_gpu(gpu_name)
    cc = parse_arch(gpu.compute_capability, where="facts")
    targets = parse_arch_list(arch_list)
    canonical = format_arch_list(targets)
    env_hint = f"the {gpu.generation} environment" if gpu.generation else "a build for it"
    first = facts.first_toolkit_for(str(cc))
    need_cuda = first.version if first else "?"
    common = dict(gpu=gpu.name, compute_capability=str(cc), arch_list=canonical, cuda=cuda)

    if cuda is not None:
        missing = unbuildable(targets, cuda, facts)
        if missing:
            names = ", ".join(t.arch.sm if t.kind == "sass" else t.arch.compute for t in missing)
            able = newest_buildable(targets, facts)
            return Assessment(
                **common, verdict="cannot-build", ok=False, warning=False,
                reason=f"CUDA {cuda}'s nvcc cannot target {names}",
                fix=(f"use CUDA >= {able[0]}" if able else "drop those archs") + f" (the {gpu.name} needs CUDA >= {need_cuda})",
            )

    result = coverage(cc, targets)
    sm = cc.sm
    if result.coverage is Coverage.NONE:
        return Assessment(
            **common, verdict="will-not-run", ok=False, warning=False,
            reason=f"{gpu.name} is compute capability {cc} ({sm}); the build holds no {sm} SASS and no PTX at or below {cc}"
            " (\"no kernel image is available for execution on the device\")",
            fix=f"add {cc} to the arch list (needs CUDA >= {need_cuda}) or install {env_hint}",
        )
    if result.coverage is Coverage.NATIVE:
        return Assessment(**common, verdict="native", ok=True, warning=False,
                          reason=f"SASS for {result.target.arch} runs natively on {gpu.name} ({cc})", fix="")
    if result.coverage is Coverage.LOWER_MINOR:
        return Assessment(
            **common, verdict="lower-minor", ok=True, warning=True,
            reason=f"runs on {result.target.arch} SASS (same major, lower minor), not tuned for {cc}",
            fix=f"add {cc} to the arch list for native code",
        )
    ptx_tk = cuda or "the building toolkit"
    return Assessment(
        **common, verdict="ptx-jit", ok=True, warning=True,
        reason=f"runs only through PTX JIT from compute_{result.target.arch.major}{result.target.arch.minor}: slow first start,"
        f" and the driver must be at least as new as {ptx_tk}",
        fix=f"add {cc} to the arch list (needs CUDA >= {need_cuda}) or install {env_hint}",
    )
