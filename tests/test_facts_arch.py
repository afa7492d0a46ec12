"""arch notation, gencode conversion and the coverage rules, table-driven."""

import collections
import json
import re
from pathlib import Path

import pytest

from mmstack.errors import BadInput
from mmstack.facts import arch
from mmstack.facts.gpus import load


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
        ("12.0f+PTX", "12.0f+PTX"),  # family PTX carries forward inside its family
        ("-gencode=arch=compute_120f,code=[sm_120f,compute_120f]", "12.0f+PTX"),
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


# One table per rule of the module docstring (plain, "a" and "f"; SASS and PTX), each row a GPU and a target.
C = arch.Coverage
RULES = {
    "plain SASS: same major, minor at or below": [
        ("8.0", "sm_80", C.NATIVE), ("8.6", "sm_80", C.LOWER_MINOR), ("8.9", "sm_86", C.LOWER_MINOR),
        ("8.0", "sm_86", C.NONE), ("12.0", "sm_90", C.NONE), ("10.3", "sm_100", C.LOWER_MINOR), ("11.0", "sm_100", C.NONE),
        ("12.1", "sm_120", C.LOWER_MINOR), ("7.5", "sm_80", C.NONE),
    ],
    "'a' SASS: exactly that compute capability": [
        ("9.0", "sm_90a", C.NATIVE), ("10.0", "sm_100a", C.NATIVE), ("10.3", "sm_100a", C.NONE),
        ("12.1", "sm_120a", C.NONE), ("10.0", "sm_90a", C.NONE), ("10.0", "sm_103a", C.NONE),
    ],
    "'f' SASS: the family (same major, minor at or below)": [
        ("10.0", "sm_100f", C.NATIVE), ("10.3", "sm_100f", C.LOWER_MINOR), ("10.7", "sm_100f", C.LOWER_MINOR),
        ("10.0", "sm_103f", C.NONE), ("11.0", "sm_100f", C.NONE), ("12.1", "sm_120f", C.LOWER_MINOR),
        ("12.0", "sm_121f", C.NONE), ("12.0", "sm_100f", C.NONE),
    ],
    "Tegra: SASS runs only on exactly its compute capability, either way": [
        ("8.7", "sm_80", C.NONE), ("8.7", "sm_86", C.NONE), ("8.7", "sm_87", C.NATIVE), ("7.2", "sm_70", C.NONE),
        ("5.3", "sm_50", C.NONE), ("5.3", "sm_52", C.NONE), ("6.2", "sm_61", C.NONE), ("6.2", "sm_60", C.NONE),
        ("10.1", "sm_100", C.NONE), ("7.5", "sm_72", C.NONE), ("8.9", "sm_87", C.NONE), ("8.7", "compute_80", C.PTX_JIT),
    ],
    "plain PTX: any equal or newer compute capability": [
        ("8.0", "compute_80", C.PTX_JIT), ("12.0", "compute_90", C.PTX_JIT), ("11.0", "compute_103", C.PTX_JIT),
        ("7.5", "compute_80", C.NONE), ("10.0", "compute_103", C.NONE),
    ],
    "'a' PTX: exactly that compute capability": [
        ("9.0", "compute_90a", C.PTX_JIT), ("10.0", "compute_100a", C.PTX_JIT), ("10.3", "compute_100a", C.NONE),
        ("12.0", "compute_90a", C.NONE), ("12.1", "compute_120a", C.NONE),
    ],
    "'f' PTX: the family (same major, minor at or below)": [
        ("10.0", "compute_100f", C.PTX_JIT), ("10.3", "compute_100f", C.PTX_JIT), ("10.7", "compute_103f", C.PTX_JIT),
        ("12.1", "compute_120f", C.PTX_JIT), ("11.0", "compute_110f", C.PTX_JIT), ("10.0", "compute_103f", C.NONE),
        ("11.0", "compute_100f", C.NONE), ("12.0", "compute_121f", C.NONE), ("12.0", "compute_100f", C.NONE),
    ],
}


