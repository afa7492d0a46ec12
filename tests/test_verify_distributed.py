"""mmstack.verify.distributed (L5): real torchrun launches of mmstack.verify.dist_worker on CPU processes (gloo),
faults injected through MMSTACK_DIST_FAULT, and the diagnosis rules against real NCCL/gloo messages.

The NCCL path needs 2+ GPUs; these tests run the same launcher, worker and checks over gloo, which
is what a CPU machine has. The launches need mmcv.ops (the worker trains through DeformConv2d and
RoIAlign) and skip without it; the diagnosis tests need nothing but the stdlib.
"""

from __future__ import annotations

import importlib
import os
import shlex
import subprocess
import warnings

import pytest

from mmstack.errors import BadInput
from mmstack.verify.distributed import (
    FAULT_ENV,
    MULTICAST_OFF,
    NCCL_FIX,
    diagnose,
    launch_env,
    run_distributed_step,
)

NCCL_VARS = ("NCCL_DEBUG=INFO", "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_IB_DISABLE=1",
             "NCCL_SOCKET_IFNAME")


def _mmcv_ops_reason() -> str | None:
    try:
        with warnings.catch_warnings():  # mmcv.ops imports torch.jit.script users: deprecation noise
            warnings.simplefilter("ignore")
            importlib.import_module("mmcv.ops")
    except Exception as exc:  # noqa: BLE001 - any failure to load the ops is a reason to skip
        return f"mmcv.ops is not importable here ({type(exc).__name__}: {exc}); the worker trains through it"
    return None


def _cuda_devices() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no torch, no GPU
        return 0


_NO_MMCV = _mmcv_ops_reason()
needs_mmcv = pytest.mark.skipif(_NO_MMCV is not None, reason=_NO_MMCV or "")
GPUS = _cuda_devices()


@pytest.fixture(scope="module")
def gloo_run(real_mmcv_python) -> dict:
    """One 2-rank gloo run shared by the checks below; the caller asks for multicast ON, which the
    launcher must override."""
    return run_distributed_step(nproc=2, steps=4, timeout=300, python=real_mmcv_python,
                                env={**os.environ, "NCCL_NVLS_ENABLE": "1"})


def test_gloo_two_ranks_train_and_agree(gloo_run):
    res = gloo_run
    assert res["status"] == "PASS", (res["diagnosis"], res["evidence"]["stderr_tail"])
    assert res["backend"] == "gloo" and res["world_size"] == 2
    losses = res["losses"]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert res["params_agree"] is True
    ev = res["evidence"]
    assert ev["param_max_abs_diff"] == 0.0
    assert len(set(ev["param_sha256"])) == 1 and len(ev["param_sha256"]) == 2
    assert ev["mmcv_ops"][1:] == ["DeformConv2d", "RoIAlign"]
    assert res["diagnosis"] is None and res["fix"] is None


def test_gloo_syncbn_skipped_with_reason(gloo_run):
    res = gloo_run
    syncbn = res["syncbn"]
    assert syncbn.startswith("skipped: ") and "nn.BatchNorm2d" in syncbn
    notes = res["evidence"]["syncbn_notes"]
    # Both SyncBatchNorms were tried on CPU tensors and refused, each with its own message.
    assert set(notes) == {"mmcv", "torch"}
    assert "implementation for device cpu not found" in notes["mmcv"]
    assert "GPU" in notes["torch"]
    # Plain BatchNorm on per-rank data: the running statistics differ, so this check has teeth on GPU.
    assert res["evidence"]["bn_stats_agree"] is False


def test_workers_saw_multicast_off(gloo_run):
    res = gloo_run
    envs = res["evidence"]["env"]
    assert len(envs) == 2
    for rank_env in envs:
        for var, value in MULTICAST_OFF.items():
            assert rank_env.get(var) == value, (var, rank_env)


