"""Which mmcv build each Arm-hosted GPU gets (issue 42 item 3): py-rattler's real solve over a
linux-aarch64 channel of lab/src/mmstack_lab/standin/fake_channel.py (mmcv per `# [aarch64]` row of
conda_build_config.yaml with the run requirements recipes/mmcv renders; STAND-IN cuda-arch, pytorch,
cuda-version), one machine per platform of envs/arm/pixi.toml (its `__cuda` and `__cuda_arch`).

What is right is derived from the facts: of the rows whose SASS the GPU runs (exactly its own, or a
lower minor of its major; facts/arch.py), the one of the highest build number. The solver must take
it, variants/arm_hosts.py serving_row must name it, and envs/arm/pixi.toml and `mmstack gpus` must
pin and name that same build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rattler", reason="py-rattler is the 'build' extra")

from mmstack.envs import arm_platforms, pixi_manifest, toml11
from mmstack.facts import arch as archmod
from mmstack.facts.gpus import load
from mmstack.variants import arm_hosts, matrix, selection
from mmstack_lab.standin import fake_channel

ROOT = Path(__file__).resolve().parents[1]
ARM_MANIFEST = ROOT / "envs" / "arm" / "pixi.toml"
CONDA_DOC = json.loads((ROOT / "tests" / "data" / "solver_selection" / "arm_conda.json").read_text())
SPECS = ["mmcv", "python 3.11.*"]
SUBDIR = arm_hosts.PLATFORM


@pytest.fixture(scope="module")
def facts():
    return load()


@pytest.fixture(scope="module")
def rows(facts):
    return matrix.load_matrix(facts, ROOT / matrix.CONFIG_FILE, SUBDIR)


@pytest.fixture(scope="module")
def channels(tmp_path_factory, rows):
    """As tests/data/solver_selection/make_arm_fixture.py writes them for the real conda: the recipe's
    `__cuda_arch` range, and `>=<min>` alone (the recipe before its upper bound)."""
    d = tmp_path_factory.mktemp("arm-selection")
    return {name: fake_channel.url(fake_channel.build_channel(d / name, fake_channel.standard_packages(
        rows, pythons=("3.11",), subdir=SUBDIR, cuda_arch_bound=bound))) for name, bound in (("recipe", True), ("unbounded", False))}


def _platforms():
    return [p for p in pixi_manifest.load(ARM_MANIFEST).platforms if not p.is_subdir_platform]


def _solve(channel: str, cuda: str | None, cuda_arch: str | None) -> selection.Answer:
    return selection.solve([channel], SPECS, selection.Machine(cuda, cuda_arch), platform=SUBDIR)


def _row(rows, build: str):
    prefix = selection.build_prefix(build)
    return next(v for v in rows if v.build_string_prefix == prefix and v.python == "3.11")


def _best_native(facts, rows, cc: str):
    """From the facts alone: of the rows holding SASS the GPU runs, the highest build number."""
    sass = [v for v in rows if v.python == "3.11" and v.cuda and arm_hosts.sass_runs(facts, cc, v)]
    return max(sass, key=lambda v: v.build_number)


def test_the_channels_mmcv_carries_the_recipes_cuda_arch_range(rows):
    """The stand-in's `__cuda_arch` requirement is the one recipes/mmcv renders for linux-aarch64 (the
    real rattler-build render, per per-generation row), so the solve below is the recipe's."""
    pytest.importorskip("rattler_build", reason="py-rattler-build is the 'build' extra")
    from mmstack.builder import recipes

    rendered = recipes.render(recipe_dir=ROOT / "recipes" / "mmcv", variant_config=ROOT / matrix.CONFIG_FILE,
                              select={"python": "3.11"}, target_platform=SUBDIR)
    seen = 0
    for r in rendered:
        v = dict(r.variant)
        row = next(x for x in rows if x.python == "3.11" and x.arch_tag == v["arch_tag"])
        run = [str(s) for s in r.recipe.to_dict()["requirements"]["run"] if str(s).startswith("__cuda_arch")]
        want = [f"__cuda_arch {row.cuda_arch_spec}"] if row.cuda_arch_spec else []
        assert run == want, v["arch_tag"]
        assert [d for d in fake_channel.mmcv_depends(row) if d.startswith("__cuda_arch")] == want
        seen += bool(want)
    assert seen == 2  # sm90, sm100


