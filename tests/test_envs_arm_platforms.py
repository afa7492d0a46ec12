"""The Arm hosts' linux-aarch64 environments: derived from arm_hosts.toml and the `# [aarch64]` rows
(mmstack.envs.arm_platforms), declared in their own pixi workspace envs/arm/pixi.toml and held to
the derivation by `mmstack lock check` (mmstack.envs.arm_manifest), left unlocked with one line each
where no local channel has linux-aarch64 repodata (everything offline here); and the root pixi.toml
kept free of them, so pixi's rule that an unlocked environment outdates the whole lock cannot bite."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import committed_lock
from support.cli import mmstack

from mmstack.envs import arm_manifest, arm_platforms, lock, lockfile, pixi_manifest, policy
from mmstack.errors import BadInput
from mmstack.facts.gpus import load as load_facts
from mmstack.variants import matrix as variants

pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")

REPO = Path(__file__).resolve().parents[1]
ARM = REPO / arm_manifest.MANIFEST


@pytest.fixture(scope="module")
def arm_matrix():
    return variants.load_matrix(load_facts(), REPO / variants.CONFIG_FILE, arm_platforms.SUBDIR)


@pytest.fixture(scope="module")
def gens(arm_matrix):
    return {g.env: g for g in arm_platforms.expected(load_facts(), arm_matrix)}


def _tree(tmp_path: Path, arm_text: str | None = None) -> Path:
    """This repository's manifests, matrix and envs/*.yml in a scratch root (envs/arm/pixi.toml edited)."""
    tree = tmp_path / "t"
    shutil.copytree(REPO / "envs", tree / "envs")
    for name in ("pixi.toml", variants.CONFIG_FILE):
        shutil.copy(REPO / name, tree / name)
    if arm_text is not None:
        (tree / arm_manifest.MANIFEST).write_text(arm_text)
    return tree


def test_each_arm_hosted_gpu_gets_the_platform_its_row_and_conda_forges_sbsa_build_give(gens):
    # arm_hosts.toml's six hosts, highest arch first; CUDA 13.0 and glibc 2.28: the sbsa rows' toolkit and sysroot
    assert [(g.env, g.cuda_arch, g.mmcv_prefix) for g in gens.values()] == [
        ("gb10", "12.1", "cuda130_all"), ("jetson-t5000", "11.0", "cuda130_all"), ("gb300", "10.3", "cuda130_sm100"),
        ("gb200", "10.0", "cuda130_sm100"), ("gh200", "9.0", "cuda130_sm90"), ("jetson-agx-orin", "8.7", "cuda130_all")]
    assert {(g.cuda, g.glibc) for g in gens.values()} == {("13.0", "2.28")}
    assert gens["jetson-agx-orin"].tegra and not gens["gh200"].tegra  # gpus.toml: 8.7 is a Tegra GPU
    assert gens["gh200"].platform_toml() == ('{ name = "linux-aarch64-gh200", platform = "linux-aarch64", '
                                             'cuda = { driver = "13.0", arch = "9.0" }, glibc = "2.28" }')


def test_envs_arm_pixi_toml_declares_them_and_their_environments(gens, arm_matrix):
    root = pixi_manifest.load(REPO / "pixi.toml")
    manifest, derived = arm_manifest.check(REPO, root, load_facts(), arm_matrix)
    assert [g.env for g in derived] == list(gens)
    assert [p.name for p in manifest.platforms] == ["linux-aarch64", *(g.platform for g in gens.values())]
    assert {p.subdir for p in manifest.platforms} == {"linux-aarch64"}
    assert manifest.channel_urls() == root.channel_urls() and manifest.channels == ("../../channel", "conda-forge")
    assert list(manifest.envs) == ["default", "cpu", *gens]
    for g in gens.values():
        env = manifest.envs[g.env]
        assert [p.name for p in env.platforms] == [g.platform]
        assert env.platforms[0].virtual_packages["__cuda_arch"] == g.cuda_arch
        assert {s.build for s in env.specs_named("mmcv")} == {f"{g.mmcv_prefix}_*"}
        assert {s.build for s in env.specs_named("pytorch")} == {"cuda*"}
    for name in ("default", "cpu"):
        assert [p.name for p in manifest.envs[name].platforms] == ["linux-aarch64"]
        assert {s.build for s in manifest.envs[name].specs_named("mmcv")} == {"cpu_*"}


