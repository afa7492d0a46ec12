"""mmstack.envs.policy: what the facts and the matrix expect of pixi.toml, and the problems found."""

from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("rattler_build", reason="py-rattler-build (the 'build' extra) reads conda_build_config.yaml")

from mmstack.envs import pixi_manifest, policy
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
