"""pixi.toml as derived data, the lock policy's pure rules, and the `mmstack lock` CLI (no solving)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from mmstack.cli import main
from mmstack.envs import lockfile, policy
from mmstack.envs.lock import NO_LOCK, check_locks_for_check_command, collect_problems, render_env_yml
from mmstack.envs.pixi_manifest import channel_url, load as load_manifest
from mmstack.errors import BadInput, CheckFailed
from mmstack.facts import arch as archmod
from mmstack.facts.gpus import load as load_facts
from mmstack.variants import matrix as variants

pytest.importorskip("rattler_build", reason="the variant matrix is read with py-rattler-build")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def matrix():
    return variants.load_matrix(load_facts(), REPO / variants.CONFIG_FILE)


@pytest.fixture
def repo(tmp_path):
    """pixi.toml, the matrix and envs/*.yml of this repository, in a scratch root."""
    for name in ("pixi.toml", variants.CONFIG_FILE):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "envs", tmp_path / "envs", ignore=shutil.ignore_patterns("*.conda-lock.yml"))
    return tmp_path


# -- the committed manifest agrees with facts + matrix -------------------------------------------


def test_committed_pixi_toml_agrees_with_facts_and_matrix(matrix):
    manifest = load_manifest(REPO / "pixi.toml")
    assert policy.manifest_problems(manifest, load_facts(), matrix) == []
    assert set(manifest.envs) >= {g.env for g in load_facts().generation} | {"build", "test", "lint"}


def test_committed_env_ymls_are_what_pixi_toml_gives():
    """One per environment pixi has (default and the tooling ones too: each conda-lock file's source),
    and for `gpu` one more per platform (envs/gpu.<platform>.yml: each platform's lock's source)."""
    from mmstack.envs.lock import yml_platforms

    manifest, facts = load_manifest(REPO / "pixi.toml"), load_facts()
    want = {(e, p.name if p else None) for e in manifest.envs for p in yml_platforms(manifest.envs[e])}
    assert {p.name for p in (REPO / "envs").glob("*.yml")} == {lockfile.env_yml_path(REPO, e, p).name for e, p in want}
    assert len(want) == len(manifest.envs) + len(manifest.envs["gpu"].platforms)
    for env, plat in sorted(want, key=str):
        platform = next((p for p in manifest.platforms if p.name == plat), None)
        assert lockfile.env_yml_path(REPO, env, plat).read_text() == render_env_yml(manifest.envs[env], facts, platform), env


def test_no_lock_is_one_rule_for_check_and_lock_check(repo, capsys):
    """A tree without pixi.lock: `mmstack check`'s lock stage and `mmstack lock check` say the same
    thing (NO_LOCK) and both pass on what they did check; --require-lock makes it a failure."""
    assert not (repo / "pixi.lock").exists()
    assert NO_LOCK in check_locks_for_check_command(repo)
    assert main(["lock", "check", "--root", str(repo)]) == 0
    assert NO_LOCK in capsys.readouterr().out
    assert main(["lock", "check", "--root", str(repo), "--require-lock"]) == 1
    assert "no pixi.lock (--require-lock) [missing-lock] (fix: mmstack lock)" in capsys.readouterr().out


def test_every_gpu_environment_declares_its_generation_on_the_platform():
    manifest, facts = load_manifest(REPO / "pixi.toml"), load_facts()
    for gen in facts.generation:
        (plat,) = manifest.envs[gen.env].platforms
        if gen.is_gpu:
            assert (plat.vp("__cuda"), plat.vp("__cuda_arch"), plat.vp("__glibc")) == (gen.cuda, gen.compute_capability, "2.28")
        else:
            assert plat.name == "linux-64" and plat.vp("__cuda") is None


# -- drift ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("old, new, env, package", [
    ('mmcv = { version = "2.2.0.*", build = "cuda129_sm89_*" }', 'mmcv = { version = "2.2.0.*", build = "cuda129_sm90_*" }', "rtx4090", "mmcv"),
    ('build = "cuda129_sm120_*"', 'build = "cuda129_all_*"', "rtx5090", "mmcv"),
    ('cuda = { driver = "12.9", arch = "8.0" }', 'cuda = { driver = "12.9", arch = "8.6" }', "a100", "__cuda"),
    ('cuda = { driver = "12.9", arch = "9.0" }', 'cuda = { driver = "12.8", arch = "9.0" }', "h100", "__cuda"),
    ('[feature.gen-b200.dependencies]\ncuda-version = "12.9.*"', '[feature.gen-b200.dependencies]\ncuda-version = "12.8.*"', "b200", "cuda-version"),
    ('pytorch = { version = "*", build = "cuda*" }', 'pytorch = { version = "*", build = "cpu*" }', "rtx3090", "pytorch"),
    ('pytorch = { version = "*", build = "cuda*" }', 'pytorch = { version = "2.0.*", build = "cuda*" }', "rtx3090", "pytorch"),
    ('rtx5090 = ["cuda", "gen-rtx5090", "mmdet"]\n', "", "rtx5090", "-"),
])
def test_manifest_drift_is_flagged(repo, matrix, old, new, env, package):
    path = repo / "pixi.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    found = policy.manifest_problems(load_manifest(path), load_facts(), matrix)
    assert any(p.env == env and p.package == package and p.rule == "manifest-drift" for p in found), [p.line() for p in found]


def test_env_yml_drift_is_flagged(repo):
    (repo / "envs" / "h100.yml").write_text("name: stale\n")
    (repo / "envs" / "cpu.yml").unlink()
    found, _ = collect_problems(root=repo)
    assert {(p.env, p.rule) for p in found} == {("h100", "env-yml-drift"), ("cpu", "env-yml-drift")}
    with pytest.raises(CheckFailed) as exc:
        check_locks_for_check_command(repo)
    assert "and 1 more" in exc.value.message and exc.value.fix == "mmstack lock --yml-only"


def test_yml_only_rewrites_envs(repo, capsys):
    (repo / "envs" / "h100.yml").write_text("name: stale\n")
    assert main(["lock", "--yml-only", "--root", str(repo)]) == 0
    assert (repo / "envs" / "h100.yml").read_text() == (REPO / "envs" / "h100.yml").read_text()


# -- manifest parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, field", [
    ("[workspace\n", "TOML"),
    ('[workspace]\nchannels = []\nplatforms = ["linux-64"]\n', "workspace.channels"),
    ('[workspace]\nchannels = ["conda-forge"]\nplatforms = [{ name = "x" }]\n', "workspace.platforms[0]"),
    ('[workspace]\nchannels = ["conda-forge"]\nplatforms = [{ platform = "linux-64", cuda = { arch = "8.9" } }]\n', "needs `driver`"),
    ('[workspace]\nchannels = ["conda-forge"]\nplatforms = ["linux-64"]\n[environments]\nx = ["nope"]\n', "unknown feature 'nope'"),
    ('[workspace]\nchannels = ["conda-forge"]\nplatforms = ["linux-64"]\n[feature.a]\nplatforms = ["osx-64"]\n'
     '[environments]\nx = ["a"]\n', "not a workspace platform"),
])
def test_malformed_manifest_is_bad_input_naming_the_file(tmp_path, text, field):
    (tmp_path / "pixi.toml").write_text(text)
    with pytest.raises(BadInput) as exc:
        load_manifest(tmp_path / "pixi.toml")
    assert "pixi.toml" in exc.value.one_line() and field in exc.value.one_line()


def test_cli_malformed_manifest_exits_2(repo, capsys):
    (repo / "pixi.toml").write_text("[workspace\n")
    assert main(["lock", "check", "--root", str(repo)]) == 2
    assert main(["lock", "--root", str(repo)]) == 2
    assert "pixi.toml" in capsys.readouterr().err


def test_cli_unknown_env_exits_2(repo):
    assert main(["lock", "check", "--root", str(repo), "--env", "nope"]) == 2


def test_channel_urls(tmp_path):
    assert channel_url("conda-forge", tmp_path) == "https://conda.anaconda.org/conda-forge/"
    assert channel_url("./channel", tmp_path) == (tmp_path / "channel").resolve().as_uri() + "/"
    assert channel_url("https://mirror.example/cf", tmp_path) == "https://mirror.example/cf/"


# -- pure rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize("build, cuda, archs", [
    ("cuda129_sm89_py311_h1234567_0", "12.9", ["8.9"]),
    ("cuda129_sm120_py312_habcdef0_0", "12.9", ["12.0"]),
    ("cuda129_sm100_py311_h1234567_0", "12.9", ["10.0"]),
    ("cuda129_sm80_86_py311_h1234567_0", "12.9", ["8.0", "8.6"]),
    ("cuda129_sm90a_py311_h1234567_0", "12.9", ["9.0a"]),
    ("cuda118_sm75_py310_h1234567_0", "11.8", ["7.5"]),
])
def test_mmcv_build_strings_name_their_archs(matrix, build, cuda, archs):
    got_cuda, targets = policy.mmcv_archs(build, matrix)
    assert got_cuda == cuda and [str(t.arch) for t in targets] == archs


def test_fat_and_cpu_build_strings(matrix):
    cuda, targets = policy.mmcv_archs("cuda129_all_py311_h1234567_0", matrix)
    fat = next(v for v in matrix if v.cuda == "12.9" and v.arch_tag == "all")
    assert cuda == "12.9" and targets == fat.targets
    assert policy.mmcv_archs("cpu_py311_h1234567_0", matrix) == (None, ())
    assert policy.mmcv_archs("py311_h1234567_0", matrix) == (None, None)


def _locked(env="h100", *pkgs, vps=("__cuda=12.9", "__cuda_arch=9.0")):
    return lockfile.LockedEnv(env, f"linux-64-{env}", "linux-64", vps, ("https://c/",), tuple(pkgs))


def _pkg(name, version, build, depends=(), constrains=(), sha="a" * 64):
    return lockfile.Locked(name, version, build, "linux-64", f"https://c/linux-64/{name}-{version}-{build}.conda",
                           f"{name}-{version}-{build}.conda", sha, "b" * 32, tuple(depends), tuple(constrains))


def _rules(locked, matrix, env="h100"):
    facts = load_facts()
    gen = next(g for g in facts.generation if g.env == env)
    return policy._generation_rules(gen, locked, facts, matrix, "mmstack lock")


def test_generation_rules_pass_for_a_good_h100_env(matrix):
    good = _locked("h100",
                   _pkg("pytorch", "2.13.0", "cuda129_generic_py311_h1_200", depends=("__cuda",)),
                   _pkg("cuda-version", "12.9", "h1_3", constrains=("__cuda >=12", "cudatoolkit 12.9|12.9.*")),
                   _pkg("mmcv", "2.2.0", "cuda129_sm90_py311_h1_0", depends=("__cuda",)))
    assert _rules(good, matrix) == []


def test_generation_rules_catch_each_problem(matrix):
    bad = _locked("h100",
                  _pkg("pytorch", "2.13.0", "cpu_generic_py311_h1_200"),
                  _pkg("cuda-version", "13.0", "h1_3", constrains=("__cuda >=13",)),
                  _pkg("mmcv", "2.2.0", "cuda129_sm89_py311_h1_0"))
    rules = {(p.package, p.rule) for p in _rules(bad, matrix)}
    assert ("pytorch", "cpu-pytorch") in rules
    assert ("cuda-version", "driver-floor") in rules
    assert ("mmcv", "mmcv-coverage") in rules
    old = _locked("rtx5090",
                  _pkg("pytorch", "2.13.0", "cuda126_generic_py311_h1_200"),
                  _pkg("cuda-version", "12.6", "h1_3", constrains=("__cuda >=12",)),
                  _pkg("mmcv", "2.2.0", "cuda129_all_py311_h1_0"),
                  vps=("__cuda=13.0", "__cuda_arch=12.0"))
    found = _rules(old, matrix, "rtx5090")
    assert any(p.rule == "cuda-version-arch" and "cannot target compute capability 12.0" in p.message for p in found)
    assert any(p.rule == "driver-floor" and "__cuda=13.0" in p.message for p in found)
    assert not any(p.rule == "mmcv-coverage" for p in found)  # the fat build has 12.0 SASS


def test_cpu_generation_rules(matrix):
    bad = _locked("cpu", _pkg("pytorch", "2.13.0", "cuda129_generic_py311_h1_200"), _pkg("mmcv", "2.2.0", "cuda129_all_py311_h1_0"), vps=())
    rules = {p.rule for p in _rules(bad, matrix, "cpu")}
    assert rules == {"cuda-pytorch-in-cpu-env", "mmcv-coverage"}


def test_pypi_torch_next_to_conda_mmcv(matrix):
    manifest = load_manifest(REPO / "pixi.toml")
    env = manifest.envs["h100"]
    locked = lockfile.LockedEnv("h100", "linux-64-h100", "linux-64", ("__cuda=12.9",), ("https://c/",),
                                (_pkg("mmcv", "2.2.0", "cuda129_sm90_py311_h1_0"),), pypi=(("torch", "2.13.0"),))
    found = policy.lock_problems(env=env, locked=locked, facts=load_facts(), matrix=matrix,
                                 channels=["https://c/"], stored_digests=None)
    assert any(p.rule == "pypi-torch" and p.package == "torch" for p in found)


def test_coverage_rule_uses_native_only(matrix):
    # sm_80 SASS runs on 8.6 (lower minor) but the rtx3090 environment must carry 8.6 itself.
    _, targets = policy.mmcv_archs("cuda129_sm80_py311_h1_0", matrix)
    assert archmod.coverage(archmod.parse_arch("8.6"), targets).coverage is archmod.Coverage.LOWER_MINOR
    bad = _locked("rtx3090", _pkg("pytorch", "2.13.0", "cuda129_generic_py311_h1_200"),
                  _pkg("cuda-version", "12.9", "h1_3"), _pkg("mmcv", "2.2.0", "cuda129_sm80_py311_h1_0"))
    assert [p.rule for p in _rules(bad, matrix, "rtx3090")] == ["mmcv-coverage"]


def test_conda_lock_dependencies_follow_conda_lock():
    deps = lockfile._dependencies(["_openmp_mutex * *_llvm", "_openmp_mutex >=4.5", "python >=3.11,<3.12.0a0", "__cuda"])
    assert deps == {"_openmp_mutex": ">=4.5", "python": ">=3.11,<3.12.0a0", "__cuda": ""}


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    (tmp_path / "a").write_text("old")

    def boom(p):
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        lockfile.write_atomically({tmp_path / "a": lockfile.text_writer("new"), tmp_path / "b": boom})
    assert (tmp_path / "a").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_problem_line_names_env_package_rule_and_fix():
    p = policy.Problem("rtx4090", "mmcv", "mmcv-coverage", "mmcv … carries 9.0", "pin it")
    assert p.line() == "rtx4090: mmcv: mmcv … carries 9.0 [mmcv-coverage] (fix: pin it)"


def test_an_unindexed_local_channel_is_bad_input(repo, tmp_path, capsys):
    pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
    (tmp_path / "empty").mkdir()
    assert main(["lock", "--root", str(repo), "--channel", str(tmp_path / "empty")]) == 2
    assert "not an indexed conda channel" in capsys.readouterr().err
    assert not (repo / "pixi.lock").exists()


# -- conda-lock's content_hash ---------------------------------------------------------------------

CONTENT_HASH_FIXTURE = Path(__file__).parent / "data" / "conda_lock_content_hash.json"


def test_content_hash_is_what_conda_lock_computes():
    """Against conda-lock's own values (recorded by tests/support/record_conda_lock_hashes.py; the
    version and command are in the file's header): every committed environment and the spellings
    render_env_yml may write."""
    data = json.loads(CONTENT_HASH_FIXTURE.read_text())
    assert data["recorded_with"]["conda_lock_version"]
    for case in data["cases"]:
        (subdir_spec,) = case["virtual_package_spec"]["subdirs"].values()
        vps = {n: v.split(" ", 1)[1] if n == "__archspec" else v for n, v in subdir_spec["packages"].items()}
        got = lockfile.conda_lock_content_hash(specs=case["dependencies"], channels=case["channels"],
                                               subdir=case["subdir"], virtual_packages=vps)
        assert got == case["conda_lock_content_hash"], case["env"]


def test_content_hash_fixture_covers_the_committed_environments():
    """The recorded cases are the inputs `mmstack lock` hashes for this pixi.toml: a change to the
    manifest or to the env.yml spellings means re-recording with conda-lock."""
    from mmstack.envs.lock import _conda_spec, virtual_packages

    cases = {(c["env"], c.get("platform")): c for c in json.loads(CONTENT_HASH_FIXTURE.read_text())["cases"]}
    manifest, facts = load_manifest(REPO / "pixi.toml"), load_facts()
    # every generation's environment, and the gpu environment once per platform (one conda-lock file each)
    wanted = [(gen.env, None, manifest.envs[gen.env].platforms[0]) for gen in facts.generation]
    wanted += [("gpu", plat.name, plat) for plat in manifest.envs["gpu"].platforms]
    for name, which, plat in wanted:
        env = manifest.envs[name]
        assert which is not None or len(env.platforms) == 1
        case = cases[(name, which)]
        assert case["dependencies"] == [_conda_spec(s) for s in env.specs], name
        assert case["channels"] == list(env.channels)
        assert case["virtual_package_spec"] == lockfile.conda_lock_virtual_package_spec(
            plat.subdir, virtual_packages(env, plat, facts)), (name, which)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_written_files_honour_the_umask(repo, umask):
    """Not mkstemp's 0600: the rename would carry it over to files others read."""
    old = os.umask(umask)
    try:
        lockfile.write_atomically({repo / "envs" / "x.txt": lockfile.text_writer("x\n")})
        assert main(["lock", "--yml-only", "--root", str(repo)]) == 0
    finally:
        os.umask(old)
    for path in [repo / "envs" / "x.txt", repo / "envs" / "h100.yml", repo / "envs" / "cpu.yml"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
    assert not list((repo / "envs").glob(".*.tmp"))


def test_lock_aliases_follow_pixi_toml_order():
    """pixi names every platform that is not a bare subdir `p1`, `p2`, ... in declaration order."""
    manifest = load_manifest(REPO / "pixi.toml")
    rich = [p.name for p in manifest.platforms if p.name != p.subdir]
    assert manifest.lock_aliases() == {name: f"p{i}" for i, name in enumerate(rich, 1)}
    assert "linux-64" not in manifest.lock_aliases() and rich[0] == "linux-64-rtx5090"  # highest arch first (pixi.toml says why)


def test_platform_identity_ignores_defaults_order_and_zero_builds():
    from mmstack.envs.pixi_manifest import platform_identity

    plat = next(p for p in load_manifest(REPO / "pixi.toml").platforms if p.name == "linux-64-h100")
    assert plat.identity() == ("linux-64", (("__cuda", "12.9", ""), ("__cuda_arch", "9", "")))
    assert platform_identity("linux-64", ["__cuda_arch=9.0", "__cuda=12.9=0", "__archspec=0=x86_64"]) == plat.identity()
    assert platform_identity("linux-64", ["__cuda=12.9", "__cuda_arch=9.0", "__glibc=2.17"]) != plat.identity()


def test_lock_check_json_gives_ci_the_verdict_on_stdout(tmp_path):
    """issue 22 item 6: `lock check --json` (it had none): ok and summary, or the problems, same exit code."""
    from support.cli import mmstack

    root = Path(__file__).resolve().parents[1]
    code, out, err = mmstack("lock", "check", "--json", "--root", str(root))
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True and doc["problems"] == [] and "environments" in doc["summary"], (out, err)
    code, out, err = mmstack("lock", "check", "--json", "--require-lock", "--root", str(root))
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["problems"], (out, err)
    assert {"env", "package", "rule", "message", "fix"} == set(doc["problems"][0])


def test_lock_yml_only_json_lists_what_it_wrote(tmp_path):
    """issue 22 item 6: `lock` had no --json (a full solve's JSON adds each environment's packages)."""
    from support.cli import mmstack

    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "envs", tmp_path / "envs")
    for f in ("pixi.toml", "conda_build_config.yaml"):
        shutil.copy(root / f, tmp_path / f)
    code, out, err = mmstack("lock", "--yml-only", "--json", "--root", str(tmp_path))
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True and "envs/h100.yml" in doc["written"], (out, err)
