"""Render and build recipes into a local channel (py-rattler-build).

`run_build` renders a recipe over the variant matrix, keeps the variants that serve the requested
environment, builds each with its tests (py-rattler-build skips tests unless asked), and only when
every variant succeeded moves the packages into the channel and re-indexes it (channel.py: atomic,
locked). A failed build raises BuildFailed and leaves the channel as it was.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmstack import report
from mmstack.builder import channel as channelmod
from mmstack.builder.build_folder import build_folder
from mmstack.builder.progress import BuildWatch
from mmstack.errors import BadInput, BuildFailed

ALL = "all"  # env=ALL: every variant of the matrix
DEFAULT_CHANNELS = ("conda-forge",)
TARGET_PLATFORM = "linux-64"
# The subdirs the matrix has rows for (conda_build_config.yaml's `# [linux64]` / `# [aarch64]`
# selectors). linux-aarch64 is cross-compiled on a linux-64 machine, as conda-forge's
# pytorch-cpu-feedstock does (conda-forge.yml build_platform linux_aarch64: linux_64).
TARGET_PLATFORMS = ("linux-64", "linux-aarch64")
BUILD_PLATFORM = "linux-64"
RECIPE_FILE = "recipe.yaml"
# The recipes `mmstack build` builds, in order: mmcv's tests run `mmstack verify` and mmdet's
# `python -m mmstack.verify.train_detector` on the mmcv just built, so mmstack goes first, mmdet last;
# mmdet requires our mmengine (safe checkpoint loading), whose own tests run mmstack's checkpoint cycle.
STACK = ("mmstack", "mmengine", "mmcv", "mmdet")
# Variant keys that pick a build (the rest follow: c_stdlib_version is zipped with cuda_compiler_version).
SELECT_KEYS = ("python", "pytorch", "cuda_compiler_version", "mmcv_arch_list", "arch_tag")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuiltPackage:
    path: Path  # where it lies in the channel
    name: str
    version: str
    build_string: str
    variant: dict = field(default_factory=dict)
    seconds: float = 0.0
    # what its recipe tests reported through report.result_line (upstream's pytest counts and skips)
    test_results: tuple[dict, ...] = ()

    def as_dict(self) -> dict:
        return {"path": str(self.path), "name": self.name, "version": self.version,
                "build_string": self.build_string, "variant": self.variant, "seconds": round(self.seconds, 1),
                "test_results": list(self.test_results)}


# A variant key's value(s): one string or number, or a list of them (as the config's YAML has them).
Override = str | int | float | Sequence[str | int | float]


def engine_errors() -> tuple[type[Exception], ...]:
    """What py-rattler-build raises for a refusal: its typed errors (BuildError, RecipeParseError,
    VariantError, ChannelError, ... all RattlerBuildError) and OSError (a missing file). Anything
    else is a bug of ours and surfaces as a traceback. Imported lazily (the `build` extra)."""
    from rattler_build import RattlerBuildError

    return (RattlerBuildError, OSError)


def platform_config(target_platform: str = TARGET_PLATFORM) -> Any:
    """rattler_build.PlatformConfig for a target subdir, built on linux-64 (a cross-compile for aarch64)."""
    from rattler_build import PlatformConfig

    if target_platform not in TARGET_PLATFORMS:
        raise BadInput(f"no variants for target platform {target_platform!r}", source="--target-platform",
                       fix=f"use one of {', '.join(TARGET_PLATFORMS)}")
    return PlatformConfig(target_platform=target_platform, host_platform=target_platform,
                          build_platform=BUILD_PLATFORM)


def load_variant_config(path: str | os.PathLike[str], overrides: Mapping[str, Override] | None = None,
                        *, target_platform: str = TARGET_PLATFORM) -> Any:
    """conda_build_config.yaml (selectors and all) as rattler-build reads it, plus overrides.

    An override replaces a key's values (a str is one value). zip_keys stay as the file has them:
    one value for a zipped key (c_compiler_version zipped with cuda_compiler_version, say) is
    repeated down the whole group; a list must then have the group's length.
    """
    from rattler_build import JinjaConfig, VariantConfig

    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path} not found", source=str(path), fix="pass the variant config (conda_build_config.yaml)")
    platform = platform_config(target_platform)
    try:
        jinja = JinjaConfig(platform=platform)
        config = VariantConfig.from_conda_build_config(str(path), jinja)
    except engine_errors() as exc:  # the engine's refusal to read the config is bad input, said in one line
        raise BadInput(f"cannot read variant config: {_first_line(exc)}", source=str(path), fix="fix the YAML") from None
    if overrides:
        values = {k: [str(v)] if isinstance(v, (str, int, float)) else [str(x) for x in v] for k, v in overrides.items()}
        for group in config.zip_keys or []:
            length = len(config[group[0]])
            for key in set(group) & set(values):
                if len(values[key]) == 1:
                    values[key] *= length
                elif len(values[key]) != length:
                    raise BadInput(f"override {key}={values[key]} has {len(values[key])} values, its zip group {length}",
                                   source=str(path), fix="give one value or one per row of the zip group")
        config = config.merge(VariantConfig(values))
    return config


def render(
    *,
    recipe_dir: str | os.PathLike[str],
    variant_config: str | os.PathLike[str] | Any,
    overrides: Mapping[str, Override] | None = None,
    select: Mapping[str, str] | None = None,
    target_platform: str = TARGET_PLATFORM,
) -> list:
    """Rendered variants (rattler_build.RenderedVariant) of the recipe, filtered by `select`.

    `variant_config` is a path or a rattler_build.VariantConfig; `select` keeps the variants whose
    keys equal the given values (strings, as in the variant config: {"arch_tag": "sm89"}).
    `target_platform` picks the config's rows by its selectors and the compilers' subdir
    (gcc_linux-aarch64, cuda-nvcc_linux-aarch64 for linux-aarch64, built on linux-64).
    """
    from rattler_build import RenderConfig, Stage0Recipe

    recipe_path = _recipe_file(recipe_dir)
    config = (load_variant_config(variant_config, overrides, target_platform=target_platform)
              if isinstance(variant_config, (str, os.PathLike)) else variant_config)
    platform = platform_config(target_platform)
    try:
        recipe = Stage0Recipe.from_file(recipe_path)
        rendered = recipe.render(config, RenderConfig(platform=platform))
    except engine_errors() as exc:  # a render error is the recipe's or config's, said in one line
        raise BadInput(f"cannot render recipe: {_render_error(exc)}", source=str(recipe_path),
                       fix="fix the recipe or add the missing key to the variant config") from None
    if select:
        rendered = [v for v in rendered if _matches(v.variant, select)]
    return rendered


def selection_for_env(env: str, config_path: str | os.PathLike[str], *, ignore: Sequence[str] = (),
                      target_platform: str = TARGET_PLATFORM) -> list[dict]:
    """The variant keys of the builds an environment takes (variants.py maps envs to rows).

    `ignore` drops keys that an override replaces (their matrix values no longer apply).
    """
    from mmstack.facts import gpus as facts
    from mmstack.variants import matrix as variants

    matrix = variants.load_matrix(facts.load(), Path(config_path), target_platform)
    rows = [v for v in matrix if env == ALL or env in v.envs]
    if not rows:
        known = sorted({e for v in matrix for e in v.envs})
        if not known:  # linux-aarch64's rows serve no environment yet: they are picked by their keys
            raise BadInput(f"no {target_platform} row serves an environment ({env!r} asked for)", source="--env",
                           fix="pass --all, with --variant KEY=VALUE for the keys of the rows you want "
                               f"(`mmstack matrix --target-platform {target_platform}`)")
        raise BadInput(f"no variant serves environment {env!r}", source=str(config_path),
                       fix=f"use one of {', '.join(known)} or {ALL!r}")
    return [{k: v for k, v in row.variant_keys().items() if k not in ignore} for row in rows]


def run_build(
    *,
    recipe_dir: str | os.PathLike[str],
    variant_config: str | os.PathLike[str],
    channel_dir: str | os.PathLike[str],
    env: str | None = None,
    select: Mapping[str, str] | None = None,
    overrides: Mapping[str, Override] | None = None,
    extra_channels: Sequence[str | os.PathLike[str]] = DEFAULT_CHANNELS,
    test: bool = True,
    progress: Progress | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    keep_build: bool = False,
    log_file: str | os.PathLike[str] | None = None,
    watch: BuildWatch | None = None,
    target_platform: str = TARGET_PLATFORM,
) -> list[BuiltPackage]:
    """Build the recipe's variants that serve `env` (None or "all": every variant) into `channel_dir`.

    Dependencies resolve from the channel itself first (so an earlier build, e.g. the mmstack
    package the tests need, is found), then `extra_channels`. `work_dir` holds the build tree
    (default: the system temp dir), at one path for every build there (build_folder.py: so two
    builds of the same sources embed the same host prefix); it is removed afterwards unless
    `keep_build`, and a kept one is emptied by the next build in that work folder.
    `log_file` receives every line rattler-build logs (build script and test output), appended.
    `watch` (progress.BuildWatch) sees every logged line too and shows each build's progress.
    Overrides can make several rows of the matrix the same build: each build string is built once.
    `target_platform` picks the config's rows for that subdir and builds them there: linux-aarch64 is
    cross-compiled on this linux-64 machine (the rendered variant carries its PlatformConfig into
    py-rattler-build's build), its test section skipped (an aarch64 package does not run here).
    """
    from rattler_build import ToolConfiguration

    say = progress or (lambda _msg: None)
    cross = target_platform != BUILD_PLATFORM
    rendered = render(recipe_dir=recipe_dir, variant_config=variant_config, overrides=overrides, select=select,
                      target_platform=target_platform)
    if env and env != ALL:
        wanted = selection_for_env(env, variant_config, ignore=tuple(overrides or ()), target_platform=target_platform)
        rendered = [v for v in rendered if any(_matches(v.variant, w) for w in wanted)]
    if not rendered:
        raise BadInput("no variant of the recipe matches the selection", source=str(variant_config),
                       fix="check --env / the selection against `mmstack matrix`")
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for v in rendered:
        ident = (v.recipe.package.name, str(v.recipe.package.version), v.recipe.build.string)
        if ident not in seen:
            seen.add(ident)
            unique.append(v)
    rendered = unique

    channel_path = Path(channel_dir).expanduser().resolve()
    channels = [as_channel_url(c) for c in extra_channels]
    if channel_path.is_dir():
        channels.insert(0, channelmod.ensure_channel(channel_path).as_uri())
    tool = ToolConfiguration(test_strategy="native" if test and not cross else "skip", keep_build=keep_build)
    log_fh = open(log_file, "a", encoding="utf-8") if log_file else None
    folder_stack = ExitStack()  # the build folder (build_folder.py), released when the builds end
    callback = EngineEvents(say, log_fh, watch)

    built: list[tuple[Path, Any, float, tuple[dict, ...]]] = []  # (package, BuildResult, seconds, test results)
    try:
        out, fixed = folder_stack.enter_context(build_folder(work_dir, keep=keep_build, say=say))
        for i, variant in enumerate(rendered, 1):
            name = f"{variant.recipe.package.name}-{variant.recipe.package.version}-{variant.recipe.build.string}"
            say(f"[{i}/{len(rendered)}] building {name}")
            evict_cached_package(name)
            callback.results.clear()
            started = time.monotonic()
            if watch:
                watch.start(name)
            try:
                result = variant.run_build(tool_config=tool, output_dir=out, channels=channels,
                                           progress_callback=callback, no_build_id=fixed)
            except engine_errors() as exc:  # the engine's failure becomes BuildFailed with its log
                raise _build_failed(name, exc, Path(work_dir or tempfile.gettempdir()),
                                    target_platform=target_platform, channels=channels) from None
            finally:
                if watch:
                    watch.stop()
            seconds = time.monotonic() - started
            say(f"[{i}/{len(rendered)}] built {name} in {seconds:.0f}s")
            tested = tuple(callback.results)
            for doc in tested:
                say(f"[{i}/{len(rendered)}] {name}: {describe_result(doc)}")
            built.extend((Path(p), result, seconds, tested) for p in result.packages)
        landed = channelmod.add_packages(channel_path, [p for p, _, _, _ in built])
    finally:
        folder_stack.close()
        if log_fh:
            log_fh.close()
    return [
        BuiltPackage(path=dest, name=result.name, version=result.version, build_string=result.build_string,
                     variant=dict(result.variant), seconds=seconds, test_results=tested)
        for dest, (_, result, seconds, tested) in zip(landed, built, strict=True)
    ]


def describe_result(doc: dict) -> str:
    """One line for a recipe test's result document (upstream's pytest summary)."""
    if doc.get("kind") == "upstream-tests":
        c = doc.get("counts", {})
        return (f"upstream {doc.get('path')}: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
                f"{c.get('skipped', 0)} skipped ({len(doc.get('skip_reasons', []))} skip reasons)")
    return f"{doc.get('kind')}: " + ", ".join(sorted(k for k in doc if k != "kind"))


def run_stack_build(
    *,
    root: str | os.PathLike[str] = ".",
    channel_dir: str | os.PathLike[str],
    env: str | None = None,
    recipes: Sequence[str | os.PathLike[str]] = STACK,
    variant_config: str | os.PathLike[str] | None = None,
    **kwargs,
) -> list[BuiltPackage]:
    """`mmstack build`: each recipe in turn (names under root/recipes, or recipe directories).

    Each recipe lands in the channel before the next one builds against it; a failure stops the
    sequence and leaves that recipe's packages out (earlier recipes stay). Other keyword
    arguments go to run_build.
    """
    root = Path(root)
    config = Path(variant_config) if variant_config else root / "conda_build_config.yaml"
    built: list[BuiltPackage] = []
    for recipe in recipes:
        built += run_build(recipe_dir=recipe_path(root, recipe), variant_config=config, channel_dir=channel_dir,
                           env=env, **kwargs)
    return built


def package_cache_dir() -> Path:
    """rattler's package cache (where rattler-build extracts the packages its environments use)."""
    root = os.environ.get("RATTLER_CACHE_DIR")
    if root:
        return Path(root) / "pkgs"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rattler" / "cache" / "pkgs"


