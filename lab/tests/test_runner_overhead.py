"""mmstack_lab.detector.runner_overhead (issue 24 item 2: what mmengine's Runner, hooks and logging and the
data loader add per iteration, the categories bench_detector.py's plain loop leaves out).

With the e2e prefix's real mmengine (the one its mmcv and mmdet run on): the three loops run the
same model, every iteration is counted, and the differences are what the JSON says they are. Its
numbers are measurements, rendered in docs/mmdet.md from lab/results/cpu-dev/, never
asserted here. A bad --skip is refused before anything runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack_lab.paths import child_env

ROOT = Path(__file__).resolve().parents[2]
MODULE = "mmstack_lab.detector.runner_overhead"
RESULT = ROOT / "lab" / "results" / "cpu-dev" / "runner_overhead.json"


def _consistent(doc: dict) -> None:
    assert set(doc["loops"]) == {"bare", "loader", "runner"}
    for loop in doc["loops"].values():
        assert loop["iterations"] == doc["rounds"] * (doc["iters"] - doc["skip"])
        assert len(loop["per_round_median_ms"]) == doc["rounds"] and loop["median_ms"] > 0
    for key in ("median_ms", "mean_ms"):
        assert doc["hooks_and_logging_ms"][key] == pytest.approx(doc["loops"]["runner"][key] - doc["loops"]["loader"][key])
        assert doc["loading_ms"][key] == pytest.approx(doc["loops"]["loader"][key] - doc["loops"]["bare"][key])


@pytest.mark.slow
def test_the_three_loops_run_with_the_real_mmengine(real_mmcv_python, tmp_path):
    done = subprocess.run([real_mmcv_python, "-m", MODULE, "--iters", "60", "--rounds", "2", "--skip", "10", "--json"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=child_env())
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["device"] == "cpu" and doc["versions"]["mmengine"]
    _consistent(doc)
    assert list(tmp_path.iterdir()) == []  # the Runner's work_dir was a temporary one


def test_the_committed_cpu_result_is_consistent_and_names_no_machine_path():
    doc = json.loads(RESULT.read_text())
    _consistent(doc)
    assert "/work/" not in RESULT.read_text() and "/tmp/" not in RESULT.read_text()


def test_a_skip_not_below_iters_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", MODULE, "--iters", "10", "--skip", "10"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 2 and "--skip 10 must be below --iters 10" in done.stderr