@pytest.mark.parametrize("rule, gpu, target, expected",
                         [(rule, *row) for rule, rows in RULES.items() for row in rows],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_family_rules(rule, gpu, target, expected):
    result = arch.coverage(arch.parse_arch(gpu), arch.parse_arch_list(target))
    assert result.coverage is expected, rule
    if expected is not C.NONE:
        assert result.target == arch.parse_arch_list(target)[0]


MATRIX = json.loads((Path(__file__).parent / "data" / "facts" / "ptxas-matrix.json").read_text())


def _measured():
    """(toolkit, PTX target, GPU arch, ptxas compiled it) for every pair of tests/data/facts/ptxas-matrix.json:
    NVIDIA's ptxas from PyPI's nvidia-cuda-nvcc wheels, one per toolkit, on a one-kernel PTX. A GPU of compute
    capability X.Y has sm_XY's, sm_XYa's and sm_XYf's features, so PTX JITs on it when ptxas compiles it for
    one of those."""
    for cuda, row in MATRIX["toolkits"].items():
        gpus = [t for t in row["targets"] if t[-1].isdigit()]
        for ptx, compiled in row["compiles"].items():
            for gpu in gpus:
                yield cuda, ptx, gpu, bool({gpu, gpu + "a", gpu + "f"} & set(compiled))


def _cc(sm: str) -> str:
    digits = sm.removeprefix("sm_")
    return f"{digits[:-1]}.{digits[-1]}"


def test_the_matrix_is_measured_and_says_what_it_measures():
    assert {"11.8", "12.4", "12.8", "12.9", "13.0", "13.5"} <= set(MATRIX["toolkits"])
    assert all(len(w["sha256"]) == 64 and w["version"].startswith(tk) for w, tk in zip(MATRIX["wheels"], MATRIX["toolkits"], strict=True))
    assert "SASS binary compatibility" in MATRIX["does_not_measure"] and "ptxas" in MATRIX["command"]


def test_every_arch_check_verdict_the_matrix_covers_agrees_with_ptxas():
    """`arch check --cc G --arch-list compute_P --cuda T`: ptx-jit exactly where T's ptxas compiled P for G,
    will-not-run elsewhere (never cannot-build: the facts' target lists are ptxas's). For an 'f' target the
    SASS verdict too: it runs exactly on the family ptxas measured (NVIDIA defines sm_XYf SASS and PTX on one
    family). Plain and 'a' SASS and Tegra are the driver's rules (the module docstring), not ptxas's."""
    f = load()
    checked = collections.Counter()
    for cuda, ptx, gpu, runs in _measured():
        target = "compute_" + ptx.removeprefix("sm_")
        a = arch.assess(f, cc=_cc(gpu), arch_list=target, cuda=cuda)
        assert a.verdict == ("ptx-jit" if runs else "will-not-run"), (cuda, ptx, gpu, a.reason)
        kind = ptx[-1] if ptx[-1] in "af" else ""
        checked[(kind, runs)] += 1
        if kind == "f":
            s = arch.assess(f, cc=_cc(gpu), arch_list=_cc(ptx[:-1]) + "f", cuda=cuda)
            assert s.ok == runs and s.verdict in ({"native", "lower-minor"} if runs else {"will-not-run"}), (cuda, ptx, gpu)
    assert set(checked) == {(k, r) for k in ("", "a", "f") for r in (True, False)}  # every rule, both ways
    assert sum(checked.values()) > 2000


def test_families_per_toolkit_are_ptxas_s():
    """data/gpus.toml's [[cuda]] families equal what each measured ptxas compiles sm_XYf PTX for."""
    f = load()
    for cuda, row in MATRIX["toolkits"].items():
        for ptx, compiled in row["compiles"].items():
            if ptx.endswith("f"):
                measured = {_cc(g) for g in compiled if g[-1].isdigit()}
                assert f.family(_cc(ptx[:-1]), cuda) == measured, (cuda, ptx)


def test_toolkit_target_lists_are_ptxas_s():
    f = load()
    for cuda, row in MATRIX["toolkits"].items():
        tk = f.toolkit(cuda)
        assert {_cc(t) for t in row["targets"] if t[-1].isdigit()} == set(tk.sass), cuda
        assert {_cc(t[:-1]) + t[-1] for t in row["targets"] if not t[-1].isdigit()} == set(tk.arch_specific), cuda


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
        ("NVIDIA B300", "compute_100f", None, "ptx-jit", True, True),  # family PTX JITs on 10.3 (issue 23)
        ("NVIDIA GB10", "compute_120f", "13.0", "ptx-jit", True, True),
        ("NVIDIA B300", "10.0a", None, "will-not-run", False, False),
        ("NVIDIA B300", "10.0f", None, "lower-minor", True, True),
        ("NVIDIA B300", "10.7", "13.5", "will-not-run", False, False),  # 13.5 builds sm_107; it does not run on 10.3
    ],
)
def test_assess(gpu, arch_list, cuda, verdict, ok, warning):
    a = arch.assess(load(), gpu_name=gpu, arch_list=arch_list, cuda=cuda)
    assert (a.verdict, a.ok, a.warning) == (verdict, ok, warning)
    if not ok:
        assert a.fix


