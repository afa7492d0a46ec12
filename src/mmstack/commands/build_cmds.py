"""`mmstack build`, `mmstack test` and `mmstack channel index`."""

from __future__ import annotations

import json as jsonlib
import shlex
from pathlib import Path

from mmstack import report
from mmstack.builder import progress as progressmod
from mmstack.builder.channel import index_channel
from mmstack.builder.reach import require_reachable
from mmstack.builder.recipes import (
    ALL,
    BUILD_PLATFORM,
    DEFAULT_CHANNELS,
    STACK,
    TARGET_PLATFORM,
    TARGET_PLATFORMS,
    describe_result,
    recipe_path,
    render,
    run_stack_build,
    selection_for_env,
)
from mmstack.commands import interrupts, targets
from mmstack.errors import BadInput
from mmstack.progress import steps_on_stderr

LARGE_CHANNEL = 200  # packages: `mmstack channel index` shows its progress above this
BUILD_GRACE_S = 10.0  # after a signal, how long a build (or test) whose script was ended may take to clean up


def _with_variants(root: Path, recipes: tuple[str, ...], target_platform: str) -> list[str]:
    """The recipes that render more than one build over the matrix (they need --env or --all)."""
    config = root / "conda_build_config.yaml"
    return [r for r in recipes
            if len(render(recipe_dir=recipe_path(root, r), variant_config=config, target_platform=target_platform)) > 1]


def check_target_platform(target_platform: str) -> None:
    """`--target-platform`: a subdir the matrix has rows for; anything else is one line, exit 2."""
    if target_platform not in TARGET_PLATFORMS:
        raise BadInput(f"{target_platform!r} is not a platform mmstack builds for ({', '.join(TARGET_PLATFORMS)})",
                       source="--target-platform", fix=f"pass --target-platform {' or '.join(TARGET_PLATFORMS)} "
                       f"(linux-aarch64 is cross-compiled on {BUILD_PLATFORM})")


def _watch(quiet: bool) -> progressmod.BuildWatch | None:
    """The stderr progress display of build and test (None with --quiet), its ticker started."""
    if quiet:
        return None
    watch = progressmod.for_stderr(report.err_console(), report.info, tty=report.err_console().is_terminal)
    watch.run_ticker()
    return watch


