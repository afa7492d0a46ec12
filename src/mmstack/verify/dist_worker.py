"""One rank of the L5 distributed verify step. torchrun runs it; `mmstack.verify.distributed` launches torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node N -m mmstack.verify.dist_worker \\
        --steps 5 --out result.json

Stdlib + torch + mmcv (+ mmengine, which mmcv.cnn imports) only: this runs inside the environment under
test, so the import of this module stays stdlib-only and torch/mmcv are imported inside functions.

Each rank trains the same tiny detector-like model for a few steps on its own fixed batch:
Conv2d -> SyncBatchNorm (mmcv's, built through the registry name 'MMSyncBN' as OpenMMLab configs do)
-> ReLU -> mmcv.ops.DeformConv2d (offsets from a conv) -> mmcv.ops.RoIAlign -> Linear, wrapped in
DistributedDataParallel. Rank 0 writes one JSON: losses (mean over ranks), whether they fell, whether
every rank holds the same parameters afterwards (all_gather of one flat float64 vector, compared
exactly; sha256 per rank), whether the BatchNorm running statistics agree (they do only when
SyncBatchNorm really synchronised: every rank sees different data), and the environment each rank
started with.

Backend: NCCL when CUDA is available with at least WORLD_SIZE GPUs; gloo on CPU processes when no GPU
is visible; fewer GPUs than ranks is an error with the counts in the message. mmcv's SyncBatchNorm and
torch.nn.SyncBatchNorm both need GPU tensors; on CPU both are tried once and, when they refuse, the
model uses nn.BatchNorm2d and `syncbn` says why.

Any exception on a rank is written to `<out>.rank<N>.error.json` (type, message, traceback, time)
before it propagates, so the launcher can tell which rank failed first and why.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import inspect
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# NVLink multicast (NVLS, symmetric-memory multicast, NVSHMEM NVLS) stays off: the GPU hosts this
# project is verified on require it, and a program that uses multicast can take the host's GPUs out
# of service. The launcher passes these; the worker sets them again in case it is run by hand.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# Test hook: "nccl" makes the last rank raise a real-looking NCCL error after init_process_group;
# "hang" makes it sleep instead; "desync" perturbs its parameters after training.
FAULT_ENV = "MMSTACK_DIST_FAULT"
FAKE_NCCL_ERROR = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device "
    "error. (injected by MMSTACK_DIST_FAULT=nccl)"
)
TOO_FEW_GPUS = "processes asked"  # the launcher matches this phrase
_ECHO_PREFIXES = ("NCCL_", "TORCH_NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_", "GLOO_", "CUDA_VISIBLE_DEVICES",
                  "OMP_NUM_THREADS", FAULT_ENV)
CHANNELS = 8


def _short(exc: BaseException, limit: int = 200) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _env_echo() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ECHO_PREFIXES)}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def probe_devices(*, p2p: bool = True) -> dict[str, Any]:
    """CUDA devices and the peer-to-peer matrix (`torch.cuda.can_device_access_peer` for each pair;
    only rank 0 asks, the answer is the same for every rank)."""
    import torch

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    n = info["device_count"]
    info["devices"] = [torch.cuda.get_device_name(i) for i in range(n)]
    if n:
        try:
            info["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception as exc:  # noqa: BLE001 - evidence, not control flow
            info["nccl"] = f"unknown ({_short(exc)})"
    # p2p[i][j]: can GPU i read/write GPU j's memory directly (NVLink or PCIe P2P); None on the diagonal.
    if p2p:
        matrix = [[None if i == j else bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)]
                  for i in range(n)]
        info["p2p"] = matrix
        info["p2p_blocked"] = [f"{i}->{j}" for i in range(n) for j in range(n) if matrix[i][j] is False]
    return info


def _choose_backend(world: int, probe: dict[str, Any]) -> str:
    gpus = probe["device_count"]
    if probe["cuda_available"] and gpus >= world:
        return "nccl"
    if probe["cuda_available"] and gpus:
        visible = probe["CUDA_VISIBLE_DEVICES"]
        raise RuntimeError(
            f"{world} {TOO_FEW_GPUS}, {gpus} GPU{'s' if gpus != 1 else ''} visible"
            + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
        )
    return "gloo"


def _syncbn_for(device: Any) -> tuple[Any, str, dict[str, str]]:
    """Return (norm layer factory, syncbn label, probe notes).

    On CUDA it is mmcv's SyncBatchNorm, no fallback: if it fails there, that is the finding. On CPU
    both SyncBatchNorms are tried on a small batch (every rank runs the same probes in the same
    order, so any collective inside them pairs up) and nn.BatchNorm2d is used when both refuse.
    """
    import torch
    from mmcv.cnn import build_norm_layer
    from mmcv.ops import SyncBatchNorm  # importing mmcv.ops is what registers "MMSyncBN"

    def mmcv_bn(c: int) -> Any:
        layer = build_norm_layer(dict(type="MMSyncBN"), c)[1]
        if not isinstance(layer, SyncBatchNorm):
            raise TypeError(f"'MMSyncBN' built {type(layer).__name__}, not mmcv.ops.SyncBatchNorm")
        return layer

    if device.type == "cuda":
        return mmcv_bn, "mmcv", {}

    notes: dict[str, str] = {}
    x = torch.randn(2, CHANNELS, 4, 4, device=device)
    for label, factory in (("mmcv", mmcv_bn), ("torch", torch.nn.SyncBatchNorm)):
        try:
            factory(CHANNELS).to(device).train()(x).sum().backward()
            return factory, label, notes
        except Exception as exc:  # noqa: BLE001 - the refusal is the evidence
            notes[label] = _short(exc)
    reason = (f"SyncBatchNorm needs CUDA tensors on {device.type}: "
              f"mmcv.ops.SyncBatchNorm -> {notes['mmcv']}; torch.nn.SyncBatchNorm -> {notes['torch']}; "
              "trained with nn.BatchNorm2d instead")
    return torch.nn.BatchNorm2d, f"skipped: {reason}", notes


def _model(norm_factory: Any) -> Any:
    """The ladder's toy model (toy_model.py, loaded by path like the ladder's child loads it) with a
    Conv2d + norm stem, CHANNELS wide, 4 outputs."""
    import importlib.util

    path = Path(__file__).resolve().with_name("toy_model.py")
    spec = importlib.util.spec_from_file_location("_mmstack_toy_model", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)
    return toy.build(channels=CHANNELS, outputs=4, norm=norm_factory)


def train(*, steps: int, out: Path, pg_timeout: float) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    started = time.time()
    marks: dict[str, float] = {}

    def mark(stage: str) -> None:
        marks[stage] = round(time.time() - started, 2)

    env_at_start = _env_echo()  # before the line below: shows what the launcher passed
    os.environ.update(MULTICAST_OFF)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    fault = os.environ.get(FAULT_ENV, "")
    fault_rank = world - 1

    probe = probe_devices(p2p=rank == 0)
    if rank == 0:  # early, so that a later hang or crash still leaves the device evidence
        _write_json(out.with_name(out.name + ".probe.json"), probe)
    backend = _choose_backend(world, probe)
    mark("probe")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    kwargs: dict[str, Any] = {"timeout": datetime.timedelta(seconds=pg_timeout)}
    if backend == "nccl" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = device  # torch >= 2.3: eager NCCL init, transport failures surface here
    dist.init_process_group(backend, **kwargs)
    mark("init_process_group")
    try:
        if fault == "nccl" and rank == fault_rank:
            raise RuntimeError(FAKE_NCCL_ERROR)
        if fault == "hang" and rank == fault_rank:
            time.sleep(24 * 3600)

        import mmcv

        mark("import_mmcv")
        norm_factory, syncbn, syncbn_notes = _syncbn_for(device)
        torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
        model = _model(norm_factory).to(device)
        ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        mark("model_ddp")
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

        g = torch.Generator().manual_seed(1000 + rank)  # each rank its own fixed batch
        x = torch.randn(2, 3, 16, 16, generator=g).to(device)
        boxes = torch.tensor([[0, 1.0, 1.0, 9.0, 9.0], [0, 4.0, 2.0, 15.0, 12.0],
                              [1, 0.0, 0.0, 15.0, 15.0], [1, 6.0, 6.0, 13.0, 14.0]])
        rois = boxes.to(device)
        target = torch.randn(len(boxes), 4, generator=g).to(device)

        losses: list[float] = []
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(ddp(x, rois), target)
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(float(mean) / world)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        mark("train")

        if fault == "desync" and rank == fault_rank:
            with torch.no_grad():
                next(model.parameters()).add_(1e-3)
        params = _gather_flat([p.detach() for p in model.parameters()], world, device)
        buffers = _gather_flat([b.detach() for n, b in model.named_buffers() if "running_" in n],
                               world, device)
        envs: list[Any] = [None] * world
        dist.all_gather_object(envs, env_at_start)
        mark("compare")
        if rank == 0:
            _write_json(out, {
                "backend": backend,
                "world_size": world,
                "device": str(device) if device.type == "cpu" else probe["devices"][local_rank],
                "steps": steps,
                "losses": losses,
                "loss_fell": len(losses) >= 2 and losses[-1] < losses[0],
                "params_agree": params["agree"],
                "param_max_abs_diff": params["max_abs_diff"],
                "param_sha256": params["sha256"],
                "param_count": params["count"],
                "bn_stats_agree": buffers["agree"],
                "bn_stats_max_abs_diff": buffers["max_abs_diff"],
                "syncbn": syncbn,
                "syncbn_notes": syncbn_notes,
                "mmcv_ops": ["SyncBatchNorm" if syncbn == "mmcv" else None, "DeformConv2d", "RoIAlign"],
                "versions": {"torch": torch.__version__, "mmcv": mmcv.__version__,
                             "nccl": probe.get("nccl")},
                "env": envs,  # per rank, as each started (before the worker touched it)
                "worker_s": marks,  # seconds since the worker started, at the end of each stage
            })
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _gather_flat(tensors: list[Any], world: int, device: Any) -> dict[str, Any]:
    """all_gather one flat float64 vector per rank; compare every rank with rank 0, exactly."""
    import torch
    import torch.distributed as dist

    flat = (torch.cat([t.reshape(-1).double() for t in tensors]) if tensors
            else torch.zeros(0, dtype=torch.float64)).to(device)
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    cpu = [t.cpu() for t in gathered]
    diff = max((float((t - cpu[0]).abs().max()) for t in cpu[1:] if t.numel()), default=0.0)
    return {
        "agree": diff == 0.0,
        "max_abs_diff": diff,
        "sha256": [hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16] for t in cpu],
        "count": flat.numel(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mmstack.verify.dist_worker", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", type=Path, help="rank 0 writes the result JSON here")
    ap.add_argument("--pg-timeout", type=float, default=120.0,
                    help="seconds a collective may wait before the process group gives up")
    ap.add_argument("--probe", action="store_true", help="print the device / peer-to-peer JSON and exit")
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(probe_devices(), indent=2))
        return 0
    if args.out is None:
        ap.error("--out is required")
    rank = os.environ.get("RANK", "?")
    try:
        train(steps=args.steps, out=args.out, pg_timeout=args.pg_timeout)
    except BaseException as exc:
        _write_json(args.out.with_name(f"{args.out.name}.rank{rank}.error.json"), {
            "rank": rank,
            "time": time.time(),
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc()[-4000:],
        })
        raise
    return 0


if __name__ == "__main__":
    code = main()
    # The result is written and the process group destroyed: skip interpreter teardown, where torch's
    # gloo threads can abort a rank ("terminate called without an active exception", SIGABRT; seen
    # once in a few runs on 2 loaded cores) after its work is done and so fail a step that passed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