@pytest.mark.parametrize("gpu, cc, arch_list, cuda, verdict", [
    # issue 40's cases: each was lower-minor or ptx-jit, and none runs
    ("Orin (nvgpu)", None, "8.0", None, "will-not-run"),
    ("Jetson AGX Xavier", None, "7.0", None, "will-not-run"),
    ("Jetson Nano", None, "5.0", None, "will-not-run"),
    ("Jetson TX2", None, "6.1", None, "will-not-run"),
    ("Orin (nvgpu)", None, "compute_80", None, "ptx-jit"),
    (None, "10.1", "10.0f", "12.9", "will-not-run"),  # 10.1 (Thor, CUDA 12 numbering) is no member of 10.0f
    (None, "10.1", "compute_100f", "12.9", "will-not-run"),
    (None, "10.1", "10.0", "12.9", "will-not-run"),  # Tegra
    (None, "10.1", "10.1f", "12.9", "native"),
    (None, "10.3", "10.0f", "12.9", "lower-minor"),
    (None, "10.7", "10.0f", "13.5", "lower-minor"),  # 13.4 added 10.7 to the 10.0 family
    (None, "10.7", "compute_103f", "13.5", "ptx-jit"),
    ("NVIDIA GB10", None, "12.0f+PTX", "13.0", "lower-minor"),
    ("NVIDIA GB10", None, "compute_120f", "12.9", "ptx-jit"),
    ("GeForce RTX 5090", None, "12.1f", "12.9", "will-not-run"),
    ("NVIDIA B200", None, "12.0f+PTX", "13.0", "will-not-run"),
])
def test_tegra_and_family_rules_in_verdicts(gpu, cc, arch_list, cuda, verdict):
    a = arch.assess(load(), gpu_name=gpu, cc=cc, arch_list=arch_list, cuda=cuda)
    assert a.verdict == verdict, a.reason
    if cc == "10.1" and verdict == "will-not-run" and "f" in arch_list:
        assert "{10.0, 10.3}" in a.reason  # names the toolkit's family


def test_tegra_is_data_with_sources():
    f = load()
    assert {"5.3", "6.2", "7.2", "8.7", "10.1"} <= f.tegra
    assert all(a.tegra_source for a in f.architecture if a.tegra)
    assert f.family("10.0", "12.9") == {"10.0", "10.3"} and f.family("10.1", "12.9") == {"10.1"}
    assert f.toolkit("12.9").families_source and not f.toolkit("12.8").families


def test_a_plus_ptx_is_still_refused_with_the_family_spelling():
    with pytest.raises(BadInput, match=r"10\.0f\+PTX"):
        arch.parse_arch_list("10.0a+PTX")


def test_will_not_run_names_the_fix():
    a = arch.assess(load(), gpu_name="RTX 5090", arch_list="9.0")
    assert "sm_120" in a.reason and "12.8" in a.fix and "rtx5090" in a.fix