def evict_cached_package(dist_name: str) -> None:
    """Drop a cached extraction of `name-version-build` before that package is built again.

    rattler's cache is keyed by that file name: a rebuilt package with the same build string (a
    noarch mmstack after a code change) would otherwise be tested from the old extraction (seen:
    the recipe test imported modules the new package no longer has).
    """
    cached = package_cache_dir() / dist_name
    shutil.rmtree(cached, ignore_errors=True)
    cached.with_name(dist_name + ".lock").unlink(missing_ok=True)


def recipe_path(root: str | os.PathLike[str], recipe: str | os.PathLike[str]) -> Path:
    """A recipe name (`mmcv`: root/recipes/mmcv) or a recipe directory."""
    return Path(recipe) if isinstance(recipe, os.PathLike) or os.sep in str(recipe) else Path(root) / "recipes" / recipe


def check_recipes(root: str | os.PathLike[str]) -> str:
    """`mmstack check`: every recipe of the stack renders, and mmcv renders exactly one build per
    variant of the matrix with that variant's build string (`cuda129_sm89_py311_h…`)."""
    import json

    from mmstack.builder import recipe_gate
    from mmstack.errors import CheckFailed
    from mmstack.facts import gpus as facts
    from mmstack.variants import matrix as variants

    root = Path(root)
    config = root / variants.CONFIG_FILE
    matrix = variants.load_matrix(facts.load(), config)
    notes = []
    for name in STACK:
        rendered = render(recipe_dir=root / "recipes" / name, variant_config=config)
        patched = recipe_gate.check_patches(root / "recipes" / name, rendered[0].recipe.to_dict().get("source") or []
                                            ) if rendered else ""
        if name != "mmcv":
            notes.append(f"{name}: {len(rendered)}" + (f" ({patched})" if patched else ""))
            continue
        strings = [v.recipe.build.string for v in rendered]
        # the build string names no pytorch (conda-forge's form): a row is its prefix and its pytorch
        torch = [str(dict(v.variant).get("pytorch", "")) for v in rendered]
        for v in matrix:
            want = v.build_string_glob[:-1]  # "cuda129_sm89_py311_"
            hits = [s for s, pt in zip(strings, torch, strict=True) if s.startswith(want) and pt in ("", v.pytorch)]
            if len(hits) != 1:
                raise CheckFailed(f"{len(hits)} rendered builds match variant {v.key} ({want}*), expected 1",
                                  source=str(root / "recipes" / "mmcv" / RECIPE_FILE),
                                  fix="derive the build string from arch_tag and cuda_compiler_version in the recipe's context")
        if len(strings) != len(matrix):
            raise CheckFailed(f"renders {len(strings)} builds for {len(matrix)} matrix variants",
                              source=str(root / "recipes" / "mmcv" / RECIPE_FILE),
                              fix="use only conda_build_config.yaml's keys as variant keys in the recipe")
        notes.append(f"mmcv: {len(strings)} (one per variant, build strings match; {patched})")
        notes.append(_check_conda_build_render(root, strings))
        fixture = root / CONDA_BUILD_RENDER
        notes.append(recipe_gate.check_run_and_tests(
            root / "recipes" / "mmcv" / RECIPE_FILE, [(v.recipe.build.string, v.recipe.to_dict()) for v in rendered],
            json.loads(fixture.read_text()) if fixture.is_file() else None))
        notes.append(_check_cross(root, config, facts.load()))
    return "rendered " + ", ".join(n for n in notes if n)


