"""pixi.toml's `gpu` environment: one environment over every generation's rich platform, whose
mmcv the solver picks per platform (CEP 46: `__cuda_arch`, docs/solver.md).

`mmstack lock` solves it once per platform with that platform's own `__cuda`/`__cuda_arch`
(py-rattler's GenericVirtualPackage) and writes one pixi.lock environment on six platforms plus a
conda-lock file per platform; `mmstack lock check` holds each platform's mmcv to its arch
(policy.platform_mmcv_problems). The solves are real: this repository's pixi.toml over
lab/src/mmstack_lab/standin/fake_channel.py's channel (STAND-IN packages, built as recipes/mmcv renders them),
locked by tests/support/committed_lock.py as it would be committed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from support import committed_lock

from mmstack.commands.lock_cmds import run_lock, run_lock_check
from mmstack.envs import lockfile, pixi_manifest, policy
from mmstack.envs.lock import collect_problems
from mmstack.facts.gpus import load as load_facts, version_key
from mmstack.variants import matrix as variants
from mmstack_lab.standin import fake_channel

pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
pytest.importorskip("rattler_build", reason="the variant matrix is read with py-rattler-build")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return committed_lock.make(tmp_path_factory.mktemp("gpu"))


@pytest.fixture(scope="module")
def facts():
    return load_facts()


@pytest.fixture(scope="module")
def matrix(root, facts):
    return variants.load_matrix(facts, root / variants.CONFIG_FILE)


def channel(root: Path) -> str:
    return fake_channel.url(root / "channel")


def gpu_generations(facts):
    """The GPU generations, highest compute capability first (the order pixi.toml declares them in)."""
    return sorted((g for g in facts.generation if g.is_gpu), key=lambda g: version_key(g.compute_capability), reverse=True)


def test_gpu_spans_every_generations_platform_highest_arch_first(root, facts):
    manifest = pixi_manifest.load(root / "pixi.toml")
    gpu = manifest.envs["gpu"]
    assert [p.name for p in gpu.platforms] == [policy.generation_platform_name(g.env) for g in gpu_generations(facts)]
    assert not any(s.build for s in gpu.specs_named("mmcv"))  # no generation pinned: the solver picks
    assert policy.is_multi_gpu_env(gpu) and not policy.is_multi_gpu_env(manifest.envs["h100"])


def test_each_platform_of_the_gpu_lock_holds_that_platforms_build(root, facts, matrix):
    """The real solve, unpinned, gives each platform the build its generation's environment pins:
    the whole record set equals that environment's, in pixi.lock and in the platform's conda-lock file."""
    manifest = pixi_manifest.load(root / "pixi.toml")
    every = lockfile.read_pixi_lock_platforms(root / "pixi.lock", manifest.platforms)
    by_platform = {lk.platform: lk for lk in every["gpu"]}
    assert list(by_platform) == [p.name for p in manifest.envs["gpu"].platforms]
    pins = policy.expected_pins(facts, matrix)
    for gen in gpu_generations(facts):
        plat = policy.generation_platform_name(gen.env)
        mine, theirs = by_platform[plat], every[gen.env][0]
        assert mine.vp("__cuda_arch") == gen.compute_capability, plat
        (mmcv,) = mine.by_name("mmcv")
        assert mmcv.build.split("_py")[0] in pins[gen.env].mmcv_prefixes, (plat, mmcv.build)
        assert [p.label for p in mine.packages] == [p.label for p in theirs.packages], plat
        cl = lockfile.read_conda_lock(lockfile.conda_lock_path(root, "gpu", plat))
        assert [(p.name, p.build, p.sha256) for p in cl.packages] == [(p.name, p.build, p.sha256) for p in mine.packages]
        meta = lockfile.load_yaml(lockfile.conda_lock_path(root, "gpu", plat).read_text())["metadata"]["custom_metadata"]
        assert meta["mmstack_platform"] == plat and f"__cuda_arch={gen.compute_capability}" in meta["mmstack_virtual_packages"]
        platform = next(p for p in manifest.platforms if p.name == plat)
        assert policy.platform_mmcv_problems("gpu", platform, mmcv.build, matrix) == []
    assert collect_problems(root=root, channels=[channel(root)])[0] == []


def test_every_conda_lock_file_has_its_yml_and_virtual_packages_beside_it(root):
    """The convention the generated locks workflow loops on (`for lock in envs/*.conda-lock.yml`:
    `-f envs/<stem>.yml --virtual-package-spec envs/<stem>.virtual-packages.yml`): gpu's six locks
    keep it, each from its platform's yml."""
    stems = [p.name.removesuffix(".conda-lock.yml") for p in sorted((root / "envs").glob("*.conda-lock.yml"))]
    assert len([s for s in stems if s.startswith("gpu.")]) == 6 and "gpu" not in stems
    for stem in stems:
        assert (root / "envs" / f"{stem}.yml").is_file() and (root / "envs" / f"{stem}.virtual-packages.yml").is_file(), stem
        meta = lockfile.load_yaml((root / "envs" / f"{stem}.conda-lock.yml").read_text())["metadata"]
        assert meta["sources"] == [f"{stem}.yml"], stem


