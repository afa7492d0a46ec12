"""conda_build_config.yaml -> a validated variant matrix.

The file is read by py-rattler-build (the same engine that builds the recipe), then every
combination is checked against the facts: CUDA known, arch set buildable by that CUDA, the
arch tag agreeing with the arch set, every GPU generation served natively.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from mmstack.errors import BadInput, CheckFailed
from mmstack.facts import arch as archmod
from mmstack.facts.gpus import Facts

CONFIG_FILE = "conda_build_config.yaml"
COMPILER_KEYS = ("c_compiler_version", "cxx_compiler_version")
REQUIRED_KEYS = ("python", "pytorch", "cuda_compiler_version", "mmcv_arch_list", "arch_tag")
FAT_TAG = "all"
CPU_TAG = "cpu"


@dataclass(frozen=True)
class Variant:
    python: str
    pytorch: str
    cuda: str | None  # None for the CPU variant
    arch_list: str  # canonical ("8.9", "5.0;...;12.0+PTX") or "none"
    arch_tag: str  # "cpu", "sm89", "all"
    envs: tuple[str, ...] = field(default=())  # generations whose environment takes this build
    # zipped with cuda_compiler_version (conda-forge: 2.17, 2.28 for CUDA 13.0); a job that
    # overrides the CUDA keys must override this one too, or the zip group has unequal lengths
    c_stdlib_version: str | None = None
    # c_compiler_version = cxx_compiler_version (gcc major), zipped with cuda_compiler_version
    # as conda-forge zips it; a job overriding the CUDA keys overrides these too
    compiler_version: str | None = None

    @property
    def build_string_prefix(self) -> str:
        """`cuda129_sm89`, `cuda129_all`, `cpu` (the recipe's context derives the same)."""
        if self.cuda is None:
            return CPU_TAG
        return f"cuda{self.cuda.replace('.', '')}_{self.arch_tag}"

    @property
    def build_string_glob(self) -> str:
        py = self.python.replace(".", "")
        return f"{self.build_string_prefix}_py{py}_*"

    @property
    def targets(self) -> tuple[archmod.Target, ...]:
        return () if self.cuda is None else archmod.parse_arch_list(self.arch_list)

    @property
    def key(self) -> str:
        """A stable id (CI cache keys, job names)."""
        return f"py{self.python.replace('.', '')}-{self.build_string_prefix}-pytorch{self.pytorch}"

    def as_dict(self) -> dict:
        return {
            "key": self.key,
            "python": self.python,
            "pytorch": self.pytorch,
            "cuda_compiler_version": self.cuda or "None",
            "mmcv_arch_list": self.arch_list,
            "arch_tag": self.arch_tag,
            "build_string_prefix": self.build_string_prefix,
            "envs": list(self.envs),
        }

    def variant_keys(self) -> dict:
        """The keys as rattler-build sees them (for `--variant` overrides)."""
        keys = {
            "python": self.python,
            "pytorch": self.pytorch,
            "cuda_compiler_version": self.cuda or "None",
            "mmcv_arch_list": self.arch_list if self.cuda else "none",
            "arch_tag": self.arch_tag,
        }
        if self.c_stdlib_version is not None:
            keys["c_stdlib_version"] = self.c_stdlib_version
        if self.compiler_version is not None:
            keys["c_compiler_version"] = keys["cxx_compiler_version"] = self.compiler_version
        return keys


def read_config(path: Path) -> list[dict]:
    """Read the file with py-rattler-build; return its combinations as plain dicts."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path} not found", fix="run from the repository root or pass --config PATH")
    try:
        from rattler_build import JinjaConfig, PlatformConfig, RattlerBuildError, VariantConfig
    except ImportError:
        raise BadInput("py-rattler-build is not installed", fix="pip install 'mmstack[build]'") from None
    try:
        jinja = JinjaConfig(platform=PlatformConfig(target_platform="linux-64"))
        config = VariantConfig.from_conda_build_config(str(path), jinja)
        combos = config.combinations()
    except RattlerBuildError as exc:  # the base of rattler_build's own error types (VariantError, IoError, ...)
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"cannot read variant config: {msg}", source=str(path), fix="fix the YAML") from None
    keys = set(config.keys())
    missing = [k for k in REQUIRED_KEYS if k not in keys]
    if missing:
        raise BadInput(f"missing key(s) {', '.join(missing)}", source=str(path),
                       fix=f"define {', '.join(missing)} (see the comments in {CONFIG_FILE})")
    zipped = {k for group in config.zip_keys or [] for k in group}
    cuda_keys = {"cuda_compiler_version", "mmcv_arch_list", "arch_tag"}
    if not cuda_keys <= zipped:
        raise BadInput("cuda_compiler_version, mmcv_arch_list and arch_tag must be zipped together",
                       source=f"{path}: zip_keys", fix="add them to one zip_keys group")
    cuda_group = next(set(g) for g in config.zip_keys or [] if "cuda_compiler_version" in g)
    for key in COMPILER_KEYS:
        if key in keys and key not in cuda_group:
            raise BadInput(f"{key} is not zipped with cuda_compiler_version", source=f"{path}: zip_keys",
                           fix=f"add {key} to cuda_compiler_version's zip_keys group, one value per row (conda-forge zips them)")
    return [dict(c) for c in combos]


def build_matrix(facts: Facts, combos: list[dict], *, source: str = CONFIG_FILE) -> list[Variant]:
    """Validate combinations against the facts; raise CheckFailed naming the first bad one."""
    problems: list[str] = []
    variants: list[Variant] = []
    for c in combos:
        v = _variant(facts, c)
        if isinstance(v, str):
            problems.append(v)
        else:
            variants.append(v)
    if problems:
        raise CheckFailed(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                          source=source, fix="edit the zipped rows so each CUDA version can build its arch set")
    variants = [_with_envs(facts, v) for v in variants]
    for gen in facts.generation:
        if not any(gen.env in v.envs for v in variants):
            raise CheckFailed(
                f"no variant serves the {gen.env} environment (CUDA {gen.cuda or 'None'}, arch {gen.compute_capability or 'cpu'})",
                source=source, fix=f"add a row with cuda_compiler_version {gen.cuda!r} and mmcv_arch_list {gen.compute_capability!r}",
            )
    return sorted(variants, key=_order)


def _order(v: Variant):
    """Python, then CUDA, then the per-generation builds by arch, the fat build last."""
    cuda = tuple(int(p) for p in v.cuda.split(".")) if v.cuda else ()
    first = min(v.targets).arch if v.targets else archmod.Arch(0, 0)
    return (tuple(int(p) for p in v.python.split(".")), cuda, v.arch_tag == FAT_TAG, first)


def _variant(facts: Facts, c: dict) -> Variant | str:
    """The combination's Variant, or the one line saying what is wrong with it."""
    raw_cuda = str(c["cuda_compiler_version"])
    cuda = None if raw_cuda in {"None", "none", ""} else raw_cuda
    tag = str(c["arch_tag"])
    raw_list = str(c["mmcv_arch_list"])
    label = f"cuda_compiler_version={cuda or 'None'} mmcv_arch_list={raw_list!r} arch_tag={tag!r}"
    stdlib = str(c["c_stdlib_version"]) if "c_stdlib_version" in c else None
    gcc = {k: str(c[k]) for k in COMPILER_KEYS if k in c}
    if len(set(gcc.values())) > 1 or len(gcc) == 1:
        return f"{label}: c_compiler_version and cxx_compiler_version must be given together and equal (got {gcc})"
    compiler = next(iter(gcc.values()), None)
    if compiler is not None and not compiler.isdigit():
        return f"{label}: c_compiler_version {compiler!r} is not a gcc major version"
    if cuda is None:
        if raw_list.lower() != "none" or tag != CPU_TAG:
            return f"{label}: the CPU variant needs mmcv_arch_list 'none' and arch_tag 'cpu'"
        return Variant(str(c["python"]), str(c["pytorch"]), None, "none", CPU_TAG, c_stdlib_version=stdlib,
                       compiler_version=compiler)
    try:
        toolkit = facts.toolkit(cuda)
        targets = archmod.parse_arch_list(raw_list, where="mmcv_arch_list")
    except BadInput as exc:
        return f"{label}: {exc.message}"
    missing = archmod.unbuildable(targets, cuda, facts)
    if missing:
        names = ", ".join(str(t.arch) for t in missing)
        return f"{label}: CUDA {cuda} cannot build {names}"
    expected = FAT_TAG if tag == FAT_TAG else arch_tag_for(targets)
    if tag != expected:
        return f"{label}: arch_tag should be {expected!r}"
    if compiler is not None and int(compiler) > toolkit.max_gcc:
        return (f"{label}: c_compiler_version {compiler}: CUDA {cuda}'s nvcc accepts gcc <= {toolkit.max_gcc} "
                "(gpus.toml [[cuda]] max_gcc)")
    return Variant(str(c["python"]), str(c["pytorch"]), cuda, archmod.format_arch_list(targets), tag,
                   c_stdlib_version=stdlib, compiler_version=compiler)


def arch_tag_for(targets) -> str:
    """`sm89` for one arch, `sm80_86` for several (the fat set is tagged 'all' by hand)."""
    archs = sorted({t.arch for t in targets})
    return "sm" + "_".join(f"{a.major}{a.minor}{a.suffix}" for a in archs)


def _with_envs(facts: Facts, v: Variant) -> Variant:
    envs = []
    for gen in facts.generation:
        if not gen.is_gpu:
            if v.cuda is None:
                envs.append(gen.env)
            continue
        if v.cuda != gen.cuda or v.arch_tag == FAT_TAG:
            continue
        cc = archmod.parse_arch(gen.compute_capability)
        if archmod.coverage(cc, v.targets).coverage is archmod.Coverage.NATIVE:
            envs.append(gen.env)
    return Variant(v.python, v.pytorch, v.cuda, v.arch_list, v.arch_tag, tuple(envs), v.c_stdlib_version,
                   v.compiler_version)


def load_matrix(facts: Facts, path: Path) -> list[Variant]:
    return build_matrix(facts, read_config(path), source=str(path))


def config_digest(path: Path) -> str:
    """Short hash of the variant config (staleness checks for locks and workflows)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


# Keys a `--variant` override may set beyond the config's own: the noarch recipes read python_min
# (`${{ python_min | default("3.11") }}`, as conda-forge's pinning sets it).
RECIPE_KEYS = ("python_min",)
_MINOR = re.compile(r"\d+\.\d+")


def check_overrides(facts: Facts, path: Path, overrides: dict[str, str], *, env: str | None,
                    option: str = "--variant") -> None:
    """`build --variant KEY=VALUE` by the matrix's rules: a key of the variant config (or one a
    recipe reads, RECIPE_KEYS), and every row the build takes (`env`'s rows; every row for None or
    "all") still a valid variant with the override in it, as `mmstack matrix` judges a row. An
    overridden arch_tag may extend the derived one (sm80ptx for 8.0+PTX) to name an experiment.
    BadInput (exit 2) on the first problem."""
    if not overrides:
        return
    combos = read_config(path)
    keys = {k for c in combos for k in c}
    unknown = sorted(set(overrides) - keys - set(RECIPE_KEYS))
    if unknown:
        raise BadInput(f"not a key of {Path(path).name}", source=f"{option} {unknown[0]}",
                       fix=f"use one of {', '.join(sorted(keys | set(RECIPE_KEYS)))}")
    for key in ("python", "python_min", "pytorch"):
        if key in overrides and not _MINOR.fullmatch(overrides[key]):
            raise BadInput(f"{overrides[key]!r} is not a version like 3.12", source=f"{option} {key}",
                           fix=f"write it like {option} {key}=3.12" if key != "pytorch" else f"write it like {option} pytorch=2.13")
    matrix = build_matrix(facts, combos, source=str(path))
    rows = [v for v in matrix if env in (None, "all") or env in v.envs]
    for row in rows:
        combo = {**row.variant_keys(), **{k: v for k, v in overrides.items() if k not in RECIPE_KEYS}}
        problem = _variant(facts, combo)
        if isinstance(problem, str) and "arch_tag" in overrides:
            derived = _variant(facts, {**combo, "arch_tag": FAT_TAG})
            if isinstance(derived, Variant) and combo["arch_tag"].startswith(arch_tag_for(derived.targets)):
                problem = derived  # the user's own name for the build, extending the derived one
        if isinstance(problem, str):
            raise BadInput(problem, source=option,
                           fix="give values `mmstack matrix` would accept for this row (CUDA known and able to build the arch list)")
