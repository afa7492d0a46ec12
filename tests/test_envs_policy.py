"""mmstack.envs.policy: what the facts and the matrix expect of pixi.toml, and the problems found."""

from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("rattler_build", reason="py-rattler-build (the 'build' extra) reads conda_build_config.yaml")

from mmstack.envs import lockfile, pixi_manifest, policy
from mmstack.facts.gpus import load as load_facts
from mmstack.variants.matrix import CONFIG_FILE, load_matrix

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def inputs():
    facts = load_facts()
    return facts, load_matrix(facts, ROOT / CONFIG_FILE), pixi_manifest.load(ROOT / "pixi.toml")


def test_the_repository_manifest_has_no_problems(inputs):
    facts, matrix, manifest = inputs
    assert [p.line() for p in policy.manifest_problems(manifest, facts, matrix)] == []


def test_expected_pins_follow_the_facts(inputs):
    facts, matrix, _ = inputs
    pins = policy.expected_pins(facts, matrix)
    assert set(pins) == set(facts.envs)
    cpu = pins["cpu"]
    assert (cpu.cuda_driver, cpu.cuda_arch, cpu.cuda_version, cpu.pytorch_build) == (None, None, None, "cpu*")
    for gen in facts.generation:
        if gen.is_gpu:
            p = pins[gen.env]
            assert p.cuda_version == f"{gen.cuda}.*" and p.cuda_arch == gen.compute_capability
            assert p.mmcv_prefixes and all(pre.startswith(f"cuda{gen.cuda.replace('.', '')}_") for pre in p.mmcv_prefixes)


def test_pins_give_the_build_globs_and_the_feature_block(inputs):
    facts, matrix, _ = inputs
    gpu = next(g for g in facts.generation if g.is_gpu)
    p = policy.expected_pins(facts, matrix)[gpu.env]
    prefix = sorted(p.mmcv_prefixes)[0]
    assert f"{prefix}_*" in p.mmcv_builds()
    assert {f"{prefix}_py{py.replace('.', '')}_*" for py in p.pythons} <= p.mmcv_builds()
    assert p.toml().splitlines() == [f"[feature.gen-{gpu.env}.dependencies]", f'cuda-version = "{gpu.cuda}.*"',
                                     f'mmcv = {{ version = "2.2.0.*", build = "{prefix}_*" }}']


def test_a_missing_generation_is_manifest_drift_with_the_fix(inputs):
    facts, matrix, manifest = inputs
    gpu = next(g for g in facts.generation if g.is_gpu)
    dropped = replace(manifest, envs={k: v for k, v in manifest.envs.items() if k != gpu.env})
    problems = policy.manifest_problems(dropped, facts, matrix)
    assert [(p.env, p.rule) for p in problems] == [(gpu.env, "manifest-drift")]
    assert f'{gpu.env} = ["cuda", "gen-{gpu.env}"]' in problems[0].fix


def test_a_drifted_pin_is_a_problem(inputs):
    facts, matrix, manifest = inputs
    gpu = next(g for g in facts.generation if g.is_gpu)
    env = manifest.envs[gpu.env]
    specs = tuple(replace(s, version="11.8.*") if s.name == "cuda-version" else s for s in env.specs)
    assert specs != env.specs, "the environment pins cuda-version"
    drifted = replace(manifest, envs={**manifest.envs, gpu.env: replace(env, specs=specs)})
    problems = policy.manifest_problems(drifted, facts, matrix)
    assert problems and all(p.env == gpu.env for p in problems)
    assert any(p.package == "cuda-version" for p in problems), [p.line() for p in problems]


def test_input_digests_follow_only_what_serves_the_environment(inputs):
    facts, matrix, manifest = inputs
    env = manifest.envs[facts.envs[-1]]
    before = policy.input_digests(env, facts, matrix)
    assert set(before) == {"mmstack_manifest", "mmstack_matrix", "mmstack_facts"}
    others = [v for v in matrix if env.name not in v.envs]
    serving = [v for v in matrix if env.name in v.envs]
    assert serving, f"no variant serves {env.name}"
    assert policy.input_digests(env, facts, [*others, *serving]) == before  # other variants do not count
    assert policy.input_digests(env, facts, others)["mmstack_matrix"] != before["mmstack_matrix"]


# -- where mmdet is, our mmengine: the manifest and the locks -----------------------------------


def test_every_environment_with_mmdet_takes_our_mmengine(inputs):
    facts, matrix, manifest = inputs
    with_mmdet = [e for e in manifest.envs.values() if e.specs_named("mmdet")]
    assert {e.name for e in with_mmdet} >= set(facts.envs)
    for env in with_mmdet:
        (spec,) = env.specs_named("mmengine")
        assert spec.build == policy.MMENGINE_BUILD, env.name
    # conda-forge's (any build) is manifest drift, with the line to write
    env = manifest.envs[facts.envs[0]]
    specs = tuple(replace(s, build=None) if s.name == "mmengine" else s for s in env.specs)
    drifted = replace(manifest, envs={**manifest.envs, env.name: replace(env, specs=specs)})
    (problem,) = [p for p in policy.manifest_problems(drifted, facts, matrix) if p.package == "mmengine"]
    assert problem.env == env.name and 'build = "safeload_*"' in problem.fix
    # the environment files generated from it say the same
    for gen in facts.generation:
        assert "  - mmengine=0.10.7=safeload_*\n" in (ROOT / "envs" / f"{gen.env}.yml").read_text()


def _pkg(name: str, version: str, build: str) -> lockfile.Locked:
    return lockfile.Locked(name, version, build, "noarch", f"https://c/noarch/{name}-{version}-{build}.conda",
                           f"{name}-{version}-{build}.conda", "a" * 64, "b" * 32, (), ())


def test_lock_check_refuses_conda_forges_mmengine_beside_mmdet():
    def problems(*pkgs):
        locked = lockfile.LockedEnv("cpu", "linux-64", "linux-64", (), ("https://c/",), pkgs)
        return policy.mmengine_problems("cpu", locked, "mmstack lock --env cpu")

    mmdet = _pkg("mmdet", "3.3.0", "mmcv22_pyh4616a5c_0")
    assert problems(mmdet, _pkg("mmengine", "0.10.7", "safeload_pyh4616a5c_0")) == []
    (bad,) = problems(mmdet, _pkg("mmengine", "0.10.7", "pyhd8ed1ab_0"))
    assert bad.rule == "mmengine-build" and "mmengine 0.10.7 pyhd8ed1ab_0" in bad.message
    assert "safeload_" in bad.fix and "mmstack lock --env cpu" in bad.fix
    assert problems(_pkg("mmengine", "0.10.7", "pyhd8ed1ab_0")) == []  # no mmdet: mmengine alone is not ours to judge
