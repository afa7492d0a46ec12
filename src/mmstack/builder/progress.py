"""Build progress from rattler-build's log lines: what a build is doing, as one line.

Every line rattler-build logs passes through `BuildWatch.log` (recipes.EngineEvents.on_log). The
reader (`LogReader`) keeps what the lines say: ninja's `[N/M]` counts while the extension
compiles, which test command runs in the sandbox (the ladder's levels, an upstream pytest path
and pytest's `[ 23%]`). Ninja prints a unit when it finishes (outside a terminal ninja has no
live status line), so the units still running are not named in the log: the line shows the last
unit that finished and how long no unit has finished instead.

A `Snapshot` is shown by the displays every long command shares (mmstack/progress.py):
`LiveDisplay` (rich's progress bar, one line per build, on a terminal) and `PlainDisplay` (a plain
line at most every `interval` seconds, for CI logs and pipes). Both take the time from a clock, so
tests replay a recorded log without sleeping.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mmstack.progress import (
    PLAIN_INTERVAL_S,
    Clock,
    Display,
    LiveDisplay,
    PlainDisplay,
    display_for_stderr,
    duration as _duration,
)

# the displays a build uses are the ones every long command shares
__all__ = ["PLAIN_INTERVAL_S", "BuildWatch", "LiveDisplay", "LogReader", "PlainDisplay", "Snapshot",
           "describe_test_command", "for_stderr"]

# ninja's default status `[%f/%t] ` (finished/total) before the command it ran
_NINJA = re.compile(r"^\[(\d+)/(\d+)\]\s+(.*)$")
_OUTPUT = re.compile(r"\s-o\s+(\S+)")
_PYTEST_PERCENT = re.compile(r"\[\s*(\d+)%\]\s*$")
# the test environment is ready: what follows are the recipe's tests
_TEST_START = re.compile(r"Successfully updated the test environment|^Testing commands:")
_BUILD_SCRIPT_DONE = re.compile(r"mmstack build\.sh: installed|^Packaging new files")


@dataclass(frozen=True)
class Snapshot:
    """What a build is doing at one moment (all times in seconds)."""

    name: str
    phase: str            # "prepare", "compile", "package", "test"
    done: int             # compile units finished (ninja's N)
    total: int            # compile units in all (ninja's M); 0 before the first [N/M] line
    elapsed: float        # since the build started
    eta: float | None     # compile time left, from the rate so far; None when it cannot be told
    last_unit: str        # the object file of the unit that finished last
    quiet_for: float      # since a unit last finished (compile phase)
    test: str             # the test running ("ladder L1,L2,L3,L4", "upstream tests/test_ops 46%")

    def detail(self) -> str:
        if self.phase == "compile":
            parts = [f"last {self.last_unit}"] if self.last_unit else []
            if self.done and self.quiet_for >= 10:
                parts.append(f"no unit finished for {_duration(self.quiet_for)}")
            return ", ".join(parts)
        if self.phase == "test":
            return self.test
        return ""

    def line(self) -> str:
        """The plain line: `mmcv-2.2.0-cuda130_sm90…: compile 69/136 units, 1m12s, ETA ~1m05s (last …)`."""
        if self.phase == "compile":
            what = f"compile {self.done}/{self.total} units"
        elif self.phase == "test":
            what = f"test: {self.test}" if self.test else "test"
        else:
            what = self.phase
        text = f"{self.name}: {what}, {_duration(self.elapsed)}"
        if self.phase == "compile" and self.eta is not None:
            text += f", ETA ~{_duration(self.eta)}"
        detail = self.detail() if self.phase == "compile" else ""
        return f"{text} ({detail})" if detail else text

    def bar(self) -> tuple[int, int | None, str]:
        """The live display's (units done, units in all, ETA and what runs)."""
        eta = f"ETA ~{_duration(self.eta)} " if self.eta is not None else ""
        detail = self.detail() or self.phase
        return self.done, self.total or None, eta + (f"{self.phase}: {detail}" if detail != self.phase else detail)