def _check_cross(root: Path, config: Path, facts_: Any) -> str:
    """The config's rows for the other target platforms (linux-aarch64): each renders to exactly one
    mmcv build with its build string, the rows agree with data/arm_hosts.toml, and the real
    conda-build's recorded render of them (where present) has the same builds."""
    from mmstack.errors import CheckFailed
    from mmstack.variants import arm_hosts, matrix as variants

    notes = []
    for target in TARGET_PLATFORMS[1:]:
        matrix = variants.load_matrix(facts_, config, target)
        if not matrix:
            continue
        wrong = arm_hosts.problems(matrix, facts_)
        if wrong:
            raise CheckFailed(wrong[0], source=str(config),
                              fix=f"keep the `# [aarch64]` rows to conda-forge's aarch64 builds (src/mmstack/data/{arm_hosts.ARM_FILE})")
        strings = [v.recipe.build.string for v in
                   render(recipe_dir=root / "recipes" / "mmcv", variant_config=config, target_platform=target)]
        for v in matrix:
            want = v.build_string_glob[:-1]
            if sum(s.startswith(want) for s in strings) != 1 or len(strings) != len(matrix):
                raise CheckFailed(f"{target}: {len(strings)} rendered builds for {len(matrix)} rows, variant {v.key} "
                                  f"({want}*) not exactly once", source=str(root / "recipes" / "mmcv" / RECIPE_FILE),
                                  fix="derive the build string from arch_tag and cuda_compiler_version in the recipe's context")
        cb = _check_conda_build_render(root, strings, CONDA_BUILD_RENDERS[target])
        notes.append(f"mmcv for {target}: {len(strings)}" + (f" ({cb})" if cb else ""))
    return ", ".join(notes)


