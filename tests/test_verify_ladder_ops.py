"""`mmstack verify --l4 complete` on a real mmcv, L4's per-op text, and the one-child ladder (issue 13)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack.verify import ladder

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ROOT / "tests" / "data" / "faults"
OPS_FILE = ROOT / "src" / "mmstack" / "verify" / "_ladder_ops.py"
REFERENCES = {"cpu-kernel", "torch", "torchvision", "known-values"}


def verify(*args: str, pythonpath: Path | None = None, extra_env: dict | None = None, timeout: float = 600):
    env = {**os.environ, "COLUMNS": "200", **(extra_env or {})}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath)] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-m", "mmstack.cli", "verify", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


def levels_of(proc) -> dict:
    return {lv["level"]: lv for lv in json.loads(proc.stdout)["levels"]}


def load_ops():
    spec = importlib.util.spec_from_file_location("_ladder_ops_under_test", OPS_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- complete mode on the real mmcv ---------------------------------------------------------------


@pytest.mark.slow  # one child importing torch and mmcv, then ~60 ops (20-40 s on a 2-core CI machine)
def test_complete_mode_covers_every_export_of_the_real_mmcv(real_mmcv_python):
    proc = verify("--levels", "L1,L2,L3,L4", "--l4", "complete", "--json", "--python", real_mmcv_python)
    out = levels_of(proc)
    l4 = out["L4"]
    assert proc.returncode == 0 and l4["status"] == "PASS", (l4["reason"], proc.stderr[-2000:])
    exported = json.loads(subprocess.run(
        [real_mmcv_python, "-c", "import json, mmcv.ops; print(json.dumps(list(mmcv.ops.__all__)))"],
        capture_output=True, text=True, check=True).stdout)
    ev = l4["evidence"]
    records = ev["ops"]
    assert ev["exported"] == len(exported)
    # every exported name is one op's record: nothing dropped, no name twice
    covered = [n for r in records for n in r["exports"]]
    assert sorted(covered) == sorted(exported)
    assert ev["unchecked_exports"] == []
    on_gpu = out["L2"]["status"] == "PASS"
    for r in records:
        assert {"op", "device", "reference", "references", "status", "max_error", "reason"} <= set(r), r
        if r["status"] == "pass":
            assert r["references"] and set(r["references"]) <= REFERENCES and r["reference"] == r["references"][0]
            assert isinstance(r["max_error"], float), r
        elif r["status"] == "run-only":
            assert r["reference"] == "run-only" and r["references"] == [] and r["max_error"] is None, r
        else:
            assert r["status"] == "skip" and r["reason"], r
        if not on_gpu:  # no CPU kernel comparison without a second device; CUDA-only ops say so
            assert "cpu-kernel" not in r["references"], r
            assert r["device"] == "cpu"
            if r["status"] == "skip":
                assert r["reason"].startswith("CUDA-only"), r
    cov = ev["coverage"]
    assert cov["ops"] == len(records)
    assert cov["compared"] == sum(r["status"] == "pass" for r in records)
    assert cov["compared"] + len(cov["run_only"]) + sum(map(len, cov["skipped"].values())) == len(records)
    assert cov["failed"] == []
    assert cov["compared"] >= 25, cov  # the CPU build alone compares these many
    # the text says, per op, what it was compared with, and run-only ops apart from compared ones
    text = l4["reason"]
    compared_part = text.split(". Compared: ")[1].split(". Run-only")[0]
    for r in records:
        if r["status"] == "pass":
            assert f"{r['op']} ({', '.join(r['references'])})" in compared_part, r["op"]
        elif r["status"] == "run-only":
            assert f"{r['op']} (" not in compared_part, r["op"]
    if str(ev["torchvision"]).startswith("torchvision not"):
        assert "torchvision" not in text.replace("torchvision not importable", "")
    # one interpreter for all four levels, and the time each level took
    timings = json.loads(proc.stdout)["timings"]
    assert timings["interpreters"] == 1
    assert set(timings["levels"]) == {"L1", "L2", "L3", "L4"} and timings["levels"]["L1"] > 0


@pytest.mark.slow  # one child per case, each importing torch and mmcv
@pytest.mark.parametrize("op, reference", [("roi_align", "known-values"), ("bbox_overlaps", "torch")])
def test_a_wrong_result_fails_L4_and_names_the_op(real_mmcv_python, op, reference):
    """The expected values of one op are shifted by 0.5 (MMSTACK_L4_PERTURB) and go through the
    same comparison every op uses: L4 must FAIL, name that op, and keep the others passing."""
    proc = verify("--levels", "L4", "--l4", "complete", "--json", "--python", real_mmcv_python,
                  extra_env={"MMSTACK_L4_PERTURB": op})
    l4 = levels_of(proc)["L4"]
    assert proc.returncode == 1 and l4["status"] == "FAIL"
    assert l4["reason"].startswith(f"1 op(s) failed: {op};"), l4["reason"]
    bad = [r for r in l4["evidence"]["ops"] if r["status"] == "fail"]
    assert [r["op"] for r in bad] == [op]
    assert f"vs {reference}: max |diff| 0.5" in bad[0]["reason"], bad[0]
    assert l4["evidence"]["coverage"]["failed"] == [op]


# -- L4's text (issue 17) -------------------------------------------------------------------------


def test_quick_is_a_named_subset_of_the_complete_checks():
    """One list of checks: the level table's quick set names ops of _ladder_ops.CHECKS, and plan()
    runs exactly those, in CHECKS' order, whether the installed mmcv exports them or not."""
    from mmstack.verify.levels import L4_SETS

    ops = load_ops()
    quick = L4_SETS["quick"]
    assert set(L4_SETS) == set(ladder.L4_MODES) and L4_SETS["complete"] is None
    assert set(quick) <= {c[0] for c in ops.CHECKS}
    todo, unknown, owner = ops.plan(["nms", "roi_align", "RoIAlign", "knn", "brand_new_op"], only=quick)
    assert [t[0] for t in todo] == [c[0] for c in ops.CHECKS if c[0] in quick] and unknown == []
    assert owner == {"roi_align": "roi_align", "RoIAlign": "roi_align", "nms": "nms"}
    with pytest.raises(KeyError, match="no_such_op"):
        ops.plan([], only=("nms", "no_such_op"))


