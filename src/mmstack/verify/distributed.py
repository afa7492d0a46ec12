"""L5 across GPUs: a short distributed training step through torchrun, and what to try when it fails.

`run_distributed_step` launches torchrun (the engine; we write no launcher of our own):

    <python> -m torch.distributed.run --standalone --nproc_per_node=N --no_python \
        <python> -c <boot> .../mmstack/dist_worker.py --steps S --out <tmp>/result.json --pg-timeout T

The worker runs by path, as the ladder's children do, so the interpreter under test needs torch and
mmcv but not mmstack (`torchrun ... -m mmstack.verify.dist_worker` is the same thing where mmstack is
installed). `--nproc_per_node` and `--no_python` are the spellings every torchrun since 1.10 accepts.
It waits at most `timeout` seconds, then turns what came back (rank 0's JSON, the per-rank error
files, torchrun's merged output) into one result: PASS/FAIL, the numbers, and for a failure a
diagnosis with the fix to try; NCCL failures name the environment variables worth trying one at a
time, with the peer-to-peer matrix and `nvidia-smi topo -m` as evidence.

Stdlib only: the ladder imports this module in environments where only the stdlib is guaranteed;
torch, mmcv and NCCL live in the worker processes.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mmstack.errors import BadInput
from mmstack.verify.diagnose import DISTRIBUTED_RULES, NCCL_FIX
from mmstack.verify.dist_worker import FAULT_ENV, MULTICAST_OFF
from mmstack.verify.launcher import boot_command

WORKER = Path(__file__).with_name("dist_worker.py")

__all__ = ["FAULT_ENV", "MULTICAST_OFF", "NCCL_ENV_TO_TRY", "NCCL_FIX", "diagnose", "launch_env",
           "run_distributed_step", "torchrun_cmd"]

# What to try, one at a time, when NCCL fails; each with the reason it can help.
NCCL_ENV_TO_TRY: list[dict[str, str]] = [
    {"var": "NCCL_DEBUG", "value": "INFO",
     "why": "logs which transport (P2P, SHM, NET/Socket, IB) each ring uses and where setup stops"},
    {"var": "NCCL_P2P_DISABLE", "value": "1",
     "why": "GPU peer-to-peer over NVLink/PCIe is broken or blocked (IOMMU/ACS, VMs): see evidence.p2p"},
    {"var": "NCCL_SHM_DISABLE", "value": "1",
     "why": "the shared-memory transport fails: containers with a small /dev/shm (docker --ipc=host "
            "or --shm-size=1g is the real fix)"},
    {"var": "NCCL_IB_DISABLE", "value": "1", "why": "an InfiniBand/RoCE adapter is found but unusable"},
    {"var": "NCCL_SOCKET_IFNAME", "value": "lo",
     "why": "NCCL picked a network interface that cannot reach the other ranks (one host: lo; "
            "otherwise the NIC that routes between hosts, e.g. eth0)"},
]
def launch_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment torchrun and its ranks get: `base` (default: ours), multicast forced off."""
    env = dict(os.environ if base is None else base)
    # Unconditional, even over the caller's values: see dist_worker.MULTICAST_OFF for why.
    env.update(MULTICAST_OFF)
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun would set it anyway, with a warning
    env.setdefault("PYTHONUNBUFFERED", "1")  # rank output in order, and not lost when a rank is killed
    return env


def torchrun_cmd(*, python: str, nproc: int, steps: int, out: Path, pg_timeout: float) -> list[str]:
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "--no_python", *boot_command(python, WORKER),  # by path, as the ladder runs its child
            "--steps", str(steps), "--out", str(out), "--pg-timeout", f"{pg_timeout:g}"]


