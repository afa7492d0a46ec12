"""bench_ops --paired (issue 43: speed claims carry their interval): a row's two sides take turns, ABBA,
`repeats` pairs of timings, and the row carries each pair's torchvision/mmcv ratio, their median and its
distribution-free 95% interval; --nms-sizes picks the box counts of --full's nms rows. Bad input: one
line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mmstack_lab.ops import bench_ops


def test_paired_alternates_the_side_timed_first_and_gives_the_interval(monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(bench_ops, "warm_up", lambda fn, seconds=0.0: None)
    # the timer records which side ran; each side's calls take a known time, so the ratios are known
    monkeypatch.setattr(bench_ops, "per_call_us", lambda fn, iters, device: fn())
    calls = {"mmcv": iter([10.0, 11.0, 9.0, 10.0, 10.5, 9.5, 10.0]), "torchvision": iter([20.0] * 7)}

    def side(name):
        def run():
            order.append(name)
            return next(calls[name])
        return run

    row = bench_ops._paired(side("mmcv"), side("torchvision"), 20, 7, "cpu")
    assert order[:4] == ["mmcv", "torchvision", "torchvision", "mmcv"] and len(order) == 14
    assert [round(p["ratio"], 4) for p in row["pairs"]] == [2.0, round(20 / 11, 4), round(20 / 9, 4), 2.0,
                                                            round(20 / 10.5, 4), round(20 / 9.5, 4), 2.0]
    assert row["mmcv_us"] == 10.0 and row["torchvision_us"] == 20.0 and row["ratio_tv_over_mmcv"] == 2.0
    assert row["ratio_median_of_pairs"] == 2.0
    low, high = row["ratio_median_ci95"]
    assert low == min(p["ratio"] for p in row["pairs"]) and high == max(p["ratio"] for p in row["pairs"])


def test_paired_times_real_calls():
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 64)
    row = bench_ops._paired(lambda: a @ a, lambda: (a @ a) @ a, 5, 6, "cpu")
    assert len(row["pairs"]) == 6 and all(p["mmcv"] > 0 and p["torchvision"] > 0 for p in row["pairs"])
    assert row["ratio_median_ci95"] is not None


@pytest.mark.parametrize("sizes", ["0,100", "ten", ","])
def test_bad_nms_sizes_is_one_line_and_exit_2(sizes):
    done = subprocess.run([sys.executable, "-m", "mmstack_lab.ops.bench_ops", "--device", "cpu", "--full",
                           "--nms-sizes", sizes], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--nms-sizes" in done.stderr, done.stderr
