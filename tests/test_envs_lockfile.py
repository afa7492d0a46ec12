"""mmstack.envs.lockfile: conda-lock's dependency records, the YAML reader and writer, the paths."""

from pathlib import Path

import pytest

from mmstack.envs import lockfile


@pytest.mark.parametrize("spec, version, build, channel", [
    ("python", "", None, None),
    ("python=3.11", "3.11.*", None, None),
    ("python=3.11.*", "3.11.*", None, None),
    ("mmcv=2.2.0=cuda129_sm89_py311_0", "2.2.0", "cuda129_sm89_py311_0", None),
    ("numpy>=1.26,<2.7", ">=1.26,<2.7", None, None),
    ("numpy ==2.4.6", "2.4.6", None, None),
    ("conda-forge::pytorch >=2.9", ">=2.9", None, "conda-forge"),
])
def test_conda_lock_dependency_spellings(spec, version, build, channel):
    dep = lockfile.conda_lock_dependency(spec)
    assert (dep["version"], dep["build"], dep["conda_channel"]) == (version, build, channel)
    assert dep["manager"] == "conda" and dep["category"] == "main" and dep["name"] == spec.split("::")[-1].split()[0].split("=")[0].split(">")[0]


def test_conda_lock_dependency_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="cannot read"):
        lockfile.conda_lock_dependency("mmcv=2.2.0=build=extra")


def test_dump_yaml_round_trips_and_never_retypes_strings():
    doc = {"version": 1, "metadata": {"content_hash": {"linux-64": "ab12"}, "platforms": ["linux-64"]},
           "package": [{"name": "numpy", "version": "2.0", "optional": False, "flag": "true", "date": "2026-12-03",
                        "dependencies": {}, "empty": []}]}
    text = lockfile.dump_yaml(doc)
    assert lockfile.load_yaml(text) == doc
    assert list(lockfile.load_yaml(text)) == ["version", "metadata", "package"]  # key order kept


def test_load_yaml_turns_parse_errors_into_value_errors():
    with pytest.raises(ValueError):
        lockfile.load_yaml("a: [unclosed\n")


def test_build_from_file_name():
    p = {"name": "mmcv", "version": "2.2.0"}
    assert lockfile._build_from_file("mmcv-2.2.0-cuda129_sm89_py311_0.conda", p) == "cuda129_sm89_py311_0"
    assert lockfile._build_from_file("mmcv-2.2.0-cpu_py311_0.tar.bz2", p) == "cpu_py311_0"


def test_paths_per_environment(tmp_path):
    assert lockfile.conda_lock_path(tmp_path, "rtx4090") == tmp_path / "envs" / "rtx4090.conda-lock.yml"
    assert lockfile.env_yml_path(tmp_path, "rtx4090") == tmp_path / "envs" / "rtx4090.yml"
    assert lockfile.vp_spec_path(Path("."), "cpu") == Path("envs/cpu.virtual-packages.yml")


def test_virtual_package_spec_gives_archspec_its_build():
    spec = lockfile.conda_lock_virtual_package_spec("linux-64", {"__cuda": "12.9", "__archspec": "x86_64"})
    assert spec == {"subdirs": {"linux-64": {"packages": {"__cuda": "12.9", "__archspec": "1 x86_64"}}}}