# (edit of envs/arm/pixi.toml, the field the one line must name, a piece of its fix)
DRIFTS = [
    ('arch = "9.0" }, glibc', 'arch = "9.1" }, glibc', "workspace.platforms",
     '{ name = "linux-aarch64-gh200", platform = "linux-aarch64", cuda = { driver = "13.0", arch = "9.0" }'),
    ('build = "cuda130_sm90_*"', 'build = "cuda130_sm100_*"', "environments.gh200 (mmcv)", 'build = "cuda130_sm90_*"'),
    ('jetson-t5000 = ["cuda", "gen-jetson-t5000", "mmdet"]\n', "", "environments.jetson-t5000",
     'jetson-t5000 = ["cuda", "gen-jetson-t5000", "mmdet"] in [environments]'),
    ('channels = ["../../channel", "conda-forge"]', 'channels = ["./channel", "conda-forge"]', "workspace.channels",
     'channels = ["../../channel", "conda-forge"]'),
    ('requires-pixi = ">=0.72.1"', 'requires-pixi = ">=0.71"', "workspace.requires-pixi", 'requires-pixi = ">=0.72.1"'),
    ('verify = { cmd = "mmstack verify --expect-gpu"', 'verify = { cmd = "mmstack verify"', "feature.cuda.tasks.verify",
     'verify = { cmd = "mmstack verify --expect-gpu"'),
]


@pytest.mark.parametrize("old, new, field, fix", DRIFTS)
def test_a_hand_edit_that_drifts_is_one_line_naming_the_file_the_field_and_the_fix(tmp_path, old, new, field, fix):
    text = ARM.read_text()
    assert text.count(old) == 1
    tree = _tree(tmp_path, text.replace(old, new))
    with pytest.raises(BadInput) as exc:
        lock.collect_problems(root=tree)
    line = exc.value.one_line()
    assert line.startswith(f"envs/arm/pixi.toml: {field}: ") and "\n" not in line, line
    assert fix in line.split(" (fix: ", 1)[1], line


def test_lock_check_and_lock_exit_2_on_a_drifted_arm_manifest_and_write_nothing(tmp_path):
    tree = _tree(tmp_path, ARM.read_text().replace('build = "cuda130_sm90_*"', 'build = "cuda130_sm100_*"'))
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    for args in (["lock", "check", "--root", str(tree)], ["lock", "--root", str(tree), "--yml-only"]):
        rc, out, err = mmstack(*args)
        assert rc == 2, (args, out, err)
        (line,) = [ln for ln in err.splitlines() if ln.strip()]
        assert "envs/arm/pixi.toml: environments.gh200 (mmcv)" in line and "cuda130_sm90_*" in line
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before


def test_arm_platforms_out_of_order_are_named(tmp_path, gens, arm_matrix):
    gb10, thor = (f"  {gens[e].platform_toml()},\n" for e in ("gb10", "jetson-t5000"))
    text = ARM.read_text()
    assert gb10 + thor in text
    tree = _tree(tmp_path, text.replace(gb10 + thor, thor + gb10))
    with pytest.raises(BadInput) as exc:
        lock.collect_problems(root=tree)
    assert "workspace.platforms: declared in the order linux-aarch64, linux-aarch64-jetson-t5000, linux-aarch64-gb10" \
        in exc.value.one_line() and "highest arch down" in exc.value.one_line()