# -- (GPU, arch list, CUDA) -> verdict, from the sources, not from the code ---------------------------
# Each expected verdict is read off: the GPU's compute capability on NVIDIA's CUDA GPU lists
# (tests/data/facts/cuda-gpus.txt), the toolkit's nvcc arch list in its release notes / nvcc guide
# (added 8.0 in 11.0, 8.6 in 11.1, 8.9/9.0 in 11.8, 9.0a in 12.0, 10.0/12.0 in 12.8, 10.3/12.1 in
# 12.9, 11.0 in 13.0; 13.0 dropped sm_5x..sm_72), and the CUDA C++ Programming Guide's binary and
# PTX compatibility rules (SASS X.y runs on X.z for z >= y; 'a' only on X.y; 'f' on the family;
# PTX JIT-compiles for any equal or newer capability).
SOURCE_CASES = [
    # Maxwell / Pascal / Volta (legacy list) -- gone from CUDA 13.0
    ("GeForce GTX 750 Ti", "5.0", "10.2", "native"),
    ("GeForce GTX 750 Ti", "5.0", "12.9", "native"),
    ("GeForce GTX 750 Ti", "5.0", "13.0", "cannot-build"),
    ("GeForce GTX 980", "5.0", None, "lower-minor"),
    ("GeForce GTX 980", "5.2", "11.8", "native"),
    ("Jetson Nano", "5.3", "10.2", "native"),
    ("Tesla P100", "6.0", "11.0", "native"),
    ("GeForce GTX 1080 Ti", "6.0", None, "lower-minor"),
    ("GeForce GTX 1080 Ti", "7.0", None, "will-not-run"),
    ("GeForce GTX 1080 Ti", "5.2+PTX", None, "ptx-jit"),
    ("GeForce GTX 1060", "6.1", "13.0", "cannot-build"),
    ("Tesla P40", "6.1", "12.9", "native"),
    ("Jetson TX2", "6.2", "10.2", "native"),
    ("NVIDIA V100", "7.0", "10.2", "native"),
    ("NVIDIA V100", "7.0", "13.0", "cannot-build"),
    ("NVIDIA V100", "6.0+PTX", "12.4", "ptx-jit"),
    ("NVIDIA V100", "7.5", None, "will-not-run"),
    ("Jetson AGX Xavier", "7.2", "11.4", "native"),
    ("Jetson AGX Xavier", "7.0", None, "will-not-run"),  # Tegra: no binary compatibility (issue 40)
    # Turing
    ("Tesla T4", "7.5", "10.2", "native"),
    ("Tesla T4", "7.5", "13.0", "native"),
    ("GeForce RTX 2080 Ti", "7.0", None, "lower-minor"),
    ("GeForce GTX 1660 Ti", "8.0", None, "will-not-run"),
    ("Quadro RTX 8000", "7.0+PTX", "11.8", "lower-minor"),
    ("NVIDIA TITAN RTX", "compute_70", None, "ptx-jit"),
    ("GeForce GTX 1650", "7.5", "13.2", "native"),
    # Ampere
    ("NVIDIA A100", "8.0", "11.0", "native"),
    ("NVIDIA A100", "8.0", "10.2", "cannot-build"),
    ("NVIDIA A100", "8.6", None, "will-not-run"),
    ("NVIDIA A100", "7.5+PTX", "11.0", "ptx-jit"),
    ("NVIDIA A30", "9.0", None, "will-not-run"),
    ("GeForce RTX 3090", "8.6", "11.0", "cannot-build"),
    ("GeForce RTX 3090", "8.6", "11.1", "native"),
    ("GeForce RTX 3060", "8.0", None, "lower-minor"),
    ("NVIDIA A10", "8.0;8.6", "12.1", "native"),
    ("NVIDIA RTX A6000", "7.5", None, "will-not-run"),
    ("Jetson AGX Orin", "8.7", "11.4", "cannot-build"),
    ("Jetson AGX Orin", "8.7", "11.8", "native"),
    ("Jetson Orin Nano", "8.6", None, "will-not-run"),  # Tegra
    ("Jetson Orin Nano", "8.6+PTX", None, "ptx-jit"),  # PTX JITs on Tegra as anywhere
    ("NVIDIA A800", "8.0", "12.1", "native"),
    ("NVIDIA A10G", "8.6", "12.9", "native"),
    # Ada
    ("GeForce RTX 4090", "8.9", "11.7", "cannot-build"),
    ("GeForce RTX 4090", "8.9", "11.8", "native"),
    ("GeForce RTX 4090", "8.6", None, "lower-minor"),
    ("NVIDIA L4", "8.0;8.6", None, "lower-minor"),
    ("NVIDIA L40S", "9.0", None, "will-not-run"),
    ("NVIDIA L20", "8.0+PTX", None, "lower-minor"),
    ("GeForce RTX 4090 D", "8.9", "12.4", "native"),
    ("NVIDIA RTX 6000 Ada", "compute_89", "12.1", "ptx-jit"),
    # Hopper
    ("NVIDIA H100", "9.0", "11.8", "native"),
    ("NVIDIA H100", "9.0", "11.7", "cannot-build"),
    ("NVIDIA H100", "9.0a", "12.0", "native"),
    ("NVIDIA H100", "9.0a", "11.8", "cannot-build"),
    ("NVIDIA H100", "8.9", None, "will-not-run"),
    ("NVIDIA H100", "8.0+PTX", "12.4", "ptx-jit"),
    ("NVIDIA H800", "9.0", "12.9", "native"),
    ("NVIDIA H20", "8.6;8.9", None, "will-not-run"),
    ("NVIDIA GH200", "9.0", "13.0", "native"),
    # Blackwell
    ("NVIDIA B200", "10.0", "12.6", "cannot-build"),
    ("NVIDIA B200", "10.0", "12.8", "native"),
    ("NVIDIA B200", "9.0", None, "will-not-run"),
    ("NVIDIA B200", "compute_90a", None, "will-not-run"),
    ("NVIDIA B300", "10.0", "12.8", "lower-minor"),
    ("NVIDIA B300", "10.3", "12.8", "cannot-build"),
    ("NVIDIA B300", "10.3", "12.9", "native"),
    ("NVIDIA B300", "10.0f", "12.9", "lower-minor"),
    ("NVIDIA B300", "10.0a", "12.9", "will-not-run"),
    ("Jetson T5000", "11.0", "13.0", "native"),
    ("Jetson T5000", "11.0", "12.9", "cannot-build"),
    ("GeForce RTX 5090", "12.0", "12.8", "native"),
    ("GeForce RTX 5090", "12.0", "12.6", "cannot-build"),
    ("GeForce RTX 5090", "9.0+PTX", "12.4", "ptx-jit"),
    ("GeForce RTX 5090", "10.0", None, "will-not-run"),
    ("GeForce RTX 5060", "12.0a", "12.8", "native"),
    ("NVIDIA GB10", "12.0", "12.9", "lower-minor"),
    ("NVIDIA GB10", "12.1", "12.8", "cannot-build"),
    ("NVIDIA GB10", "12.1", "12.9", "native"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "13.0", "native"),
    ("GeForce RTX 5090 D", "8.9", None, "will-not-run"),
    # releases newer than the facts' rows: a minor release never dropped an arch
    ("GeForce RTX 5090", "12.0", "13.5", "native"),
    ("GeForce GTX 1080", "6.1", "13.4", "cannot-build"),
]