def test_nccl_error_on_one_rank_is_diagnosed(real_mmcv_python):
    res = run_distributed_step(nproc=2, steps=3, timeout=120, python=real_mmcv_python,
                               env={**os.environ, FAULT_ENV: "nccl"})
    assert res["status"] == "FAIL"
    assert res["diagnosis"].startswith("rank 1: NCCL failed"), res["diagnosis"]
    assert "unhandled system error" in res["diagnosis"]
    for var in NCCL_VARS:
        assert var in res["fix"], var
    ev = res["evidence"]
    assert [t["var"] for t in ev["nccl_env_to_try"]] == [
        "NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME"]
    assert ev["rank_errors"][0]["rank"] == "1"
    assert "NCCL error" in ev["stderr_tail"]
    assert "dev_shm_bytes" in ev


@pytest.mark.slow
def test_ranks_that_disagree_fail(real_mmcv_python):
    res = run_distributed_step(nproc=2, steps=3, timeout=120, python=real_mmcv_python,
                               env={**os.environ, FAULT_ENV: "desync"})
    assert res["status"] == "FAIL"
    assert res["params_agree"] is False
    assert "different parameters" in res["diagnosis"]
    assert res["evidence"]["param_max_abs_diff"] > 0


@pytest.mark.slow
def test_stuck_collective_reports_itself(real_mmcv_python):
    # rank 1 sleeps; rank 0 waits in DDP's first broadcast until the process group's own timeout
    # fires, so the failure names the collective instead of being a silent kill.
    res = run_distributed_step(nproc=2, steps=3, timeout=120, pg_timeout=10, python=real_mmcv_python,
                               env={**os.environ, FAULT_ENV: "hang"})
    assert res["status"] == "FAIL"
    assert res["diagnosis"].startswith("rank 0: a collective timed out"), res["diagnosis"]
    assert res["fix"] == NCCL_FIX.format(nproc=2)
    assert res["rule"] == "nccl-timeout" and res["backend"] == "gloo"
    assert "10000ms" in res["diagnosis"]  # gloo's own words: "Timed out waiting 10000ms for send ..."
    assert res["wall_s"] < 120


