"""Driver vs CUDA runtime (minor-version compatibility), ext archs vs GPU, GPU name -> environment."""

from __future__ import annotations

import pytest

from mmstack.facts.arch import Coverage
from mmstack.facts.compat import driver_compat, driver_needed, environment_for, ext_coverage
from mmstack.facts.gpus import load

FACTS = load()


@pytest.mark.parametrize(
    "driver, runtime, ok, mode, needed",
    [
        ("575.51.03", "12.9", True, "native", "575.51.03"),  # 12.9's own driver
        ("580.82.07", "12.9", True, "native", "575.51.03"),
        ("535.104.05", "12.9", True, "minor-compat", "525.60.13"),  # 12.x app on a 12.2 driver
        ("525.60.13", "12.4", True, "minor-compat", "525.60.13"),  # exactly the floor
        ("520.61.05", "12.1", False, "too-old", "525.60.13"),  # an 11.8 driver cannot run 12.x
        ("470.57.02", "11.8", True, "minor-compat", "450.80.02"),
        ("450.36.06", "11.8", False, "too-old", "450.80.02"),
        ("575.51.03", "13.0", False, "too-old", "580.65.06"),  # a CUDA 12 driver cannot run 13.0
    ],
)
def test_driver_compat(driver, runtime, ok, mode, needed):
    c = driver_compat(FACTS, driver=driver, runtime_cuda=runtime)
    assert (c.ok, c.mode, c.needed) == (ok, mode, needed), c.message
    if not ok:
        assert needed in c.message and driver in c.message


@pytest.mark.parametrize(
    "driver_cuda, runtime, ok, mode",
    [("12.9", "12.4", True, "native"), ("12.2", "12.9", True, "minor-compat"), ("11.8", "12.1", False, "too-old")],
)
def test_driver_compat_from_the_driver_cuda_version_alone(driver_cuda, runtime, ok, mode):
    c = driver_compat(FACTS, driver=None, runtime_cuda=runtime, driver_cuda=driver_cuda)
    assert (c.ok, c.mode) == (ok, mode)


# 13.4/13.5: the toolkit's own driver is unknown ("unknown" in the facts); only CUDA 13's minor-version floor
# can be judged, and each verdict that would need the toolkit's own driver says it is unknown.
@pytest.mark.parametrize("driver, runtime, ok, mode, says_unknown", [
    ("610.43.02", "13.5", True, "minor-compat", True),  # new enough for 13.3: for 13.5 nobody knows
    ("580.65.06", "13.4", True, "minor-compat", True),  # exactly CUDA 13's floor
    ("575.51.03", "13.5", False, "too-old", True),  # a CUDA 12 driver: too old whatever 13.5's own floor is
    ("610.43.02", "13.3", True, "native", False),  # 13.3's own driver is known
])
def test_unknown_toolkit_driver_is_said(driver, runtime, ok, mode, says_unknown):
    c = driver_compat(FACTS, driver=driver, runtime_cuda=runtime)
    assert (c.ok, c.mode, c.needed) == (ok, mode, "580.65.06" if mode != "native" else FACTS.toolkit(runtime).min_driver)
    assert ("own driver floor is unknown" in c.message) is says_unknown, c.message


def test_no_driver_and_driver_needed():
    assert driver_compat(FACTS, driver=None, runtime_cuda="12.9").mode == "unknown"
    assert driver_needed(FACTS, "12.8") == "525.60.13"
    assert driver_needed(FACTS, "13.0") == "580.65.06"


@pytest.mark.parametrize(
    "cc, sass, ptx, coverage",
    [
        ("9.0", ("8.0", "8.6", "9.0"), (), Coverage.NATIVE),
        ("8.9", ("8.0", "8.6"), (), Coverage.LOWER_MINOR),  # sm_86 runs on 8.9
        ("8.0", ("8.6",), (), Coverage.NONE),  # sm_86 does not run on 8.0
        ("12.0", ("9.0",), (), Coverage.NONE),  # no SASS across majors
        ("12.0", ("9.0",), ("9.0",), Coverage.PTX_JIT),  # PTX JITs forward
        ("9.0", ("9.0a",), (), Coverage.NATIVE),
        ("10.0", ("9.0a",), ("9.0a",), Coverage.NONE),  # arch-specific code stays put
        ("9.0", (), (), Coverage.NONE),  # a CPU build's ext
    ],
)
def test_ext_coverage(cc, sass, ptx, coverage):
    assert ext_coverage(cc, sass, ptx).coverage is coverage


@pytest.mark.parametrize(
    "name, cc, env",
    [
        ("NVIDIA H200", "9.0", "h100"),
        ("NVIDIA H100 80GB HBM3", "9.0", "h100"),  # NVML's long name
        ("NVIDIA GeForce RTX 4090", "8.9", "rtx4090"),
        ("NVIDIA A100-SXM4-80GB", "8.0", "a100"),
        ("Some Future GPU", "12.0", "rtx5090"),  # unknown name: by compute capability
        ("Tesla T4", "7.5", None),  # known, but no environment serves 7.5
    ],
)
def test_environment_for(name, cc, env):
    assert environment_for(FACTS, name=name, cc=cc) == env


def test_doctor_s_ext_coverage_applies_the_tegra_rule():
    """doctor judges the installed mmcv._ext with ext_coverage: on Tegra (Orin 8.7) sm_80 SASS does not run,
    compute_80 PTX does (issue 40 item 1)."""
    assert ext_coverage("8.7", ("8.0",), ()).coverage is Coverage.NONE
    assert ext_coverage("8.7", ("8.0",), ("8.0",)).coverage is Coverage.PTX_JIT
    assert ext_coverage("8.6", ("8.0",), ()).coverage is Coverage.LOWER_MINOR
