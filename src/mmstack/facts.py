"""Typed access to the facts in data/gpus.toml.

Models are frozen and strict (`extra="forbid"`): a facts file with an unknown field, a missing
source or a malformed arch fails to load with the file and the field named.
"""

from __future__ import annotations

import difflib
import functools
import re
from importlib import resources
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import BadInput

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - 3.10
    import tomli as tomllib  # type: ignore[no-redef]

FACTS_FILE = "gpus.toml"
_ARCH_RE = re.compile(r"^\d{1,2}\.\d[af]?$")
_VERSION_RE = re.compile(r"^\d+\.\d+$")
_DRIVER_RE = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2})?$")

Url = Annotated[str, Field(pattern=r"^https://\S+$")]


def _arch(value: str, *, allow_suffix: bool = False) -> str:
    if not _ARCH_RE.match(value) or (not allow_suffix and value[-1] in "af"):
        raise ValueError(f"{value!r} is not an arch in mmstack notation (e.g. '8.9', '9.0a')")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Generation(_Strict):
    env: str = Field(pattern=r"^[a-z0-9]+$")
    compute_capability: str  # "" for cpu
    first_cuda: str
    cuda: str
    summary: str
    source: Url

    @field_validator("compute_capability")
    @classmethod
    def _cc(cls, v: str) -> str:
        return v and _arch(v)

    @property
    def is_gpu(self) -> bool:
        return bool(self.compute_capability)


class Gpu(_Strict):
    name: str
    aliases: tuple[str, ...] = ()
    compute_capability: str
    architecture: str
    generation: str  # env name, "" when no environment serves it
    source: Url

    @field_validator("compute_capability")
    @classmethod
    def _cc(cls, v: str) -> str:
        return _arch(v)


class CudaMajor(_Strict):
    major: int
    minor_compat_driver: str = Field(pattern=_DRIVER_RE.pattern)
    source: Url


class CudaToolkit(_Strict):
    version: str = Field(pattern=_VERSION_RE.pattern)
    sass: tuple[str, ...]
    arch_specific: tuple[str, ...]
    min_driver: str = Field(pattern=_DRIVER_RE.pattern)
    max_gcc: int
    sources: tuple[Url, ...] = Field(min_length=1)

    @field_validator("sass")
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
    def key(self) -> tuple[int, int]:
        return version_key(self.version)


class Facts(_Strict):
    generation: tuple[Generation, ...]
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

    def find_gpu(self, name: str) -> Gpu:
        """Look a GPU up by name or alias: case, spaces, 'NVIDIA'/'GeForce' prefixes ignored."""
        wanted = _norm(name)
        for gpu in self.gpu:
            if wanted in {_norm(n) for n in (gpu.name, *gpu.aliases)}:
                return gpu
        names = [n for gpu in self.gpu for n in (gpu.name, *gpu.aliases)]
        raise BadInput(
            f"unknown GPU {name!r}{_did_you_mean(name, names)}",
            fix="run `mmstack gpus` for the known names",
        )

    def toolkit(self, version: str) -> CudaToolkit:
        for tk in self.cuda:
            if tk.version == version:
                return tk
        raise BadInput(
            f"unknown CUDA version {version!r}{_did_you_mean(version, [t.version for t in self.cuda])}",
            fix=f"use one of: {', '.join(t.version for t in self.cuda)}",
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

    def gpus_of(self, env: str) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpu if g.generation == env)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _norm(name: str) -> str:
    n = name.lower().replace("-", " ").replace("_", " ")
    for prefix in ("nvidia ", "geforce ", "tesla "):
        if n.startswith(prefix):
            n = n[len(prefix):]
    return "".join(n.split())


def _did_you_mean(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    if not close:
        by_norm = {_norm(c): c for c in choices}
        hit = difflib.get_close_matches(_norm(name), list(by_norm), n=1, cutoff=0.5)
        close = [by_norm[hit[0]]] if hit else []
    return f"; did you mean {close[0]!r}?" if close else ""


def load_file(path: Path) -> Facts:
    """Load and validate a facts file; any problem is a BadInput naming the file and field."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"cannot read facts: {exc}", source=str(path), fix="fix the TOML syntax") from None
    return _validate(raw, str(path))


def _validate(raw: dict, where: str) -> Facts:
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
    versions = {t.version for t in facts.cuda}
    for gen in facts.generation:
        if not gen.is_gpu:
            continue
        if gen.cuda not in versions or gen.first_cuda not in versions | {"11.0", "11.1"}:
            raise BadInput(f"generation {gen.env!r}: cuda {gen.cuda!r} is not a [[cuda]] row", source=where)
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
    text = resources.files("mmstack").joinpath("data", FACTS_FILE).read_text()
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - packaging error
        raise BadInput(f"cannot read facts: {exc}", source=f"mmstack/data/{FACTS_FILE}") from None
    return _validate(raw, f"src/mmstack/data/{FACTS_FILE}")
