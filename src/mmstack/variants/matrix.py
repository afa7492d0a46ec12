"""conda_build_config.yaml -> a validated variant matrix.

The file is read by py-rattler-build (the same engine that builds the recipe), then every
combination is checked against the facts: CUDA known, arch set buildable by that CUDA, the
arch tag agreeing with the arch set, every GPU generation served natively.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

from mmstack.errors import BadInput, CheckFailed
from mmstack.facts import arch as archmod
from mmstack.facts.gpus import Facts

CONFIG_FILE = "conda_build_config.yaml"
COMPILER_KEYS = ("c_compiler_version", "cxx_compiler_version")
REQUIRED_KEYS = ("python", "pytorch", "cuda_compiler_version", "mmcv_arch_list", "arch_tag")
# CEP 46 (conda/ceps cep-0046.md; conda-incubator/nvidia-virtual-packages README): a per-generation
# row's host `cuda-arch <cuda_arch_min>` (run-export `cuda-arch >=<cuda_arch_min>`) and its install
# priority (build number + 100 x mmcv_priority). Optional; zipped with cuda_compiler_version when given.
CEP46_KEYS = ("cuda_arch_min", "mmcv_priority")
PRIORITY_STEP = 100
# The recipe whose context holds the base build number (`build_number: N`, raised each time the package's
# content changes at one version); meta.yaml mirrors it and tests/test_build_render.py compares both.
RECIPE_FILE = Path("recipes/mmcv/recipe.yaml")
_BASE_BUILD_NUMBER = re.compile(r"^  build_number: (\d+)\b", re.M)
FAT_TAG = "all"
CPU_TAG = "cpu"
# The subdir a row builds for: conda_build_config.yaml keeps a row for one of them by its selector
# (`# [linux64]`, `# [aarch64]`), as conda-forge's feedstocks do; linux-64 unless said.
PLATFORM = "linux-64"
PLATFORMS = ("linux-64", "linux-aarch64")


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
    # CEP 46: the compute capability the row's host `cuda-arch` pins (its lowest SASS arch); None for
    # the CPU and fat rows, and where the config has no cuda_arch_min key
    arch_min: str | None = None
    # install priority (mmcv_priority): build number = PRIORITY_STEP x priority; None without the key
    priority: int | None = None
    platform: str = PLATFORM  # the conda subdir the row builds for (linux-aarch64: cross-compiled on linux-64)
    base_build_number: int = 0  # the recipe's context build_number (recipe_build_number)

    @property
    def build_number(self) -> int:
        """The recipe's build number: its base plus 100 x priority where the row has one, else plus the
        fat +100 rule."""
        if self.priority is not None:
            return self.base_build_number + PRIORITY_STEP * self.priority
        return self.base_build_number + (PRIORITY_STEP if self.arch_tag == FAT_TAG else 0)

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
    def cuda_arch_spec(self) -> str | None:
        """The per-generation build's `__cuda_arch` run requirement, `>=10.0,<11` (recipes/mmcv renders the
        same): from its lowest SASS arch up to the next major, where plain SASS stops running (facts/arch.py's
        rule), so a machine whose `__cuda_arch` is past its SASS (GB10 12.1, Thor 11.0 beside an sm100 row)
        takes the fat build's native SASS, not this build's PTX by JIT. None for the CPU and fat rows."""
        if self.arch_min is None:
            return None
        return f">={self.arch_min},<{archmod.parse_arch(self.arch_min).major + 1}"

    def admits(self, cuda_arch: str | None) -> bool:
        """Whether a machine of this `__cuda_arch` meets the row's `cuda_arch_spec` (the fat and CPU rows
        need no `__cuda_arch`; a per-generation row needs one in its range)."""
        if self.arch_min is None:
            return True
        if cuda_arch is None:
            return False
        cc = archmod.parse_arch(cuda_arch).plain
        return archmod.parse_arch(self.arch_min).plain <= cc and cc.major < archmod.parse_arch(self.arch_min).major + 1

    @property
    def key(self) -> str:
        """A stable id (CI cache keys, job names); an aarch64 row's ends in its platform."""
        key = f"py{self.python.replace('.', '')}-{self.build_string_prefix}-pytorch{self.pytorch}"
        return key if self.platform == PLATFORM else f"{key}-{self.platform}"

    def as_dict(self) -> dict:
        return {
            "key": self.key,
            "python": self.python,
            "pytorch": self.pytorch,
            "cuda_compiler_version": self.cuda or "None",
            "mmcv_arch_list": self.arch_list,
            "arch_tag": self.arch_tag,
            "build_string_prefix": self.build_string_prefix,
            "cuda_arch_min": self.arch_min or "none",
            "cuda_arch": self.cuda_arch_spec,
            "build_number": self.build_number,
            "envs": list(self.envs),
            "target_platform": self.platform,
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
        if self.priority is not None:
            keys["cuda_arch_min"] = self.arch_min or "none"
            keys["mmcv_priority"] = str(self.priority)
        return keys


def serving_row(rows: list[Variant], cuda_arch: str | None) -> Variant | None:
    """The CUDA row a solver installs on a machine of this `__cuda_arch` (rows of one platform, of CUDA
    majors its driver takes): of those whose `__cuda_arch` requirement it meets (Variant.admits; the fat
    row needs none), the highest build number (base + 100 x mmcv_priority), of equals the oldest CUDA (the
    lowest driver floor). The one model of the recipe's CEP 46 ranking; None where no CUDA row fits."""
    fits = [v for v in rows if v.cuda is not None and v.admits(cuda_arch)]
    if not fits:
        return None
    return min(fits, key=lambda v: (-v.build_number, tuple(int(p) for p in (v.cuda or "0").split("."))))


def read_config(path: Path, target_platform: str = PLATFORM) -> list[dict]:
    """Read the file with py-rattler-build for a target subdir (its selectors keep that platform's
    rows); return its combinations as plain dicts."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path} not found", fix="run from the repository root or give it as --root DIR (`mmstack matrix`: --config PATH)")
    try:
        from rattler_build import JinjaConfig, PlatformConfig, RattlerBuildError, VariantConfig
    except ImportError:
        raise BadInput("py-rattler-build is not installed", fix="pip install 'mmstack[build]'") from None
    if target_platform not in PLATFORMS:
        raise BadInput(f"no variants for target platform {target_platform!r}", source="--target-platform",
                       fix=f"use one of {', '.join(PLATFORMS)}")
    try:
        jinja = JinjaConfig(platform=PlatformConfig(target_platform=target_platform))
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
    for key in (*COMPILER_KEYS, *CEP46_KEYS):
        if key in keys and key not in cuda_group:
            raise BadInput(f"{key} is not zipped with cuda_compiler_version", source=f"{path}: zip_keys",
                           fix=f"add {key} to cuda_compiler_version's zip_keys group, one value per row (conda-forge zips them)")
    return [dict(c) for c in combos]


def build_matrix(facts: Facts, combos: list[dict], *, source: str = CONFIG_FILE,
                 target_platform: str = PLATFORM, base_build_number: int = 0) -> list[Variant]:
    """Validate combinations against the facts; raise CheckFailed naming the first bad one. Every
    generation environment of `target_platform` (gpus.toml [[generation]] platform) must be served."""
    problems: list[str] = []
    variants: list[Variant] = []
    for c in combos:
        v = _variant(facts, c)
        if isinstance(v, str):
            problems.append(v)
        else:
            variants.append(dataclasses.replace(v, platform=target_platform, base_build_number=base_build_number))
    if problems:
        raise CheckFailed(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                          source=source, fix="edit the zipped rows so each CUDA version can build its arch set")
    admitted = _admits_without_sass(facts, variants)
    if admitted:
        raise CheckFailed(admitted, source=source,
                          fix="give that GPU a row of its own arch, or leave it to the fat row (which holds its SASS)")
    order = _priority_order(variants)
    if order:
        raise CheckFailed(order, source=source,
                          fix="rank mmcv_priority cpu < fat < per-generation rows, rising with cuda_arch_min")
    variants = [_with_envs(facts, v) for v in variants]
    for gen in facts.generation:
        if gen.platform != target_platform:
            continue
        if not any(gen.env in v.envs for v in variants):
            raise CheckFailed(
                f"no variant serves the {gen.env} environment (CUDA {gen.cuda or 'None'}, arch {gen.compute_capability or 'cpu'})",
                source=source, fix=f"add a row with cuda_compiler_version {gen.cuda!r} and mmcv_arch_list {gen.compute_capability!r}",
            )
    return sorted(variants, key=_order)


def _priority_order(variants: list[Variant]) -> str:
    """CEP 46's ranking, where the rows carry mmcv_priority: a machine without `__cuda` takes the CPU
    build, one with `__cuda` but no `__cuda_arch` the fat build (the per-generation builds need
    `__cuda_arch`), and one with `__cuda_arch` the per-generation build of the highest
    cuda_arch_min it reaches. '' when the ranking holds (or no row has a priority)."""
    rank = {id(v): v.priority for v in variants if v.priority is not None}
    if not rank:
        return ""
    if len(rank) != len(variants):
        return "mmcv_priority is given for some rows only"
    for py, cuda in sorted({(v.python, v.cuda) for v in variants if v.cuda}):
        cpu = [rank[id(v)] for v in variants if v.cuda is None and v.python == py]
        rows = [v for v in variants if v.cuda == cuda and v.python == py]
        fat = [rank[id(v)] for v in rows if v.arch_tag == FAT_TAG]
        gens = sorted((archmod.parse_arch(v.arch_min), rank[id(v)], v.arch_tag) for v in rows if v.arch_min)
        if fat and cpu and min(fat) <= max(cpu):
            return f"CUDA {cuda}: the fat build's mmcv_priority {min(fat)} is not above the CPU build's {max(cpu)}"
        for (_, p, tag), (_, q, nxt) in itertools.pairwise(gens):
            if q <= p:
                return f"CUDA {cuda}: {nxt}'s mmcv_priority {q} is not above {tag}'s {p} (a higher cuda_arch_min ranks higher)"
        low = max(cpu + fat, default=-1)
        if gens and gens[0][1] <= low:
            return f"CUDA {cuda}: {gens[0][2]}'s mmcv_priority {gens[0][1]} is not above the fat and CPU builds' {low}"
    return ""


def _admits_without_sass(facts: Facts, variants: list[Variant]) -> str:
    """A per-generation row whose `__cuda_arch` range (Variant.cuda_arch_spec) admits a GPU of its platform
    (gpus.toml: host "" or that platform) that does not run its SASS: a solver would install it there
    and the GPU would run its PTX through the JIT (a Tegra GPU inside the range: an 8.6 row on
    linux-aarch64 would take Jetson Orin, 8.7, which runs no 8.6 SASS). '' when none does."""
    for v in variants:
        if v.arch_min is None:
            continue
        sass = tuple(t for t in v.targets if t.kind == "sass")
        for gpu in facts.gpu:
            if gpu.host not in ("", v.platform) or not v.admits(gpu.compute_capability):
                continue
            cov = archmod.coverage(archmod.parse_arch(gpu.compute_capability), sass, cuda=v.cuda, facts=facts).coverage
            if cov not in (archmod.Coverage.NATIVE, archmod.Coverage.LOWER_MINOR):
                return (f"{v.key}: its __cuda_arch {v.cuda_arch_spec} admits the {gpu.name} ({gpu.compute_capability}),"
                        f" which runs none of its SASS ({v.arch_list}): a solver would install it there")
    return ""


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
    if ("cuda_arch_min" in c) != ("mmcv_priority" in c):
        return f"{label}: cuda_arch_min and mmcv_priority must be given together"
    raw_min = str(c.get("cuda_arch_min", "none"))
    arch_min = None if raw_min.lower() == "none" else raw_min
    raw_priority = str(c["mmcv_priority"]) if "mmcv_priority" in c else None
    if raw_priority is not None and not raw_priority.isdigit():
        return f"{label}: mmcv_priority {raw_priority!r} is not a whole number"
    priority = int(raw_priority) if raw_priority is not None else None
    if cuda is None:
        if raw_list.lower() != "none" or tag != CPU_TAG:
            return f"{label}: the CPU variant needs mmcv_arch_list 'none' and arch_tag 'cpu'"
        if arch_min is not None:
            return f"{label}: the CPU variant needs cuda_arch_min 'none'"
        return Variant(str(c["python"]), str(c["pytorch"]), None, "none", CPU_TAG, c_stdlib_version=stdlib,
                       compiler_version=compiler, priority=priority)
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
    problem = _cep46_problem(targets, tag, arch_min, priority)
    if problem:
        return f"{label}: {problem}"
    return Variant(str(c["python"]), str(c["pytorch"]), cuda, archmod.format_arch_list(targets), tag,
                   c_stdlib_version=stdlib, compiler_version=compiler, arch_min=arch_min, priority=priority)


def _cep46_problem(targets, tag: str, arch_min: str | None, priority: int | None) -> str:
    """A CUDA row's cuda_arch_min against its arch list: 'none' for the fat row; for a per-generation
    row its lowest SASS arch, with PTX for its highest arch (CEP 46, "Notes on usage": `__cuda_arch`
    is the minimum over the GPUs, so newer GPUs beside it run the build through that PTX)."""
    if priority is None:
        return ""
    if tag == FAT_TAG:
        return "" if arch_min is None else "the fat variant needs cuda_arch_min 'none' (it runs without `__cuda_arch`)"
    sass = sorted(t.arch for t in targets if t.kind == "sass")
    expected = str(sass[0].plain) if sass else None
    if arch_min != expected:
        return f"cuda_arch_min should be {expected!r}, the lowest arch the row holds SASS for"
    top = max(t.arch for t in targets)
    if not any(t.kind == "ptx" and t.arch == top for t in targets):
        return f"the per-generation row needs PTX for its highest arch ({top}+PTX): CEP 46's notes on usage"
    return ""


def arch_tag_for(targets) -> str:
    """`sm89` for one arch, `sm80_86` for several (the fat set is tagged 'all' by hand)."""
    archs = sorted({t.arch for t in targets})
    return "sm" + "_".join(f"{a.major}{a.minor}{a.suffix}" for a in archs)


def _with_envs(facts: Facts, v: Variant) -> Variant:
    envs = []
    for gen in facts.generation:
        if gen.platform != v.platform:
            continue
        if not gen.is_gpu:
            if v.cuda is None:
                envs.append(gen.env)
            continue
        if v.cuda != gen.cuda or v.arch_tag == FAT_TAG:
            continue
        cc = archmod.parse_arch(gen.compute_capability)
        if archmod.coverage(cc, v.targets).coverage is archmod.Coverage.NATIVE:
            envs.append(gen.env)
    return dataclasses.replace(v, envs=tuple(envs))


def load_matrix(facts: Facts, path: Path, target_platform: str = PLATFORM) -> list[Variant]:
    return build_matrix(facts, read_config(path, target_platform), source=str(path), target_platform=target_platform,
                        base_build_number=recipe_build_number(path))


def recipe_build_number(config: Path) -> int:
    """The base build number of the mmcv recipe beside a variant config (RECIPE_FILE under the config's
    folder). A config with no recipe beside it (one checked alone) counts from 0; a recipe without the
    field is BadInput."""
    recipe = Path(config).parent / RECIPE_FILE
    if not recipe.is_file():
        return 0
    found = _BASE_BUILD_NUMBER.findall(recipe.read_text(encoding="utf-8"))
    if len(found) != 1:
        raise BadInput(f"{'no' if not found else 'more than one'} context `build_number: N` line",
                       source=f"{recipe}: context.build_number",
                       fix="keep one `  build_number: N` under context: (the base the matrix adds 100 x mmcv_priority to)")
    return int(found[0])


def config_digest(path: Path) -> str:
    """Short hash of the variant config (staleness checks for locks and workflows)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


# Keys a `--variant` override may set beyond the config's own: the noarch recipes read python_min
# (`${{ python_min | default("3.10") }}`, as conda-forge's pinning sets it).
RECIPE_KEYS = ("python_min",)
_MINOR = re.compile(r"\d+\.\d+")


def check_overrides(facts: Facts, path: Path, overrides: dict[str, str], *, env: str | None,
                    option: str = "--variant", target_platform: str = PLATFORM) -> None:
    """`build --variant KEY=VALUE` by the matrix's rules: a key of the variant config (or one a
    recipe reads, RECIPE_KEYS), and every row the build takes (`env`'s rows; every row for None or
    "all") still a valid variant with the override in it, as `mmstack matrix` judges a row. An
    overridden arch_tag may extend the derived one (sm80ptx for 8.0+PTX) to name an experiment.
    BadInput (exit 2) on the first problem."""
    if not overrides:
        return
    combos = read_config(path, target_platform)
    keys = {k for c in combos for k in c}
    unknown = sorted(set(overrides) - keys - set(RECIPE_KEYS))
    if unknown:
        raise BadInput(f"not a key of {Path(path).name}", source=f"{option} {unknown[0]}",
                       fix=f"use one of {', '.join(sorted(keys | set(RECIPE_KEYS)))}")
    for key in ("python", "python_min", "pytorch"):
        if key in overrides and not _MINOR.fullmatch(overrides[key]):
            raise BadInput(f"{overrides[key]!r} is not a version like 3.12", source=f"{option} {key}",
                           fix=f"write it like {option} {key}=3.12" if key != "pytorch" else f"write it like {option} pytorch=2.13")
    matrix = build_matrix(facts, combos, source=str(path), target_platform=target_platform,
                          base_build_number=recipe_build_number(path))
    rows = [v for v in matrix if env in (None, "all") or env in v.envs]
    for row in rows:
        combo = {**row.variant_keys(), **{k: v for k, v in overrides.items() if k not in RECIPE_KEYS}}
        problem = _variant(facts, combo)
        if isinstance(problem, str) and "arch_tag" in overrides:
            # the user's own tag names an experiment: judged for buildability, not CEP 46's ranking
            derived = _variant(facts, {k: v for k, v in {**combo, "arch_tag": FAT_TAG}.items() if k not in CEP46_KEYS})
            if isinstance(derived, Variant) and combo["arch_tag"].startswith(arch_tag_for(derived.targets)):
                problem = derived  # the user's own name for the build, extending the derived one
        if isinstance(problem, str):
            raise BadInput(problem, source=option,
                           fix="give values `mmstack matrix` would accept for this row (CUDA known and able to build the arch list)")
