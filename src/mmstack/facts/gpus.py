"""Typed access to the facts in data/gpus.toml.

Models are frozen and strict (`extra="forbid"`): a facts file with an unknown field, a missing
source or a malformed arch fails to load with the file and the field named.
"""

from __future__ import annotations

import difflib
import functools
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mmstack.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10: the `tomli` dependency
    import tomli as tomllib

FACTS_FILE = "gpus.toml"
_ARCH_RE = re.compile(r"^\d{1,2}\.\d[af]?$")
_VERSION_RE = re.compile(r"^\d+\.\d+$")
_DRIVER_RE = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2})?$")
UNKNOWN_DRIVER = "unknown"  # a toolkit row whose GA driver no source gave (13.4, 13.5)

Url = Annotated[str, Field(pattern=r"^https://\S+$")]


def _arch(value: str, *, allow_suffix: bool = False) -> str:
    if not _ARCH_RE.match(value) or (not allow_suffix and value[-1] in "af"):
        raise ValueError(f"{value!r} is not an arch in mmstack notation (e.g. '8.9', '9.0a')")
    return value


# A compute capability in mmstack notation ("8.9"), checked where it is read.
Cc = Annotated[str, AfterValidator(lambda v: _arch(v))]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Generation(_Strict):
    env: str = Field(pattern=r"^[a-z0-9]+$")
    compute_capability: str  # "" for cpu
    first_cuda: str
    cuda: str
    summary: str
    source: Url
    platform: str = Field(pattern=r"^linux-(64|aarch64)$")  # the conda subdir its pixi environment solves for

    @field_validator("compute_capability")
    @classmethod
    def _cc(cls, v: str) -> str:
        return v and _arch(v)

    @property
    def is_gpu(self) -> bool:
        return bool(self.compute_capability)


SEGMENTS = ("datacenter", "workstation", "geforce", "laptop", "jetson")


class Architecture(_Strict):
    compute_capability: Cc
    name: str
    first_cuda: str = Field(pattern=_VERSION_RE.pattern)
    last_cuda: str = Field(default="", pattern=r"^(\d+\.\d+)?$")  # only where no [[cuda]] row targets it
    source: Url
    # Tegra (Jetson's integrated GPUs): no binary compatibility, SASS runs only on its exact compute capability
    tegra: bool = False
    tegra_source: Url | None = None

    @model_validator(mode="after")
    def _tegra_sourced(self) -> Architecture:
        if self.tegra != (self.tegra_source is not None):
            raise ValueError("tegra = true and tegra_source go together")
        return self


class Chip(_Strict):
    """A GPU die ("GM204") and its compute capability: the one place a chip's figure is."""

    name: str = Field(pattern=r"^[A-Z]{2}\d{2,3}[A-Z]?$")
    compute_capability: Cc
    source: Url


class Gpu(_Strict):
    name: str
    aliases: tuple[str, ...] = ()
    compute_capability: Cc
    chip: str
    nvidia_list_says: str = ""  # NVIDIA's list's figure, where it contradicts the chip
    segment: str
    same_chip_as: str = ""
    source: Url
    # the only host platform the GPU comes in ("linux-aarch64": Grace, GB10's and Jetson's Arm cores); "" for
    # a card that goes into x86-64 (and Arm) servers
    host: str = Field(default="", pattern=r"^(linux-aarch64)?$")
    host_source: Url | None = None
    # derived by the loader (never written in the TOML): from [[architecture]] and [[generation]]
    architecture: str = ""
    generation: str = ""  # the env whose SASS is exactly this GPU's compute capability, "" if none

    @model_validator(mode="after")
    def _host_sourced(self) -> Gpu:
        if bool(self.host) != (self.host_source is not None):
            raise ValueError("host and host_source go together")
        return self

    @field_validator("nvidia_list_says")
    @classmethod
    def _listed(cls, v: str) -> str:
        return v and _arch(v)

    @field_validator("segment")
    @classmethod
    def _segment(cls, v: str) -> str:
        if v not in SEGMENTS:
            raise ValueError(f"{v!r} is not one of {', '.join(SEGMENTS)}")
        return v