def test_quick_text_names_what_each_op_was_compared_with():
    no_tv = {"device": "cpu", "torchvision": "torchvision not importable (ModuleNotFoundError: x)", "mode": "quick",
             "exported": 124, "ops": [
                 {"op": "roi_align", "status": "pass", "reference": "known-values", "references": ["known-values"]},
                 {"op": "deform_conv2d", "status": "pass", "reference": "torch", "references": ["torch", "known-values"]}]}
    text = ladder.l4_text(no_tv)
    assert text.startswith("2 ops (the quick set) on cpu: 2 compared, 0 run-only, 0 skipped. "
                           "Compared: roi_align (known-values); deform_conv2d (torch, known-values)")
    assert text.endswith("; torchvision not importable") and "CPU kernel" not in text
    gpu = {**no_tv, "device": "cuda", "torchvision": "0.20.1", "ops": [
        {"op": "roi_align", "status": "pass", "reference": "cpu-kernel",
         "references": ["cpu-kernel", "torchvision", "known-values"]},
        {"op": "box_iou_rotated", "status": "pass", "reference": "cpu-kernel", "references": ["cpu-kernel", "known-values"]}]}
    text = ladder.l4_text(gpu)
    assert "roi_align (cpu-kernel, torchvision, known-values)" in text
    assert "box_iou_rotated (cpu-kernel, known-values)" in text  # torchvision has no rotated IoU
    assert "not importable" not in text


def test_complete_text_and_coverage_from_records():
    ev = {"device": "cpu", "torchvision": "torchvision not importable (x)", "exported": 5, "ops": [
        {"op": "nms", "status": "pass", "reference": "known-values", "references": ["known-values"]},
        {"op": "bias_act", "status": "pass", "reference": "torch", "references": ["torch", "known-values"]},
        {"op": "bezier_align", "status": "run-only", "reference": "run-only", "references": []},
        {"op": "knn", "status": "skip", "reference": None, "references": [], "reason": "CUDA-only: no CPU kernel"},
    ]}
    cov = ladder.l4_coverage(ev)
    assert cov == {"exported": 5, "ops": 4, "compared": 2, "run_only": ["bezier_align"], "failed": [],
                   "skipped": {"CUDA-only: no CPU kernel": ["knn"]},
                   "compared_by_reference": {"known-values": ["nms"], "torch": ["bias_act"]}}
    text = ladder.l4_text(ev)
    assert text.startswith("4 ops (5 names exported) on cpu: 2 compared, 1 run-only, 1 skipped")
    assert "Compared: nms (known-values); bias_act (torch, known-values)." in text
    assert "Run-only (no reference): bezier_align" in text and "Skipped (CUDA-only: no CPU kernel): knn" in text


def test_plan_maps_aliases_to_one_op_and_lists_unknown_exports():
    ops = load_ops()
    todo, unknown, owner = ops.plan(["roi_align", "RoIAlign", "nms", "brand_new_op"])
    assert [t[0] for t in todo] == ["roi_align", "nms"]
    assert unknown == ["brand_new_op"]
    assert owner == {"roi_align": "roi_align", "RoIAlign": "roi_align", "nms": "nms"}
    names = [n for entry in ops.CHECKS for n in entry[1]]
    assert len(names) == len(set(names)), "a name belongs to one op"


def test_ops_file_imports_only_stdlib_torch_and_mmcv():
    tree = ast.parse(OPS_FILE.read_text())
    allowed = set(sys.stdlib_module_names) | {"torch", "torchvision", "mmcv", "__future__"}
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        for name in names:
            assert name.split(".")[0] in allowed, name


