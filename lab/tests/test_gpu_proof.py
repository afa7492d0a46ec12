"""The H200 proof's parts that run anywhere: the stand-in nvcc activation (as conda-forge's
behaves), requirement mapping for repacked distributions, and the committed recipe-run1 results
read back by the summary script (the sandbox ladder really ran L2 and L4 on the GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from mmstack_lab.common.result_logs import read_log
from mmstack_lab.standin import bootstrap_cuda

ROOT = Path(__file__).resolve().parents[2]
RUN1 = ROOT / "lab" / "results" / "h200" / "recipe-run1"


def _activate(tmp_path: Path, env: dict) -> tuple[int, dict]:
    script = tmp_path / "activate.sh"
    script.write_text(bootstrap_cuda._NVCC_ACTIVATE.format(stand_in="x", targets=bootstrap_cuda.TARGETS))
    code = f"source {script}; rc=$?; echo RC=$rc; env"
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env})
    lines = out.stdout.splitlines()
    rc = int(next(line for line in lines if line.startswith("RC="))[3:])
    return rc, dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("RC="))


def test_nvcc_activation_in_a_build_points_nvcc_at_cxx_and_the_host_targets_dir(tmp_path):
    rc, env = _activate(tmp_path, {"CONDA_BUILD": "1", "PREFIX": "/h", "BUILD_PREFIX": "/b", "CXX": "/usr/bin/g++"})
    assert rc == 0
    assert "-ccbin=/usr/bin/g++" in env["NVCC_PREPEND_FLAGS"]
    assert "-I/h/targets/x86_64-linux/include" in env["NVCC_APPEND_FLAGS"]
    assert "-L/h/targets/x86_64-linux/lib" in env["LDFLAGS"] and "-L/b/targets/x86_64-linux/lib" in env["LDFLAGS"]
    assert "-I/h/targets/x86_64-linux/include" in env["CXXFLAGS"]


def test_nvcc_activation_without_a_cxx_compiler_fails(tmp_path):
    rc, env = _activate(tmp_path, {"CONDA_BUILD": "1", "PREFIX": "/h", "BUILD_PREFIX": "/b"})
    assert rc != 0
    assert "NVCC_PREPEND_FLAGS" not in env


def test_repacked_distributions_depend_on_what_their_metadata_requires():
    dist = metadata.distribution("rich")
    known = bootstrap_cuda._known_names([])
    deps = bootstrap_cuda._conda_depends(dist, known, log=lambda _m: None)
    assert {"markdown-it-py", "pygments"} <= set(deps)


RUN2 = RUN1.with_name("recipe-run2")
RUN3 = RUN1.with_name("recipe-run3")
RUN4 = RUN1.with_name("recipe-run4")
RUN5 = RUN1.with_name("recipe-run5")
RUN6 = RUN1.with_name("recipe-run6")
RUN7 = RUN1.with_name("recipe-run7")
FAT1 = RUN1.with_name("recipe-fat1")
FAT2 = RUN1.with_name("recipe-fat2")  # the fat build with --compress-mode=size
FAT3 = RUN1.with_name("recipe-fat3")  # the fat build with --threads 0
RUN8 = RUN1.with_name("recipe-run8")  # sm_90 with --compress-mode=size
RUN9 = RUN1.with_name("recipe-run9")  # sm_90 with candidate 0012, which then entered the recipe


@pytest.mark.parametrize("run", [RUN1, RUN2, RUN3, RUN4, RUN5, RUN6, RUN7, RUN8, RUN9, FAT1, FAT2, FAT3], ids=lambda p: p.name)
def test_recipe_run_summary_is_what_the_script_makes_of_the_committed_files(run):
    if not run.is_dir():
        pytest.skip(f"no committed {run.name} results")
    out = subprocess.run([sys.executable, "-m", "mmstack_lab.proof.gpu_proof_summary", str(run)],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == json.loads((run / "summary.json").read_text())


@pytest.mark.parametrize("run,suites", [(RUN2, "tests/test_ops"), (RUN3, "tests/test_ops tests/test_cnn"),
                                       (RUN4, "tests/test_ops tests/test_cnn"), (RUN6, "tests/test_ops tests/test_cnn"),
                                       (RUN7, "tests/test_ops tests/test_cnn"), (RUN9, "tests/test_ops tests/test_cnn")],
                         ids=lambda x: getattr(x, "name", x))
def test_recipe_run_tested_sm90_package_landed_with_upstream_tests_on_the_h200(run, suites):
    """issue 20: the sm_90 build passed its whole test section on the GPU and landed; its sandbox
    ran L2 and L4 on the H200 (not skipped) and upstream's tests with no failure (recipe-run3:
    test_cnn too, every one of its files among the passes)."""
    summary = json.loads((run / "summary.json").read_text())
    sm90 = summary["builds"]["sm90"]
    assert sm90["command_rc"] == 0 and sm90["tests_run"] and sm90["landed_in_channel"]
    assert {k: v["status"] for k, v in sm90["sandbox_ladder"]["levels"].items()} == {
        "L1": "PASS", "L2": "PASS", "L3": "PASS", "L4": "PASS"}
    (pkg,) = sm90["packages"]
    assert pkg["build_string"].startswith("cuda130_sm90_py312_")
    (upstream,) = pkg["test_results"]
    assert upstream["kind"] == "upstream-tests" and upstream["failed"] == []
    assert upstream["counts"]["passed"] >= 200 and upstream["counts"]["failed"] == upstream["counts"]["error"] == 0
    assert upstream.get("path", "tests/test_ops") == suites
    if "test_cnn" in suites:
        cnn = {f: c for f, c in upstream["by_file"].items() if f.startswith("tests/test_cnn/")}
        assert len(cnn) >= 15 and all(c.get("passed") for c in cnn.values())
    l4 = summary["installed_prefix_l4_complete"]["sm90"]["l4_per_op"]
    assert l4["device"] == "cuda" and l4["coverage"]["failed"] == [] and l4["coverage"]["compared"] >= 60
    assert summary["installed_prefix_ladder"]["sm90"]["ok"] is True


def test_recipe_run5_tested_ptx_package_landed_and_runs_through_the_jit_on_the_h200():
    """issue 20: the 8.0+PTX build passed its whole test section on the H200 (through the driver's
    JIT: L2 says so), with upstream's tests and `fatbin --expect 8.0+PTX`, and landed; installed
    with py-rattler, `arch check` predicts PTX JIT and L1-L5 pass with both detector models."""
    summary = json.loads((RUN5 / "summary.json").read_text())
    ptx = summary["builds"]["ptx"]
    assert ptx["command_rc"] == 0 and ptx["tests_run"] and ptx["landed_in_channel"] and ptx["tests_failed"] is None
    sandbox = ptx["sandbox_ladder"]
    assert "--expect-gpu" in sandbox["command"] and "--l4 complete" in sandbox["command"] and sandbox["l4_device"] == "cuda"
    assert {k: v["status"] for k, v in sandbox["levels"].items()} == {"L1": "PASS", "L2": "PASS", "L3": "PASS", "L4": "PASS"}
    assert "PTX JIT only from 8.0" in sandbox["levels"]["L2"]["reason"] and "H200" in sandbox["levels"]["L2"]["reason"]
    (pkg,) = ptx["packages"]
    assert pkg["build_string"].startswith("cuda130_sm80ptx_py312_") and pkg["variant"]["mmcv_arch_list"] == "8.0+PTX"
    (upstream,) = pkg["test_results"]
    assert upstream["path"] == "tests/test_ops tests/test_cnn" and upstream["failed"] == []
    assert upstream["counts"]["passed"] >= 200 and upstream["counts"]["failed"] == upstream["counts"]["error"] == 0
    # recipe patch 0008 (nms) is in this package: upstream's nms and iou3d tests ran its kernel
    assert upstream["by_file"]["tests/test_ops/test_nms.py"]["passed"] >= 1
    assert upstream["by_file"]["tests/test_ops/test_iou3d.py"]["passed"] >= 1
    log = read_log(RUN5 / "rattler-build-ptx.log")
    assert "+ mmstack fatbin --expect 8.0+PTX" in log and "all tests passed" in log
    assert summary["arch_check"]["ptx"]["verdict"] == "ptx-jit" and summary["arch_check"]["ptx"]["ok"]
    (fat,) = summary["fatbin"]["ptx"]["files"]
    assert fat["sass"] == ["8.0"] and fat["ptx"] == ["8.0"]
    installed = summary["installed_prefix_ladder"]["ptx"]
    assert installed["ok"] and all(lv["status"] == "PASS" for lv in installed["levels"].values())
    assert set(installed["levels"]) == {"L1", "L2", "L3", "L4", "L5"}
    l4 = summary["installed_prefix_l4_complete"]["ptx"]["l4_per_op"]
    assert l4["device"] == "cuda" and l4["coverage"]["failed"] == [] and l4["coverage"]["compared"] >= 60


def test_recipe_run5_ladder_costs_little_over_a_bare_import_on_the_h200():
    """issue 20 item 3 (issue 13's other half): bench_ladder in the installed sm_90 prefix on the
    H200, goal L1-L4 <= 1.5x a bare `import mmcv.ops` + one op, one interpreter for the ladder."""
    bench = json.loads((RUN5 / "summary.json").read_text())["bench_ladder"]
    assert bench["machine"] == "H200" and bench["runs"] >= 3
    assert all(len(v) == bench["runs"] for v in bench["seconds"].values())
    assert bench["ratio"]["L1-L4_over_bare"] <= 1.5
    assert bench["interpreters"]["L1-L4"] == [1] * bench["runs"]


@pytest.mark.skipif(not RUN1.is_dir(), reason="no committed recipe-run1 results")
def test_recipe_run1_sandbox_ran_l2_and_l4_on_the_h200():
    summary = json.loads((RUN1 / "summary.json").read_text())
    for tag in ("sm90", "ptx"):
        sandbox = summary["builds"][tag]["sandbox_ladder"]
        assert "--expect-gpu" in sandbox["command"] and "--l4 complete" in sandbox["command"]
        assert sandbox["levels"]["L2"]["status"] == "PASS" and "H200" in sandbox["levels"]["L2"]["reason"]
        assert sandbox["l4_device"] == "cuda"
        assert any(op["status"] == "pass" and op["device"] == "cuda" for op in sandbox["l4_ops"])
    assert "PTX JIT" in summary["builds"]["ptx"]["sandbox_ladder"]["levels"]["L2"]["reason"]
    assert summary["arch_check"]["ptx"]["verdict"] == "ptx-jit"
    installed = summary["installed_prefix_ladder"]["sm90"]
    assert installed["ok"] and all(lv["status"] == "PASS" for lv in installed["levels"].values())


@pytest.mark.skipif(not RUN1.is_dir(), reason="no committed recipe-run1 results")
def test_schedule_replay_of_the_current_patch_is_the_committed_one():
    from mmstack_lab.standin import offline

    sdist = Path(offline.CACHE_ROOT) / "sdist" / "mmcv-2.2.0.tar.gz"
    if not sdist.is_file():
        pytest.skip("mmcv sdist not cached (tests/test_build_e2e.py fetches it)")
    out = subprocess.run([sys.executable, "-m", "mmstack_lab.build_cost.schedule_units", str(RUN1 / "units_sm90.json"),
                          "--sdist", str(sdist), "--cores", "16"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    got, want = json.loads(out), json.loads((RUN1 / "schedule_sm90_patch-v2.json").read_text())
    assert got["patch_sha256"] == want["patch_sha256"], "patch 0007 changed: regenerate schedule_sm90_patch-v2.json"
    assert got["orders"] == want["orders"]
    spans = {name: row["span_s"] for name, row in got["orders"].items()}
    assert spans["patch 0007"] < spans["setuptools (sorted by path)"]


def test_recipe_run6_built_the_patches_that_entered_the_recipe_and_no_unit_sets_the_span():
    """issue 24: the sm_90 build with patches 0009/0010 (and mmdet's 0003) as candidates passed
    its test section on the H200 (upstream's test_filtered_lrelu and test_roi_align among the
    passes) and the patched mmdet its own; with 0009 no filtered_lrelu unit is the longest, and
    the compile span is within 1.1x of its parallel limit."""
    summary = json.loads((RUN6 / "summary.json").read_text())
    built = (RUN6 / "proposed.txt").read_text()
    assert all(n in built for n in ("mmcv/0009-", "mmcv/0010-", "mmdet/0003-"))
    sm90, mmdet = summary["builds"]["sm90"], summary["builds"]["mmdet"]
    assert mmdet["command_rc"] == 0 and mmdet["tests_run"] and mmdet["landed_in_channel"]
    (upstream,) = sm90["packages"][0]["test_results"]
    for f in ("tests/test_ops/test_filtered_lrelu.py", "tests/test_ops/test_roi_align.py"):
        assert upstream["by_file"][f]["passed"] >= 1 and not upstream["by_file"][f].get("failed")
    comp = sm90["compile"]
    assert not comp["longest_unit"]["unit"].startswith("filtered_lrelu")
    assert comp["span_over_limit"] <= 1.1
    log = read_log(RUN6 / "rattler-build-sm90.log")  # the six kernel units compiled, each alone
    assert all(f"filtered_lrelu_{s}_{t}.o" in log for s in ("wr", "rd", "ns") for t in ("half", "float"))
    assert summary["installed_prefix_ladder"]["sm90"]["levels"]["L5"]["status"] == "PASS"


def test_recipe_fat1_fat_build_was_tested_on_the_gpu_within_its_parallel_limit():
    """issue 24 item 3: the fat variant (arch_tag all, the host pytorch's arch list: on the device the
    stand-in's) built through the recipe, passed its whole test section on the H200 (L2 read every
    SASS target of the list from _ext, upstream's tests passed) and landed; its compile span is
    within 1.1x of max(unit CPU-s / cores, longest unit), and the package is larger than the sm_90
    one (the size goal, 1.6x, is not met: docs/benchmarks.md says why)."""
    fat = json.loads((FAT1 / "summary.json").read_text())["builds"]["fat"]
    assert fat["command_rc"] == 0 and fat["tests_run"] and fat["landed_in_channel"]
    (pkg,) = fat["packages"]
    assert pkg["build_string"].startswith("cuda130_all_py312_") and pkg["variant"]["arch_tag"] == "all"
    archs = pkg["variant"]["mmcv_arch_list"].split(";")
    levels = fat["sandbox_ladder"]["levels"]
    assert {k: v["status"] for k, v in levels.items()} == {"L1": "PASS", "L2": "PASS", "L3": "PASS", "L4": "PASS"}
    assert f"SASS [{', '.join(archs)}]" in levels["L2"]["reason"]
    (upstream,) = pkg["test_results"]
    assert upstream["counts"]["failed"] == upstream["counts"]["error"] == 0 and upstream["counts"]["passed"] >= 200
    comp = fat["compile"]
    assert comp["parallel_limit_s"] == round(max(comp["unit_cpu_s"] / comp["cores"], comp["longest_unit"]["s"]), 1)
    assert comp["span_over_limit"] <= 1.1
    sm90 = json.loads((RUN7 / "summary.json").read_text())["builds"]["sm90"]
    assert sm90["compile"]["span_over_limit"] <= 1.1
    assert comp["unit_cpu_s"] > 2 * sm90["compile"]["unit_cpu_s"]
    assert pkg["conda_bytes"] > 1.6 * sm90["packages"][0]["conda_bytes"]
    sizes = json.loads((RUN7 / "conda_sizes_sm90.json").read_text())["packages"][0]
    assert sizes["conda_bytes"] == sm90["packages"][0]["conda_bytes"] and list(sizes["stored_by_arch"]) == ["9.0"]
    assert 0 < sizes["nv_fatbin_bytes"] < sizes["ext_bytes"]


def _tested_on_the_gpu(build, tag_prefix):
    """A build of scripts/gpu-proof.sh that landed after its whole test section passed on the GPU."""
    assert build["command_rc"] == 0 and build["tests_run"] and build["landed_in_channel"]
    (pkg,) = build["packages"]
    assert pkg["build_string"].startswith(tag_prefix)
    levels = build["sandbox_ladder"]["levels"]
    assert {k: v["status"] for k, v in levels.items()} == {"L1": "PASS", "L2": "PASS", "L3": "PASS", "L4": "PASS"}
    assert f"SASS [{', '.join(pkg['variant']['mmcv_arch_list'].split(';'))}]" in levels["L2"]["reason"]
    (upstream,) = pkg["test_results"]
    assert upstream["counts"]["failed"] == upstream["counts"]["error"] == 0 and upstream["counts"]["passed"] >= 200
    return pkg


@pytest.mark.parametrize(("run", "tag", "flags"), [(FAT2, "fat", "--compress-mode=size"), (FAT3, "fat", "--threads 0"),
                                                   (RUN8, "sm90", "--compress-mode=size")], ids=lambda x: getattr(x, "name", x))
def test_fat_build_variants_reached_nvcc_and_passed_on_the_gpu(run, tag, flags):
    """issue 24 item 3: the fat build with nvcc --compress-mode=size and with --threads 0 (and the sm_90
    build with size mode): the flags reached nvcc (build.sh's trace in the log), and each package
    passed upstream's tests and L1-L4 on the H200 with the stand-in pytorch's six SASS targets."""
    summary = json.loads((run / "summary.json").read_text())
    assert summary["nvcc_extra"] == flags
    log = read_log(run / f"rattler-build-{tag}.log")
    assert f"-Xfatbin -compress-all {flags}'" in log
    build = summary["builds"][tag]
    _tested_on_the_gpu(build, f"cuda130_{'all' if tag == 'fat' else 'sm90'}_py312_")
    assert build["compile"]["span_over_limit"] <= 1.1


def test_size_mode_shrinks_both_packages_and_threads_buy_no_wall_time():
    """What the three builds showed: --compress-mode=size stores less device code per arch than
    -compress-all alone (fat: recipe-fat3's, same machine; sm_90: recipe-run7's), so both packages
    are smaller, but the fat/sm_90 ratio stays far above 1.6x; --threads 0 cut the longest unit but
    the fat build is CPU-bound (limit = unit CPU-s / cores), so it spent more CPU and no less wall."""
    size = json.loads((FAT2 / "conda_sizes.json").read_text())["packages"][0]
    cmp_ = json.loads((FAT3 / "conda_sizes.json").read_text())["packages"][0]
    assert set(size["stored_by_arch"]) == set(cmp_["stored_by_arch"]) and len(size["stored_by_arch"]) == 6
    assert all(size["stored_by_arch"][a] < cmp_["stored_by_arch"][a] for a in size["stored_by_arch"])
    assert size["text_bytes"] == cmp_["text_bytes"]  # host code identical: only the fatbin differs
    sm90_size = json.loads((RUN8 / "conda_sizes_sm90.json").read_text())["packages"][0]
    sm90_cmp = json.loads((RUN7 / "conda_sizes_sm90.json").read_text())["packages"][0]
    assert sm90_size["stored_by_arch"]["9.0"] < sm90_cmp["stored_by_arch"]["9.0"]
    assert size["conda_bytes"] < cmp_["conda_bytes"] and sm90_size["conda_bytes"] < sm90_cmp["conda_bytes"]
    assert size["conda_bytes"] / sm90_size["conda_bytes"] > 1.6
    fat = {r.name: json.loads((r / "summary.json").read_text())["builds"]["fat"] for r in (FAT2, FAT3)}
    thr, base = fat["recipe-fat3"]["compile"], fat["recipe-fat2"]["compile"]
    assert thr["longest_unit"]["s"] < base["longest_unit"]["s"] and thr["unit_cpu_s"] > base["unit_cpu_s"]
    assert thr["parallel_limit_s"] == round(thr["unit_cpu_s"] / thr["cores"], 1)  # CPU-bound, not longest-unit-bound
    assert fat["recipe-fat3"]["command_wall_s"] >= fat["recipe-fat2"]["command_wall_s"]


def test_sandbox_ladder_reads_past_the_result_record_and_survives_a_cut_log(tmp_path):
    """recipe-run13's log: `mmstack verify`'s JSON (stdout) has the one-line mmstack-result record
    (stderr) in the middle of it; the report is still read. A log that ends inside the JSON gives None."""
    from mmstack_lab.proof.gpu_proof_summary import sandbox_ladder

    report = {"ok": True, "python": "py", "levels": [{"level": "L1", "status": "PASS", "seconds": 1.0},
                                                      {"level": "L2", "status": "PASS", "seconds": 0.1}]}
    body = json.dumps(report, indent=1).splitlines()
    lines = ["02:32:55 [info] + mmstack verify --levels L1,L2 --json --expect-gpu", "02:32:55 [info] verify: L1 import (1/2), 0s"]
    lines += [f"02:33:06 [info] {b.strip()}" for b in body[:3]]
    lines += ['02:33:06 [info] mmstack-result {"kind":"ladder","ok":true}']
    lines += [f"02:33:06 [info] {b.strip()}" for b in body[3:]]
    log = tmp_path / "rattler-build-sm90.log"
    log.write_text("\n".join([*lines, "│ Package ┆ Version │"]) + "\n")
    got = sandbox_ladder(log)
    assert got is not None and got["ok"] is True
    assert {k: v["status"] for k, v in got["levels"].items()} == {"L1": "PASS", "L2": "PASS"}
    log.write_text("\n".join(lines[:6]) + "\n│ Package ┆ Version │\n")  # cut inside the JSON
    assert sandbox_ladder(log) is None