class CudaMajor(_Strict):
    major: int
    minor_compat_driver: str = Field(pattern=_DRIVER_RE.pattern)
    source: Url
    # the driver a `--compress-mode=size` fatbin of this major needs (None: no source, or no such mode)
    fatbin_size_mode_driver: str | None = Field(default=None, pattern=_DRIVER_RE.pattern)
    fatbin_size_mode_source: Url | None = None


class CudaToolkit(_Strict):
    version: str = Field(pattern=_VERSION_RE.pattern)
    sass: tuple[str, ...]
    arch_specific: tuple[str, ...]
    deprecated: tuple[str, ...] = ()
    min_driver: str = Field(pattern=f"{_DRIVER_RE.pattern}|^{UNKNOWN_DRIVER}$")
    max_gcc: int
    sources: tuple[Url, ...] = Field(min_length=1)
    # the 'f' families: groups of compute capabilities an sm_XYf target (SASS or PTX) serves, each at minor >= Y
    deprecated_source: Url | None = None  # where `deprecated` was read, when not the `sources`
    families: tuple[tuple[str, ...], ...] = ()
    families_source: Url | None = None

    @field_validator("families")
    @classmethod
    def _families(cls, v: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
        for group in v:
            for a in group:
                _arch(a)
            if len({a.split(".")[0] for a in group}) != 1:
                raise ValueError(f"family {list(group)} spans two majors")
        return v

    @model_validator(mode="after")
    def _families_sourced(self) -> CudaToolkit:
        if bool(self.families) != (self.families_source is not None):
            raise ValueError("families and families_source go together")
        return self

    @field_validator("sass", "deprecated")
    @classmethod
    def _sass(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_arch(a) for a in v)

    @field_validator("arch_specific")
    @classmethod
    def _specific(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for a in v:
            if _arch(a, allow_suffix=True)[-1] not in "af":
                raise ValueError(f"{a!r} in arch_specific lacks its 'a'/'f' suffix")
        return v

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def driver(self) -> str | None:
        """The toolkit's own GA driver, None where the facts do not know it."""
        return None if self.min_driver == UNKNOWN_DRIVER else self.min_driver

    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.version)


@dataclass(frozen=True)
class ToolkitChanges:
    """What a toolkit's nvcc added and dropped against the previous row, and what it deprecates."""

    version: str
    previous: str | None
    added: tuple[str, ...]
    dropped: tuple[str, ...]
    deprecated: tuple[str, ...]


class Facts(_Strict):
    generation: tuple[Generation, ...]
    architecture: tuple[Architecture, ...]
    chip: tuple[Chip, ...]
    gpu: tuple[Gpu, ...]
    cuda_major: tuple[CudaMajor, ...]
    cuda: tuple[CudaToolkit, ...]

    # -- lookups ---------------------------------------------------------------------------
    @property
    def envs(self) -> tuple[str, ...]:
        return tuple(g.env for g in self.generation)

    def env(self, name: str) -> Generation:
        for g in self.generation:
            if g.env == name:
                return g
        raise BadInput(
            f"unknown environment {name!r}{_did_you_mean(name, self.envs)}",
            fix=f"use one of: {', '.join(self.envs)}",
        )

    def _names(self) -> dict[str, Gpu]:
        """Normalized name or alias -> GPU (built once per Facts object)."""
        index = _INDEX.get(id(self))
        if index is None or index[0] is not self:
            table: dict[str, Gpu] = {}
            for gpu in self.gpu:
                for n in (gpu.name, *gpu.aliases):
                    table.setdefault(_norm(n), gpu)
            index = _INDEX[id(self)] = (self, table)
        return index[1]

    def lookup_gpu(self, name: str) -> Gpu | None:
        """A GPU by name or alias as people type it or NVML prints it; None when unknown.

        Case, spaces, dashes, 'NVIDIA'/'GeForce'/'Tesla'/'GRID' prefixes are ignored; failing an exact
        match, memory sizes, form factors and 'Laptop GPU' are dropped ('NVIDIA A100-SXM4-80GB',
        'NVIDIA GeForce RTX 3060 Laptop GPU', 'NVIDIA H100 80GB HBM3', 'NVIDIA GH200 144G HBM3e'), and
        a MIG instance or a vGPU profile is its parent GPU ('NVIDIA A100-SXM4-40GB MIG 1g.5gb',
        'NVIDIA A10-24Q', 'GRID A100-40C')."""
        names = self._names()
        for candidate in (name, _parent(name)):
            key = _norm(candidate)
            if key in names:
                return names[key]
            hit = names.get(_norm(_strip_variant(candidate)))
            if hit is not None:
                return hit
        return None

    def find_gpu(self, name: str) -> Gpu:
        """Like lookup_gpu, but an unknown name is bad input with a did-you-mean."""
        gpu = self.lookup_gpu(name)
        if gpu is not None:
            return gpu
        raise BadInput(
            f"unknown GPU {name!r}{self._gpu_did_you_mean(name)}",
            fix="run `mmstack gpus` for the known names, or pass --cc X.Y (nvidia-smi --query-gpu=compute_cap --format=csv)",
        )

    def _gpu_did_you_mean(self, name: str) -> str:
        """A close name, always with its compute capability; when its model number is not the one asked
        about (GTX 780 -> GTX 980), it says that this is another GPU whose compute capability may differ.
        A name whose model number is a known one with two digits swapped (RTX 4900) gets that GPU
        (RTX 4090); a name with no model number at all (nope) gets a suggestion only when it is close."""
        by_name = {n: gpu for gpu in self.gpu for n in (gpu.name, *gpu.aliases)}
        asked = _model_numbers(name)
        swapped = [n for n in by_name if _model_numbers(n) and any(_transposed(a, m) for a in asked for m in _model_numbers(n))
                   and _model_numbers(n) - {m for m in _model_numbers(n) if any(_transposed(a, m) for a in asked)} <= asked]
        if swapped:
            best = max(swapped, key=lambda n: difflib.SequenceMatcher(None, name.lower(), n.lower()).ratio())
            hint = f"; did you mean {best!r}?"
        else:
            hint = _did_you_mean(name, by_name, cutoff=0.5 if asked else 0.75)
        if not hint:
            return ""
        close = hint.split("'", 2)[1] if "'" in hint else ""
        gpu = by_name.get(close)
        if gpu is None:  # pragma: no cover - _did_you_mean returns one of the choices
            return hint
        said = f"; did you mean {close!r} (compute capability {gpu.compute_capability})?"
        if _model_numbers(name) != _model_numbers(close) and not swapped:
            said += (f" It is another GPU than {name!r}: its compute capability need not be yours"
                     " (nvidia-smi --query-gpu=compute_cap --format=csv tells)")
        return said

    def arch_row(self, cc: str) -> Architecture | None:
        for a in self.architecture:
            if a.compute_capability == cc:
                return a
        return None

    def first_cuda(self, cc: str) -> str | None:
        """The first CUDA toolkit whose nvcc targets `cc`: the [[cuda]] rows, else [[architecture]]."""
        row = self.arch_row(cc)
        if row is not None:
            return row.first_cuda  # the loader checked it against the [[cuda]] rows where they reach
        first = self.first_toolkit_for(cc)
        return first.version if first else None

    def last_cuda(self, cc: str) -> str | None:
        """The last toolkit whose nvcc targets `cc`; None while the newest toolkit row still does."""
        tks = sorted(self.toolkits_for(cc), key=lambda t: t.key)
        newest = max(self.cuda, key=lambda t: t.key) if self.cuda else None
        if tks:
            return None if tks[-1] is newest else tks[-1].version
        row = self.arch_row(cc)
        return row.last_cuda or None if row else None

    def toolkit(self, version: str) -> CudaToolkit:
        for tk in self.cuda:
            if tk.version == version:
                return tk
        raise BadInput(
            f"unknown CUDA version {version!r}{_version_hint(version, [t.version for t in self.cuda])}",
            fix=f"use one of: {', '.join(t.version for t in self.cuda)}",
        )

    def resolve_toolkit(self, version: str) -> tuple[CudaToolkit, str]:
        """A toolkit by version, with a note when it is answered by another row.

        A release newer than the facts' newest row of its major (13.5 when the facts end at 13.2)
        is answered by that row: within a major, nvcc has never dropped an arch. Anything else the
        facts lack (12.7 was never released, 10.1 predates the facts) is bad input."""
        if not _VERSION_RE.match(version or ""):
            raise BadInput(f"--cuda {version!r} is not a CUDA version", fix="write it like 12.8")
        for tk in self.cuda:
            if tk.version == version:
                return tk, ""
        key = version_key(version)
        same_major = sorted((t for t in self.cuda if t.major == key[0]), key=lambda t: t.key)
        if same_major and key > same_major[-1].key:
            newest = same_major[-1]
            return newest, (f"CUDA {version} is newer than the facts' newest {key[0]}.x row; answered with CUDA"
                            f" {newest.version}'s arch list (a minor release has never dropped an arch)")
        self.toolkit(version)  # raises BadInput with a did-you-mean
        raise AssertionError("unreachable")  # pragma: no cover

    def changes(self, version: str) -> ToolkitChanges:
        ordered = sorted(self.cuda, key=lambda t: t.key)
        tk = self.toolkit(version)
        i = ordered.index(tk)
        prev = ordered[i - 1] if i else None
        before = set(prev.sass) if prev else set()
        key = lambda a: version_key(a)  # noqa: E731
        return ToolkitChanges(
            version=tk.version,
            previous=prev.version if prev else None,
            added=tuple(sorted(set(tk.sass) - before, key=key)) if prev else (),
            dropped=tuple(sorted(before - set(tk.sass), key=key)),
            deprecated=tk.deprecated,
        )

    def toolkits_for(self, arch: str) -> tuple[CudaToolkit, ...]:
        """Toolkits whose nvcc can emit SASS (or the arch-specific variant) for `arch`."""
        return tuple(tk for tk in self.cuda if arch in tk.sass or arch in tk.arch_specific)

    def first_toolkit_for(self, arch: str) -> CudaToolkit | None:
        tks = sorted(self.toolkits_for(arch), key=lambda t: t.key)
        return tks[0] if tks else None

    def minor_compat_driver(self, major: int) -> str | None:
        for m in self.cuda_major:
            if m.major == major:
                return m.minor_compat_driver
        return None

    @property
    def tegra(self) -> frozenset[str]:
        """Compute capabilities of Tegra GPUs ([[architecture]] tegra = true): no binary compatibility."""
        return frozenset(a.compute_capability for a in self.architecture if a.tegra)

    def family(self, target: str, cuda: str | None = None) -> frozenset[str]:
        """The compute capabilities an 'f' target X.Y serves: its family's members at minor >= Y, per the
        toolkit `cuda` (its [[cuda]] families; a newer release of a major takes that major's newest row), or
        per every toolkit when `cuda` is None (a package whose toolkit is not known). Only X.Y itself where no
        row groups it."""
        if cuda is not None:
            tks: tuple[CudaToolkit, ...] = (self.resolve_toolkit(cuda)[0],)
        else:
            tks = self.cuda
        major, minor = version_key(target)
        members = {target}
        for tk in tks:
            for group in tk.families:
                if target in group:
                    members |= {a for a in group if version_key(a)[1] >= minor and version_key(a)[0] == major}
        return frozenset(members)

    def gpus_of(self, env: str) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpu if g.generation == env)


