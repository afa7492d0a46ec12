"""The repository's pixi.toml against a local channel shaped like conda-forge + ./channel.

The channel (lab/src/mmstack_lab/standin/fake_channel.py) holds real, empty .conda packages: pytorch with
`cuda129_…`/`cuda130_…`/`cpu_…` builds, cuda-version 12.8/12.9/13.0 with conda-forge's `__cuda`
constraint, and one mmcv per variant of conda_build_config.yaml with the matrix's build strings.
Every generation must solve to the mmcv built for its compute capability, and none to one that
cannot run on its GPU.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mmstack.commands.lock_cmds import run_lock, run_lock_check
from mmstack.envs import lockfile, policy
from mmstack.envs.lock import collect_problems, solve_env
from mmstack.envs.pixi_manifest import load as load_manifest
from mmstack.facts import arch as archmod
from mmstack.facts.gpus import load as load_facts
from mmstack.variants import matrix as variants
from mmstack_lab.standin import fake_channel

pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def matrix():
    return variants.load_matrix(load_facts(), REPO / variants.CONFIG_FILE)


@pytest.fixture(scope="session")
def channel(tmp_path_factory, matrix):
    fc = fake_channel
    return fc.url(fc.build_channel(tmp_path_factory.mktemp("fake-channel"), fc.standard_packages(matrix)))


@pytest.fixture(scope="session")
def locked_repo(tmp_path_factory, channel):
    """The repository's pixi.toml and matrix, every environment locked against the fake channel."""
    root = tmp_path_factory.mktemp("repo")
    for name in ("pixi.toml", variants.CONFIG_FILE):
        shutil.copy(REPO / name, root / name)
    assert run_lock(root=root, channels=[channel]) == 0
    return root


def test_every_environment_locks_and_passes_the_check(locked_repo, channel, capsys):
    assert run_lock_check(root=locked_repo, channels=[channel]) == 0, capsys.readouterr().out
    locked = lockfile.read_pixi_lock(locked_repo / "pixi.lock")
    assert set(locked) == set(load_manifest(REPO / "pixi.toml").envs)


def test_each_generation_gets_its_own_mmcv_build(locked_repo, matrix):
    facts = load_facts()
    locked = lockfile.read_pixi_lock(locked_repo / "pixi.lock")
    pins = policy.expected_pins(facts, matrix)
    for gen in facts.generation:
        env = locked[gen.env]
        (mmcv,) = env.by_name("mmcv")
        (torch,) = env.by_name("pytorch")
        prefix = next(iter(pins[gen.env].mmcv_prefixes))
        assert mmcv.build.startswith(f"{prefix}_py311_"), (gen.env, mmcv.label)
        if not gen.is_gpu:
            assert torch.build.startswith("cpu_") and not env.by_name("cuda-version")
            continue
        assert torch.build.startswith("cuda129_"), (gen.env, torch.label)  # never cuda130: __cuda is 12.9
        assert [p.version for p in env.by_name("cuda-version")] == [gen.cuda]
        cuda, targets = policy.mmcv_archs(mmcv.build, matrix)
        cov = archmod.coverage(archmod.parse_arch(gen.compute_capability), targets)
        assert cuda == gen.cuda and cov.coverage is archmod.Coverage.NATIVE, (gen.env, mmcv.label)
        assert env.vp("__cuda") == gen.cuda and env.vp("__cuda_arch") == gen.compute_capability


@pytest.mark.parametrize("env, wrong, named", [("a100", "cuda129_sm86_*", "__cuda_arch >=8.6"),
                                               # the CPU build's `pytorch * cpu*` leaves no CUDA pytorch: with two
                                               # pytorch minors in the channel the solver names that side
                                               ("h100", "cpu_*", "pytorch * cuda* cannot be installed")])
def test_an_mmcv_the_machine_cannot_take_is_refused_by_the_solver_itself(channel, env, wrong, named):
    """recipes/mmcv's own requirements: the sm86 build needs `__cuda_arch >=8.6` (CEP 46; the A100
    declares 8.0), the CPU build constrains pytorch to a CPU build (the environment pins a CUDA one):
    the solve fails, naming it, before the policy could flag the lock."""
    from mmstack.errors import CheckFailed

    facts = load_facts()
    spec = load_manifest(REPO / "pixi.toml").envs[env]
    specs = tuple(s if s.name != "mmcv" else type(s)("mmcv", "2.2.0.*", wrong, None, s.feature) for s in spec.specs)
    with pytest.raises(CheckFailed) as exc:
        solve_env(type(spec)(spec.name, spec.features, specs, spec.pypi, spec.platforms, spec.channels), facts, [channel])
    assert f"{env}: cannot solve" in exc.value.message and named in exc.value.message


@pytest.mark.parametrize("env, wrong, named", [("rtx5090", "cuda129_sm90_*", "__cuda_arch >=9.0,<10")])
def test_an_mmcv_that_cannot_run_on_the_gpu_is_refused_by_the_solver_and_flagged_by_the_pins(channel, matrix, env, wrong, named):
    """Another generation's mmcv pinned, whose SASS the GPU does not run (sm_90 on 12.0): the recipe's
    `__cuda_arch >=9.0,<10` (up to the next major) keeps the solver itself off it, where before the
    upper bound the solve took it and only the lock policy (mmcv-coverage) flagged the lock; the pin
    check names the mmcv pin either way."""
    from mmstack.errors import CheckFailed

    facts = load_facts()
    spec = load_manifest(REPO / "pixi.toml").envs[env]
    bad_specs = tuple(s if s.name != "mmcv" else type(s)("mmcv", "2.2.0.*", wrong, None, s.feature) for s in spec.specs)
    bad = type(spec)(spec.name, spec.features, bad_specs, spec.pypi, spec.platforms, spec.channels)
    with pytest.raises(CheckFailed) as exc:
        solve_env(bad, facts, [channel])
    assert f"{env}: cannot solve" in exc.value.message and named in exc.value.message
    drift = policy._env_pins(bad, policy.expected_pins(facts, matrix)[env], "pixi.toml")
    assert any(p.package == "mmcv" for p in drift)