def test_lock_check_says_each_arm_environment_is_unlocked_and_why(tmp_path):
    """Offline, ./channel (or a --channel) has no linux-aarch64 repodata: one line per environment.
    With one that has it, the reason is that `mmstack lock` locks the root workspace only."""
    rc, out, err = mmstack("lock", "check", "--root", str(REPO))
    assert rc == 0, err
    lines = out.splitlines()
    arm = [ln for ln in lines if ": unlocked: " in ln]
    assert [ln.split(" ")[0] for ln in arm] == ["default", "cpu", "gb10", "jetson-t5000", "gb300", "gb200", "gh200",
                                                "jetson-agx-orin"]
    assert "gh200 (linux-aarch64-gh200): unlocked: no linux-aarch64 repodata in ./channel/ (envs/README.md says what" \
        " a maintainer runs to lock it)" in lines
    assert "envs/arm/pixi.toml: 8 linux-aarch64 environments agree with the facts and the matrix" in lines
    chan = tmp_path / "channel"
    (chan / "linux-aarch64").mkdir(parents=True)
    (chan / "linux-aarch64" / "repodata.json").write_text('{"info": {"subdir": "linux-aarch64"}, "packages": {}}')
    _, summary = lock.collect_problems(root=REPO, channels=[chan.resolve().as_uri()])
    assert "no linux-aarch64 repodata" not in summary
    assert "gh200 (linux-aarch64-gh200): unlocked: `mmstack lock` locks the root workspace only; pixi locks" \
        " envs/arm/pixi.toml" in summary
    # a lock pixi wrote for the Arm workspace is not called unlocked, nor passed off as checked
    tree = _tree(tmp_path)
    (tree / "envs/arm/pixi.lock").write_text("version: 6\n")
    _, summary = lock.collect_problems(root=tree)
    assert "unlocked" not in summary and "envs/arm/pixi.toml: its pixi.lock (pixi's) is not checked" in summary


# -- the root workspace: pixi's rule (an environment missing from pixi.lock outdates the whole lock) ----


def test_the_root_pixi_toml_declares_no_linux_aarch64_and_mmstack_lock_locks_every_environment(tmp_path_factory):
    """pixi (crates/pixi_core/src/lock_file/outdated.rs:271-285 at 2b25fc76) marks the lock outdated for
    an environment it lacks; `--locked` then fails for all. The root manifest has none it cannot lock:
    no linux-aarch64 platform, and the lock `mmstack lock` writes holds every environment."""
    root = pixi_manifest.load(REPO / "pixi.toml")
    assert {p.subdir for p in root.platforms} == {"linux-64"}
    assert all(p.subdir == "linux-64" for env in root.envs.values() for p in env.platforms)
    tree = committed_lock.make(tmp_path_factory.mktemp("committed"))
    locked = lockfile.read_pixi_lock(tree / "pixi.lock", root.platforms)
    assert set(locked) == set(root.envs)
    assert policy.pixi_lock_problems(pixi_manifest.load(tree / "pixi.toml"), locked) == []


def test_mmstack_lock_locks_the_root_workspace_and_says_each_arm_environment_is_unlocked(tmp_path_factory, capsys):
    from mmstack.commands.lock_cmds import run_lock

    tree = committed_lock.make(tmp_path_factory.mktemp("committed"))
    (tree / "envs" / "arm").mkdir()
    shutil.copy(ARM, tree / arm_manifest.MANIFEST)
    before = (tree / "pixi.lock").read_text()
    capsys.readouterr()
    assert run_lock(root=tree, channels=[(tree / "channel").resolve().as_uri()], quiet=True) == 0
    err = capsys.readouterr().err
    assert sum(": unlocked: no linux-aarch64 repodata in ./channel/" in ln for ln in err.splitlines()) == 8, err
    assert (tree / "pixi.lock").read_text() == before  # the root lock as it was: nothing of the Arm workspace in it
    assert not (tree / "envs" / "arm" / "pixi.lock").exists()


def test_the_solvers_pick_on_every_arm_platform_is_the_build_its_environment_pins(gens, arm_matrix):
    """The per-platform rule `mmstack lock check` holds a `gpu` environment to (CEP 46 picking, no pin)
    accepts each Arm host's pinned build: with the recipe's `__cuda_arch >=<min>,<next major>`, GB10
    (12.1) and Thor (11.0) fall to the fat build, which holds their SASS, where the bound-less
    requirement gave them sm100's PTX (tests/test_arm_selection.py solves both)."""
    manifest = pixi_manifest.load(ARM)
    wrong = set()
    for g in gens.values():
        plat = next(p for p in manifest.platforms if p.name == g.platform)
        if policy.platform_mmcv_problems("gpu", plat, f"{g.mmcv_prefix}_py311_h0_0", arm_matrix):
            wrong.add(g.env)
    assert wrong == set() and len(gens) == 6
