"""`mmstack build`, `mmstack test` and `mmstack channel index`."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path

from mmstack import report
from mmstack.builder import progress as progressmod
from mmstack.builder.channel import index_channel
from mmstack.builder.reach import require_reachable
from mmstack.builder.recipes import (
    ALL,
    DEFAULT_CHANNELS,
    STACK,
    describe_result,
    recipe_path,
    render,
    run_stack_build,
    selection_for_env,
)
from mmstack.errors import BadInput
from mmstack.progress import steps_on_stderr

LARGE_CHANNEL = 200  # packages: `mmstack channel index` shows its progress above this


def _with_variants(root: Path, recipes: tuple[str, ...]) -> list[str]:
    """The recipes that render more than one build over the matrix (they need --env or --all)."""
    config = root / "conda_build_config.yaml"
    return [r for r in recipes if len(render(recipe_dir=recipe_path(root, r), variant_config=config)) > 1]


def run_build_cmd(*, root: Path, channel: Path, env: str | None, build_all: bool,
                  recipes: list[str] | None, extra_channels: list[str] | None, test: bool,
                  as_json: bool, variant: list[str] | None = None, keep_build: bool = False,
                  work_dir: Path | None = None, log: Path | None = None, quiet: bool = False) -> int:
    """Build the stack's recipes for one environment (or all variants) into `channel`, then index it.

    Progress goes to stderr: the build steps line by line and, unless `quiet`, each build's progress
    (a live bar on a terminal, else a plain line at most every 30 s); the result is a table (or
    JSON) of the packages that landed.
    """
    names = tuple(recipes or STACK)
    if build_all and env:
        raise BadInput("--env and --all both given", source="command line", fix="pass one of them")
    if not build_all and not env:
        varied = _with_variants(root, names) if recipes else list(names)
        if varied:
            raise BadInput(f"which builds? neither --env nor --all given, and {', '.join(varied)} has variants",
                           source="command line", fix="pass --env NAME (see `mmstack matrix`) or --all")
    if env:
        selection_for_env(env, root / "conda_build_config.yaml")  # bad input before any network probe
    overrides = parse_variant_overrides(variant or [])
    if overrides:
        from mmstack.facts.gpus import load as load_facts
        from mmstack.variants.matrix import check_overrides

        check_overrides(load_facts(), root / "conda_build_config.yaml", overrides, env=ALL if build_all else env)
    sources = tuple(extra_channels or DEFAULT_CHANNELS)
    require_reachable(sources, option="--source-channel")
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    watch = None if quiet else progressmod.for_stderr(report.err_console(), report.info, tty=report.err_console().is_terminal)
    if watch:
        watch.run_ticker()
    try:
        built = run_stack_build(root=root, channel_dir=channel, env=ALL if build_all else env,
                                recipes=names, extra_channels=sources, test=test, progress=report.info,
                                overrides=overrides or None, keep_build=keep_build, work_dir=work_dir, log_file=log,
                                watch=watch)
    finally:
        if watch:
            watch.close()
    if as_json:
        report.print_json({"channel": str(channel.resolve()), "packages": [b.as_dict() for b in built]})
        return 0
    rows = [(b.name, b.version, b.build_string, b.variant.get("arch_tag", ""), f"{b.seconds:.0f}s", b.path.name)
            for b in built]
    report.print_table(["package", "version", "build", "arch", "time", "file"], rows,
                       title=f"built into {channel.resolve()}")
    for b in built:
        for doc in b.test_results:  # upstream's pytest counts, skips by reason
            report.info(f"{b.name} {b.build_string}: {describe_result(doc)}")
            for item in doc.get("skip_reasons", []):
                report.info(f"  skipped {item['tests']}: {item['reason']}")
    report.info(install_hint(channel, [b.name for b in built]))
    return 0


def run_test_cmd(*, packages: list[Path], channel: Path, extra_channels: list[str] | None, as_json: bool,
                 log: Path | None = None, quiet: bool = False) -> int:
    """Run each package file's own test section (built with --no-test, or elsewhere) on this machine.

    Dependencies come from `channel` (the packages' own channel: mmstack, mmengine, ...) where it
    exists, then the source channels. Exit 0 when every test of every package passed, 1 if one
    failed (its last error line and a log file named), 2 for a file that is not a package.
    """
    from mmstack.builder.tester import open_package, run_package_tests

    for path in packages:
        open_package(path)  # bad input before any network probe or test environment
    sources = tuple(extra_channels or DEFAULT_CHANNELS)
    require_reachable(sources, option="--source-channel")
    channels = ([channel] if channel.is_dir() else []) + list(sources)
    watch = None if quiet else progressmod.for_stderr(report.err_console(), report.info, tty=report.err_console().is_terminal)
    if watch:
        watch.run_ticker()
    tested = []
    try:
        for path in packages:
            tested.append(run_package_tests(path, channels=channels, progress=report.info, log_file=log, watch=watch))
    finally:
        if watch:
            watch.close()
    ok = all(t.ok for t in tested)
    if as_json:
        report.print_json({"passed": ok, "channels": [str(c) for c in channels],
                           "packages": [t.as_dict() for t in tested]})
        return 0 if ok else 1
    rows = [(t.name, t.version, t.build_string, f"{sum(t.passed)}/{len(t.passed)}", f"{t.seconds:.0f}s",
             "PASS" if t.ok else "FAIL") for t in tested]
    report.print_table(["package", "version", "build", "tests", "time", "result"], rows, title="tested on this machine")
    for t in tested:
        for doc in t.test_results:
            report.info(f"{t.name} {t.build_string}: {describe_result(doc)}")
        if not t.ok:
            report.info(f"{t.name} {t.build_string}: FAILED: {t.failure}" + (f" (full output: {t.log_file})" if t.log_file else ""))
    return 0 if ok else 1


def install_hint(channel: Path, names: list[str]) -> str:
    """The closing line: how to install what this run built (and nothing it did not)."""
    if not names:
        return "nothing built"
    pkgs = " ".join(dict.fromkeys(n for n in ("mmcv", "mmdet", "mmstack") if n in names)) or " ".join(dict.fromkeys(names))
    return f"install with: conda install -c {channel.resolve()} -c conda-forge {pkgs}"


def parse_variant_overrides(items: list[str]) -> dict[str, str]:
    """`--variant KEY=VALUE` pairs as a dict; a key given twice or without '=' is bad input."""
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise BadInput(f"--variant {item!r} is not KEY=VALUE", source="command line",
                           fix="write it like --variant cuda_compiler_version=13.0")
        if key in overrides:
            raise BadInput(f"--variant {key} given twice", source="command line", fix="give each key once")
        overrides[key] = value
    return overrides


def run_channel_index(*, path: Path, as_json: bool, quiet: bool = False) -> int:
    """(Re)write every subdir's repodata.json atomically; print what each subdir now holds.

    Unless `quiet`, a channel of more than LARGE_CHANNEL packages shows on stderr how many are read."""
    watch = steps_on_stderr("channel index", quiet=quiet)

    def on_progress(label: str, done: int, total: int) -> None:
        if watch and total > LARGE_CHANNEL:
            watch.count(label, done, total, "packages")

    try:
        channel = index_channel(path, on_progress=on_progress)
    finally:
        if watch:
            watch.close()
    counts = {}
    for repodata in sorted(channel.glob("*/repodata.json")):
        data = jsonlib.loads(repodata.read_text())
        counts[repodata.parent.name] = len(data.get("packages", {})) + len(data.get("packages.conda", {}))
    if as_json:
        report.print_json({"channel": str(channel), "subdirs": counts})
    else:
        report.print_table(["subdir", "packages"], sorted(counts.items()), title=f"indexed {channel}")
    return 0