_INDEX: dict[int, tuple[Facts, dict[str, Gpu]]] = {}


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _norm(name: str) -> str:
    n = name.lower().replace("-", " ").replace("_", " ").strip()
    for prefix in ("nvidia ", "grid ", "geforce ", "tesla "):
        if n.startswith(prefix):
            n = n[len(prefix):]
    return "".join(n.split())


# What NVML/nvidia-smi append to a product name: memory ("80GB", GH200's "144G"), form factor, laptop and OEM markers.
_VARIANT = re.compile(
    r"\b(\d+\s?gb?|hbm\d?e?|pcie|sxm\d?|oem|laptop\s+gpu|laptop|mobile|with\s+max\s?q\s+design|max\s?q|nvl\d*)\b",
    re.I,
)
# A MIG instance prints as its parent plus the profile ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "... MIG 1c.2g.10gb",
# "... MIG 1g.24gb+me"; NVIDIA's MIG user guide names the profiles so). A vGPU prints as the parent's short name,
# a dash, the frame buffer in GB and the profile series letter ("NVIDIA A10-24Q", "GRID A100-40C", "GRID T4-16Q",
# MIG-backed "GRID A100-4-20C"; NVIDIA's vGPU user guide's "Virtual GPU Types" tables).
_MIG = re.compile(r"\s+MIG\s+(\d+c\.)?\d+g\.\d+gb(\+\w+)?\s*$", re.I)
_VGPU = re.compile(r"-(\d+-)?\d+[ABCQ]\s*$")
# vGPU types of boards sharing a short name carry a board suffix after the model ("GRID A100D-80C" the 80GB PCIe,
# "A100DX-80C" the 80GB SXM4, "H100XM-80C" the SXM5, "H100L-94C" the NVL, "H200X-141C" the SXM; NVIDIA's vGPU user
# guide's "Virtual GPU Types" tables): the GPU is the model without it.
_BOARD = re.compile(r"(?<=\d)(DX|XM|D|L|X)$")


