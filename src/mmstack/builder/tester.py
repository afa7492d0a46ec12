"""Run a built package's own test section again, from the package file (py-rattler-build).

A package built with its tests skipped (`mmstack build --no-test`, the generated CI's build job
on a CPU runner) carries its recipe's test section inside the .conda (info/tests/). This runs
that section on the machine at hand (the GPU runner): the same environments, the same scripts,
the same result lines as the build's own test phase, so a GPU is held only for the tests.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mmstack.builder.progress import BuildWatch
from mmstack.builder.recipes import EngineEvents, Progress, as_channel_url, engine_errors
from mmstack.errors import BadInput, BuildFailed

PACKAGE_SUFFIXES = (".conda", ".tar.bz2")


@dataclass(frozen=True)
class TestedPackage:
    path: Path
    name: str
    version: str
    build_string: str
    subdir: str
    passed: tuple[bool, ...]  # one per test of the section, in order
    seconds: float = 0.0
    # what the tests reported through report.result_line (upstream's pytest counts and skips)
    test_results: tuple[dict, ...] = ()
    log_file: Path | None = None  # the test output of a failed run
    failure: str = ""  # the failing test's own last error line

    @property
    def ok(self) -> bool:
        return bool(self.passed) and all(self.passed)

    def as_dict(self) -> dict:
        return {"path": str(self.path), "name": self.name, "version": self.version,
                "build_string": self.build_string, "subdir": self.subdir, "passed": self.ok,
                "tests": [{"index": i, "passed": p} for i, p in enumerate(self.passed)],
                "seconds": round(self.seconds, 1), "test_results": list(self.test_results),
                "failure": self.failure, "log": str(self.log_file) if self.log_file else None}


def open_package(path: Path):
    """The package file as py-rattler-build's Package; a file that is none is bad input."""
    from rattler_build import Package

    if not path.name.endswith(PACKAGE_SUFFIXES):
        raise BadInput(f"{path} is not a conda package (.conda or .tar.bz2)", source="command line",
                       fix="pass a package file, e.g. channel/linux-64/mmcv-2.2.0-cpu_py311_h..._0.conda")
    if not path.is_file():
        raise BadInput(f"{path} does not exist or is not a regular file", source="command line",
                       fix="pass the path of a built package (mmstack build --no-test writes them into --channel)")
    try:
        return Package.from_file(path)
    except engine_errors() as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"{path}: damaged or not a conda package: {first}", source="command line",
                       fix="rebuild it, or download it again") from None


def run_package_tests(
    path: str | os.PathLike[str],
    *,
    channels: Sequence[str | os.PathLike[str]],
    progress: Progress | None = None,
    log_file: str | os.PathLike[str] | None = None,
    watch: BuildWatch | None = None,
    log_dir: Path | None = None,
) -> TestedPackage:
    """Every test of the package's test section, in order, against `channels` (local ones first).

    A failing test does not raise: the result says which failed, with its last error line and
    the full output written to a log file (under `log_dir`, default the system temp dir). The
    engine refusing to run (no channel has a dependency, say) raises BuildFailed.
    """
    pkg_path = Path(path).expanduser().resolve()
    pkg = open_package(pkg_path)
    say = progress or (lambda _msg: None)
    resolved = [as_channel_url(c) for c in channels]
    name = f"{pkg.name}-{pkg.version}-{pkg.build_string}"
    log_fh = open(log_file, "a", encoding="utf-8") if log_file else None
    callback = EngineEvents(say, log_fh, watch)
    say(f"testing {name} ({pkg.test_count} test(s) in its test section)")
    started = time.monotonic()
    if watch:
        watch.start(name)
    results = []
    try:
        # one test at a time: the engine's run_tests stops at the first failure and reports one
        # result for the whole section; by index, each test gets its verdict and all of them run
        for index in range(pkg.test_count):
            results.append(pkg.run_test(index, channel=resolved, progress_callback=callback))
    except engine_errors() as exc:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise BuildFailed(f"{name}: the tests could not run: {first}",
                          fix="pass the channels that hold its dependencies with --channel/--source-channel") from None
    finally:
        if watch:
            watch.stop()
        if log_fh:
            log_fh.close()
    seconds = time.monotonic() - started
    passed = tuple(bool(r.success) for r in results)
    failure, failed_log = "", None
    if not all(passed):
        lines = [str(line) for r in results if not r.success for line in r.output]
        failure = _failure_line(lines)
        if "failed to setup test environment" in failure:  # the engine's solve, not a test, failed
            failure = ("the test environment could not be solved from " + ", ".join(resolved)
                       + " (pass the channels holding its dependencies with --channel/--source-channel)")
        where = Path(log_dir or tempfile.gettempdir())
        failed_log = where / f"mmstack-test-{name}.log"
        try:
            failed_log.write_text("\n".join(lines) + "\n")
        except OSError:
            failed_log = None
    say(f"tested {name} in {seconds:.0f}s: {sum(passed)}/{len(passed)} passed")
    return TestedPackage(path=pkg_path, name=pkg.name, version=str(pkg.version), build_string=pkg.build_string,
                         subdir=pkg.subdir, passed=passed, seconds=seconds, test_results=tuple(callback.results),
                         log_file=failed_log, failure=failure)


def _failure_line(lines: list[str]) -> str:
    """The failing test's own last error line (before the engine's "Script failed with status N")."""
    cut = next((i for i, line in enumerate(lines) if line.startswith("Script failed with status")), len(lines))
    before = [line.strip() for line in lines[:cut] if line.strip()]
    stated = [line for line in before if "ERROR" in line or "FAILED" in line or "Error" in line]
    pick = stated or before or [line.strip() for line in lines if line.strip()] or ["(no output)"]
    return pick[-1][:300]

