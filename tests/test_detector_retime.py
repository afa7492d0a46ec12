"""Issue 24 item 2: the detector re-timing on the H200 (benchmarks/results/h200/detector-retime/).

The committed results are what bench_detector.py writes: a paired run alternates its sides ABBA and
its ratio is the median of the pairs' ratios; a sequential run's ratio is median over median; every
run trained (losses finite and falling on both sides) on the package recipe-run9 built, with the
installed ladder passed on the machine the paired runs used.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RETIME = ROOT / "benchmarks" / "results" / "h200" / "detector-retime"
SIDES = ("mmdet", "torchvision-matched")


@pytest.mark.parametrize("path", sorted(RETIME.glob("paired_bs*.json")), ids=lambda p: p.stem)
def test_paired_runs_alternate_abba_and_report_the_median_of_pairs(path):
    doc = json.loads(path.read_text())
    paired = doc["paired"]
    assert len(paired["pairs"]) == doc["repeats"] >= 6
    for i, pair in enumerate(paired["pairs"]):
        assert pair["first"] == SIDES[i % 2]
        assert pair["ratio"] == pytest.approx(pair["mmdet"] / pair["torchvision-matched"])
    ratios = [p["ratio"] for p in paired["pairs"]]
    assert paired["ratio_median_of_pairs"] == pytest.approx(statistics.median(ratios))
    for side in SIDES:
        s = paired["sides"][side]
        assert s["iters_per_s_all"] == [p[side] for p in paired["pairs"]]
        assert s["losses_finite"] and s["loss_fell"]


@pytest.mark.parametrize("path", sorted(RETIME.glob("sequential_bs*.json")), ids=lambda p: p.stem)
def test_sequential_runs_trained_both_sides(path):
    doc = json.loads(path.read_text())
    res = doc["results"]
    assert doc["ratio"] == pytest.approx(res["mmdet"]["iters_per_s"] / res["torchvision-matched"]["iters_per_s"])
    for side in SIDES:
        assert res[side]["losses_finite"] and res[side]["loss_fell"]
        assert len(res[side]["iters_per_s_all"]) == doc["repeats"]


def test_the_package_timed_is_recipe_run9s_and_its_ladder_passed_there():
    verify = json.loads((RETIME / "verify_installed_sm90.json").read_text())
    assert verify["ok"] is True
    assert {lv["level"]: lv["status"] for lv in verify["levels"]} == {f"L{i}": "PASS" for i in range(1, 6)}
    assert "seed: 3 carried packages" in (RETIME / "STATUS_prefix").read_text()
    assert "H200" in (RETIME / "smi.txt").read_text()
    for path in RETIME.glob("*.json"):
        assert "/tmp/" not in path.read_text(), f"{path.name}: a machine path"
