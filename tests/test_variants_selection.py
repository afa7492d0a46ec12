"""Which mmcv build a solver installs for a machine (issue 45 item 2): py-rattler solved here, over
lab/src/mmstack_lab/standin/fake_channel.py's channel (mmcv per variant of conda_build_config.yaml as
recipes/mmcv renders it; STAND-IN cuda-arch, pytorch, cuda-version), against the committed answers
of py-rattler (tests/data/solver_selection/rattler.json) and of the real conda 26.7.1 with the
nvidia-virtual-packages plugin (conda.json; their headers say how they were made). What is right is
derived from the facts: the build whose SASS runs natively on the machine's `__cuda_arch`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("rattler", reason="py-rattler is the 'build' extra")

from mmstack.facts import arch as archmod
from mmstack.facts.gpus import load
from mmstack.variants import matrix, selection
from mmstack_lab.standin import fake_channel

DATA = Path(__file__).parent / "data" / "solver_selection"
ROOT = Path(__file__).resolve().parents[1]
CASES = json.loads((DATA / "cases.json").read_text())["cases"]
RATTLER = {a["id"]: a for a in json.loads((DATA / "rattler.json").read_text())["answers"]}
CONDA_DOC = json.loads((DATA / "conda.json").read_text())
CONDA = {a["id"]: a for a in CONDA_DOC["answers"]}
ARCH_CASES = [c for c in CASES if c["cuda_arch"] and c["cuda"] == "12.9" and "channel" not in c and "specs" not in c]


@pytest.fixture(scope="module")
def rows():
    return matrix.load_matrix(load(), ROOT / matrix.CONFIG_FILE)


@pytest.fixture(scope="module")
def channels(tmp_path_factory, rows):
    d = tmp_path_factory.mktemp("selection")
    return {name: fake_channel.url(fake_channel.build_channel(d / name, fake_channel.standard_packages(rows, cuda_arch_guard=guard)))
            for name, guard in (("guarded", True), ("unguarded", False))}


def _solve(channels, case) -> dict:
    doc = json.loads((DATA / "cases.json").read_text())
    specs = case.get("specs") or [*doc["specs"], *case.get("extra_specs", [])]
    answer = selection.solve([channels[case.get("channel", "guarded")]], specs,
                             selection.Machine(case["cuda"], case["cuda_arch"]), package=case.get("package", "mmcv"))
    out = answer.as_dict()
    if out.get("build"):
        out["build"] = selection.mask_hash(out["build"])
    return out


def _row(rows, build: str):
    prefix = selection.build_prefix(build)
    return next(v for v in rows if v.build_string_prefix == prefix and v.python == "3.11")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_py_rattler_answers_as_recorded(channels, case):
    got = _solve(channels, case)
    want = RATTLER[case["id"]]
    if "unsatisfiable" in want:
        assert "unsatisfiable" in got and got["unsatisfiable"].split(" ")[:6] == want["unsatisfiable"].split(" ")[:6]
    else:
        assert (got["build"], got["build_number"]) == (want["build"], want["build_number"])


@pytest.mark.parametrize("case", ARCH_CASES, ids=lambda c: c["id"])
def test_each_cuda_arch_gets_the_newest_build_whose_sass_runs_there_natively(rows, case):
    """Both solvers: the per-generation build (never the fat one) whose SASS the GPU runs without JIT,
    and of those the one of the highest arch (mmcv_priority)."""
    gpu = archmod.parse_arch(case["cuda_arch"])
    sass_runs = (archmod.Coverage.NATIVE, archmod.Coverage.LOWER_MINOR)  # SASS, no JIT (sm_100 on 10.3)
    native = [v for v in rows if v.python == "3.11" and v.arch_min
              and archmod.coverage(gpu, tuple(t for t in v.targets if t.kind == "sass")).coverage in sass_runs]
    best = max(native, key=lambda v: v.build_number)
    assert selection.build_prefix(RATTLER[case["id"]]["build"]) == best.build_string_prefix
    assert RATTLER[case["id"]]["build_number"] == best.build_number


def test_without_cuda_arch_both_solvers_take_a_fat_build_and_without_cuda_the_cpu_build(rows):
    for answers in (RATTLER, CONDA):
        assert _row(rows, answers["no-cuda_arch"]["build"]).arch_tag == matrix.FAT_TAG
        assert _row(rows, answers["no-cuda"]["build"]).cuda is None
        assert "__cuda_arch" not in answers["no-cuda_arch"]["virtual_packages"]


def test_the_cuda_arch_requirement_is_what_keeps_a_conda_without_the_plugin_off_the_per_generation_builds(rows):
    """CEP 46's pattern alone (host cuda-arch, its run-export): without `__cuda_arch` the run
    constraint binds nothing and both solvers take the highest-priority build, sm120, on any GPU."""
    for answers in (RATTLER, CONDA):
        assert _row(rows, answers["no-cuda_arch-unguarded"]["build"]).arch_tag == "sm120"


def test_a_driver_too_old_is_refused_naming_the_driver():
    assert "__cuda 11.8" in RATTLER["driver-too-old"]["unsatisfiable"]
    assert "__cuda >=12" in RATTLER["driver-too-old"]["unsatisfiable"]


def test_the_real_conda_with_the_plugin_installs_what_py_rattler_does(rows):
    """conda 26.7.1 (classic solver) with nvidia-virtual-packages: `__cuda_arch` reaches it (each case
    records the virtual packages conda reported) and it installs the same build as py-rattler for
    every machine, because recipes/mmcv states `__cuda_arch >=<arch>` and `__cuda >=<major>` as
    dependencies. It checks no run constraint against a virtual package (the probes: cuda-version
    12.9 on a driver of CUDA 11.8, cuda-arch 12.1 on `__cuda_arch` 8.0, both refused by py-rattler),
    so with CEP 46's run constraint alone it takes sm120 on an RTX 4090 (the unguarded row)."""
    assert CONDA_DOC["conda"] == "26.7.1" and CONDA_DOC["solver"] == "classic" and CONDA_DOC["nvidia_virtual_packages"]
    for case in ARCH_CASES:
        assert CONDA[case["id"]]["virtual_packages"] == {"__cuda": case["cuda"], "__cuda_arch": case["cuda_arch"]}
    mmcv_cases = [c for c in CASES if "specs" not in c and c["id"] != "cuda_arch-8.9-unguarded"]
    for case in mmcv_cases:
        ours, theirs = RATTLER[case["id"]], CONDA[case["id"]]
        if "unsatisfiable" in ours:
            assert "unsatisfiable" in theirs and "__cuda==11.8" in theirs["unsatisfiable"], case["id"]
        elif case["id"] == "no-cuda_arch":  # two fat builds tie on build number; either is the fat build
            assert _row(rows, theirs["build"]).arch_tag == matrix.FAT_TAG
        else:
            assert theirs["build"] == ours["build"], case["id"]
    for probe in ("probe-cuda-version-12.9-on-driver-11.8", "probe-cuda-arch-12.1-on-cuda_arch-8.0"):
        assert CONDA[probe].get("build") and "unsatisfiable" in RATTLER[probe]
    assert selection.build_prefix(CONDA["cuda_arch-8.9-unguarded"]["build"]) == "cuda129_sm120"
    assert selection.build_prefix(RATTLER["cuda_arch-8.9-unguarded"]["build"]) == "cuda129_sm89"


