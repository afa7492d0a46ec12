"""`mmstack gpus`, `arch check`, `matrix`, `check` driven as a user drives them."""

import json
from pathlib import Path

import pytest
from support.cli import mmstack

ROOT = Path(__file__).resolve().parents[1]




@pytest.mark.parametrize(
    "gpu, archs, cuda, rc, verdict",
    [
        ("RTX 5090", "-gencode=arch=compute_90,code=sm_90", None, 1, "will-not-run"),
        ("RTX 5090", "9.0", None, 1, "will-not-run"),
        ("RTX 5090", "12.0", "12.4", 1, "cannot-build"),
        ("A100", "8.6", None, 1, "will-not-run"),
        ("B200", "9.0", None, 1, "will-not-run"),
        ("RTX 4090", "8.6", None, 0, "lower-minor"),
        ("H100", "8.0+PTX", None, 0, "ptx-jit"),
        ("H100", "9.0", None, 0, "native"),
    ],
)
def test_arch_check_exit_codes_and_verdicts(gpu, archs, cuda, rc, verdict):
    args = ["arch", "check", "--gpu", gpu, "--arch-list", archs, "--json"] + (["--cuda", cuda] if cuda else [])
    code, out, err = mmstack(*args)
    assert code == rc, err
    assert json.loads(out)["verdict"] == verdict


def test_arch_check_table_says_why_and_fix():
    code, out, _ = mmstack("arch", "check", "--gpu", "RTX 5090", "--arch-list", "9.0")
    assert code == 1 and "why:" in out and "fix:" in out and "rtx5090" in out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["arch", "check", "--gpu", "RTX 5900", "--arch-list", "9.0"], "did you mean 'RTX 5090'"),
        (["arch", "check", "--gpu", "H100", "--arch-list", "sm_9x"], "did you mean 'sm_90'"),
        (["arch", "check", "--gpu", "RTX 3090", "--arch-list", "86"], "did you mean '8.6'"),
        (["arch", "check", "--gpu", "GTX 1800", "--arch-list", "6.1"], "did you mean 'GTX 1080'"),
        (["arch", "check", "--gpu", "H100"], "exactly one of --arch-list"),
        (["arch", "check", "--arch-list", "9.0"], "--gpu NAME or --cc"),
        (["arch", "check", "--cc", "8.x", "--arch-list", "9.0"], "--cc"),
        (["arch", "check", "--gpu", "H100", "--package", "/nonexistent.whl"], "no such file"),
        (["gpus", "--env", "rtx4000"], "did you mean 'rtx4090'"),
        (["gpus", "--arch", "sm_9z"], "--arch"),
        (["gpus", "Voodoo 5"], "unknown GPU"),
        (["arch", "check", "--gpu", "H100", "--arch-list", "9.0", "--cuda", "12.7"], "unknown CUDA version"),
        (["matrix", "--format", "yaml"], "--format"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle):
    code, _, err = mmstack(*args)
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_gpus_table_and_json():
    code, out, _ = mmstack("gpus")
    assert code == 0 and "RTX PRO 6000 Blackwell" in out
    code, out, _ = mmstack("gpus", "rtx 4090", "--json")
    data = json.loads(out)
    assert code == 0 and data["compute_capability"] == "8.9" and data["environment"] == "rtx4090"


def test_matrix_and_check():
    pytest.importorskip("rattler_build")
    code, out, _ = mmstack("matrix", "--format", "json")
    assert code == 0 and any(v["build_string_prefix"] == "cuda129_sm89" for v in json.loads(out))
    code, out, err = mmstack("matrix", "--config", "nope.yaml")
    assert code == 2 and "nope.yaml" in err


def test_malformed_config_exits_2(tmp_path):
    pytest.importorskip("rattler_build")
    bad = tmp_path / "conda_build_config.yaml"
    bad.write_text("python: [\n")
    code, _, err = mmstack("matrix", "--config", str(bad))
    assert code == 2 and "conda_build_config.yaml" in err and len(err.strip().splitlines()) == 1