def test_cuda13_mmcv_cannot_be_solved_for_a_cuda_129_generation(channel):
    """The fat cuda130 build needs cuda-version 13 (`__cuda >=13`): not on a 12.9 driver floor."""
    from mmstack.errors import CheckFailed

    facts = load_facts()
    spec = load_manifest(REPO / "pixi.toml").envs["rtx4090"]
    specs = tuple(s for s in spec.specs if s.name not in ("mmcv", "cuda-version"))
    specs += (type(specs[0])("mmcv", "2.2.0.*", "cuda130_all_*"),)
    env = type(spec)(spec.name, spec.features, specs, spec.pypi, spec.platforms, spec.channels)
    with pytest.raises(CheckFailed) as exc:
        solve_env(env, facts, [channel])
    assert "rtx4090: cannot solve" in exc.value.message


def test_lock_one_environment_keeps_the_others(locked_repo, channel, tmp_path, capsys):
    root = tmp_path / "r"
    shutil.copytree(locked_repo, root)
    before = lockfile.read_pixi_lock_platforms(root / "pixi.lock")
    assert run_lock(root=root, envs=["b200"], channels=[channel]) == 0
    assert "b200: unchanged" in capsys.readouterr().out
    after = lockfile.read_pixi_lock_platforms(root / "pixi.lock")
    # every platform of every environment (gpu's six too) as it was
    assert {(n, e.platform): [p.label for p in e.packages] for n, es in after.items() for e in es} == \
        {(n, e.platform): [p.label for p in e.packages] for n, es in before.items() for e in es}


def test_facts_change_makes_the_generation_stale(locked_repo, channel):
    facts = load_facts()
    # CUDA 12.9's driver floor corrected: every generation on 12.9 is stale, the cpu one is not.
    cuda = tuple(t.model_copy(update={"min_driver": "575.57.08"}) if t.version == "12.9" else t for t in facts.cuda)
    found, _ = collect_problems(root=locked_repo, channels=[channel], facts=facts.model_copy(update={"cuda": cuda}))
    stale = [p for p in found if p.rule == "stale-lock"]
    # and gpu, on each of its platforms (it spans them all)
    assert sorted(p.env for p in stale) == sorted([g.env for g in facts.generation if g.is_gpu] + ["gpu"] * 6)
    assert all("gpus.toml changed" in p.message for p in stale)
    # Prose in the facts is not an input of the solve: no stale lock (envs/h100.yml's comment drifts).
    rows = tuple(g.model_copy(update={"summary": "edited"}) if g.env == "h100" else g for g in facts.generation)
    found, _ = collect_problems(root=locked_repo, channels=[channel], facts=facts.model_copy(update={"generation": rows}))
    assert [(p.env, p.rule) for p in found] == [("h100", "env-yml-drift")]


def test_drifted_manifest_refuses_to_lock(locked_repo, channel, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(locked_repo, root)
    text = (root / "pixi.toml").read_text()
    (root / "pixi.toml").write_text(text.replace('build = "cuda129_sm89_*"', 'build = "cuda129_sm90_*"'))
    before = (root / "pixi.lock").read_bytes()
    assert run_lock(root=root, channels=[channel]) == 1
    assert (root / "pixi.lock").read_bytes() == before
    found, _ = collect_problems(root=root, channels=[channel])
    assert any(p.env == "rtx4090" and p.rule == "manifest-drift" and p.package == "mmcv" for p in found)
    assert not any(p.env == "rtx4090" and p.rule == "mmcv-coverage" for p in found)  # the lock itself is still right
    assert any(p.env == "rtx4090" and p.rule == "stale-lock" for p in found)


def test_every_runtime_environment_gets_the_patched_mmdet(locked_repo):
    """The channel also holds an unpatched mmdet 3.3.0 with a higher build number (as conda-forge
    does); the `mmcv22_*` build pin in pixi.toml's mmdet feature must keep it out."""
    locked = lockfile.read_pixi_lock(locked_repo / "pixi.lock")
    for gen in load_facts().generation:
        (mmdet,) = locked[gen.env].by_name("mmdet")
        assert mmdet.version == "3.3.0" and mmdet.build.startswith("mmcv22_pyh"), (gen.env, mmdet.label)
        assert locked[gen.env].by_name("mmengine"), gen.env


@pytest.mark.parametrize("virtual, want", [
    (("__cuda=12.9",), "cuda129_all_py311_"),  # an A100, a 4090 or a 5090 on a 12.9 driver: the fat build
    ((), "cpu_py311_"),                       # no NVIDIA driver: the CPU build
])
def test_a_plain_mmcv_install_gets_a_build_that_runs_on_any_gpu(channel, tmp_path, virtual, want):
    """`conda install -c ./channel mmcv` names no build: the fat build's higher build number must
    win over the single-generation builds, which would fail with 'no kernel image' on other GPUs."""
    from mmstack.builder import channel as channelmod

    installed = channelmod.install(["mmcv", "python 3.11.*"], [channel], tmp_path / "env",
                                   virtual_packages=["__glibc=2.28", "__unix=0", "__linux=6.8", *virtual])
    (mmcv,) = [r for r in installed if r.startswith("mmcv=")]
    assert mmcv.split("=")[2].startswith(want), installed
