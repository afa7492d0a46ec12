"""The GPU proof's stage registry (mmstack_lab.proof.stages) and its driver (proof.run).

The registry is the one place a stage is defined; these check its shape and that the driver keeps
its promises before anything runs: a stage whose needs did not run is refused, a GPU stage is
refused on a machine without one, an unknown stage is one line and exit 2. The stages themselves
ran for real: the CPU ones on the development machine (lab/results/cpu-dev/proof-cpu-build/), the
GPU ones in the runs under lab/results/h200/.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack_lab.docs.tables import TABLES
from mmstack_lab.proof import run as driver
from mmstack_lab.proof.context import Run
from mmstack_lab.proof.stages import BY_NAME, CPU_DEFAULT, GPU_DEFAULT, STAGES, plan

ROOT = Path(__file__).resolve().parents[2]


def test_every_stage_is_defined_once_with_known_needs_that_come_before_it():
    names = [s.name for s in STAGES]
    assert len(names) == len(set(names))
    for i, s in enumerate(STAGES):
        assert s.where in ("cpu", "gpu", "both"), s.name
        assert s.summary and s.outputs, s.name
        for need in s.needs:
            assert need in names[:i], f"{s.name} needs {need}, which is not an earlier stage"


def test_builds_are_cpu_stages_and_the_gpu_machine_only_tests_installs_and_measures():
    cpu = {s.name for s in STAGES if s.where == "cpu"}
    assert {"noarch", "mmengine", "sm90", "ptx", "fat", "mmdet"} == cpu
    assert all(BY_NAME[n].where in ("cpu", "both") for n in CPU_DEFAULT)
    assert all(BY_NAME[n].where in ("gpu", "both") for n in GPU_DEFAULT), "the GPU machine builds nothing by default"
    assert "test" in GPU_DEFAULT and "seed" in GPU_DEFAULT


def test_each_docs_table_a_stage_feeds_exists():
    for s in STAGES:
        if s.docs:
            assert s.docs in TABLES, (s.name, s.docs)


def test_no_stage_edits_a_recipe_with_sed():
    """Variants and flags go through `mmstack build`; --proposed edits the copy's patch list as YAML."""
    for mod in ("stages", "context", "run"):
        tree = ast.parse((ROOT / "lab/src/mmstack_lab/proof" / f"{mod}.py").read_text())
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        assert "sed" not in strings, mod


def test_plan_keeps_registry_order_and_refuses_unknown_names():
    assert [s.name for s in plan(["test", "seed", "standin"])] == ["standin", "seed", "test"]
    with pytest.raises(ValueError, match="unknown stage"):
        plan(["sm91"])


def _run(tmp_path: Path) -> Run:
    return Run(root=ROOT, carry=tmp_path / "carry", res=tmp_path / "res", work=tmp_path / "work", py=sys.executable,
               facts={"python": "3.11", "torch": "2.13", "cuda": "", "gcc": "12", "c_stdlib_version": ""})


def test_a_stage_whose_needs_never_ran_is_refused_before_anything_runs(tmp_path):
    r = _run(tmp_path)
    r.res.mkdir()
    r.work.mkdir()
    assert driver.execute(r, ["mmdet"]) == 2
    status = (r.res / "STATUS").read_text()
    assert "FAIL plan: mmdet needs standin; mmdet needs recipes; mmdet needs mmengine" in status
    assert not list(r.work.iterdir()), "nothing ran"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU is present")
def test_gpu_stages_are_refused_on_a_machine_without_a_gpu(tmp_path):
    r = _run(tmp_path)
    r.res.mkdir()
    r.work.mkdir()
    (r.work / ".done-standin").touch()
    assert driver.execute(r, ["seed", "test"]) == 2
    assert "seed, test need a GPU; this machine has none" in (r.res / "STATUS").read_text()


def test_unknown_stage_on_the_command_line_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mmstack_lab.proof.run", "--stages", "sm91", "--res",
                           str(tmp_path / "res"), "--work", str(tmp_path / "w")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "unknown stage(s) sm91" in proc.stderr


def test_without_drops_an_option_and_its_value_in_either_spelling():
    argv = ["--where", "gpu", "--carry", "../.carry", "--stages", "a b", "--start=560", "--ptx-arch", "8.9"]
    assert driver._without(argv, "--start", "--carry") == ["--where", "gpu", "--stages", "a b", "--ptx-arch", "8.9"]


