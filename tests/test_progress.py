"""The displays every long command shares (mmstack/progress.py), driven by recorded step sequences
and a fake clock: no sleeping, no timed assertions."""

from __future__ import annotations

import itertools

from mmstack import progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay(events, *, title="lock"):
    """events: (time, kind, args) with kind "step", "count" or "tick"; the plain lines and their times."""
    clock = Clock()
    lines: list[tuple[float, str]] = []
    watch = progress.StepWatch(progress.PlainDisplay(lambda line: lines.append((clock.now, line))), title=title,
                               clock=clock)
    for t, kind, args in events:
        clock.now = t
        if kind == "step":
            label, i, n, expected = args
            watch.step(label, i, n, expected=expected)
        elif kind == "count":
            watch.count(*args)
        else:
            watch.tick()
    watch.stop()
    return lines


# A lock of seven environments as `mmstack lock` steps through them (times from a real run's log shape:
# most solves take seconds, b200's half a minute, rtx5090's over a minute), with the ticker's ticks.
LOCK = [(0, "step", ("solving cpu", 1, 7, None)),
        (4, "step", ("solving rtx3090", 2, 7, None)),
        (9, "step", ("solving a100", 3, 7, None)),
        (14, "step", ("solving rtx4090", 4, 7, None)),
        (20, "step", ("solving h100", 5, 7, None)),
        (25, "step", ("solving b200", 6, 7, None)),
        *[(t, "tick", ()) for t in range(26, 56)],
        (56, "step", ("solving rtx5090", 7, 7, None)),
        *[(t, "tick", ()) for t in range(57, 140)]]


def test_plain_lines_come_at_most_every_30_seconds_and_name_the_step():
    lines = replay(LOCK)
    stamps = [t for t, _ in lines]
    assert [line for _, line in lines] == [
        "lock: solving cpu (1/7), 0s",
        "lock: solving b200 (6/7), 5s, 30s in all",      # the steps between came within 30 s of the first line
        "lock: solving rtx5090 (7/7), 4s, 1m00s in all",  # a tick: the new step, 30 s on
        "lock: solving rtx5090 (7/7), 34s, 1m30s in all",
        "lock: solving rtx5090 (7/7), 1m04s, 2m00s in all",
    ]
    assert all(b - a >= progress.PLAIN_INTERVAL_S for a, b in itertools.pairwise(stamps))


def test_a_short_interval_shows_every_step():
    clock = Clock()
    lines: list[str] = []
    watch = progress.StepWatch(progress.PlainDisplay(lines.append, interval=0), title="lock", clock=clock)
    for t, kind, args in LOCK:
        clock.now = t
        if kind == "step":
            watch.step(args[0], args[1], args[2])
    assert [line.split(" (")[0] for line in lines] == [f"lock: solving {e}" for e in
                                                        ("cpu", "rtx3090", "a100", "rtx4090", "h100", "b200", "rtx5090")]
    assert lines[3] == "lock: solving rtx4090 (4/7), 0s, 14s in all"


def test_verify_levels_show_last_runs_time():
    lines = replay([(0, "step", ("L1 import", 1, 5, 1.2)),
                    (1, "step", ("L2 CUDA", 2, 5, 0.8)),
                    (2, "step", ("L3 ops load", 3, 5, 3.0)),
                    (5, "step", ("L4 ops run", 4, 5, 70.0)),
                    *[(t, "tick", ()) for t in range(6, 80)],
                    (80, "step", ("L5 train", 5, 5, None))], title="verify")
    assert [line for _, line in lines] == [
        "verify: L1 import (1/5), 0s of ~1s last run",
        "verify: L4 ops run (4/5), 25s of ~1m10s last run, 30s in all",
        "verify: L4 ops run (4/5), 55s of ~1m10s last run, 1m00s in all",
    ]


def test_counts_keep_the_labels_start_and_the_bar_counts_units():
    clock = Clock()
    watch = progress.StepWatch(progress.PlainDisplay(lambda _l: None), title="channel index", clock=clock)
    for k in range(0, 1001, 100):
        clock.now = k / 50
        watch.count("reading linux-64", k, 1000, "packages")
    snap = watch.snapshot()
    assert snap is not None
    assert snap.line() == "channel index: reading linux-64 (1000/1000 packages), 20s"
    assert snap.bar() == (1000, 1000, "reading linux-64, 20s")
    clock.now = 25
    watch.count("reading noarch", 3, 250, "packages")
    assert watch.snapshot().line() == "channel index: reading noarch (3/250 packages), 0s, 25s in all"
    watch.step("writing repodata", 1, 1)
    assert watch.snapshot().bar() == (0, 1, "writing repodata, 0s, 25s in all")  # step 1 of 1 runs: none done yet


def test_stop_ends_the_work_and_a_tick_after_it_writes_nothing():
    clock = Clock()
    lines: list[str] = []
    watch = progress.StepWatch(progress.PlainDisplay(lines.append), title="lock", clock=clock)
    watch.step("solving cpu", 1, 1)
    watch.close()
    clock.now = 100
    watch.tick()
    assert lines == ["lock: solving cpu (1/1), 0s"] and watch.snapshot() is None


def test_quiet_gives_no_watch():
    assert progress.steps_on_stderr("lock", quiet=True) is None


def test_durations():
    assert [progress.duration(s) for s in (0, 0.4, 59.6, 60, 65, 3600)] == ["0s", "0s", "1m00s", "1m00s", "1m05s",
                                                                              "60m00s"]