def run_build_cmd(*, root: Path, channel: Path, env: str | None, build_all: bool,
                  recipes: list[str] | None, extra_channels: list[str] | None, test: bool,
                  as_json: bool, variant: list[str] | None = None, keep_build: bool = False,
                  work_dir: Path | None = None, log: Path | None = None, quiet: bool = False,
                  target_platform: str = TARGET_PLATFORM) -> int:
    """Build the stack's recipes for one environment (or all variants) into `channel`, then index it.

    Progress goes to stderr: the build steps line by line and, unless `quiet`, each build's progress
    (a live bar on a terminal, else a plain line at most every 30 s); the result is a table (or
    JSON) of the packages that landed. `target_platform` linux-aarch64 builds the config's
    `# [aarch64]` rows, cross-compiled here, with their test sections skipped (no receipt: nothing
    was tested; `mmstack test` runs them on an aarch64 machine).
    """
    check_target_platform(target_platform)
    names = tuple(recipes or STACK)
    if build_all and env:
        raise BadInput("--env and --all both given", source="command line", fix="pass one of them")
    if not build_all and not env:
        varied = _with_variants(root, names, target_platform) if recipes else list(names)
        if varied:
            raise BadInput(f"which builds? neither --env nor --all given, and {', '.join(varied)} has variants",
                           source="command line", fix="pass --env NAME (see `mmstack matrix`) or --all")
    if env:  # bad input before any network probe
        selection_for_env(env, root / "conda_build_config.yaml", target_platform=target_platform)
    overrides = parse_variant_overrides(variant or [])
    if overrides:
        from mmstack.facts.gpus import load as load_facts
        from mmstack.variants.matrix import check_overrides

        check_overrides(load_facts(), root / "conda_build_config.yaml", overrides, env=ALL if build_all else env,
                        target_platform=target_platform)
    if test and target_platform != BUILD_PLATFORM:
        report.info(f"test sections skipped: a {target_platform} package cannot run on this {BUILD_PLATFORM} machine "
                    f"(run `mmstack test PACKAGE` on a {target_platform} one)")
        test = False
    output_channel(channel)  # every place the build writes, before it starts
    if log is not None:
        targets.writable_file(log, option="--log")
    if work_dir is not None:
        targets.writable_dir(work_dir, option="--work-dir", what="build trees")
    sources = tuple(extra_channels or DEFAULT_CHANNELS)
    require_reachable(sources, option="--source-channel")
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    built = []
    receipts = Receipts("mmstack build")
    for name in names:  # one recipe at a time: each landed recipe gets its receipts even if a later one fails
        # the engine holds the GIL for a whole build: it runs in a child process (interrupts.py), which
        # a signal ends (its build script first, then BUILD_GRACE_S to remove its build tree)
        landed = interrupts.in_process(
            _build_with_progress, quiet=quiet, root=root, channel_dir=channel, env=ALL if build_all else env,
            recipes=(name,), extra_channels=sources, test=test, overrides=overrides or None,
            keep_build=keep_build, work_dir=work_dir, log_file=log, grace=BUILD_GRACE_S,
            target_platform=target_platform)
        if test:  # a package lands only when its test section passed
            for b in landed:
                count = _test_count(b.path)
                if count:  # a section of no tests proves nothing: no receipt
                    receipts.write(b.path, name=b.name, version=b.version, build_string=b.build_string,
                                   subdir=b.path.parent.name, test_results=b.test_results, passed=count,
                                   seconds=b.seconds)
        built += landed
    if as_json:
        report.print_json({"channel": str(channel.resolve()),
                           "packages": [{**b.as_dict(), "receipt": receipts.written.get(b.path)} for b in built]})
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
    from mmstack.builder.tester import open_package

    for path in packages:
        open_package(path)  # bad input before any network probe or test environment
    if log is not None:
        targets.writable_file(log, option="--log")
    sources = tuple(extra_channels or DEFAULT_CHANNELS)
    require_reachable(sources, option="--source-channel")
    channels = ([channel] if channel.is_dir() else []) + list(sources)
    tested = []
    receipts = Receipts("mmstack test")
    for path in packages:  # the engine in a child process, as for build
        t = interrupts.in_process(_test_with_progress, path, quiet=quiet, channels=channels, log_file=log,
                                  grace=BUILD_GRACE_S)
        if t.ok:
            receipts.write(t.path, name=t.name, version=t.version, build_string=t.build_string, subdir=t.subdir,
                           test_results=t.test_results, passed=len(t.passed), seconds=t.seconds)
        tested.append(t)
    ok = all(t.ok for t in tested)
    if as_json:
        report.print_json({"passed": ok, "channels": [str(c) for c in channels],
                           "packages": [{**t.as_dict(), "receipt": receipts.written.get(t.path)} for t in tested]})
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


def _build_with_progress(*, quiet: bool, **kwargs) -> list:
    """run_stack_build with this process's progress display (in_process's child runs it)."""
    watch = _watch(quiet)
    try:
        return run_stack_build(progress=report.info, watch=watch, **kwargs)
    finally:
        if watch:
            watch.close()


def _test_with_progress(path: Path, *, quiet: bool, **kwargs):
    """run_package_tests with this process's progress display (in_process's child runs it)."""
    from mmstack.builder.tester import run_package_tests

    watch = _watch(quiet)
    try:
        return run_package_tests(path, progress=report.info, watch=watch, **kwargs)
    finally:
        if watch:
            watch.close()


def _test_count(package: Path) -> int:
    """How many tests the package's own test section holds (what `mmstack test` would run)."""
    from mmstack.builder.tester import open_package

    return int(open_package(package).test_count)