def _parent(name: str) -> str:
    """The physical GPU a MIG instance or vGPU profile name belongs to (the name itself otherwise)."""
    bare = _MIG.sub("", name.strip())
    vgpu = _VGPU.sub("", bare)
    return _BOARD.sub("", vgpu) if vgpu != bare else vgpu


def _model_numbers(name: str) -> set[str]:
    """The words of a name that carry digits, letters included ('K2000' and 'T2000' are two models)."""
    words = re.split(r"[^a-z0-9]+", _strip_variant(_parent(name)).lower())
    return {w for w in words if any(c.isdigit() for c in w)}


def _strip_variant(name: str) -> str:
    return _VARIANT.sub(" ", name.replace("-", " ").replace("_", " "))


def _transposed(a: str, b: str) -> bool:
    """b is a with two neighbouring characters swapped (4900 <-> 4090)."""
    if len(a) != len(b) or a == b:
        return False
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]


def _version_hint(version: str, known: list[str]) -> str:
    """For an unknown CUDA version: outside the known range, say so; inside it, the nearest release
    of the same major (12.7 -> 12.8); otherwise a close spelling."""
    try:
        asked = tuple(int(x) for x in version.split("."))
        rows = sorted((tuple(int(x) for x in v.split(".")), v) for v in known)
    except ValueError:
        return _did_you_mean(version, known, cutoff=0.6)
    if asked < rows[0][0]:
        return f"; CUDA {version} is older than every toolkit in the facts (the oldest is {rows[0][1]})"
    if asked > rows[-1][0]:
        return f"; CUDA {version} is newer than every toolkit in the facts (the newest is {rows[-1][1]})"
    same = [(abs(k[1] - asked[1]) if len(k) > 1 and len(asked) > 1 else 0, v) for k, v in rows if k[0] == asked[0]]
    return f"; did you mean {min(same)[1]!r}?" if same else ""


