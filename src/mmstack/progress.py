"""Progress of long work on stderr: one place for how it is shown, whatever the work is.

Two displays take a view (anything with `line()` and `bar()`): `LiveDisplay` (rich's progress
bar, on a terminal) and `PlainDisplay` (a plain line at most every `interval` seconds, for CI logs
and pipes). `StepWatch` is the view of work done in steps, "step i of n, label, elapsed,
expected": `mmstack lock` (one step per environment), `mmstack verify` (one per level, with the
time it took last run), `mmstack channel index` (packages read) and `mmstack arch check
--package` (a large wheel's megabytes read). `mmstack build` reads its state from rattler-build's
log (builder/progress.py) and shows it through the same displays.

Every time comes from an injected clock, so tests replay a sequence of steps without sleeping.
Progress never touches stdout: `--json` documents stay as they are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

Clock = Callable[[], float]
PLAIN_INTERVAL_S = 30.0


def duration(seconds: float) -> str:
    """`42s`, `1m05s`."""
    s = round(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class View(Protocol):
    def line(self) -> str:
        """The whole state as one plain line."""
        ...

    def bar(self) -> tuple[int, int | None, str]:
        """(completed, total or None when unknown, the text beside the bar) for the live display."""
        ...


class PlainDisplay:
    """A plain line (to `write`) at most every `interval` seconds, when something changed or time passed."""

    def __init__(self, write: Callable[[str], None], *, interval: float = PLAIN_INTERVAL_S):
        self._write = write
        self._interval = interval
        self._last_at: float | None = None

    def start(self, name: str, now: float) -> None:
        pass

    def update(self, view: View, now: float) -> None:
        if self._last_at is not None and now - self._last_at < self._interval:
            return
        self._last_at = now
        self._write(view.line())

    def stop(self, view: View, now: float) -> None:
        self._last_at = None  # the next piece of work's first line is not held back by this one's


class LiveDisplay:  # pragma: no cover - needs a terminal; PlainDisplay and the views carry the logic
    """rich's progress bar: one line per piece of work (done/total, elapsed, what runs)."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("{task.fields[detail]}"), console=console,
                                  transient=False)
        self._task = None

    def start(self, name: str, now: float) -> None:
        self._progress.start()
        self._task = self._progress.add_task(name, total=None, detail="starting")

    def update(self, view: View, now: float) -> None:
        if self._task is None:
            return
        completed, total, detail = view.bar()
        self._progress.update(self._task, completed=completed, total=total, detail=detail)

    def stop(self, view: View, now: float) -> None:
        if self._task is not None:
            self.update(view, now)
        self._progress.stop()
        self._task = None


Display = PlainDisplay | LiveDisplay


@dataclass(frozen=True)
class Step:
    """Where stepped work stands (times in seconds)."""

    title: str                 # the work: "lock", "verify", "channel index"
    label: str                 # what runs now: "solving rtx4090", "L4 ops run"
    position: int              # the number shown: step i (running) or i units done
    total: int
    unit: str                  # "" for steps; "packages", "MB" for counts
    done: int                  # finished, for the bar
    step_elapsed: float        # since this label began
    elapsed: float             # since the work began
    expected: float | None     # how long this step took last time, when known

    def _timing(self) -> str:
        text = duration(self.step_elapsed)
        if self.expected is not None:
            text += f" of ~{duration(self.expected)} last run"
        if self.elapsed - self.step_elapsed >= 1:
            text += f", {duration(self.elapsed)} in all"
        return text

    def line(self) -> str:
        """`lock: solving rtx4090 (3/7), 12s, 40s in all`."""
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.title}: {self.label} ({self.position}/{self.total}{unit}), {self._timing()}"

    def bar(self) -> tuple[int, int | None, str]:
        return self.done, self.total or None, f"{self.label}, {self._timing()}"


class StepWatch:
    """What long work calls: `step(label, i, n)` when step i of n begins, `count(label, k, n, unit)`
    when k of n units are done, `stop()` at the end. `tick()` refreshes the display without news (a
    solve says nothing for minutes); `run_ticker()` calls it from a daemon thread until `close()`."""

    def __init__(self, display: Display, *, title: str, clock: Clock = time.monotonic):
        self._display = display
        self._title = title
        self._clock = clock
        self._lock = threading.Lock()
        self._stop_ticker = threading.Event()
        self._started: float | None = None
        self._state: tuple[str, int, int, str, int, float | None] | None = None  # label, position, total, unit, done, expected
        self._label_at = 0.0

    def _begin(self, now: float) -> None:
        if self._started is None:
            self._started = now
            self._display.start(self._title, now)

    def _set(self, label: str, position: int, total: int, unit: str, done: int, expected: float | None) -> None:
        with self._lock:
            now = self._clock()
            self._begin(now)
            if self._state is None or self._state[0] != label:
                self._label_at = now
            self._state = (label, position, total, unit, done, expected)
            self._display.update(self._snapshot(now), now)

    def step(self, label: str, index: int, total: int, *, expected: float | None = None) -> None:
        """Step `index` (from 1) of `total` begins; `expected`: its seconds last time."""
        self._set(label, index, total, "", index - 1, expected)

    def count(self, label: str, done: int, total: int, unit: str) -> None:
        """`done` of `total` units are finished."""
        self._set(label, done, total, unit, done, None)

    def _snapshot(self, now: float) -> Step:
        assert self._state is not None and self._started is not None
        label, position, total, unit, done, expected = self._state
        return Step(title=self._title, label=label, position=position, total=total, unit=unit, done=done,
                    step_elapsed=now - self._label_at, elapsed=now - self._started, expected=expected)

    def snapshot(self) -> Step | None:
        with self._lock:
            return self._snapshot(self._clock()) if self._state is not None else None

    def tick(self) -> None:
        with self._lock:
            if self._state is not None:
                now = self._clock()
                self._display.update(self._snapshot(now), now)

    def stop(self) -> None:
        with self._lock:
            if self._state is not None:
                now = self._clock()
                self._display.stop(self._snapshot(now), now)
            self._state, self._started = None, None

    def run_ticker(self, every: float = 1.0) -> threading.Thread:  # pragma: no cover - real time only
        def loop() -> None:
            while not self._stop_ticker.wait(every):
                self.tick()

        thread = threading.Thread(target=loop, name=f"mmstack-{self._title}-progress", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._stop_ticker.set()
        self.stop()


def display_for_stderr(console, write: Callable[[str], None], *, tty: bool) -> Display:
    """The live bar on a terminal, else the throttled plain line."""
    return LiveDisplay(console) if tty else PlainDisplay(write)


def steps_on_stderr(title: str, *, quiet: bool, clock: Clock = time.monotonic) -> StepWatch | None:
    """The watch a command uses (None under --quiet), its ticker already running: stop it with `close()`."""
    if quiet:
        return None
    from mmstack import report

    console = report.err_console()
    watch = StepWatch(display_for_stderr(console, report.info, tty=console.is_terminal), title=title, clock=clock)
    watch.run_ticker()
    return watch