# The real conda-build's render of recipes/mmcv/meta.yaml (made by the script beside it; conda-build
# is no dependency of mmstack). Present in a checkout of the repository, not in an installed package.
CONDA_BUILD_RENDER = Path("tests") / "data" / "conda_build_render" / "render.json"
CONDA_BUILD_RENDERS = {"linux-aarch64": CONDA_BUILD_RENDER.with_name("render_linux-aarch64.json")}
_HASH = re.compile(r"_h[0-9a-f]{7}_")


def _check_conda_build_render(root: Path, strings: list[str], rel: Path = CONDA_BUILD_RENDER) -> str:
    """meta.yaml (conda-build) against recipe.yaml (rattler-build): same builds, same strings."""
    import hashlib
    import json

    from mmstack.errors import CheckFailed

    fixture = root / rel
    if not fixture.is_file():
        return ""
    doc = json.loads(fixture.read_text())
    for rel, digest in doc["inputs_sha256"].items():
        if hashlib.sha256((root / rel).read_bytes()).hexdigest() != digest:
            raise CheckFailed(f"{rel} changed since conda-build's render was recorded", source=str(fixture),
                              fix=f"regenerate it: {doc['generated_by']} (needs conda-build)")
    theirs = sorted(_HASH.sub("_h#_", v["build_string"]) for v in doc["variants"])
    ours = sorted(_HASH.sub("_h#_", s) for s in strings)
    if theirs != ours:
        only = sorted(set(theirs) ^ set(ours))[:3]
        raise CheckFailed(f"conda-build renders meta.yaml into {len(theirs)} builds, rattler-build recipe.yaml into "
                          f"{len(ours)}; differing build strings: {', '.join(only)}", source=str(fixture),
                          fix="keep recipes/mmcv/meta.yaml and recipe.yaml in step, then regenerate the render")
    return f"meta.yaml: {len(theirs)} per conda-build {doc['conda_build']} (same build strings)"