def _did_you_mean(name: str, choices, *, cutoff: float = 0.5) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=cutoff)
    if not close:
        by_norm = {_norm(c): c for c in choices}
        hit = difflib.get_close_matches(_norm(name), list(by_norm), n=1, cutoff=cutoff)
        close = [by_norm[hit[0]]] if hit else []
    return f"; did you mean {close[0]!r}?" if close else ""


def load_file(path: Path) -> Facts:
    """Load and validate a facts file; any problem is a BadInput naming the file and field."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"cannot read facts: {exc}", source=str(path), fix="fix the TOML syntax") from None
    return _validate(raw, str(path))


def _derive(raw: dict, where: str) -> dict:
    """Fill each GPU row's derived fields; refuse them written by hand."""
    archs = {a.get("compute_capability"): a.get("name") for a in raw.get("architecture", []) if isinstance(a, dict)}
    envs = {g.get("compute_capability"): g.get("env") for g in raw.get("generation", [])
            if isinstance(g, dict) and g.get("compute_capability")}
    rows = []
    for i, gpu in enumerate(raw.get("gpu", [])):
        if not isinstance(gpu, dict):
            rows.append(gpu)
            continue
        for derived in ("architecture", "generation"):
            if derived in gpu:
                raise BadInput(f"field gpu.{i}.{derived}: derived from [[architecture]]/[[generation]], not written",
                               source=where, fix=f"delete {derived} from the row")
        cc = gpu.get("compute_capability")
        rows.append({**gpu, "architecture": archs.get(cc, ""), "generation": envs.get(cc, "")})
    return {**raw, "gpu": rows}