def test_real_toolkits_get_verdicts_not_bad_input():
    for cuda in ("10.2", "11.0", "11.4", "11.7", "12.2", "13.1", "13.2", "13.5"):
        code, out, err = mmstack("arch", "check", "--gpu", "Tesla T4", "--arch-list", "7.5", "--cuda", cuda, "--json")
        assert code in (0, 1), (cuda, err)
        assert json.loads(out)["verdict"] == "native"


def test_cc_for_a_name_the_facts_lack():
    code, out, _ = mmstack("arch", "check", "--gpu", "NVIDIA Mystery 3000", "--cc", "sm_86", "--arch-list", "8.0", "--json")
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "lower-minor" and data["compute_capability"] == "8.6"
    code, out, _ = mmstack("arch", "check", "--cc", "12.0", "--arch-list", "9.0")
    assert code == 1 and "sm_120" in out and "rtx5090" in out


# First CUDA per GPU (release notes; Wikipedia's table for those before the 10.2 row).
@pytest.mark.parametrize("gpu, first, env", [
    ("GTX 1080", "8.0", None), ("T4", "10.0", None), ("V100", "9.0", None), ("A100", "11.0", "a100"),
    ("RTX 3060", "11.1", "rtx3090"), ("RTX 4090", "11.8", "rtx4090"), ("B300", "12.9", "b200"),
    ("RTX 5070", "12.8", "rtx5090"), ("Jetson AGX Orin", "11.5", None),
])
def test_gpus_first_cuda_and_env(gpu, first, env):
    code, out, _ = mmstack("gpus", gpu, "--json")
    data = json.loads(out)
    assert code == 0 and (data["first_cuda"], data["environment"]) == (first, env)


# GPUs below 5.0 (issue 23): known by name, what they are, that no environment serves them, and the last
# CUDA that targets them (from the toolkit rows; Fermi's predates them all).
@pytest.mark.parametrize("gpu, cc, what, last", [
    ("Tesla K80", "3.7", "Kepler", "11.8"), ("GeForce GTX 780", "3.5", "Kepler", "11.8"),
    ("GeForce GTX 680", "3.0", "Kepler", "10.2"), ("GeForce 910M", "3.5", "Kepler", "11.8"),
    ("GeForce GTX 580", "2.0", "Fermi", "8.0"), ("GeForce GTX 560 Ti", "2.1", "Fermi", "8.0"),
])
def test_gpus_below_5_say_what_they_are_and_the_last_cuda(gpu, cc, what, last):
    code, out, _ = mmstack("gpus", gpu, "--json")
    data = json.loads(out)
    assert code == 0 and (data["compute_capability"], data["architecture"], data["last_cuda"]) == (cc, what, last)
    assert data["environment"] is None and data["environment_runs"] == "none"
    reason = data["environment_reason"]
    assert f"{what} {cc}" in reason and "no mmstack environment serves it" in reason
    assert f"the last CUDA that targets it is {last}" in reason
    assert ("older than every toolkit mmstack knows" in reason) == (what == "Fermi")
    code, out, _ = mmstack("arch", "check", "--gpu", gpu, "--arch-list", "8.0", "--json")
    verdict = json.loads(out)
    assert code == 1 and verdict["verdict"] == "will-not-run"
    assert f"the last CUDA that targets it is {last}" in verdict["fix"] and "CUDA >=" not in verdict["fix"]


def test_cuda_13_5_targets_sm_107_and_the_gcc_16_row():
    code, out, _ = mmstack("arch", "check", "--cc", "10.7", "--arch-list", "10.7;10.7f", "--cuda", "13.5", "--json")
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "native" and not data["notes"]
    code, out, _ = mmstack("arch", "check", "--cc", "10.7", "--arch-list", "10.7", "--cuda", "13.3", "--json")
    assert code == 1 and json.loads(out)["verdict"] == "cannot-build"