@pytest.mark.slow
def test_silent_hang_is_killed_with_all_its_ranks(real_mmcv_python):
    # The process group waits longer (60 s) than the launcher (12 s): the hang stays silent, so it
    # is the launcher's timeout that must end it (the reported-timeout case is the test above).
    res = run_distributed_step(nproc=2, steps=3, timeout=12, pg_timeout=60, python=real_mmcv_python,
                               env={**os.environ, FAULT_ENV: "hang"})
    assert res["status"] == "FAIL"
    assert res["diagnosis"].startswith("no result after 12 s"), res["diagnosis"]
    assert res["fix"] == NCCL_FIX.format(nproc=2)
    # torchrun and both ranks ran in their own session; none of them outlives the call.
    out_path = shlex.split(res["evidence"]["cmd"])[-3]
    left = subprocess.run(["pgrep", "-f", out_path], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"processes left running: {left.stdout}"


# --- NCCL on GPUs: skipped here (no GPU); run where one or more are visible ---------------------


@needs_mmcv
@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU: the one-GPU NCCL path (world size 1)")
def test_one_gpu_nccl_with_mmcv_syncbn():
    res = run_distributed_step(nproc=1, steps=5, timeout=300)
    assert res["status"] == "PASS", (res["diagnosis"], res["evidence"]["stderr_tail"])
    assert res["backend"] == "nccl" and res["world_size"] == 1
    assert res["syncbn"] == "mmcv"  # mmcv's CUDA sync_bn kernels ran; no cross-rank sync at size 1
    assert res["params_agree"] and res["evidence"]["bn_stats_agree"]
    assert res["evidence"]["env"][0]["NCCL_NVLS_ENABLE"] == "0"


@needs_mmcv
@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs: NCCL between GPUs and SyncBN across them")
def test_two_gpus_nccl_with_mmcv_syncbn():
    res = run_distributed_step(nproc=2, steps=5, timeout=300)
    assert res["status"] == "PASS", (res["diagnosis"], res["evidence"]["stderr_tail"])
    assert res["backend"] == "nccl" and res["world_size"] == 2 and res["syncbn"] == "mmcv"
    assert res["params_agree"] and res["evidence"]["bn_stats_agree"]  # SyncBN really synchronised
    assert len(res["evidence"]["p2p"]) == GPUS


@needs_mmcv
@pytest.mark.gpu
@pytest.mark.skipif(GPUS != 1, reason="needs exactly one visible CUDA GPU")
def test_more_ranks_than_gpus_fails_clearly():
    res = run_distributed_step(nproc=2, steps=3, timeout=300)
    assert res["status"] == "FAIL" and res["rule"] == "too-few-gpus"
    assert "2 processes asked, 1 GPU visible" in res["diagnosis"]


# --- the diagnosis rules, on messages as NCCL, gloo and torchrun print them -----------------------


def _err(rank: str, message: str, t: float, typ: str = "RuntimeError") -> dict:
    return {"rank": rank, "type": typ, "message": message, "traceback": "", "time": t}


def test_first_failing_rank_decides():
    errors = [
        _err("1", "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5", 1.0),
        _err("0", "Connection reset by peer", 2.0),
    ]
    rule, diagnosis, fix = diagnose(output="", rank_errors=errors, timed_out=False, timeout=60,
                                    returncode=1, nproc=2)
    assert rule == "nccl-error"
    assert diagnosis.startswith("rank 1: NCCL failed")
    assert fix == NCCL_FIX.format(nproc=2)


@pytest.mark.parametrize(
    ("message", "expect_rule", "expect"),
    [
        ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, "
         "NumelIn=2646, NumelOut=2646, Timeout(ms)=90000) ran for 90041 milliseconds before timing out.",
         "nccl-timeout", "collective timed out"),
        ("DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, internal error - please report "
         "this issue to the NCCL developers, NCCL version 2.20.5\nncclInternalError: Internal check failed.",
         "nccl-error", "NCCL failed"),
        ("CUDA error: no kernel image is available for execution on the device", "no-kernel-image",
         "architecture"),
        ("sync_bn_forward_mean_impl: implementation for device cuda not found.", "mmcv-cpu-only",
         "without its CUDA ops"),
        ("2 processes asked, 1 GPU visible (CUDA_VISIBLE_DEVICES=0)", "too-few-gpus",
         "2 processes asked, 1 GPU visible (CUDA_VISIBLE_DEVICES=0): one process per GPU"),
        ("ImportError: /x/mmcv/_ext.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c10",
         "abi-mismatch", "ABI"),
        ("ModuleNotFoundError: No module named 'mmcv'", "missing-package", "missing or broken"),
    ],
)
def test_rules(message, expect_rule, expect):
    rule, diagnosis, fix = diagnose(output="", rank_errors=[_err("0", message, 1.0)], timed_out=False,
                                    timeout=60, returncode=1, nproc=2)
    assert rule == expect_rule
    assert expect in diagnosis
    assert fix


def test_segfault_from_torchrun_summary():
    output = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
              "  exitcode  : -11 (pid: 4242)\n  error_file: <N/A>\n"
              "  traceback : Signal 11 (SIGSEGV) received by PID 4242")
    rule, diagnosis, _ = diagnose(output=output, rank_errors=[], timed_out=False, timeout=60,
                            returncode=1, nproc=2)
    assert rule == "segfault" and "segmentation fault" in diagnosis


def test_silent_hang_becomes_the_nccl_diagnosis():
    rule, diagnosis, fix = diagnose(output="", rank_errors=[], timed_out=True, timeout=42,
                              returncode=None, nproc=4)
    assert rule == "timeout" and "no result after 42 s" in diagnosis
    assert fix == NCCL_FIX.format(nproc=4) and "--nproc 4" in fix


def test_launch_env_forces_multicast_off(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    env = launch_env({"TORCH_SYMM_MEM_DISABLE_MULTICAST": "0", "NCCL_P2P_DISABLE": "1"})
    for var, value in MULTICAST_OFF.items():
        assert env[var] == value
    assert env["NCCL_P2P_DISABLE"] == "1"


@pytest.mark.parametrize(("nproc", "steps"), [(0, 5), (2, 1)])
def test_bad_arguments(nproc, steps):
    with pytest.raises(BadInput):
        run_distributed_step(nproc=nproc, steps=steps)
