"""mmstack.envs.pixi_manifest: pixi.toml -> environments, platforms, the pixi floor, lock aliases."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mmstack.envs import pixi_manifest
from mmstack.errors import BadInput
from mmstack.facts.gpus import load as load_facts

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def manifest():
    return pixi_manifest.load(ROOT / "pixi.toml")


def test_the_repository_manifest_has_an_environment_per_generation(manifest):
    facts = load_facts()
    assert set(facts.envs) <= set(manifest.envs)
    for env in facts.envs:
        spec = manifest.env(env)
        assert spec.name == env and spec.platforms and spec.channels


def test_unknown_environment_is_bad_input_naming_the_choices(manifest):
    with pytest.raises(BadInput) as err:
        manifest.env("no-such-env")
    assert "no-such-env" in str(err.value) and "pixi.toml" in str(err.value)


def test_pixi_floor_is_the_lowest_release_requires_pixi_admits(manifest):
    assert pixi_manifest.pixi_floor(replace(manifest, requires_pixi=">=0.71")) == "v0.71.0"
    assert pixi_manifest.pixi_floor(replace(manifest, requires_pixi=">=0.71.2,<1")) == "v0.71.2"
    with pytest.raises(BadInput, match="no lower bound"):
        pixi_manifest.pixi_floor(replace(manifest, requires_pixi="<1"))
    with pytest.raises(BadInput, match="no requires-pixi"):
        pixi_manifest.pixi_floor(replace(manifest, requires_pixi=None))


def test_lock_aliases_number_only_the_platforms_that_are_not_bare_subdirs(manifest):
    aliases = manifest.lock_aliases()
    rich = [p.name for p in manifest.platforms if not p.is_subdir_platform]
    assert list(aliases) == rich
    assert list(aliases.values()) == [f"p{i}" for i in range(1, len(rich) + 1)]


def test_platform_identity_drops_the_subdir_defaults_and_normalises_versions():
    plain = pixi_manifest.platform_identity("linux-64", ["__unix=0=0", "__linux=4.18", "__glibc=2.28"])
    assert plain == ("linux-64", ())
    gpu = pixi_manifest.platform_identity("linux-64", ["__unix=0=0", "__cuda=12.9.0=0", "__cuda_arch=8.9"])
    assert gpu == ("linux-64", (("__cuda", "12.9", ""), ("__cuda_arch", "8.9", "")))
    assert gpu == pixi_manifest.platform_identity("linux-64", ["__cuda_arch=8.9", "__cuda=12.9"])


def test_env_digest_follows_the_specs(manifest):
    env = manifest.env(load_facts().envs[0])
    assert env.digest() == replace(env).digest()
    assert env.digest() != replace(env, specs=env.specs[1:]).digest()


def test_channel_urls(tmp_path):
    assert pixi_manifest.channel_url("conda-forge", tmp_path) == "https://conda.anaconda.org/conda-forge/"
    assert pixi_manifest.channel_url("./channel", tmp_path) == (tmp_path / "channel").resolve().as_uri() + "/"
    assert pixi_manifest.channel_url("https://example.org/ch/", tmp_path) == "https://example.org/ch/"


# -- TOML 1.1 (pixi >= 0.73 reads it) --------------------------------------------------------------

TOML11 = Path(__file__).parent / "data" / "toml11"


@pytest.mark.parametrize("name", ["layout.toml", "tasks-pixi.toml"])
def test_toml_11_inline_tables_read_as_a_toml_11_parser_reads_them(name):
    """Multi-line inline tables with comments and trailing commas (pixi's own examples/tasks):
    tomllib (TOML 1.0) refuses them; mmstack reads what tomli 2.5.0 (TOML 1.1) reads, recorded in
    tests/data/toml11/tomli-2.5.0.json."""
    from mmstack.envs import toml11

    recorded = json.loads((TOML11 / "tomli-2.5.0.json").read_text())["files"][name]
    text = (TOML11 / recorded["path"]).read_text()
    assert isinstance(recorded["tomllib_3.11_toml_1.0"], str)  # the TOML 1.0 reader refused it (its error)
    assert toml11.loads(text) == recorded["tomli_toml_1.1"]


def test_a_toml_11_pixi_toml_loads():
    m = pixi_manifest.load(TOML11.parent / "pixi_lock_fixtures" / "empty-environments" / "tasks" / "pixi.toml")
    assert list(m.envs) == ["default", "extra"] and [p.name for p in m.platforms] == ["osx-arm64"]


def test_toml_11_syntax_mmstack_does_not_read_is_named(tmp_path):
    path = tmp_path / "pixi.toml"
    path.write_text('[workspace]\nchannels = ["conda-forge"]\nplatforms = ["linux-64"]\nname = "a\\e"\n')
    with pytest.raises(BadInput) as exc:
        pixi_manifest.load(path)
    line = exc.value.one_line()
    assert "cannot read the manifest" in line and "of TOML 1.1, mmstack reads inline tables over several lines" in line
    assert "not the \\e or \\xHH escapes" in line and "\n" not in line
