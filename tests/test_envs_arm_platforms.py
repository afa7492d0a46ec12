"""pixi.toml's linux-aarch64 generations (mmstack.envs.arm_platforms): derived from arm_hosts.toml and
the `# [aarch64]` rows, checked by `mmstack lock check`, and left unlocked (one line each) where the
solve's local channels have no linux-aarch64 repodata, as everything offline here."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from support import committed_lock

from mmstack.envs import arm_platforms, lock, lockfile, pixi_manifest, policy
from mmstack.facts import arch as archmod
from mmstack.facts.gpus import load as load_facts
from mmstack.variants import matrix as variants

pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def arm_matrix():
    return variants.load_matrix(load_facts(), REPO / variants.CONFIG_FILE, arm_platforms.SUBDIR)


@pytest.fixture(scope="module")
def gens(arm_matrix):
    return {g.env: g for g in arm_platforms.expected(load_facts(), arm_matrix)}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return committed_lock.make(tmp_path_factory.mktemp("committed"))


def test_each_arm_hosted_gpu_gets_the_platform_its_row_and_conda_forges_sbsa_build_give(gens):
    # arm_hosts.toml's six hosts, highest arch first; CUDA 13.0 and glibc 2.28: the sbsa rows' toolkit and sysroot
    assert [(g.env, g.cuda_arch, g.mmcv_prefix) for g in gens.values()] == [
        ("gb10", "12.1", "cuda130_all"), ("jetson-t5000", "11.0", "cuda130_all"), ("gb300", "10.3", "cuda130_sm100"),
        ("gb200", "10.0", "cuda130_sm100"), ("gh200", "9.0", "cuda130_sm90"), ("jetson-agx-orin", "8.7", "cuda130_all")]
    assert {(g.cuda, g.glibc) for g in gens.values()} == {("13.0", "2.28")}
    assert gens["jetson-agx-orin"].tegra and not gens["gh200"].tegra  # gpus.toml: 8.7 is a Tegra GPU
    assert gens["gh200"].platform_toml() == ('{ name = "linux-aarch64-gh200", platform = "linux-aarch64", '
                                             'cuda = { driver = "13.0", arch = "9.0" }, glibc = "2.28" }')


def test_pixi_toml_declares_them_and_their_environments(gens, arm_matrix):
    manifest = pixi_manifest.load(REPO / "pixi.toml")
    assert policy.arm_manifest_problems(manifest, list(gens.values()), arm_matrix) == []
    declared = [p.name for p in manifest.platforms if p.subdir == arm_platforms.SUBDIR]
    assert declared == [g.platform for g in gens.values()]
    for g in gens.values():
        env = manifest.envs[g.env]
        assert [p.name for p in env.platforms] == [g.platform]
        assert env.platforms[0].virtual_packages["__cuda_arch"] == g.cuda_arch
        assert {s.build for s in env.specs_named("mmcv")} == {f"{g.mmcv_prefix}_*"}


@pytest.mark.parametrize("old, new, rule, env", [
    ('arch = "9.0" }, glibc = "2.28" },\n  { name = "linux-aarch64-jetson-agx-orin"',
     'arch = "9.1" }, glibc = "2.28" },\n  { name = "linux-aarch64-jetson-agx-orin"', "manifest-drift", "gh200"),
    ('mmcv = { version = "2.2.0.*", build = "cuda130_sm90_*" }', 'mmcv = { version = "2.2.0.*", build = "cuda130_sm100_*" }',
     "manifest-drift", "gh200"),
    ('jetson-t5000 = ["cuda", "gen-jetson-t5000", "mmdet"]\n', "", "manifest-drift", "jetson-t5000"),
])
def test_a_drifted_arm_platform_or_pin_is_named(tmp_path, gens, arm_matrix, old, new, rule, env):
    text = (REPO / "pixi.toml").read_text()
    assert old in text
    (tmp_path / "pixi.toml").write_text(text.replace(old, new, 1))
    found = policy.arm_manifest_problems(pixi_manifest.load(tmp_path / "pixi.toml"), list(gens.values()), arm_matrix)
    assert {(p.env, p.rule) for p in found} == {(env, rule)}, found


def test_arm_platforms_out_of_order_fail_platform_order(tmp_path, gens, arm_matrix):
    text = (REPO / "pixi.toml").read_text()
    gb10, thor = (f"  {gens[e].platform_toml()},\n" for e in ("gb10", "jetson-t5000"))
    (tmp_path / "pixi.toml").write_text(text.replace(gb10 + thor, thor + gb10))
    found = policy.arm_manifest_problems(pixi_manifest.load(tmp_path / "pixi.toml"), list(gens.values()), arm_matrix)
    assert [p.rule for p in found] == ["platform-order"] and "linux-aarch64-gb10, linux-aarch64-jetson-t5000" in found[0].fix


def _as_aarch64(env: lockfile.LockedEnv, mmcv_build: str) -> lockfile.LockedEnv:
    """A DOCTORED copy of a real linux-64 lock, its records moved to linux-aarch64 and CUDA 13.0 (no
    linux-aarch64 repodata exists offline): what the rule must accept, to set against what it refuses."""
    def move(p):
        build = mmcv_build if p.name == "mmcv" else p.build
        version = "13.0" if p.name == "cuda-version" else p.version
        sub = p.subdir if p.subdir == "noarch" else arm_platforms.SUBDIR
        return replace(p, subdir=sub, build=build, version=version, url=p.url.replace("/linux-64/", f"/{sub}/"))
    return replace(env, subdir=arm_platforms.SUBDIR, packages=tuple(move(p) for p in env.packages))


def test_the_lock_rule_holds_each_platforms_mmcv_to_an_aarch64_build_of_its_arch(root, gens):
    manifest = pixi_manifest.load(root / "pixi.toml")
    h100 = lockfile.read_pixi_lock(root / "pixi.lock", manifest.platforms)["h100"]  # real: linux-64, cuda129_sm90
    gh200 = gens["gh200"]
    found = policy.arm_lock_problems(gh200, h100, "R")
    rules = {(p.rule, p.package) for p in found}
    assert ("arm-platform", "-") in rules and ("mmcv-platform-arch", "mmcv") in rules and ("cuda-version-arch", "cuda-version") in rules
    assert any("cuda129_sm90" in p.message and "cuda130_sm90" in p.message for p in found)
    good = _as_aarch64(h100, "cuda130_sm90_py311_h0000000_500")
    assert policy.arm_lock_problems(gh200, good, "R") == []
    # another row's build, an aarch64 build of the right prefix but linux-64's file, a CPU pytorch
    (p,) = policy.arm_lock_problems(gh200, _as_aarch64(h100, "cuda130_sm100_py311_h0000000_600"), "R")
    assert p.rule == "mmcv-platform-arch" and "cuda130_sm100" in p.message
    cpu = replace(good, packages=tuple(replace(p, build="cpu_generic_py311_h0") if p.name == "pytorch" else p
                                       for p in good.packages))
    assert [p.rule for p in policy.arm_lock_problems(gh200, cpu, "R")] == ["cpu-pytorch"]
    # a Tegra GPU runs only SASS of its exact compute capability: 8.6 SASS does not serve Orin's 8.7
    orin = replace(gens["jetson-agx-orin"], targets=archmod.parse_arch_list("8.6;9.0+PTX"))
    (p,) = policy.arm_lock_problems(orin, _as_aarch64(h100, "cuda130_all_py311_h0000000_100"), "R")
    assert p.rule == "mmcv-platform-arch" and "no SASS compute capability 8.7" in p.message


def test_lock_and_lock_check_say_each_arm_environment_is_unlocked_and_why(root, tmp_path, capsys):
    from mmstack.commands.lock_cmds import run_lock_check

    chan = (root / "channel").resolve().as_uri()
    problems, summary = lock.collect_problems(root=root, channels=[chan])
    lines = summary.splitlines()
    assert problems == [] and len(lines) == 7 and lines[0].startswith("12 environments locked")
    assert lines[5] == ("gh200 (linux-aarch64-gh200): unlocked: no linux-aarch64 repodata in ./channel/; lock it where"
                        " conda-forge is reachable, after `mmstack build --target-platform linux-aarch64` (envs/README.md)")
    assert run_lock_check(root=root, channels=[chan]) == 0
    assert "jetson-agx-orin (linux-aarch64-jetson-agx-orin): unlocked" in capsys.readouterr().out
    # a local channel with linux-aarch64 repodata: then the environment is expected in pixi.lock
    tree = tmp_path / "t"
    shutil.copytree(root, tree)
    (tree / "channel" / "linux-aarch64").mkdir()
    (tree / "channel" / "linux-aarch64" / "repodata.json").write_text('{"info": {"subdir": "linux-aarch64"}, "packages": {}}')
    problems, summary = lock.collect_problems(root=tree, channels=[(tree / "channel").resolve().as_uri()])
    assert {(p.env, p.rule) for p in problems} == {(g, "missing-lock") for g in committed_lock.unlocked(tree)}
    assert "unlocked" not in summary


def test_mmstack_lock_prints_the_line_and_locks_the_rest(root, tmp_path, capsys):
    from mmstack.commands.lock_cmds import run_lock

    tree = tmp_path / "t"
    shutil.copytree(root, tree)
    chan = (tree / "channel").resolve().as_uri()
    assert run_lock(root=tree, channels=[chan], quiet=True) == 0
    err = capsys.readouterr().err
    assert sum("unlocked: no linux-aarch64 repodata in ./channel/" in ln for ln in err.splitlines()) == 6, err
    assert set(lockfile.read_pixi_lock(tree / "pixi.lock")) == set(pixi_manifest.load(tree / "pixi.toml").envs) - \
        committed_lock.unlocked(tree)
    assert run_lock(root=tree, channels=[chan], envs=["gh200"], quiet=True) == 1  # asked for it alone: nothing to lock
    assert "gh200 (linux-aarch64-gh200): unlocked" in capsys.readouterr().err


def test_no_arm_gpu_environment_the_solver_would_serve_wrongly(gens, arm_matrix):
    """Why pixi.toml has no linux-aarch64 `gpu` (one environment over the Arm platforms, CEP 46 picking):
    the `# [aarch64]` rows' ranking gives GB10 (12.1) and Thor (11.0) the sm100 build, whose SASS they
    do not run (PTX JIT only), and Orin (8.7) no per-generation build; each is pinned to the fat build."""
    manifest = pixi_manifest.load(REPO / "pixi.toml")
    wrong = set()
    for g in gens.values():
        plat = next(p for p in manifest.platforms if p.name == g.platform)
        if policy.platform_mmcv_problems("gpu", plat, f"{g.mmcv_prefix}_py311_h0_0", arm_matrix):
            wrong.add(g.env)
    assert wrong == {"gb10", "jetson-t5000", "jetson-agx-orin"}