def test_unknown_l4_mode_is_bad_input():
    proc = verify("--l4", "fast")
    assert proc.returncode == 2 and "--l4 'fast'" in proc.stderr and "complete" in proc.stderr


# -- one child for all levels; a crash or hang costs a fresh one (issue 13) -------------------------


def test_a_crash_in_L2_is_its_fail_and_L3_runs_in_a_fresh_child():
    proc = verify("--json", "--levels", "L1,L2,L3", pythonpath=FAULTS / "cuda_init_segv")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    out = levels_of(proc)
    assert out["L1"]["status"] == "PASS"
    assert out["L2"]["status"] == "FAIL" and out["L2"]["reason"] == "crashed with SIGSEGV in torch.cuda.is_available"
    assert "Segmentation fault" in out["L2"]["evidence"]["output_tail"]
    assert out["L3"]["status"] == "PASS", out["L3"]
    children = data["timings"]["children"]
    assert data["timings"]["interpreters"] == 2
    assert children[0]["died_in"] == "L2" and children[0]["returncode"] == -11
    assert children[1]["parts"] == ["L3", "L3-info"] and children[1]["returncode"] == 0


def test_a_hang_in_L2_times_out_and_L3_runs_in_a_fresh_child():
    proc = verify("--json", "--levels", "L1,L2,L3", "--timeout", "3", pythonpath=FAULTS / "cuda_init_segv",
                  extra_env={"MMSTACK_FAULT": "hang"})
    data = json.loads(proc.stdout)
    out = levels_of(proc)
    assert out["L1"]["status"] == "PASS"
    l2 = out["L2"]
    assert l2["status"] == "FAIL" and l2["evidence"]["timed_out"] is True
    assert "timed out in torch.cuda.is_available" in l2["reason"] and l2["diagnosis"]["rule"] == "hang"
    assert out["L3"]["status"] == "PASS"
    assert data["timings"]["interpreters"] == 2 and data["timings"]["children"][0]["timed_out"] is True


@pytest.mark.parametrize("fault", ["undefined_symbol", "compiler_segv"])
def test_what_a_failure_blocks_costs_no_interpreter(fault):
    """L3 fails (by an exception, or by a crash in its last part): L4 and L5 are NOT RUN without a new child."""
    proc = verify("--json", "--levels", "L1,L3,L4,L5", pythonpath=FAULTS / fault)
    data = json.loads(proc.stdout)
    assert [lv["status"] for lv in data["levels"]] == ["PASS", "FAIL", "NOT RUN", "NOT RUN"]
    assert data["timings"]["interpreters"] == 1
    assert data["timings"]["children"][0]["parts"] == ["L1", "L3", "L3-info", "L4", "L5"]


# -- L4's references against upstream's own expectations -----------------------------------------


def _upstream_literals(test_file: str, *names: str) -> dict:
    """Module-level literals of one of upstream mmcv v2.2.0's tests (tests/ of the tag archive)."""
    import tarfile

    from mmstack_lab.standin import offline

    with tarfile.open(offline.cached_github_archive()) as tar:
        source = tar.extractfile(f"mmcv-2.2.0/{test_file}").read().decode()
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "id", None) in names:
            values[node.targets[0].id] = ast.literal_eval(node.value)
    assert set(values) == set(names), f"{test_file} has no {set(names) - set(values)}"
    return values


def test_tin_shift_reference_gives_upstream_test_tin_shift_outputs():
    """c_tin_shift (CUDA-only op) compares with tin_shift_reference: it must give the outputs
    upstream's test_tin_shift expects for its inputs and both of its shift tables."""
    torch = pytest.importorskip("torch")
    ops = load_ops()
    up = _upstream_literals("tests/test_ops/test_tin_shift.py", "inputs", "shifts", "outputs")
    x = torch.tensor(up["inputs"])
    assert tuple(x.shape) == (2, 4, 8, 2)  # [N, num_segments, C, H*W]: the layout c_tin_shift uses
    for shift, output in zip(up["shifts"], up["outputs"], strict=True):
        got = ops.tin_shift_reference(x, torch.tensor(shift, dtype=torch.int32))
        assert torch.allclose(got, torch.tensor(output), atol=1e-4, rtol=1e-3)  # upstream rounds to 5 digits


def test_every_l4_op_names_the_upstream_test_of_the_same_op_and_it_exists():
    import tarfile

    from mmstack_lab.standin import offline

    ops = load_ops()
    assert set(ops.UPSTREAM_TESTS) == {entry[0] for entry in ops.CHECKS}
    with tarfile.open(offline.cached_github_archive()) as tar:
        names = set(tar.getnames())
    for op, test in ops.UPSTREAM_TESTS.items():
        if test is not None:
            assert f"mmcv-2.2.0/tests/{test}" in names, (op, test)
    # the ops upstream tests nowhere are few; each is compared by L4 itself
    assert sorted(op for op, t in ops.UPSTREAM_TESTS.items() if t is None) == [
        "GroupAll", "iou_bev", "point_sample", "scatter_nd"]