def test_a_detached_run_works_from_its_own_copy_of_the_tree_and_the_carry(tmp_path):
    """--start copies the checkout and the carry's parts under WORK and runs from there: the device
    tool replaces the checkout on every later call (recipe-run10 on the H100 lost two stages to it)."""
    carry, res, work = tmp_path / "carry", tmp_path / "res", tmp_path / "w"
    (carry / "packages").mkdir(parents=True)
    (carry / "packages" / "x-1-0.conda").write_bytes(b"x")
    (carry / "site.tar.xz").write_bytes(b"")
    (carry / "unrelated.txt").write_text("not a part the stages read")
    env = {**__import__("os").environ, "SKIP_PIP": "1", "PYTHONPATH": str(ROOT / "lab" / "src")}
    proc = subprocess.run([sys.executable, "-m", "mmstack_lab.proof.run", "--where", "gpu", "--rehearse", "--stages",
                           "ckpt", "--carry", str(carry), "--res", str(res), "--work", str(work), "--start", "120"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "--- done=yes" in proc.stdout, proc.stdout
    assert "FAIL plan: ckpt needs" in (res / "STATUS").read_text()
    tree = work / "tree"
    assert (tree / "lab" / "src" / "mmstack_lab" / "proof" / "run.py").read_bytes() == \
        (ROOT / "lab" / "src" / "mmstack_lab" / "proof" / "run.py").read_bytes()
    assert not (tree / ".git").exists()
    assert sorted(p.name for p in (work / "carry").iterdir()) == ["packages", "site.tar.xz"]
    assert (work / "carry" / "packages" / "x-1-0.conda").read_bytes() == b"x"


def test_gpu_time_adds_up_the_runs_own_timed_files():
    """recipe-run9 built and tested on the H200: the GPU machine's seconds are its timed.py files' sum."""
    import json

    from mmstack_lab.paths import RESULTS
    from mmstack_lab.proof import gpu_time

    run = RESULTS / "h200" / "recipe-run9"
    doc = gpu_time.before(run)
    walls = [json.loads((run / f).read_text())["wall_s"] for f in
             ("standin_time.json", "build_time_noarch.json", "build_time_sm90.json", "build_time_mmdet.json")]
    assert doc["total_s"] == round(sum(walls), 1)
    assert doc["seconds"]["build+test mmengine"] is None  # not in that run: null, never a guess


def test_gpu_time_compares_only_passing_sections_on_the_same_gpu(tmp_path):
    """recipe-run10 (H100; sm_90 and mmdet sections did not pass) against run 9 (H200): no ratio,
    each reason named. Two runs on one GPU with a passing section: the ratio of that package."""
    import json

    from mmstack_lab.paths import RESULTS
    from mmstack_lab.proof import gpu_time

    got = gpu_time.like_for_like(RESULTS / "h200" / "recipe-run9", RESULTS / "h100" / "recipe-run10")
    assert got["after_over_before"] is None
    assert got["not_compared"][0].startswith("different GPUs (NVIDIA H200 against NVIDIA H100")
    assert "mmcv_cuda130_sm90: its test section did not pass in recipe-run10" in got["not_compared"]

    b, a = tmp_path / "b", tmp_path / "a"
    for run in (b, a):
        run.mkdir()
        (run / "machine.txt").write_text("NVIDIA H200, 9.0, 580.159.04, 143771 MiB\n")
    (b / "build_time_sm90.json").write_text(json.dumps({"wall_s": 300.0}))
    (a / "test_time_mmcv_cuda130_sm90.json").write_text(json.dumps({"wall_s": 105.0}))
    (a / "test_mmcv_cuda130_sm90.json").write_text(json.dumps({"passed": True, "packages": [{"passed": True}]}))
    got = gpu_time.like_for_like(b, a)
    assert got == {"packages": {"sm90": {"before": 300.0, "after": 105.0}}, "after_over_before": 0.35, "not_compared": []}


def test_proposed_seeds_the_candidate_builds_in_place_of_the_same_packages(tmp_path):
    from dataclasses import replace

    from mmstack_lab.proof.stages import carried_packages

    r = _run(tmp_path)
    (r.carry / "packages").mkdir(parents=True)
    (r.carry / "proposed").mkdir()
    for name in ("mmcv-2.2.0-cuda130_sm90_py312_h9d68dc8_500.conda", "mmdet-3.3.0-mmcv22_pyh8259157_1.conda",
                 "mmstack-0.1.0-pyh8259157_0.conda"):
        (r.carry / "packages" / name).touch()
    (r.carry / "proposed" / "mmcv-2.2.0-cuda130_sm90_py312_h360a1f8_500.conda").touch()
    plain = [p.name for p in carried_packages(r)]
    assert plain == ["mmcv-2.2.0-cuda130_sm90_py312_h9d68dc8_500.conda", "mmdet-3.3.0-mmcv22_pyh8259157_1.conda",
                     "mmstack-0.1.0-pyh8259157_0.conda"]
    proposed = [p.name for p in carried_packages(replace(r, proposed=True))]
    assert proposed == ["mmcv-2.2.0-cuda130_sm90_py312_h360a1f8_500.conda", "mmdet-3.3.0-mmcv22_pyh8259157_1.conda",
                        "mmstack-0.1.0-pyh8259157_0.conda"]
    assert "proposed" in driver.CARRIED, "a detached run copies the candidates too"


def test_seed_leaves_only_this_calls_packages_in_the_channel(tmp_path):
    """A warm GPU machine keeps the last call's channel: perf-run2 tested an earlier call's mmcv beside
    the candidate, and its results replaced the candidate's. seed removes what this call did not carry."""
    rattler_build = pytest.importorskip("rattler_build")
    from mmstack.builder import channel
    from mmstack_lab.proof.stages import _seed

    def package(name: str, build: str) -> Path:
        files = tmp_path / f"files-{name}-{build}"
        (files / "share" / name).mkdir(parents=True)
        (files / "share" / name / "x.txt").write_text(build)
        out = tmp_path / f"built-{build}" / "noarch"
        out.mkdir(parents=True, exist_ok=True)
        return rattler_build.assemble_package(name=name, version="1.0", target_platform="noarch", build_string=build,
                                              output_dir=out, files_dir=files, depends=[], noarch="generic").path

    r = _run(tmp_path)
    r.res.mkdir()
    r.work.mkdir()
    channel.add_packages(r.channel, [package("mmstack", "hold_0")])  # an earlier call's
    (r.carry / "packages").mkdir(parents=True)
    shutil.copy2(package("mmstack", "hnew_0"), r.carry / "packages")
    assert _seed(r) == 0
    assert [p.name for p in r.ours()] == ["mmstack-1.0-hnew_0.conda"]
    index = json.loads((r.channel / "noarch" / "repodata.json").read_text())
    assert sorted({**index.get("packages", {}), **index.get("packages.conda", {})}) == ["mmstack-1.0-hnew_0.conda"]
    assert "removed 1 package(s) an earlier call left in the channel (mmstack-1.0-hold_0.conda)" in (
        r.res / "STATUS").read_text()
    # the seeded file by content (a --proposed build shares its file name with the recipe's package)
    (seeded,) = json.loads((r.res / "seeded.json").read_text())
    carried = r.carry / "packages" / "mmstack-1.0-hnew_0.conda"
    assert seeded == {"file": carried.name, "from": "packages", "sha256": hashlib.sha256(carried.read_bytes()).hexdigest()}


def test_recipe_run13_tested_the_cpu_built_sm90_package_and_built_one_itself_on_one_gpu():
    """Issue 39's measure, like for like: on one H100, in one call, the GPU machine built the sm_90
    mmcv with its test section (before) and ran the whole test section of the package the 2-core CPU
    machine had built (after, proof-cpu-build2: the seeded file), upstream's tests seeded and passing;
    gpu_time.json is what gpu_time makes of the run's own timed files."""
    import json

    from mmstack_lab.paths import RESULTS
    from mmstack_lab.proof import gpu_time

    run, cpu = RESULTS / "h100" / "recipe-run13", RESULTS / "cpu-dev" / "proof-cpu-build2"
    carried = (run / "seed.out").read_text().split()
    assert carried == [p for p in (cpu / "packages.txt").read_text().split() if p.startswith(("mmcv-", "mmstack-"))]
    (mmcv,) = [p for p in carried if p.startswith("mmcv-")]
    status = (run / "STATUS").read_text()
    assert f"test {mmcv} rc=0" in status and "sm90 build rc=0" in status
    doc = json.loads((run / "test_mmcv_cuda130_sm90.json").read_text())
    (pkg,) = doc["packages"]
    assert doc["passed"] and pkg["passed"] and Path(pkg["path"]).name == mmcv
    (up,) = [r for r in pkg["test_results"] if r.get("kind") == "upstream-tests"]
    assert up["counts"]["failed"] == 0 and up["counts"]["error"] == 0 and up["counts"]["passed"] >= 264
    assert up["seed"] == 0  # seeded per test (mmstack.verify.upstream_tests)
    assert gpu_time.gpu(run).startswith("NVIDIA H100")
    made = json.loads((run / "gpu_time.json").read_text())
    assert made["like_for_like"] == gpu_time.like_for_like(run, run)
    assert made["before"] == gpu_time.before(run) and made["after"] == gpu_time.after(run)
    pair = made["like_for_like"]["packages"]["sm90"]
    assert pair["after"] < pair["before"] / 2 and made["like_for_like"]["after_over_before"] < 0.5


def test_detprocs_batches_are_checked_on_the_command_line(tmp_path):
    assert driver._batches("8, 16") == (8, 16) and driver._batches("2") == (2,)
    proc = subprocess.run([sys.executable, "-m", "mmstack_lab.proof.run", "--detprocs", "8 x", "--res",
                           str(tmp_path / "res"), "--work", str(tmp_path / "w")], capture_output=True, text=True)
    assert proc.returncode == 2 and "argument --detprocs: '8 x': give positive batch sizes" in proc.stderr
    assert not (tmp_path / "res").exists()


def test_detprocs_runs_the_runs_batches_and_pairs(tmp_path, monkeypatch):
    """perf-run4 asked for batch 8 and 16 with 6 pairs: the stage times those, in that order."""
    from mmstack_lab.proof import stages

    calls = []
    monkeypatch.setattr(stages, "_lab", lambda r, name, module, *args, timeout=300: calls.append((name, args, timeout)) or 0)
    r = Run(root=ROOT, carry=tmp_path, res=tmp_path / "res", work=tmp_path / "w", detprocs_batches=(8, 16), detprocs_pairs=6)
    assert stages._detprocs(r) == 0
    assert [c[0] for c in calls] == ["detprocs_bs8_sm90", "detprocs_bs16_sm90"]
    assert all(c[1][c[1].index("--processes") + 1] == "6" and c[2] == 6 * 60 + 60 for c in calls)


def test_test_only_names_a_package_the_channel_lacks_fails_the_stage(tmp_path):
    from mmstack_lab.proof.stages import _test

    r = _run(tmp_path)
    r.res.mkdir()
    r.test_only = ("mmdet",)
    assert _test(r) == 1
    assert "test: no package of ours named mmdet in the channel" in (r.res / "STATUS").read_text()


def test_patchab_only_runs_the_named_candidates(tmp_path, monkeypatch):
    """perf-run6 timed proposed mmdet 0009 alone (`--patchab-only mmdet-0009`); without the option every
    candidate with a patch_ab: line runs, and one without (a CUDA candidate: it needs a --proposed
    build) does not. The candidates here are files of a scratch tree: which ones the repository holds
    changes as they enter their recipes."""
    from mmstack_lab.proof import stages

    root = tmp_path / "tree"
    for name, line in (("mmdet/proposed/0008-rpn-proposals-batched", "patch_ab: --package mmdet --ops \"\""),
                       ("mmdet/proposed/0009-anchor-targets-batched", "patch_ab: --package mmdet --ops \"\""),
                       ("mmcv/proposed/0016-cuda-helper-fewer-aten-includes", "Status: proposed")):
        f = root / "recipes" / f"{name}.patch"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"Subject: [PATCH] x\n\n{line}\n\n---\n")
    calls = []
    monkeypatch.setattr(stages, "_lab", lambda r, name, module, *args, timeout=300: calls.append(name) or 0)
    r = Run(root=root, carry=tmp_path, res=tmp_path / "res", work=tmp_path / "w", patchab_only=("mmdet-0009",))
    assert stages._patchab(r) == 0
    assert calls == ["patchab_mmdet-0009-anchor-targets-batched"]
    calls.clear()
    r.patchab_only = ()
    assert stages._patchab(r) == 0
    assert calls == ["patchab_mmdet-0008-rpn-proposals-batched", "patchab_mmdet-0009-anchor-targets-batched"]