def _swap_mmcv(lock_text: str, alias: str, mmcv_file: str) -> str:
    """pixi.lock with the gpu environment's mmcv on platform `alias` replaced by `mmcv_file`."""
    lines = lock_text.splitlines(keepends=True)
    start = lines.index("  gpu:\n")
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"^  \S", lines[i]))
    plat = next(i for i in range(start, end) if lines[i] == f"      {alias}:\n")
    hit = next(i for i in range(plat + 1, end) if "/mmcv-2.2.0-" in lines[i])
    lines[hit] = re.sub(r"mmcv-2\.2\.0-[^/\s]+\.conda", mmcv_file, lines[hit])
    return "".join(lines)


@pytest.mark.parametrize("platform, wrong", [
    ("linux-64-h100", "cuda129_sm89"),    # a lower generation's build: runs, but not the build for 9.0
    ("linux-64-a100", "cuda129_sm120"),   # a higher one: no SASS the A100 runs
])
def test_a_platform_with_another_generations_build_fails_lock_check(root, tmp_path, capsys, platform, wrong):
    tree = tmp_path / "r"
    shutil.copytree(root, tree)
    manifest = pixi_manifest.load(tree / "pixi.toml")
    alias = manifest.lock_aliases()[platform]
    files = sorted(p.name for p in (tree / "channel" / "linux-64").glob(f"mmcv-2.2.0-{wrong}_py311_*.conda"))
    assert len(files) == 1, files
    (tree / "pixi.lock").write_text(_swap_mmcv((tree / "pixi.lock").read_text(), alias, files[0]))
    found, _ = collect_problems(root=tree, channels=[channel(tree)])
    arch = [p for p in found if p.rule == "mmcv-platform-arch"]
    assert len(arch) == 1 and arch[0].env == "gpu" and arch[0].package == "mmcv", found
    assert arch[0].message.startswith(f"{platform} (") and wrong in arch[0].message, arch[0].message
    assert {p.env for p in found} == {"gpu"}  # the generation environments' locks are untouched
    assert run_lock_check(root=tree, channels=[channel(tree)]) == 1
    assert "[mmcv-platform-arch]" in capsys.readouterr().out


def test_an_unlocked_or_moved_platform_is_named(root, tmp_path):
    """A platform of `gpu` whose definition changed since the lock (pixi's PlatformDefinitionChanged:
    the locked `p3` no longer matches linux-64-h100) is reported for gpu too, naming the platform."""
    tree = tmp_path / "r"
    shutil.copytree(root, tree)
    text = (tree / "pixi.toml").read_text()
    (tree / "pixi.toml").write_text(text.replace('cuda = { driver = "12.9", arch = "9.0" }', 'cuda = { driver = "12.9", arch = "9.1" }'))
    found, _ = collect_problems(root=tree, channels=[channel(tree)])
    assert any(p.env == "gpu" and p.rule == "missing-lock" and "linux-64-h100" in p.message for p in found), found
    assert any(p.env == "h100" and p.rule == "stale-lock" for p in found)


A100 = '  { name = "linux-64-a100", platform = "linux-64", cuda = { driver = "12.9", arch = "8.0" }, glibc = "2.28" },\n'
RTX5090 = '  { name = "linux-64-rtx5090", platform = "linux-64", cuda = { driver = "12.9", arch = "12.0" }, glibc = "2.28" },\n'


def _first(text: str, line: str) -> str:
    """pixi.toml with the platform entry `line` declared first after the bare linux-64."""
    assert line in text
    return text.replace(line, "", 1).replace('  "linux-64",\n', '  "linux-64",\n' + line, 1)


@pytest.mark.parametrize("edit, rule, words", [
    # pixi installs the first declared platform a machine meets: lowest first would give every GPU sm_80
    (lambda t: _first(t, A100), "platform-order", "from the highest arch down: linux-64-rtx5090, linux-64-b200"),
    (lambda t: t.replace('"linux-64-b200", "linux-64-h100", "linux-64-rtx4090"', '"linux-64-h100", "linux-64-rtx4090"', 1),
     "manifest-drift", "also have linux-64-b200"),
    (lambda t: t.replace('[feature.gpu.dependencies]\ncuda-version = "12.9.*"\nmmcv = "2.2.0.*"',
                         '[feature.gpu.dependencies]\ncuda-version = "12.9.*"\nmmcv = { version = "2.2.0.*", build = "cuda129_sm89_*" }', 1),
     "manifest-drift", "pins one generation"),
])
def test_the_manifest_rules_of_the_gpu_environment(tmp_path, facts, matrix, edit, rule, words):
    shutil.copy(committed_lock.REPO / "pixi.toml", tmp_path / "pixi.toml")
    text = (tmp_path / "pixi.toml").read_text()
    edited = edit(text)
    assert edited != text
    (tmp_path / "pixi.toml").write_text(edited)
    found = policy.manifest_problems(pixi_manifest.load(tmp_path / "pixi.toml"), facts, matrix)
    assert [(p.env, p.rule) for p in found] == [("gpu", rule)], found
    assert words in found[0].message + found[0].fix, found[0]


def test_lock_refuses_a_gpu_environment_in_the_wrong_order(root, tmp_path, capsys):
    tree = tmp_path / "r"
    shutil.copytree(root, tree)
    text = (tree / "pixi.toml").read_text()
    assert RTX5090 in text and A100 in text
    (tree / "pixi.toml").write_text(text.replace(RTX5090, "", 1).replace(A100, A100 + RTX5090, 1))  # rtx5090 last
    before = (tree / "pixi.lock").read_bytes()
    assert run_lock(root=tree, channels=[channel(tree)]) == 1
    assert "[platform-order]" in capsys.readouterr().err
    assert (tree / "pixi.lock").read_bytes() == before
