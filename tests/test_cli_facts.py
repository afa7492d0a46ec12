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
        (["arch", "check", "--gpu", "H100", "--arch-list", "sm_9x"], "--arch-list"),
        (["gpus", "Voodoo 5"], "unknown GPU"),
        (["arch", "check", "--gpu", "H100", "--arch-list", "9.0", "--cuda", "12.7"], "unknown CUDA version"),
        (["matrix", "--format", "yaml"], "--format"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle):
    code, out, err = mmstack(*args)
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
