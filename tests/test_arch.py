"""arch notation, gencode conversion and the coverage rules, table-driven."""

import pytest

from mmstack import arch
from mmstack.errors import BadInput
from mmstack.facts import load


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("8.9", "8.9"),
        ("sm_89", "8.9"),
        ("compute_89", "compute_89"),
        ("-gencode=arch=compute_90,code=sm_90", "9.0"),
        ("-gencode arch=compute_80,code=[sm_80,compute_80]", "8.0+PTX"),
        ("8.9;9.0", "8.9;9.0"),
        ("8.6 8.9", "8.6;8.9"),
        ('"8.6 8.9"', "8.6;8.9"),
        ("12.0+PTX", "12.0+PTX"),
        ("9.0a", "9.0a"),
        ("sm_100f", "10.0f"),
        ("9.0, 8.0 ;8.6", "8.0;8.6;9.0"),
        ("-arch=sm_90", "9.0"),
    ],
)
def test_parse_spellings(text, canonical):
    assert arch.format_arch_list(arch.parse_arch_list(text)) == canonical


@pytest.mark.parametrize("text", ["", "sm_9x", "9", "8.9+ptx+ptx", "-gencode", "9.0a+PTX", "cuda_90"])
def test_malformed_arch_is_bad_input(text):
    with pytest.raises(BadInput):
        arch.parse_arch_list(text)


def test_gencode_is_the_one_conversion():
    targets = arch.parse_arch_list("8.0;9.0a;12.0+PTX")
    assert arch.gencode_flags(targets) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_120,code=compute_120",
        "-gencode=arch=compute_120,code=sm_120",
    ]


@pytest.mark.parametrize(
    "gpu, targets, expected",
    [
        ("8.6", "8.0", arch.Coverage.LOWER_MINOR),  # sm_80 runs on 8.6
        ("8.0", "8.6", arch.Coverage.NONE),  # sm_86 does not run on 8.0
        ("12.0", "9.0", arch.Coverage.NONE),  # sm_90 does not run on 12.0
        ("12.0", "9.0+PTX", arch.Coverage.PTX_JIT),  # PTX JITs forward across majors
        ("9.0", "9.0a", arch.Coverage.NATIVE),
        ("10.0", "9.0a", arch.Coverage.NONE),  # 'a' does not carry forward
        ("10.3", "10.0f", arch.Coverage.LOWER_MINOR),  # family SASS within the major
        ("12.0", "compute_90a", arch.Coverage.NONE),  # 'a' PTX does not carry forward
        ("8.9", "8.0;8.6;8.9", arch.Coverage.NATIVE),
        ("7.5", "8.0+PTX", arch.Coverage.NONE),  # PTX never runs backward
    ],
)
def test_coverage_rules(gpu, targets, expected):
    assert arch.coverage(arch.parse_arch(gpu), arch.parse_arch_list(targets)).coverage is expected


# The advice in circulation, and what is true (issue 2's table).
@pytest.mark.parametrize(
    "gpu, arch_list, cuda, verdict, ok, warning",
    [
        ("RTX 5090", "-gencode=arch=compute_90,code=sm_90", None, "will-not-run", False, False),
        ("RTX 5090", "9.0", None, "will-not-run", False, False),
        ("RTX 5090", "12.0", "12.4", "cannot-build", False, False),
        ("RTX 5090", "12.0", "12.8", "native", True, False),
        ("A100", "8.6", None, "will-not-run", False, False),
        ("B200", "9.0", None, "will-not-run", False, False),
        ("RTX 4090", "8.6", None, "lower-minor", True, True),
        ("H100", "8.0+PTX", None, "ptx-jit", True, True),
        ("H100", "9.0", None, "native", True, False),
        ("H200", "sm_90", "12.9", "native", True, False),
        ("Tesla T4", "7.5", "13.0", "native", True, False),
        ("GeForce RTX 2080", "6.1", "13.0", "cannot-build", False, False),  # CUDA 13 dropped Pascal
    ],
)
def test_assess(gpu, arch_list, cuda, verdict, ok, warning):
    a = arch.assess(load(), gpu_name=gpu, arch_list=arch_list, cuda=cuda)
    assert (a.verdict, a.ok, a.warning) == (verdict, ok, warning)
    if not ok:
        assert a.fix


def test_will_not_run_names_the_fix():
    a = arch.assess(load(), gpu_name="RTX 5090", arch_list="9.0")
    assert "sm_120" in a.reason and "12.8" in a.fix and "rtx5090" in a.fix