def test_enough_source_cases():
    assert len(SOURCE_CASES) >= 60


@pytest.mark.parametrize("gpu, arch_list, cuda, verdict", SOURCE_CASES)
def test_verdict_from_sources(gpu, arch_list, cuda, verdict):
    a = arch.assess(load(), gpu_name=gpu, arch_list=arch_list, cuda=cuda)
    assert a.verdict == verdict, a.reason
    assert a.ok == (verdict in {"native", "lower-minor", "ptx-jit"})
    assert a.reason and (a.ok or a.fix)


@pytest.mark.parametrize("cc, arch_list, verdict", [
    ("8.6", "8.0", "lower-minor"), ("sm_86", "8.6", "native"), ("12.1", "12.0", "lower-minor"),
    ("9.0", "8.9", "will-not-run"), ("10.3", "9.0+PTX", "ptx-jit"),
])
def test_cc_for_an_unknown_name(cc, arch_list, verdict):
    a = arch.assess(load(), gpu_name="Some OEM Card 9000", cc=cc, arch_list=arch_list)
    assert a.verdict == verdict and "Some OEM Card 9000" == a.gpu


def test_cc_contradicting_a_known_name_is_bad_input():
    with pytest.raises(BadInput, match=r"8\.6"):
        arch.assess(load(), gpu_name="RTX 3090", cc="9.0", arch_list="9.0")


def test_every_real_gpu_and_toolkit_gets_a_verdict():
    """Exit 0/1, never 2: every GPU of the facts against every toolkit, with its own arch and 8.0+PTX."""
    f = load()
    for gpu in f.gpu:
        for tk in f.cuda:
            for archs in (gpu.compute_capability, "8.0+PTX"):
                a = arch.assess(f, gpu_name=gpu.name, arch_list=archs, cuda=tk.version)
                assert a.verdict in {"native", "lower-minor", "ptx-jit", "will-not-run", "cannot-build"}


@pytest.mark.parametrize("cc, env, runs", [
    ("8.6", "rtx3090", arch.Coverage.NATIVE), ("8.7", None, arch.Coverage.NONE),  # 8.7 is Tegra (Orin)
    ("10.3", "b200", arch.Coverage.LOWER_MINOR), ("12.1", "rtx5090", arch.Coverage.LOWER_MINOR),
    ("7.5", None, arch.Coverage.NONE), ("6.1", None, arch.Coverage.NONE), ("11.0", None, arch.Coverage.NONE),
])
def test_serving_env(cc, env, runs):
    s = arch.serving_env(load(), cc)
    assert (s.env, s.coverage) == (env, runs) and s.reason


def test_jetson_is_served_by_no_linux64_env():
    assert arch.serving_env(load(), "8.7", segment="jetson").env is None


@pytest.mark.parametrize("text, guess", [("sm_9x", "sm_90"), ("89", "8.9"), ("120", "12.0"), ("sm_1200", "sm_120")])
def test_malformed_arch_says_did_you_mean(text, guess):
    with pytest.raises(BadInput, match=f"did you mean '{re.escape(guess)}'"):
        arch.parse_arch_list(text)