def _validate(raw: dict, where: str) -> Facts:
    raw = _derive(raw, where)
    try:
        facts = Facts.model_validate(_tuples(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise BadInput(
            f"field {field}: {first['msg']}",
            source=where,
            fix="every row needs the schema's fields (and a source URL), nothing else",
        ) from None
    _cross_check(facts, where)
    return facts


def _cross_check(facts: Facts, where: str) -> None:
    envs = set(facts.envs)
    for gpu in facts.gpu:
        if gpu.generation and gpu.generation not in envs:
            raise BadInput(f"gpu {gpu.name!r}: generation {gpu.generation!r} is not a [[generation]] env", source=where)
    archs = {a.compute_capability: a for a in facts.architecture}
    chips: dict[str, Chip] = {}
    for i, chip in enumerate(facts.chip):
        if chips.setdefault(chip.name, chip) is not chip:
            raise BadInput(f"field chip.{i}.name: {chip.name!r} has two rows", source=where, fix="keep one")
        if chip.compute_capability not in archs:
            raise BadInput(f"field chip.{i}.compute_capability: {chip.compute_capability} has no [[architecture]] row",
                           source=where, fix="add the architecture row (name, first_cuda, source)")
    seen: dict[str, str] = {}
    by_name = {g.name: g for g in facts.gpu}
    for i, gpu in enumerate(facts.gpu):
        own = chips.get(gpu.chip)
        if own is None:
            raise BadInput(f"field gpu.{i}.chip: {gpu.chip!r} ({gpu.name}) is not a [[chip]] row", source=where,
                           fix="add the chip (name, compute_capability, source) or correct the name")
        if own.compute_capability != gpu.compute_capability:
            raise BadInput(f"field gpu.{i}.compute_capability: {gpu.name} says {gpu.compute_capability} but its chip"
                           f" {own.name} is {own.compute_capability}", source=where,
                           fix=f"write compute_capability = \"{own.compute_capability}\" (keep a list's other figure in"
                           " nvidia_list_says), or correct the chip")
        if gpu.nvidia_list_says == gpu.compute_capability:
            raise BadInput(f"field gpu.{i}.nvidia_list_says: equals the row's compute capability", source=where,
                           fix="delete it: it records only where NVIDIA's list contradicts the chip")
        for n in (gpu.name, *gpu.aliases):
            other = seen.setdefault(_norm(n), gpu.name)
            if other != gpu.name:
                raise BadInput(f"field gpu.{i}.aliases: {n!r} also names {other!r}", source=where,
                               fix="every name and alias must pick one GPU")
        if gpu.same_chip_as:
            twin = by_name.get(gpu.same_chip_as)
            if twin is None or twin.chip != gpu.chip:
                raise BadInput(f"field gpu.{i}.same_chip_as: {gpu.same_chip_as!r} is not a GPU on chip {gpu.chip}",
                               source=where, fix="name a listed product on the same chip")
    for gpu in facts.gpu:
        if gpu.segment == "jetson" and gpu.host != "linux-aarch64":
            raise BadInput(f"gpu {gpu.name!r}: a Jetson module's host is linux-aarch64", source=where,
                           fix='add host = "linux-aarch64" and host_source')
    for tk in facts.cuda:
        members = [a for group in tk.families for a in group]
        stray = [a for a in members if a not in tk.sass]
        if stray or len(members) != len(set(members)):
            raise BadInput(f"cuda {tk.version}: families name {', '.join(stray) or 'an arch twice'}"
                           + (" which its sass lacks" if stray else ""), source=where,
                           fix="list each of the toolkit's archs in at most one family")
        loose = [a for a in tk.arch_specific if a.endswith("f") and a[:-1] not in members]
        if loose:
            raise BadInput(f"cuda {tk.version}: arch_specific {', '.join(loose)} in no family", source=where,
                           fix="add the family (a group of families) with its source")
    versions = {t.version for t in facts.cuda}
    oldest = min(facts.cuda, key=lambda t: t.key).key if facts.cuda else (0,)
    for a in facts.architecture:
        first = facts.first_toolkit_for(a.compute_capability)
        known_since_oldest = version_key(a.first_cuda) >= oldest
        if known_since_oldest and (first is None or first.version != a.first_cuda):
            raise BadInput(f"architecture {a.compute_capability}: first_cuda {a.first_cuda} but the first [[cuda]] row"
                           f" targeting it is {first.version if first else 'none'}", source=where)
        if a.last_cuda and first is not None:
            raise BadInput(f"architecture {a.compute_capability}: last_cuda is derived from the [[cuda]] rows that target"
                           " it", source=where, fix="delete last_cuda")
    for gen in facts.generation:
        if not gen.is_gpu:
            continue
        if gen.cuda not in versions:
            raise BadInput(f"generation {gen.env!r}: cuda {gen.cuda!r} is not a [[cuda]] row", source=where)
        row = archs.get(gen.compute_capability)
        if row is None or row.first_cuda != gen.first_cuda:
            raise BadInput(f"generation {gen.env!r}: first_cuda {gen.first_cuda} disagrees with [[architecture]]"
                           f" {gen.compute_capability}", source=where)
        if gen.compute_capability not in facts.toolkit(gen.cuda).sass:
            raise BadInput(
                f"generation {gen.env!r}: CUDA {gen.cuda} cannot emit SASS for {gen.compute_capability}",
                source=where,
                fix="pin a toolkit that lists the arch in its `sass`",
            )


def _tuples(obj):
    if isinstance(obj, list):
        return tuple(_tuples(v) for v in obj)
    if isinstance(obj, dict):
        return {k: _tuples(v) for k, v in obj.items()}
    return obj


@functools.lru_cache(maxsize=1)
def load() -> Facts:
    """The packaged facts (cached)."""
    text = (resources.files("mmstack") / "data" / FACTS_FILE).read_text()  # Traversable.joinpath takes one part on 3.10
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - packaging error
        raise BadInput(f"cannot read facts: {exc}", source=f"mmstack/data/{FACTS_FILE}") from None
    return _validate(raw, f"src/mmstack/data/{FACTS_FILE}")