def test_the_fixtures_come_from_the_committed_scripts():
    for name in ("rattler.json", "conda.json"):
        doc = json.loads((DATA / name).read_text())
        script = doc["generated_by"].split()[-2]
        assert (ROOT / script).is_file() and "STAND-IN" in doc["stand_in"]
        assert {a["id"] for a in doc["answers"]} == {c["id"] for c in CASES}


def test_the_device_channels_stand_in_cuda_arch_is_built_like_conda_forges(tmp_path):
    """lab/src/mmstack_lab/standin/bootstrap_cuda.py's cuda-arch (what recipes/mmcv's per-generation builds take
    in host on the device): every conda-forge version, its run-export and run constraint, STAND-IN."""
    import io
    import tarfile
    import zipfile

    zstandard = pytest.importorskip("zstandard")
    from mmstack_lab.standin import bootstrap, bootstrap_cuda

    channel = tmp_path / "channel"
    for sub in ("linux-64", "noarch"):
        (channel / sub).mkdir(parents=True)
    bootstrap_cuda.build_cuda_arch(channel, tmp_path / "recipes")
    bootstrap.index(channel)
    repodata = json.loads((channel / "noarch" / "repodata.json").read_text())["packages.conda"]
    versions = {r["version"]: r for r in repodata.values() if r["name"] == "cuda-arch"}
    assert sorted(versions) == sorted(fake_channel.tomllib.loads(fake_channel.CUDA_ARCH_VERSIONS.read_text())["versions"])
    assert versions["8.9"]["constrains"] == ["__cuda_arch 8.9.*"] and versions["8.9"]["noarch"] == "generic"
    (pkg,) = (channel / "noarch").glob("cuda-arch-8.9-*.conda")
    with zipfile.ZipFile(pkg) as z:
        info = next(n for n in z.namelist() if n.startswith("info-"))
        stream = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(z.read(info)))
        files = {m.name: t.extractfile(m).read() for t in [tarfile.open(fileobj=stream, mode="r|")] for m in t
                 if m.name in ("info/run_exports.json", "info/about.json")}
    assert json.loads(files["info/run_exports.json"]) == {"weak": ["cuda-arch >=8.9"]}
    assert "STAND-IN" in json.loads(files["info/about.json"])["summary"]


PIXI_DOC = json.loads((DATA / "pixi.json").read_text())


