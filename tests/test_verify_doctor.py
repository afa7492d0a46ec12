"""`mmstack doctor` and `mmstack detect`: findings from fingerprints, GPU detection mapped to envs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack import cli
from mmstack.facts.gpus import load
from mmstack.verify import doctor
from mmstack.verify.doctor import findings

ROOT = Path(__file__).resolve().parents[1]
FACTS = load()
H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver": "575.51.03"}


def fp(**kw) -> dict:
    """A healthy H100 machine; override parts to make it sick."""
    base = {
        "gpus": [dict(H100)],
        "driver": "575.51.03",
        "torch": {"torch_version": "2.5.1", "torch_cuda": "12.4", "cudnn": 90100},
        "mmcv": {"version": "2.2.0", "ext_archs": {"sass": ["8.0", "8.6", "8.9", "9.0"], "ptx": ["9.0"]},
                 "libstdcxx": "shared"},
        "nvcc": {"path": "/env/bin/nvcc", "version": "12.4"},
        "gcc": {"path": "/env/bin/g++", "version": "13.2.0"},
        "env": {"LD_LIBRARY_PATH": None, "CONDA_PREFIX": "/env"},
        "crash": None,
    }
    for key, value in kw.items():
        base[key] = {**base[key], **value} if isinstance(base.get(key), dict) and isinstance(value, dict) else value
    return base


def test_healthy_machine_has_no_findings():
    assert findings(fp(), FACTS) == []


@pytest.mark.parametrize(
    "change, severity, words",
    [
        ({"gcc": {"version": "14.1.0"}}, "FAIL", ["nvcc 12.4 accepts host gcc <= 13", "gcc 14.1.0", "gxx_linux-64=13"]),
        ({"nvcc": {"version": "13.0"}, "gcc": {"version": "14.2.0"}}, "WARN", ["nvcc is CUDA 13.0", "12.4"]),
        ({"driver": "520.61.05"}, "FAIL", ["too old", ">= 525.60.13"]),
        ({"driver": "535.104.05"}, "WARN", ["minor-version compatibility", "550.54.14"]),
        ({"torch": {"torch_cuda": None}}, "FAIL", ["CPU build", "H100", "pixi run -e h100"]),
        ({"mmcv": {"ext_archs": {"sass": ["8.0", "8.6"], "ptx": []}}}, "FAIL", ["no kernel image", "pixi run -e h100"]),
        ({"mmcv": {"ext_archs": {"sass": ["8.0"], "ptx": ["8.0"]}}}, "WARN", ["PTX JIT", "slow first start"]),
        ({"mmcv": {"ext_archs": {"sass": [], "ptx": []}}}, "FAIL", ["no CUDA code"]),
        ({"gpus": [{**H100, "name": "Tesla T4", "compute_capability": "7.5"}], "mmcv": {"ext_archs": None}}, "WARN",
         ["no mmstack environment serves Tesla T4"]),
        ({"env": {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "CONDA_PREFIX": "/env"}}, "WARN", ["/usr/local/cuda/lib64"]),
        ({"mmcv": {"libstdcxx": "static"}}, "FAIL", ["static libstdc++", "readelf -d"]),
        ({"crash": {"diagnosis_text": "level=doctor\nstep=import mmcv signal=SIGSEGV"}}, "FAIL", ["SIGSEGV", "import mmcv"]),
    ],
)
def test_findings(change, severity, words):
    got = findings(fp(**change), FACTS)
    assert len(got) == 1, got
    text = got[0].what + " | " + got[0].fix
    assert got[0].severity == severity, got[0]
    for word in words:
        assert word in text, (word, text)


# -- detect -------------------------------------------------------------------------------------------


def run_cli(capsys, *args) -> tuple[int, str]:
    code = cli.main(list(args))
    return code, capsys.readouterr().out


@pytest.fixture
def no_nvml(monkeypatch):
    def fail():
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(doctor, "_nvml", fail)


@pytest.fixture
def fake_smi(tmp_path, monkeypatch, no_nvml):
    """A stand-in nvidia-smi first on PATH, answering the query detect makes."""

    def install(lines: list[str]):
        exe = tmp_path / "nvidia-smi"
        body = "\n".join(lines)
        exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{body}\nEOF\n")
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    return install


def test_detect_maps_gpus_to_environments(capsys, fake_smi):
    fake_smi(["NVIDIA H200, 9.0, 575.51.03", "NVIDIA GeForce RTX 4090, 8.9, 575.51.03"])
    code, out = run_cli(capsys, "detect", "--json")
    data = json.loads(out)
    assert code == 0 and data["source"] == "nvidia-smi"
    assert [g["environment"] for g in data["gpus"]] == ["h100", "rtx4090"]
    assert data["suggest"] == ["pixi run -e h100 verify", "pixi run -e rtx4090 verify"]
    code, out = run_cli(capsys, "detect")
    assert code == 0 and "pixi run -e h100 verify" in out and "NVIDIA H200" in out


def test_detect_a_gpu_no_environment_serves_exits_1(capsys, fake_smi):
    fake_smi(["Tesla T4, 7.5, 535.104.05"])
    code, out = run_cli(capsys, "detect", "--json")
    assert code == 1 and json.loads(out)["gpus"][0]["environment"] is None


def test_detect_without_a_gpu_suggests_cpu(capsys, monkeypatch, no_nvml):
    monkeypatch.setenv("PATH", "/nonexistent")
    code, out = run_cli(capsys, "detect")
    assert code == 0 and "no NVIDIA GPU found" in out and "pixi run -e cpu verify" in out
    code, out = run_cli(capsys, "detect", "--json")
    assert json.loads(out)["environments"] == ["cpu"]


# -- doctor end to end ----------------------------------------------------------------------------------


def test_doctor_json_runs_here():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "data" / "faults" / "compiler_segv")}
    proc = subprocess.run([sys.executable, "-m", "mmstack.cli", "doctor", "--json"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    fpr = data["fingerprint"]
    assert fpr["python"]["version"] and fpr["glibc"] and fpr["os"]
    assert fpr["torch"]["torch_version"]  # torch imported in the child
    assert fpr["mmcv"]["version"] == "2.2.0"  # the stand-in, found through PYTHONPATH
    assert all({"severity", "what", "fix"} <= set(f) for f in data["findings"])


# -- detect: the compute capability the driver reports decides -------------------------------------


@pytest.mark.parametrize("line, env, runs, known_as", [
    ("NVIDIA Foo Bar 9000, 8.9, 575.51.03", "rtx4090", "native", None),  # a name no list has
    ("NVIDIA GeForce RTX 3060 Laptop GPU, 8.6, 575.51.03", "rtx3090", "native", "GeForce RTX 3060"),
    ("NVIDIA A100-SXM4-80GB, 8.0, 575.51.03", "a100", "native", "NVIDIA A100"),
    ("NVIDIA B300 SXM6 AC, 10.3, 580.65.06", "b200", "lower-minor", "NVIDIA B300"),
    ("NVIDIA GeForce RTX 4090, [N/A], 470.82.01", "rtx4090", "native", "GeForce RTX 4090"),  # old driver: no compute_cap
    ("Tesla P100-PCIE-16GB, 6.0, 535.104.05", None, "none", "Tesla P100"),
])
def test_detect_takes_the_compute_capability_from_the_driver(capsys, fake_smi, line, env, runs, known_as):
    fake_smi([line])
    code, out = run_cli(capsys, "detect", "--json")
    g = json.loads(out)["gpus"][0]
    assert (g["environment"], g["runs"], g["known_as"]) == (env, runs, known_as)
    assert code == (0 if env else 1) and g["reason"]