# ---------------------------------------------------------------------------------------------


def _recipe_file(recipe_dir: str | os.PathLike[str]) -> Path:
    path = Path(recipe_dir)
    if path.is_dir():
        path = path / RECIPE_FILE
    if not path.is_file():
        raise BadInput(f"{path} not found", source=str(path), fix="pass a recipe directory holding recipe.yaml")
    return path


def _matches(variant: Mapping[str, object], select: Mapping[str, object]) -> bool:
    """A key the recipe does not use for this variant (arch_tag of the CPU build) cannot differ."""
    return all(str(variant[k]) == str(v) for k, v in select.items() if k in variant)


def as_channel_url(c: str | os.PathLike[str]) -> str:
    text = os.fspath(c)
    if "://" in text or not (os.sep in text or Path(text).exists()):
        return text  # a URL or a channel name like conda-forge
    return channelmod.ensure_channel(text).as_uri()


_SHA_MISMATCH = re.compile(r"(sha256|md5) checksum validation failed for (.*)")
_EXPECTED = re.compile(r"expected:\s*([0-9a-f]+)")
_ACTUAL = re.compile(r"actual:\s*([0-9a-f]+)")
_ERROR_LINE = re.compile(r"(?i)\berror\b|fatal|no such file|not found|undefined reference|cannot|failed to")