@pytest.mark.parametrize("plat", _platforms(), ids=lambda p: p.name)
def test_each_arm_host_gets_the_build_with_sass_for_its_own_arch(facts, rows, channels, plat):
    """The real solve on the host's platform takes the build that holds SASS it runs (GH200 sm90,
    GB200/GB300 sm100, GB10, Thor and Orin the fat build: 12.0, 11.0 and 8.7 SASS), the one
    serving_row names and envs/arm/pixi.toml pins."""
    vps = plat.virtual_packages
    cc = vps["__cuda_arch"]
    got = _solve(channels["recipe"], vps["__cuda"], cc)
    assert got.build, got.unsatisfiable
    row = _row(rows, got.build)
    want = _best_native(facts, rows, cc)
    assert row.build_string_prefix == want.build_string_prefix and got.build_number == want.build_number
    assert arm_hosts.serving_row(rows, cc).build_string_prefix == row.build_string_prefix
    gen = next(g for g in arm_platforms.expected(facts, rows) if g.platform == plat.name)
    assert gen.mmcv_prefix == row.build_string_prefix
    assert archmod.coverage(archmod.parse_arch(cc), row.targets, cuda=row.cuda, facts=facts).coverage in (
        archmod.Coverage.NATIVE, archmod.Coverage.LOWER_MINOR)


def test_what_each_arm_host_gets_by_name(rows, channels):
    """The answer per host, spelled out (the derivation above is the rule; this is what it says today)."""
    got = {}
    for plat in _platforms():
        vps = plat.virtual_packages
        got[plat.name.removeprefix(f"{SUBDIR}-")] = selection.build_prefix(_solve(channels["recipe"], vps["__cuda"], vps["__cuda_arch"]).build)
    assert got == {"gb10": "cuda130_all", "jetson-t5000": "cuda130_all", "gb300": "cuda130_sm100",
                   "gb200": "cuda130_sm100", "gh200": "cuda130_sm90", "jetson-agx-orin": "cuda130_all"}


def test_without_the_upper_bound_gb10_and_thor_took_sm100_by_ptx(facts, rows, channels):
    """Why the recipe bounds `__cuda_arch` by the next major: with `>=<min>` alone (the recipe before)
    the highest-priority build the arch reaches wins, sm100, whose 10.0 PTX GB10 (12.1) and Thor (11.0)
    only JIT; GH200, GB200/GB300 and Orin got the same as now."""
    for plat in _platforms():
        vps = plat.virtual_packages
        cc = vps["__cuda_arch"]
        old = _row(rows, _solve(channels["unbounded"], vps["__cuda"], cc).build)
        new = _row(rows, _solve(channels["recipe"], vps["__cuda"], cc).build)
        if cc in ("12.1", "11.0"):
            assert old.arch_tag == "sm100" and new.arch_tag == matrix.FAT_TAG, plat.name
            assert archmod.coverage(archmod.parse_arch(cc), old.targets, facts=facts).coverage is archmod.Coverage.PTX_JIT
        else:
            assert old.build_string_prefix == new.build_string_prefix, plat.name


def test_a_machine_without_cuda_arch_or_cuda_takes_the_fat_or_cpu_build(rows, channels):
    assert _row(rows, _solve(channels["recipe"], "13.0", None).build).arch_tag == matrix.FAT_TAG
    assert _row(rows, _solve(channels["recipe"], None, None).build).cuda is None