def test_pixis_rules_as_mmstack_reads_pixi_toml_and_the_builds_they_select(channels, rows):
    """pixi.json: pixi's rules (its source, cited per rule) on pixi.toml's platforms. mmstack's reading
    of pixi.toml declares the same virtual packages; the solve with them takes, on each generation's
    platform, that generation's per-generation build, and on the bare linux-64 the CPU build."""
    from mmstack.envs import pixi_manifest

    assert PIXI_DOC["pixi"]["commit"] and all(r["file"] and r["lines"] for r in PIXI_DOC["rules"])
    manifest = pixi_manifest.load(ROOT / "pixi.toml")
    recorded = {a["platform"]: a for a in PIXI_DOC["answers"]}
    assert sorted(recorded) == sorted(p.name for p in manifest.platforms)
    specs = json.loads((DATA / "cases.json").read_text())["specs"]
    for plat in manifest.platforms:
        want = recorded[plat.name]
        assert plat.virtual_packages == want["virtual_packages"], plat.name
        vps = plat.virtual_packages
        got = selection.solve([channels["guarded"]], specs, selection.Machine(vps.get("__cuda"), vps.get("__cuda_arch")))
        assert (selection.mask_hash(got.build or ""), got.build_number) == (want["build"], want["build_number"])
        row = _row(rows, want["build"])
        if plat.is_subdir_platform:
            assert row.cuda is None
        else:
            assert plat.name.removeprefix("linux-64-") in row.envs


# -- the commands: `mmstack arch check --channel`, `mmstack detect --channel` --------------------------

def _cli(*args, env=None):
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "mmstack.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("gpu, prefix", [("RTX 4090", "cuda129_sm89"), ("B300", "cuda129_sm100"), ("A100", "cuda129_sm80")])
def test_arch_check_channel_names_the_build_the_solver_installs_for_a_gpu(channels, gpu, prefix):
    from urllib.parse import urlparse

    code, out, err = _cli("arch", "check", "--gpu", gpu, "--channel", urlparse(channels["guarded"]).path, "--json")
    doc = json.loads(out)
    assert code == 0, err
    assert selection.build_prefix(doc["with_cuda_arch"]["build"]) == prefix
    assert doc["with_cuda_arch"]["runs"] in ("native", "lower-minor")  # SASS, no JIT
    assert selection.build_prefix(doc["without_cuda_arch"]["build"]).endswith("_all")  # the fat build
    code, out, _ = _cli("arch", "check", "--gpu", gpu, "--channel", urlparse(channels["guarded"]).path)
    assert code == 0 and f"mmcv 2.2.0 {prefix}_py" in out and "a conda without __cuda_arch" in out


def test_arch_check_channel_refuses_a_directory_that_is_no_channel(tmp_path):
    code, _, err = _cli("arch", "check", "--gpu", "RTX 4090", "--channel", str(tmp_path))
    assert code == 2 and "not an indexed conda channel" in err


def test_detect_prints_cuda_arch_and_the_pick_for_the_overridden_machine(channels):
    """No GPU here: CONDA_OVERRIDE_CUDA / CONDA_OVERRIDE_CUDA_ARCH make the machine (CEP 46's overrides)."""
    from urllib.parse import urlparse

    env = {"CONDA_OVERRIDE_CUDA": "12.9", "CONDA_OVERRIDE_CUDA_ARCH": "9.0"}
    _, out, err = _cli("detect", "--channel", urlparse(channels["guarded"]).path, "--json", env=env)
    doc = json.loads(out)
    assert doc["virtual_packages"] == {"__cuda": "12.9", "__cuda_arch": "9.0"}, err
    assert selection.build_prefix(doc["solver"]["with_cuda_arch"]["build"]) == "cuda129_sm90"
    _, out, _ = _cli("detect", env=env)
    assert "__cuda_arch: 9.0 (the lowest compute capability of the GPUs, CEP 46)" in out and "pass --channel" in out
    _, out, _ = _cli("detect", "--json", env={"CONDA_OVERRIDE_CUDA": "", "CONDA_OVERRIDE_CUDA_ARCH": "9.0"})
    assert json.loads(out)["virtual_packages"] == {}  # no __cuda: no __cuda_arch either


# -- the per-platform rule `mmstack lock check` holds a multi-platform (gpu) environment to ------------

def test_each_rich_platforms_solved_mmcv_passes_the_per_platform_arch_rule_and_a_wrong_one_fails(channels, rows):
    """policy.platform_mmcv_problems over pixi.toml's platforms: the build the real solve takes for a
    platform passes; another generation's build, or the fat build where `__cuda_arch` is declared, fails."""
    from mmstack.envs import pixi_manifest, policy

    specs = json.loads((DATA / "cases.json").read_text())["specs"]
    for plat in pixi_manifest.load(ROOT / "pixi.toml").platforms:
        vps = plat.virtual_packages
        got = selection.solve([channels["guarded"]], specs, selection.Machine(vps.get("__cuda"), vps.get("__cuda_arch")))
        assert policy.platform_mmcv_problems("gpu", plat, got.build or "", rows) == [], plat.name
        if vps.get("__cuda_arch"):
            for wrong in ("cuda129_sm120_py311_h0000000_700", "cuda129_all_py311_h0000000_100", "cpu_py311_h0000000_0"):
                if not got.build.startswith(wrong.split("_py")[0]):
                    (p,) = policy.platform_mmcv_problems("gpu", plat, wrong, rows)
                    assert p.rule == "mmcv-platform-arch" and plat.name in p.message