def run_distributed_step(
    *,
    nproc: int,
    steps: int = 5,
    timeout: float = 180,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    pg_timeout: float | None = None,
) -> dict[str, Any]:
    """Run the L5 step with `nproc` ranks under `python`, all within `timeout` seconds.

    Returns {status: PASS|FAIL, backend: nccl|gloo, world_size, losses (mean over ranks, one per
    step, reported by rank 0), params_agree, syncbn: "mmcv" | "torch" | "skipped: <why>", wall_s,
    diagnosis, fix, rule (the diagnosis rule's id), summary (one line for a table), evidence}.
    `env` is the whole environment for torchrun (default: ours); the multicast-off variables are
    set over it. `pg_timeout` is how long one collective may wait (default: timeout / 2). Never
    raises for a failed run; BadInput for bad arguments.
    """
    if nproc < 1:
        raise BadInput(f"--nproc {nproc}: expected 1 or more processes", fix="pass --nproc 1 or more")
    if steps < 2:
        raise BadInput(f"--steps {steps}: expected 2 or more (a single loss cannot fall)",
                       fix="pass 2 or more steps")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mmstack-l5-") as tmp:
        out = Path(tmp) / "result.json"
        # The process group gives up well before we do, so a stuck collective reports itself as an
        # NCCL/gloo timeout naming the rank and the operation instead of ending in a silent kill.
        pg_timeout = pg_timeout or max(5.0, timeout / 2)
        cmd = torchrun_cmd(python=python, nproc=nproc, steps=steps, out=out, pg_timeout=pg_timeout)
        # cwd: an empty directory, so a checkout's ./torch or ./mmcv cannot shadow the installed ones.
        output, rc, timed_out = _launch(cmd, launch_env(env), timeout, cwd=tmp)
        result = _read_json(out)
        probe = _read_json(out.with_name(out.name + ".probe.json")) or {}
        rank_errors = sorted((e for e in (_read_json(p) for p in Path(tmp).glob("*.error.json")) if e),
                             key=lambda e: e.get("time", math.inf))

    evidence: dict[str, Any] = {
        "cmd": shlex.join(cmd),
        "returncode": rc,
        "multicast_off": dict(MULTICAST_OFF),
        "devices": probe.get("devices"),
        "p2p": probe.get("p2p"),
        "p2p_blocked": probe.get("p2p_blocked"),
        "stderr_tail": _tail(output),
    }
    res: dict[str, Any] = {
        "status": "FAIL", "backend": None, "world_size": nproc, "losses": [], "params_agree": False,
        "syncbn": None, "wall_s": None, "diagnosis": None, "fix": None, "rule": None, "summary": None,
        "evidence": evidence,
    }
    if probe.get("cuda_available") is not None:  # what the ranks chose, even if they got no further
        res["backend"] = "nccl" if probe["cuda_available"] and probe["device_count"] >= nproc else "gloo"
    if result:
        res.update(backend=result["backend"], world_size=result["world_size"], losses=result["losses"],
                   params_agree=result["params_agree"], syncbn=result["syncbn"])
        evidence.update({k: result.get(k) for k in (
            "device", "loss_fell", "param_max_abs_diff", "param_sha256", "param_count", "bn_stats_agree",
            "bn_stats_max_abs_diff", "syncbn_notes", "mmcv_ops", "versions", "env", "worker_s")})
    if not result or rc != 0 or timed_out:
        evidence["rank_errors"] = [{k: e.get(k) for k in ("rank", "type", "message")} for e in rank_errors]
        rule, diagnosis, fix = diagnose(output=output, rank_errors=rank_errors, timed_out=timed_out,
                                        timeout=timeout, returncode=rc, nproc=nproc)
        res.update(rule=rule, diagnosis=diagnosis, fix=fix)
    else:
        res.update(_judge(result))
    if res["rule"] in ("nccl-error", "nccl-timeout", "timeout"):
        evidence["nccl_env_to_try"] = NCCL_ENV_TO_TRY
    if res["status"] == "FAIL":
        evidence.update(_host_evidence())
    res["summary"] = _summary(res)
    res["wall_s"] = round(time.monotonic() - started, 2)
    return res


def _summary(res: dict[str, Any]) -> str:
    if res["status"] != "PASS":
        return str(res["diagnosis"])
    losses, ev = res["losses"], res["evidence"]
    syncbn = res["syncbn"]
    bn = ("mmcv SyncBatchNorm synchronised" if syncbn == "mmcv" else
          "torch SyncBatchNorm synchronised" if syncbn == "torch" else "SyncBatchNorm skipped (CUDA-only)")
    return (f"{res['backend']} x{res['world_size']} on {ev.get('device')}: loss {losses[0]:.4g} -> "
            f"{losses[-1]:.4g} in {len(losses)} steps, parameters identical on every rank, {bn}")