def _build_failed(name: str, exc: Exception, log_dir: Path, *, target_platform: str = TARGET_PLATFORM,
                  channels: Sequence[str] = ()) -> BuildFailed:
    """One line saying what failed, from rattler-build's multi-line error and captured log."""
    text = str(exc)
    log = [str(line) for line in (getattr(exc, "log", None) or [])]
    sha = _SHA_MISMATCH.search(text)
    if sha:
        expected, actual = _EXPECTED.search(text), _ACTUAL.search(text)
        got = f": recipe says {expected.group(1)[:12]}..., download is {actual.group(1)[:12]}..." if expected and actual else ""
        return BuildFailed(f"{name}: source {sha.group(1)} mismatch{got}",
                           fix="check source.url and source.sha256 in recipe.yaml (a re-released sdist changes its hash)")
    log_file: Path | None = log_dir / f"mmstack-build-{name}.log"
    try:
        log_file.write_text("\n".join([*log, "", text]) + "\n")  # type: ignore[union-attr]
    except OSError:
        log_file = None
    summary = text.strip().splitlines()[0].removeprefix("PyRattlerBuildError: ") if text.strip() else type(exc).__name__
    if "Failed to resolve dependencies" in summary:
        block = _last_solve(log)
        if block and target_platform != BUILD_PLATFORM:
            failed = _cross_solve_failed(name, block, target_platform, channels)
            if failed:
                return failed
        unsolvable = _explain_solve(log)
        if unsolvable:
            specs, channels, why = unsolvable
            return BuildFailed(f"{name}: cannot solve an environment of the build: {why} (specs: {', '.join(specs)}; "
                               f"channels: {', '.join(channels)})",
                               fix="add the missing package to a --source-channel, or set the variant so the spec "
                                   "exists there (e.g. --variant python_min=3.12 for a channel without 3.10)")
    # the script's own last error line, before rattler-build's "Script failed with status N"
    cut = next((i for i, line in enumerate(log) if line.startswith("Script failed with status")), len(log))
    before = log[:cut]
    # build.sh's own `die` message ("mmstack build.sh: ERROR: ...") says what to edit: prefer it
    stated = [line.strip() for line in before if "ERROR:" in line]
    errors = stated or [line.strip() for line in before if _ERROR_LINE.search(line)]
    detail = f"{summary}: {errors[-1][:300]}" if errors else summary
    where = f"the full log is {log_file}" if log_file else "rerun with keep_build=True and read the build log"
    return BuildFailed(f"{name}: {detail}", fix=f"{where}; the build tree is kept with --keep-build")


@dataclass(frozen=True)
class SolveBlock:
    """What rattler-build logs before it solves an environment: the subdir, channels and specs."""

    platform: str | None
    channels: list[str]
    specs: list[str]


_PLATFORM_LINE = re.compile(r"^Platform:\s*(\S+)")


