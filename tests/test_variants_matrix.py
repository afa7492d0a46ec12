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
    """Per Python: the migration target's rows serve every environment once; the pin's only the CPU one
    (its GPU rows are the fat builds, which serve no generation environment)."""
    from mmstack.facts.pytorch import load_pytorch

    m = variants.load_matrix(load(), CONFIG)
    roles = {r.version: r.role for r in load_pytorch().pytorch}
    assert sorted({v.python for v in m}) == ["3.10", "3.11", "3.12", "3.13", "3.14"]
    assert sorted(roles[v.pytorch] for v in m if v.python == "3.13" and v.cuda is None) == ["migration", "pin"]
    for py in {v.python for v in m}:
        for pt, role in roles.items():
            for env in load().envs:
                n = len([v for v in m if v.python == py and v.pytorch == pt and env in v.envs])
                assert n == (1 if role == "migration" or env == "cpu" else 0), (py, pt, env)
            fat = [v.cuda for v in m if v.python == py and v.pytorch == pt and v.arch_tag == variants.FAT_TAG]
            assert sorted(fat) == ["12.9", "13.0"], (py, pt)


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


# -- compiler pins (issue 21 item 5): gcc zipped with CUDA, as conda-forge pins it -------------------

GCC = BASE + """c_compiler_version: ["14", "{gcc}"]
cxx_compiler_version: ["14", "{gxx}"]
"""


def _gcc_config(tmp_path, *, cuda="12.6", gcc="13", gxx="13", zipped=True):
    text = GCC.format(cuda=cuda, archs="8.9", tag="sm89", gcc=gcc, gxx=gxx)
    if zipped:
        text = text.replace("[cuda_compiler_version, mmcv_arch_list, arch_tag]",
                            "[cuda_compiler_version, mmcv_arch_list, arch_tag, c_compiler_version, cxx_compiler_version]")
    return _config(tmp_path, text)


def test_repo_matrix_pins_conda_forges_gcc_on_every_row_within_what_its_nvcc_accepts():
    facts = load()
    for v in variants.load_matrix(facts, CONFIG):
        assert v.compiler_version == "14"
        assert v.variant_keys()["c_compiler_version"] == v.variant_keys()["cxx_compiler_version"] == "14"
        if v.cuda:
            assert int(v.compiler_version) <= facts.toolkit(v.cuda).max_gcc


def test_a_gcc_newer_than_the_rows_nvcc_accepts_is_refused_naming_the_fact(tmp_path):
    # CUDA 12.6's nvcc accepts gcc <= 13 (gpus.toml); gcc 14 there is the classic "unsupported GNU version"
    p = _gcc_config(tmp_path, cuda="12.6", gcc="14", gxx="14")
    with pytest.raises(CheckFailed, match=r"c_compiler_version 14: CUDA 12\.6's nvcc accepts gcc <= 13"):
        variants.build_matrix(load(), variants.read_config(p))
    ok = _gcc_config(tmp_path, cuda="12.6", gcc="13", gxx="13")
    rows = [variants._variant(load(), c) for c in variants.read_config(ok)]  # a two-row file serves no full matrix
    assert [(v.cuda, v.compiler_version) for v in rows] == [(None, "14"), ("12.6", "13")]


def test_c_and_cxx_compiler_versions_must_agree(tmp_path):
    p = _gcc_config(tmp_path, cuda="12.9", gcc="14", gxx="13")
    with pytest.raises(CheckFailed, match="c_compiler_version and cxx_compiler_version must be given together and equal"):
        variants.build_matrix(load(), variants.read_config(p))


def test_a_compiler_pin_not_zipped_with_cuda_is_bad_input(tmp_path):
    p = _gcc_config(tmp_path, zipped=False)
    with pytest.raises(BadInput, match="c_compiler_version is not zipped with cuda_compiler_version"):
        variants.read_config(p)


CEP46 = """
python: ["3.11"]
pytorch: ["2.9"]
cuda_compiler_version: [None, "12.9", "12.9", "12.9", "12.9", "12.9", "12.9", "12.9"]
mmcv_arch_list: [none, "{a100}", "8.6+PTX", "8.9+PTX", "9.0+PTX", "10.0+PTX", "12.0+PTX", "8.0;9.0+PTX"]
arch_tag: [cpu, sm80, sm86, sm89, sm90, sm100, sm120, all]
cuda_arch_min: [none, "{a100_min}", "8.6", "8.9", "9.0", "10.0", "12.0", none]
mmcv_priority: [0, {a100_priority}, 3, 4, 5, 6, 7, 1]
zip_keys:
  - [cuda_compiler_version, mmcv_arch_list, arch_tag, cuda_arch_min, mmcv_priority]
"""


def test_cep46_rows_carry_cuda_arch_min_and_a_priority_that_ranks_them():
    """The repository's matrix: cpu < fat < per-generation by arch; each per-generation row's
    cuda_arch_min is its arch, with PTX for it (CEP 46's notes on usage)."""
    m = variants.load_matrix(load(), CONFIG)
    for v in m:
        if v.cuda is None or v.arch_tag == variants.FAT_TAG:
            assert v.arch_min is None
        else:
            assert v.arch_min == str(min(t.arch for t in v.targets)) and v.arch_list.endswith("+PTX")
    py311 = sorted((v.build_number, v.build_string_prefix) for v in m if v.python == "3.11")
    assert [p for _, p in py311][-6:] == [f"cuda129_sm{a}" for a in ("80", "86", "89", "90", "100", "120")]
    base = variants.recipe_build_number(CONFIG)  # recipes/mmcv/recipe.yaml's context build_number
    assert py311[0] == (base, "cpu") and {n for n, p in py311 if p.endswith("_all")} == {base + 100}
    assert {n - base for n, p in py311 if "_sm" in p} == {200, 300, 400, 500, 600, 700}


@pytest.mark.parametrize("a100, a100_min, a100_priority, message", [
    ("8.0+PTX", "8.0", 2, None),
    ("8.0+PTX", "8.6", 2, "cuda_arch_min should be '8.0'"),
    ("8.0", "8.0", 2, r"needs PTX for its highest arch \(8.0\+PTX\)"),
    ("8.0+PTX", "8.0", 3, "sm86's mmcv_priority 3 is not above sm80's 3"),
    ("8.0+PTX", "8.0", 1, "sm80's mmcv_priority 1 is not above the fat and CPU builds' 1"),
])
def test_cep46_keys_are_checked_against_the_arch_list_and_the_ranking(tmp_path, a100, a100_min, a100_priority, message):
    p = _config(tmp_path, CEP46.format(a100=a100, a100_min=a100_min, a100_priority=a100_priority))
    combos = variants.read_config(p)
    if message is None:
        rows = variants.build_matrix(load(), combos)
        assert {v.arch_tag: v.build_number for v in rows}["sm80"] == 200
        return
    with pytest.raises(CheckFailed, match=message):
        variants.build_matrix(load(), combos)