class LogReader:
    """The state one build's log lines describe. `feed` one message at a time with its time."""

    def __init__(self, name: str, started: float):
        self.name = name
        self.started = started
        self.phase = "prepare"
        self.done = 0
        self.total = 0
        self.last_unit = ""
        self.first_unit_at: float | None = None
        self.last_unit_at: float | None = None
        self.test = ""
        self._test_command = ""  # the label before pytest's percentage

    def feed(self, message: str, now: float) -> bool:
        """Take one log message; True when it changed what the line shows."""
        text = message.strip()
        if not text:
            return False
        if self.phase in ("prepare", "compile"):
            m = _NINJA.match(text)
            if m:
                self.phase = "compile"
                self.done, self.total = int(m.group(1)), int(m.group(2))
                out = _OUTPUT.search(m.group(3))
                self.last_unit = out.group(1).rsplit("/", 1)[-1] if out else m.group(3).split()[-1][:60]
                if self.first_unit_at is None:
                    self.first_unit_at = now
                self.last_unit_at = now
                return True
            if self.phase == "compile" and _BUILD_SCRIPT_DONE.search(text):
                self.phase = "package"
                return True
        if _TEST_START.search(text):
            changed = self.phase != "test"
            self.phase = "test"
            return changed
        if self.phase == "test":
            return self._feed_test(text)
        return False

    def _feed_test(self, text: str) -> bool:
        if text.startswith("+ "):  # the test script's `set -x` line: the command about to run
            label = describe_test_command(text[2:])
            if label is None or label == self.test:
                return False
            self.test = self._test_command = label
            return True
        m = _PYTEST_PERCENT.search(text)
        if m and self._test_command.startswith("upstream "):
            self.test = f"{self._test_command} {m.group(1)}%"
            return True
        return False

    def snapshot(self, now: float) -> Snapshot:
        eta = None
        if self.phase == "compile" and self.first_unit_at is not None and self.done > 1 and now > self.first_unit_at:
            rate = (self.done - 1) / (now - self.first_unit_at)  # units per second since the first finished
            eta = (self.total - self.done) / rate if rate > 0 else None
        quiet = now - self.last_unit_at if self.last_unit_at is not None else 0.0
        return Snapshot(name=self.name, phase=self.phase, done=self.done, total=self.total,
                        elapsed=now - self.started, eta=eta, last_unit=self.last_unit, quiet_for=quiet,
                        test=self.test)


def describe_test_command(command: str) -> str | None:
    """What a recipe's test command is, in a few words (None: a shell detail not worth a line)."""
    words = command.split()
    if not words:
        return None
    if "mmstack.verify.upstream_tests" in words:
        paths = [w for w in words[words.index("mmstack.verify.upstream_tests") + 1:] if not w.startswith("-")]
        return f"upstream {paths[0]}" if paths else "upstream tests"
    if words[:2] == ["mmstack", "verify"]:
        return f"ladder {words[words.index('--levels') + 1]}" if "--levels" in words[:-1] else "ladder"
    if "mmstack.verify.train_detector" in words:
        return "detector training"
    if words[:2] == ["mmstack", "fatbin"]:
        return "fatbin check"
    if command.endswith("conda_build_script.py"):
        return "python imports"
    if words[:2] == ["pip", "check"]:
        return "pip check"
    if words[0] in ("cd", "export") or "=" in words[0]:
        return None
    return command if len(command) <= 60 else command[:57] + "..."


class BuildWatch:
    """What `run_build` calls: `start(name)`, `log(message)` for every line, `stop()`.

    `tick()` refreshes the display without a new line (a slow unit logs nothing for minutes);
    `run_ticker()` calls it from a daemon thread until `stop`.
    """

    def __init__(self, display: Display, *, clock: Clock = time.monotonic):
        self._display = display
        self._clock = clock
        self._reader: LogReader | None = None
        self._lock = threading.Lock()
        self._stop_ticker = threading.Event()

    def start(self, name: str) -> None:
        with self._lock:
            now = self._clock()
            self._reader = LogReader(name, now)
            self._display.start(name, now)

    def log(self, message: str) -> None:
        with self._lock:
            if self._reader is None:
                return
            now = self._clock()
            if self._reader.feed(message, now):
                self._display.update(self._reader.snapshot(now), now)

    def tick(self) -> None:
        with self._lock:
            if self._reader is not None:
                now = self._clock()
                self._display.update(self._reader.snapshot(now), now)

    def stop(self) -> None:
        with self._lock:
            if self._reader is not None:
                now = self._clock()
                self._display.stop(self._reader.snapshot(now), now)
            self._reader = None

    def run_ticker(self, every: float = 1.0) -> threading.Thread:  # pragma: no cover - real time only
        def loop() -> None:
            while not self._stop_ticker.wait(every):
                self.tick()

        thread = threading.Thread(target=loop, name="mmstack-build-progress", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._stop_ticker.set()
        self.stop()


def for_stderr(console, write: Callable[[str], None], *, tty: bool, clock: Clock = time.monotonic) -> BuildWatch:
    """The watch `mmstack build` uses: the live bar on a terminal, else the throttled plain line."""
    return BuildWatch(display_for_stderr(console, write, tty=tty), clock=clock)