def _last_solve(log: list[str]) -> SolveBlock | None:
    """The last environment rattler-build tried to solve, with the subdir its `Platform:` line names."""
    blocks = _solve_blocks(log)
    if not blocks:
        return None
    channels, specs = blocks[-1]
    platforms, current = [], None  # the subdir of each block: the `Platform:` line logged before its `Channels:`
    for line in log:
        m = _PLATFORM_LINE.match(line.strip())
        if m:
            current = m.group(1)
        elif line.strip() == "Channels:":
            platforms.append(current)
    return SolveBlock(platforms[-1] if platforms else None, channels, specs)


def _cross_solve_failed(name: str, block: SolveBlock, target_platform: str, named: Sequence[str]) -> BuildFailed | None:
    """A cross build's failed solve in one line: which environment (the build machine's subdir or
    the target's), and every spec no channel has a package for there; None when each spec has a
    candidate (a conflict: the solver's own explanation says it better). `named`: the channels the
    build was given (the message leaves out rattler-build's own output directory)."""
    subdir = block.platform or BUILD_PLATFORM
    missing = channelmod.missing_specs(block.specs, block.channels, subdir) if block.specs else None
    if not missing:
        return None
    env = "build" if subdir == BUILD_PLATFORM else "host"
    return BuildFailed(
        f"{name}: cannot solve the {env} environment of a {target_platform} cross build: no package for "
        f"{', '.join(missing)} in {subdir} or noarch of {', '.join(named or block.channels)}",
        fix=f"build for {target_platform} against channels with its packages and the cross compilers "
            f"(--source-channel conda-forge has both); `mmstack build` without --target-platform builds for {BUILD_PLATFORM}")


def _solve_blocks(log: list[str]) -> list[tuple[list[str], list[str]]]:
    """Each (channels, specs) block rattler-build logs before a solve, in order."""
    blocks, i = [], 0
    while i < len(log):
        if log[i].strip() == "Channels:":
            channels, specs = [], []
            i += 1
            while i < len(log) and log[i].strip().startswith("- "):
                channels.append(log[i].strip()[2:])
                i += 1
            if i < len(log) and log[i].strip() == "Specs:":
                i += 1
                while i < len(log) and log[i].strip().startswith("- "):
                    specs.append(log[i].strip()[2:])
                    i += 1
            blocks.append((channels, specs))
        else:
            i += 1
    return blocks


def _explain_solve(log: list[str]) -> tuple[list[str], list[str], str] | None:
    """The last solve rattler-build attempted, asked again with py-rattler for the solver's reason."""
    blocks = _solve_blocks(log)
    if not blocks:
        return None
    channels, specs = blocks[-1]
    why = channelmod.explain_unsolvable(specs, channels) if specs else None
    return (specs, channels, why) if why else None


_TEST_LOG = re.compile(r"(?i)tests? passed|test failed|Running .*test|Testing ")


class EngineEvents:
    """rattler-build progress events as one-line messages (all of them to `log`, if given)."""

    def __init__(self, say: Progress, log=None, watch: BuildWatch | None = None):
        self._say = say
        self._log = log
        self._watch = watch
        self.results: list[dict] = []  # report.result_line documents seen in the test output

    def _write(self, text: str) -> None:
        if self._log:
            self._log.write(f"{time.strftime('%H:%M:%S')} {text}\n")
            self._log.flush()

    def on_build_step(self, event) -> None:
        self._write(f"== {event.step_name}: {event.message}")
        self._say(f"{event.step_name}: {event.message}")

    def on_log(self, event) -> None:
        message = str(event.message).strip()
        self._write(f"[{event.level}] {message}")
        if self._watch:
            self._watch.log(message)
        doc = report.parse_result_line(message)
        if doc is not None:
            self.results.append(doc)
        if message and (event.level in ("warn", "error") or _TEST_LOG.search(message)):
            self._say(f"{event.level}: {message}" if event.level != "info" else message)

    def on_download_start(self, event) -> None:
        self._say(f"downloading {event.url}")

    def on_download_progress(self, event) -> None:
        pass

    def on_download_complete(self, event) -> None:
        pass


def _render_error(exc: Exception) -> str:
    """rattler-build wraps Jinja errors in a Debug dump; keep the sentence a person can act on."""
    text = str(exc)
    m = re.search(r'message: "(.*?)(?: \(in <string>|", span)', text, re.S)
    if m:
        return " ".join(m.group(1).replace("\\n", " ").split())
    return _first_line(exc)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