def _judge(result: dict[str, Any]) -> dict[str, Any]:
    """PASS only if the loss fell, every rank holds the same parameters, and (when a SyncBatchNorm ran)
    the BatchNorm running statistics agree across ranks, which they do only if it synchronised."""
    losses = result["losses"]
    problems, fixes, rules = [], [], []
    if not all(math.isfinite(x) for x in losses):
        problems.append(f"loss is not finite: {losses}")
        fixes.append("run L4 (single-process ops) to find the op producing NaN/inf")
        rules.append("loss-not-finite")
    elif not result["loss_fell"]:
        problems.append(f"loss did not fall over {len(losses)} steps: {losses[0]:.4g} -> {losses[-1]:.4g}")
        fixes.append("gradients do not reach the parameters: check mmcv op backward with L4")
        rules.append("loss-flat")
    if not result["params_agree"]:
        problems.append(f"ranks hold different parameters after training (max |diff| "
                        f"{result['param_max_abs_diff']:.3g}; sha256 per rank {result['param_sha256']})")
        fixes.append("gradients were not all-reduced identically: rerun with NCCL_DEBUG=INFO and "
                     "NCCL_P2P_DISABLE=1 to rule out a faulty transport")
        rules.append("params-disagree")
    if result["syncbn"] in ("mmcv", "torch") and not result["bn_stats_agree"]:
        problems.append(f"SyncBatchNorm running statistics differ across ranks (max |diff| "
                        f"{result['bn_stats_max_abs_diff']:.3g}): it did not synchronise")
        fixes.append("check mmcv's sync_bn ops on this GPU (L4) and the process group it was given")
        rules.append("syncbn-not-synced")
    if problems:
        return {"status": "FAIL", "diagnosis": "; ".join(problems), "fix": "; ".join(fixes),
                "rule": rules[0]}
    return {"status": "PASS"}


def diagnose(
    *,
    output: str,
    rank_errors: list[dict[str, Any]],
    timed_out: bool,
    timeout: float,
    returncode: int | None,
    nproc: int,
) -> tuple[str, str, str]:
    """Map a failed run to (rule id, diagnosis, fix). The first failing rank's error decides when it
    matches a rule: the other ranks usually fail as a consequence (connection reset, killed by
    torchrun)."""
    texts = [f"{e.get('type')}: {e.get('message')}\n{e.get('traceback', '')}" for e in rank_errors]
    first = texts[0] if texts else ""
    for text in (first, "\n".join(texts), output):
        if text is output and timed_out:
            break  # what torchrun printed while being killed says less than the timeout itself
        for r in DISTRIBUTED_RULES:
            m = r.search(text)
            if m:
                rule, fix = r.name, r.fix
                diagnosis = r.cause.format(match=m.group(0).strip())
                if first and text is first:  # say which rank, and what it said
                    e = rank_errors[0]
                    said = _first_line(f"{e.get('type')}: {e.get('message')}")
                    diagnosis = f"rank {e.get('rank')}: {diagnosis}"
                    if m.group(0).strip() not in diagnosis:
                        diagnosis += f" ({said})"
                return rule, diagnosis, fix.format(nproc=nproc)
    if timed_out:
        return ("timeout", f"no result after {timeout:g} s: a rank hung (most often NCCL transport setup: "
                f"peer-to-peer, shared memory or the network interface)", NCCL_FIX.format(nproc=nproc))
    if rank_errors:
        e = rank_errors[0]
        said = _first_line(f"{e.get('type')}: {e.get('message')}")
        return ("rank-error", f"rank {e.get('rank')} failed: {said}",
                "see evidence.stderr_tail; rerun with NCCL_DEBUG=INFO")
    return ("no-result", f"torchrun exited with code {returncode} and no result",
            "see evidence.stderr_tail; rerun with NCCL_DEBUG=INFO")


def _launch(cmd: list[str], env: dict[str, str], timeout: float, *, cwd: str) -> tuple[str, int | None, bool]:
    """Run torchrun in its own session so a hang can be ended as a group: torchrun and its ranks."""
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True, cwd=cwd,
                                stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise BadInput(f"cannot run {cmd[0]}: {exc.strerror}",
                       fix="pass a Python interpreter to --python") from None
    try:
        output, _ = proc.communicate(timeout=timeout)
        return output, proc.returncode, False
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                output, _ = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                output = ""
        return output or "", proc.returncode, True


def _host_evidence() -> dict[str, Any]:
    """`nvidia-smi topo -m` (how the GPUs connect) and /dev/shm size (NCCL's SHM transport)."""
    ev: dict[str, Any] = {}
    if shutil.which("nvidia-smi"):
        try:
            ev["topo"] = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                                        timeout=30).stdout.strip() or None
        except (OSError, subprocess.SubprocessError) as exc:
            ev["topo"] = f"nvidia-smi topo -m failed: {exc}"
    try:
        st = os.statvfs("/dev/shm")
        ev["dev_shm_bytes"] = st.f_frsize * st.f_blocks
    except OSError:
        pass
    return ev


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _first_line(text: str, limit: int = 240) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _tail(text: str, lines: int = 60, chars: int = 6000) -> str:
    return "\n".join(text.splitlines()[-lines:])[-chars:]
