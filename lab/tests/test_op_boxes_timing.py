"""mmstack_lab.ops.boxes and mmstack_lab.ops.timing: the boxes and the timing bench_ops and
nms_anatomy share. The boxes are the ones the committed results were measured on: the digests
below are of the boxes bench_ops.py's `_boxes` and nms_anatomy.py's `boxes_for` drew before they
moved here (commit faffe85, torch 2.13 on the CPU; torch's CPU generator is the same everywhere)."""

from __future__ import annotations

import hashlib
import time

import pytest

torch = pytest.importorskip("torch")
from mmstack_lab.ops import timing  # noqa: E402 - after the torch check
from mmstack_lab.ops.boxes import random_boxes  # noqa: E402


def _digest(boxes, scores) -> str:
    return hashlib.sha256(boxes.numpy().tobytes() + scores.numpy().tobytes()).hexdigest()[:16]


@pytest.mark.parametrize(("n", "seed", "clustered", "digest"), [
    (1000, 1, False, "45ba9b964ea096d8"),  # bench_ops: roi_align's rois
    (20000, 2, False, "523a14f5712ded1e"),  # bench_ops: nms at 20k
    (1000, 1000, False, "0e61ede306471dac"),  # nms_anatomy: the timed size 1000
    (4097, 7, True, "07b0ed3bfcf392b1"),  # nms_anatomy's clustered checks
])
def test_the_boxes_are_those_the_results_were_measured_on(n, seed, clustered, digest):
    assert _digest(*random_boxes(n, seed, clustered=clustered)) == digest


def test_uniform_and_clustered_boxes_are_what_the_docstring_says():
    boxes, scores = random_boxes(5000, 3)
    wh = boxes[:, 2:] - boxes[:, :2]
    assert boxes.shape == (5000, 4) and scores.shape == (5000,)
    assert 0 <= float(boxes[:, :2].min()) and float(boxes[:, :2].max()) < 800
    assert 8 <= float(wh.min()) and float(wh.max()) < 208
    assert 0 <= float(scores.min()) and float(scores.max()) < 1
    cwh = (lambda b: b[:, 2:] - b[:, :2])(random_boxes(5000, 3, clustered=True)[0])
    assert 60 <= float(cwh.min()) and float(cwh.max()) < 80
    assert torch.equal(random_boxes(64, 9)[0], random_boxes(64, 9)[0])
    assert not torch.equal(random_boxes(64, 9)[0], random_boxes(64, 10)[0])


def test_a_timing_is_iters_calls_after_the_warm_up():
    calls = []
    timing.warm_up(lambda: calls.append("warm"))
    assert calls == ["warm"] * timing.WARMUP_CALLS

    def sleep_2ms():
        calls.append("timed")
        time.sleep(0.002)

    us = timing.per_call_us(sleep_2ms, 5, "cpu")
    assert calls.count("timed") == 5
    assert 2000 <= us < 200_000  # µs per call: at least the sleep, and not per batch of five


def test_a_timed_warm_up_keeps_calling_until_its_seconds_have_passed():
    stamps = []
    start = time.perf_counter()
    timing.warm_up(lambda: stamps.append(time.perf_counter()), seconds=0.05)
    assert len(stamps) > timing.WARMUP_CALLS  # the calls beyond the fixed few are the timed part
    assert stamps[-1] - start >= 0.05 - 1e-3  # it ran its seconds; no upper bound is asserted
