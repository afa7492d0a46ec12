"""conda_build_config.yaml read by py-rattler-build and validated against the facts."""

from pathlib import Path

import pytest

pytest.importorskip("rattler_build", reason="py-rattler-build is the 'build' extra")

from mmstack.errors import BadInput, CheckFailed
from mmstack.facts.gpus import load
from mmstack.variants import matrix as variants

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / variants.CONFIG_FILE


def test_repo_matrix_is_valid_and_serves_every_generation():
    m = variants.load_matrix(load(), CONFIG)
    served = {env for v in m for env in v.envs}
    assert served == set(load().envs)
    for v in m:
        if v.cuda:
            assert v.build_string_prefix.startswith(f"cuda{v.cuda.replace('.', '')}_")
    tags = {v.build_string_prefix for v in m}
    assert {"cpu", "cuda129_sm89", "cuda129_all"} <= tags


def test_each_generation_gets_exactly_one_build_per_python():
    m = variants.load_matrix(load(), CONFIG)
    for py in {v.python for v in m}:
        for env in load().envs:
            assert len([v for v in m if v.python == py and env in v.envs]) == 1


def _config(tmp_path, text):
    p = tmp_path / "conda_build_config.yaml"
    p.write_text(text)
    return p


BASE = """
python: ["3.11"]
pytorch: ["2.9"]
cuda_compiler_version: [None, "{cuda}"]
mmcv_arch_list: [none, "{archs}"]
arch_tag: [cpu, "{tag}"]
zip_keys:
  - [cuda_compiler_version, mmcv_arch_list, arch_tag]
"""


def test_impossible_combination_exits_1_naming_it(tmp_path):
    p = _config(tmp_path, BASE.format(cuda="12.4", archs="12.0", tag="sm120"))
    with pytest.raises(CheckFailed, match=r"cuda_compiler_version=12\.4 .*CUDA 12\.4 cannot build 12\.0"):
        variants.build_matrix(load(), variants.read_config(p))


def test_wrong_arch_tag_is_caught(tmp_path):
    p = _config(tmp_path, BASE.format(cuda="12.9", archs="8.9", tag="sm90"))
    with pytest.raises(CheckFailed, match="arch_tag should be 'sm89'"):
        variants.build_matrix(load(), variants.read_config(p))


def test_malformed_file_exits_2(tmp_path):
    p = _config(tmp_path, "python: [\n")
    with pytest.raises(BadInput, match=r"conda_build_config\.yaml"):
        variants.read_config(p)


def test_unzipped_cuda_keys_are_bad_input(tmp_path):
    p = _config(tmp_path, BASE.format(cuda="12.9", archs="8.9", tag="sm89").split("zip_keys")[0])
    with pytest.raises(BadInput, match="zip_keys"):
        variants.read_config(p)