def test_gpus_filters():
    code, out, _ = mmstack("gpus", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) >= 200
    by_name = {r["name"]: r for r in rows}
    assert by_name["GeForce RTX 3090"]["first_cuda"] == "11.1" and by_name["NVIDIA T4"]["first_cuda"] == "10.0"
    code, out, _ = mmstack("gpus", "--arch", "8.9", "--json")
    assert {r["compute_capability"] for r in json.loads(out)} == {"8.9"}
    code, out, _ = mmstack("gpus", "--arch", "sm_10x", "--json")
    assert {r["compute_capability"] for r in json.loads(out)} == {"10.0", "10.3"}
    code, out, _ = mmstack("gpus", "--env", "b200", "--json")
    got = {(r["compute_capability"], r["environment_runs"]) for r in json.loads(out)}
    assert got == {("10.0", "native"), ("10.3", "lower-minor")}
    code, out, _ = mmstack("gpus", "--env", "none", "--arch", "7.5", "--json")
    assert code == 0 and json.loads(out) and all(r["environment"] is None for r in json.loads(out))
    code, out, _ = mmstack("gpus", "--arch", "12", "--env", "rtx5090")
    assert code == 0 and "RTX 5090" in out and "GB10" not in out  # GB10 only comes in Arm hosts (issue 40)


def test_a_compute_capability_no_gpu_has_is_bad_input_not_a_needs_cuda_question_mark():
    """issue 22 item 7: `--cc 99.9` said "needs CUDA >= ?" and exited 1."""
    code, out, err = mmstack("arch", "check", "--cc", "99.9", "--arch-list", "9.0")
    assert code == 2, (out, err)
    assert "no GPU architecture or CUDA toolkit in the facts has compute capability 99.9" in err and "9.0" in err
    assert "?" not in err.split("(fix:")[0]


def test_arch_check_package_fails_a_build_needing_a_newer_glibc_than_the_system(tmp_path):
    """issue 26: `arch check --package` on a real CUDA object that uses __libc_single_threaded
    (GLIBC_2.32): fine on this machine's glibc, a failure for a glibc 2.28 system, with the fix."""
    import os
    import shutil
    import subprocess

    if not shutil.which("nvcc"):
        pytest.skip("no nvcc on this machine")
    if tuple(int(x) for x in (os.confstr("CS_GNU_LIBC_VERSION") or "glibc 0.0").split()[-1].split(".")) < (2, 32):
        pytest.skip("this glibc is older than 2.32")
    src = tmp_path / "g.cu"
    src.write_text("#include <sys/single_threaded.h>\n__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n"
                   'extern "C" int st(float *x) { k<<<1, 32>>>(x); return __libc_single_threaded; }\n')
    so = tmp_path / "g.so"
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                    "-o", str(so), str(src)], check=True, cwd=tmp_path)
    code, out, err = mmstack("arch", "check", "--package", str(so), "--cc", "8.0", "--glibc", "2.28", "--json")
    a = json.loads(out)
    assert code == 1 and a["ok"] is False and a["verdict"] == "native", (out, err)
    needed = a["notes"][-1].split("glibc >= ")[1].split()[0]
    assert tuple(map(int, needed.split("."))) >= (2, 32)
    assert "cannot load on glibc 2.28" in a["reason"] and "sysroot_linux-64 <= 2.28" in a["fix"]
    code, out, _ = mmstack("arch", "check", "--package", str(so), "--cc", "8.0", "--glibc", needed, "--json")
    assert code == 0 and json.loads(out)["ok"] is True
    code, out, _ = mmstack("fatbin", str(so), "--json")
    assert json.loads(out)["glibc"] == needed


@pytest.mark.parametrize("name, build", [("NVIDIA GH200 480GB", "cuda130_sm90"), ("NVIDIA GB200", "cuda130_sm100"),
                                         ("GB300", "cuda130_sm100"), ("NVIDIA GB10", "cuda130_all")])
def test_arm_hosted_gpus_get_no_linux64_environment(name, build):
    """Issue 40 item 5: these only come in linux-aarch64 hosts; every environment is linux-64. The answer
    names the linux-aarch64 build a solver installs there (tests/test_arm_selection.py solves it)."""
    code, out, _ = mmstack("gpus", name, "--json")
    row = json.loads(out)
    assert code == 0 and row["environment"] is None and row["verify"] is None and row["host"] == "linux-aarch64"
    assert "cannot install until a channel has linux-aarch64 mmcv builds" in row["environment_reason"]
    assert row["build"] == build and f"a solver installs mmcv {build} (CUDA 13.0" in row["environment_reason"]


