"""Build progress (builder/progress.py) from a recorded rattler-build log of a real CUDA build.

lab/results/h200/recipe-run2/rattler-build-sm90.log is what `mmstack build --log` wrote
for mmcv sm_90 on the H200: `HH:MM:SS [level] message` per line. Replayed through the build's
own log callback with the log's timestamps as the clock: no sleeping, no timed assertions.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from mmstack.builder import progress, recipes
from mmstack_lab.common.result_logs import read_log

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "lab" / "results" / "h200" / "recipe-run2" / "rattler-build-sm90.log"
NAME = "mmcv-2.2.0-cuda130_sm90_py312_h1ec696c_0"
_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d) \[(\w+)\] ?(.*)$")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Event:
    def __init__(self, level: str, message: str):
        self.level, self.message = level, message


def recorded() -> list[tuple[float, str, str]]:
    """(seconds since midnight, level, message) of each timestamped line of the recorded log."""
    rows = []
    for line in read_log(LOG).splitlines():
        m = _LINE.match(line)
        if m:
            h, mi, s, level, message = m.groups()
            rows.append((int(h) * 3600 + int(mi) * 60 + int(s), level, message))
    return rows


def replay(display) -> tuple[progress.BuildWatch, list[progress.Snapshot], Clock]:
    """Feed the log through recipes.EngineEvents (as a build does); a snapshot after every line."""
    clock = Clock()
    rows = recorded()
    clock.now = rows[0][0]
    watch = progress.BuildWatch(display, clock=clock)
    callback = recipes.EngineEvents(lambda _m: None, None, watch)
    watch.start(NAME)
    snaps = []
    for t, level, message in rows:
        clock.now = t
        callback.on_log(Event(level, message))
        snaps.append(watch._reader.snapshot(t))
    return watch, snaps, clock


def test_the_recorded_log_counts_all_136_units_in_order():
    lines: list[str] = []
    _, snaps, _ = replay(progress.PlainDisplay(lines.append))
    compiling = [s for s in snaps if s.phase == "compile"]
    assert compiling[0].done == 1 and compiling[0].total == 136
    assert compiling[-1].done == 136 and {s.total for s in compiling} == {136}
    done = [s.done for s in compiling]
    assert done == sorted(done) and len(set(done)) == 136  # every [N/M] seen once, never backwards
    assert compiling[0].last_unit == "bias_act_cuda.o"  # [1/136] in the log
    assert next(s for s in compiling if s.done == 69).last_unit.endswith(".o")


def test_phases_follow_the_log_and_the_tests_are_named():
    _, snaps, _ = replay(progress.PlainDisplay(lambda _l: None))
    phases = [s.phase for s in snaps]
    order = list(dict.fromkeys(phases))
    assert order == ["prepare", "compile", "package", "test"]
    tests = list(dict.fromkeys(s.test for s in snaps if s.test))
    # the recipe's test commands as the log shows them: the ladder's levels, then upstream's pytest run
    assert "ladder L1,L2,L3,L4" in tests and "upstream tests/test_ops" in tests
    assert tests.index("ladder L1,L2,L3,L4") < tests.index("upstream tests/test_ops")
    assert "upstream tests/test_ops 46%" in tests and "upstream tests/test_ops 100%" in tests
    assert "fatbin check" in tests


def test_eta_is_a_rate_estimate_that_reaches_zero():
    _, snaps, _ = replay(progress.PlainDisplay(lambda _l: None))
    compiling = [s for s in snaps if s.phase == "compile"]
    assert compiling[0].eta is None  # one unit says nothing about the rate
    half = next(s for s in compiling if s.done == 68)
    assert half.eta is not None and half.eta > 0
    assert compiling[-1].eta == 0


def test_plain_lines_come_at_most_every_30_seconds():
    lines: list[str] = []
    stamps: list[float] = []
    clock_ref: list[Clock] = []

    def write(line: str) -> None:
        lines.append(line)
        stamps.append(clock_ref[0].now if clock_ref else 0.0)

    display = progress.PlainDisplay(write)
    clock = Clock()
    rows = recorded()
    clock.now = rows[0][0]
    clock_ref.append(clock)
    watch = progress.BuildWatch(display, clock=clock)
    callback = recipes.EngineEvents(lambda _m: None, None, watch)
    watch.start(NAME)
    for t, level, message in rows:
        clock.now = t
        callback.on_log(Event(level, message))
    watch.stop()
    span = rows[-1][0] - rows[0][0]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert lines and all(g >= 30 for g in gaps)
    assert len(lines) <= span // 30 + 1
    # the 136 [N/M] lines of the compile phase became a handful of lines, with the counts in them
    compile_lines = [line for line in lines if " compile " in line]
    assert 2 <= len(compile_lines) < 136
    assert all(line.startswith(f"{NAME}: compile ") and "/136 units" in line for line in compile_lines)
    assert any(line.startswith(f"{NAME}: test: ") for line in lines)


def test_a_tick_reports_a_silent_slow_unit_but_not_before_30_seconds():
    lines: list[str] = []
    clock = Clock()
    watch = progress.BuildWatch(progress.PlainDisplay(lines.append), clock=clock)
    watch.start("mmcv-x")
    clock.now = 5
    watch.log("[1/3] nvcc -c a.cu -o build/a.o")
    clock.now = 6
    watch.log("[2/3] nvcc -c b.cu -o build/b.o")
    assert lines == ["mmcv-x: compile 1/3 units, 5s (last a.o)"]
    clock.now = 20
    watch.tick()
    assert len(lines) == 1  # held back: 15 s since the last line
    clock.now = 95
    watch.tick()  # nothing logged for 89 s: the line says so
    assert lines[-1] == "mmcv-x: compile 2/3 units, 1m35s, ETA ~1m30s (last b.o, no unit finished for 1m29s)"


def test_test_commands_in_words():
    assert progress.describe_test_command("mmstack verify --levels L1,L2 --json") == "ladder L1,L2"
    assert progress.describe_test_command("python -m mmstack.verify.upstream_tests tests/test_ops --ignore=x") == \
        "upstream tests/test_ops"
    assert progress.describe_test_command("python -m mmstack.verify.train_detector --device cpu") == "detector training"
    assert progress.describe_test_command("cd upstream") is None
    assert progress.describe_test_command("gpu=--expect-gpu") is None