def test_mmstack_gpus_names_the_build_envs_arm_pins_for_every_arm_host(facts, rows):
    """One choice in both places: `mmstack gpus --json` (each Arm host's `build` and the environment its
    reason names) and envs/arm/pixi.toml's gen-<env> feature (its mmcv build pin)."""
    proc = subprocess.run([sys.executable, "-m", "mmstack.cli", "gpus", "--json"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "200"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    by_name = {r["name"]: r for r in json.loads(proc.stdout)}
    features = toml11.loads(ARM_MANIFEST.read_text())["feature"]
    gens = {g.gpu: g for g in arm_platforms.expected(facts, rows)}
    assert sorted(gens) == sorted(h.gpu for h in arm_hosts.load().host)
    for name, gen in gens.items():
        row = by_name[name]
        pin = features[f"gen-{gen.env}"]["dependencies"]["mmcv"]["build"]
        assert pin == f"{row['build']}_*" == f"{gen.mmcv_prefix}_*", name
        assert f"envs/arm/pixi.toml's {gen.env} environment pins it" in row["environment_reason"], name
        assert row["environment_runs"] in ("native", "lower-minor"), name


@pytest.mark.parametrize("cc, ok", [("9.0", False), ("10.0", True), ("10.3", True), ("11.0", False), ("12.1", False)])
def test_a_per_generation_row_admits_its_major_only(rows, cc, ok):
    sm100 = next(v for v in rows if v.arch_tag == "sm100")
    assert sm100.cuda_arch_spec == ">=10.0,<11"
    assert sm100.admits(cc) is ok
    fat = next(v for v in rows if v.arch_tag == matrix.FAT_TAG)
    assert fat.cuda_arch_spec is None and fat.admits(cc) and fat.admits(None)


def test_the_real_conda_installs_on_each_arm_platform_what_py_rattler_does(channels):
    """conda 26.7.1 (classic) with nvidia-virtual-packages 0.2.0, CONDA_SUBDIR=linux-aarch64, on the same
    channels (tests/data/solver_selection/arm_conda.json, made by make_arm_fixture.py): `__cuda_arch`
    reaches it, and for every platform and both channels it installs py-rattler's build, so the upper
    bound holds for the real conda too (it checks the dependency on the virtual package)."""
    assert (CONDA_DOC["conda"], CONDA_DOC["solver"]) == ("26.7.1", "classic") and "STAND-IN" in CONDA_DOC["stand_in"]
    assert CONDA_DOC["nvidia_virtual_packages"] and CONDA_DOC["env"]["CONDA_SUBDIR"] == SUBDIR
    recorded = {(a["platform"], a["channel"]): a for a in CONDA_DOC["answers"]}
    assert sorted({p for p, _ in recorded}) == sorted(p.name for p in _platforms())
    for plat in _platforms():
        vps = plat.virtual_packages
        for name, url in channels.items():
            theirs = recorded[(plat.name, name)]
            assert theirs["specs"] == SPECS
            assert theirs["virtual_packages"] == {"__cuda": vps["__cuda"], "__cuda_arch": vps["__cuda_arch"]}
            ours = _solve(url, vps["__cuda"], vps["__cuda_arch"])
            assert (theirs["build"], theirs["build_number"]) == (selection.mask_hash(ours.build), ours.build_number), (plat.name, name)


def test_mmstack_detect_names_the_same_build_and_environment_for_every_arm_host(facts, rows, monkeypatch):
    """verify/doctor.assign_envs (`mmstack detect`, `mmstack doctor`) on an Arm host's GPU: the build and
    the Arm environment of envs/arm_platforms.host_choice, the same as `mmstack gpus` and the pins."""
    from mmstack.verify.doctor import assign_envs

    monkeypatch.chdir(ROOT)  # the conda_build_config.yaml it reads, as `mmstack gpus` does
    for gen in arm_platforms.expected(facts, rows):
        (row,) = assign_envs([{"name": gen.gpu, "compute_capability": gen.cuda_arch}], facts)
        assert row["environment"] is None and row["runs"] in ("native", "lower-minor"), gen.gpu
        assert f"a solver installs mmcv {gen.mmcv_prefix} (CUDA {gen.cuda}" in row["reason"], gen.gpu
        assert f"envs/arm/pixi.toml's {gen.env} environment pins it" in row["reason"], gen.gpu


def test_a_per_generation_row_whose_range_admits_a_gpu_without_its_sass_is_refused(facts):
    """`mmstack matrix`/`check` (variants/matrix.py): an sm86 row on linux-aarch64 would admit Jetson Orin
    (8.7, Tegra: it runs no 8.6 SASS), so a solver would give Orin that build's PTX; the matrix says so."""
    from mmstack.errors import CheckFailed

    combos = matrix.read_config(ROOT / matrix.CONFIG_FILE, SUBDIR)
    sm90 = next(c for c in combos if c["arch_tag"] == "sm90" and c["python"] == "3.11")
    sm86 = {**sm90, "mmcv_arch_list": "8.6+PTX", "arch_tag": "sm86", "cuda_arch_min": "8.6", "mmcv_priority": "4"}
    assert matrix.build_matrix(facts, combos, target_platform=SUBDIR)  # as committed: accepted
    with pytest.raises(CheckFailed) as err:
        matrix.build_matrix(facts, [*combos, sm86], target_platform=SUBDIR)
    msg = err.value.message
    assert "__cuda_arch >=8.6,<9 admits the Jetson" in msg and "Orin" in msg and "(8.7)" in msg