@pytest.mark.parametrize("name, cc, runs", [("Tesla T4", "7.5", "native"), ("Tesla V100-SXM2-16GB", "7.0", "native"),
                                            ("Tesla P100-PCIE-16GB", "6.0", "native"), ("GeForce GTX 1080", "6.1", "lower-minor")])
def test_turing_volta_pascal_are_told_the_fat_build(name, cc, runs):
    """Issue 41 item 6: the fat build of the matrix (conda_build_config.yaml) carries their SASS; the answer
    names it, derived from the matrix, with how to install it."""
    code, out, _ = mmstack("gpus", name, "--json")
    row = json.loads(out)
    assert code == 0 and row["compute_capability"] == cc and row["environment"] is None
    assert row["build"] == "cuda129_all" and row["environment_runs"] == runs
    assert '"mmcv=*=cuda129_all*"' in row["environment_reason"]


def test_a_dropped_arch_gets_no_fat_build():
    code, out, _ = mmstack("gpus", "Tesla K80", "--json")
    row = json.loads(out)
    assert code == 0 and row["build"] is None and "11.8" in row["environment_reason"]


@pytest.fixture(scope="module")
def sm80_and_sm100f(tmp_path_factory):
    """Real objects from tests/data/fatbin/kernel.cu: sm_80 SASS only, and sm_100f SASS only."""
    import shutil
    import subprocess

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: this test compiles a real CUDA object")
    kernel = Path(__file__).parent / "data" / "fatbin" / "kernel.cu"
    out = tmp_path_factory.mktemp("tegra")
    built = {}
    for name, code in (("sm80", "arch=compute_80,code=sm_80"), ("sm100f", "arch=compute_100f,code=sm_100f")):
        so = out / f"{name}.so"
        subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-gencode", code, str(kernel), "-o", str(so)],
                       check=True, capture_output=True)
        built[name] = so
    return built


@pytest.mark.parametrize("obj, gpu, verdict", [
    ("sm80", "Jetson AGX Orin", "will-not-run"),  # Tegra: no binary compatibility (issue 40 item 1)
    ("sm80", "GeForce RTX 3090", "lower-minor"),  # the desktop's rule
    ("sm100f", "NVIDIA B300", "lower-minor"),  # 10.3 is in the 10.0 family
])
def test_package_check_inherits_tegra_and_family_rules(sm80_and_sm100f, obj, gpu, verdict):
    code, out, err = mmstack("arch", "check", "--gpu", gpu, "--package", str(sm80_and_sm100f[obj]), "--json")
    a = json.loads(out)
    assert a["verdict"] == verdict and code == (0 if a["ok"] else 1), err


def test_arch_check_offers_the_fat_build_to_a_turing_gpu():
    code, out, _ = mmstack("arch", "check", "--gpu", "Tesla T4", "--arch-list", "8.0", "--json")
    a = json.loads(out)
    assert code == 1 and a["verdict"] == "will-not-run" and '"mmcv=*=cuda129_all*"' in a["fix"]


def test_detect_tells_an_arm_hosted_gpu_no_environment():
    """`mmstack detect` (verify/doctor.assign_envs) passes the facts' host through as `gpus` does."""
    from mmstack.facts.gpus import load
    from mmstack.verify.doctor import assign_envs

    (row,) = assign_envs([{"name": "NVIDIA GH200 480GB", "compute_capability": "9.0"}], load())
    assert row["environment"] is None and row["command"] is None and "linux-aarch64" in row["reason"]
    (row,) = assign_envs([{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}], load())
    assert row["environment"] == "h100"


def test_gpus_says_a_tegra_gpu_has_no_binary_compatibility():
    code, out, _ = mmstack("gpus", "Jetson AGX Orin", "--json")
    row = json.loads(out)
    assert code == 0 and row["binary_compatibility"].startswith("Tegra: only sm_87")
    code, out, _ = mmstack("gpus", "RTX 3060", "--json")
    assert json.loads(out)["binary_compatibility"].startswith("desktop")