class Receipts:
    """Writes the test receipt beside each package whose test section passed (builder/receipt.py);
    the machine is detected once, at the first receipt."""

    def __init__(self, via: str):
        self.via = via
        self.written: dict[Path, str] = {}  # package path -> receipt file name
        self._machine: dict | None = None

    def machine(self) -> dict:
        if self._machine is None:
            from mmstack.builder import receipt
            from mmstack.verify.doctor import detect_gpus

            gpus, source, _ = detect_gpus()
            self._machine = receipt.machine(gpus, source=source)
        return self._machine

    def write(self, package: Path, *, name: str, version: str, build_string: str, subdir: str,
              test_results, passed: int | None, seconds: float) -> None:
        from mmstack.builder import receipt

        doc = receipt.make(package, name=name, version=version, build_string=build_string, subdir=subdir,
                           test_results=test_results, machine_part=self.machine(), tests_passed=passed,
                           seconds=seconds, via=self.via)
        self.written[package] = receipt.write(package, doc).name
        report.info(f"receipt: {self.written[package]} ({doc['machine']['summary']})")


def install_hint(channel: Path, names: list[str]) -> str:
    """The closing line: how to install what this run built (and nothing it did not)."""
    if not names:
        return "nothing built"
    pkgs = " ".join(dict.fromkeys(n for n in ("mmcv", "mmdet", "mmstack") if n in names)) or " ".join(dict.fromkeys(names))
    return f"install with: conda install -c {shlex.quote(str(channel.resolve()))} -c conda-forge {pkgs}"


def output_channel(channel: Path) -> None:
    """`build --channel`: a writable directory that is a new or empty one (it becomes a channel) or an
    indexed channel; an unindexed one is named as such, with `mmstack channel index` as the fix."""
    targets.writable_dir(channel, option="--channel", what="packages")
    if channel.is_dir() and any(channel.iterdir()) and not (channel / "noarch" / "repodata.json").is_file():
        raise BadInput(f"--channel {channel}: not an indexed conda channel (no noarch/repodata.json)",
                       fix=f"index it first: mmstack channel index {shlex.quote(str(channel))}, or pass an "
                           "empty or new directory")


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
    if path.is_dir():  # a missing one is index_channel's to refuse
        targets.writable_dir(path, option="channel index", what="repodata.json")
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


def run_channel_page(*, path: Path, out: Path | None, source_channels: list[str] | None, solve: bool,
                     as_json: bool, url: str | None = None, quiet: bool = False) -> int:
    """Write the channel's page (builder/page.py); solves go to `source_channels` (default conda-forge)
    for mmcv's dependencies unless `solve` is off."""
    from mmstack.builder import page
    from mmstack.facts.gpus import load as load_facts

    channel = path.expanduser().resolve()
    if not (channel / "noarch" / "repodata.json").is_file():
        raise BadInput(f"{path} is not an indexed conda channel (no noarch/repodata.json)", source=str(path),
                       fix=f"index it first: mmstack channel index {path}")
    if out is not None and not out.parent.is_dir():
        raise BadInput(f"--out {out}: its directory does not exist", source="--out", fix="create it or pick another path")
    sources = list(source_channels or DEFAULT_CHANNELS) if solve else None
    if sources:
        require_reachable(tuple(sources), option="--source-channel")
    watch = steps_on_stderr("channel page", quiet=quiet)

    def on_progress(label: str, done: int, total: int) -> None:
        if watch:
            watch.count(label, done, total, "packages" if label.startswith("reading") else "compute capabilities")

    try:
        data = page.page_data(channel, load_facts(), solve_channels=sources, url=url, on_progress=on_progress)
    finally:
        if watch:
            watch.close()
    written = page.write_page(channel, page.render(data), out)
    tested = sum(1 for p in data["packages"] for c in p.get("cells", {}).values() if c["state"] == "tested")
    receipts = sum(1 for p in data["packages"] if p["receipt"]["state"] == "current")
    if as_json:
        report.print_json({"page": str(written), "packages": len(data["packages"]), "receipts": receipts,
                           "tested_cells": tested, "solver": data["solver"]})
    else:
        report.info(f"wrote {written}: {len(data['packages'])} packages, {receipts} with a current receipt, "
                    f"{tested} tested cells; builds picked by {data['solver']['how']}")
    return 0
