"""Per stage of a detector training iteration: how many ops it dispatches and how many of them make
the host wait for the GPU, mmdet against torchvision (issue 24 item 2).

    python -m mmstack_lab.detector.detector_ops --device cpu --batch-size 2 --json > detector_ops.json
    python -m mmstack_lab.detector.detector_ops --device cuda --batch-size 8 --json

At batch 2 both detectors are launch-bound on the H200 (docs/mmdet.md): an iteration costs what
its host side issues, kernel by kernel, and each point where the host reads a result off the GPU
drains the queue. detector_stages.py times the stages; this counts what is in them. Same models,
batch and stage seams as detector_stages.py (its SEAMS); after --warmup iterations, each of
--iters iterations runs under a TorchDispatchMode that attributes every op to each stage open at
the time (nested stages are inclusive: mmdet's rpn.loss holds its rpn.targets, as in the timing).
Per stage:
- ops: ops dispatched that are not views (a view launches no kernel); on CUDA each is about one
  kernel launch, and more for a few composite ones;
- views;
- host_waits: ops whose result the host needs before it can go on, by kind: a tensor read as a
  Python number or bool (`_local_scalar_dense`), an output whose size depends on the data
  (nonzero, masked_select, unique, indexing with a bool mask, repeat_interleave without
  output_size; `x[mask] = v` only where ATen cannot make it a masked_fill), and on CUDA a copy to
  the host. On the CPU nothing waits; the same Python code
  runs these ops on CUDA, so this is what the GPU run would wait on, a lower bound: host reads
  that bypass the dispatcher (`.tolist()`, `.cpu()` of a CPU tensor) are not seen on the CPU;
- cuda_syncs (CUDA only): the synchronising calls torch itself reports
  (`torch.cuda.set_sync_debug_mode("warn")`), the real count. (Written for the GPU run; on the
  CPU it is absent.)
Custom ops count as what they dispatch: torchvision's nms and roi_align are one op each, mmcv's
`_ext` functions the ATen calls their C++ makes (on the CPU its CPU kernels', not CUDA's).
Iterations are counted separately; `same_every_iteration` says whether they agree.
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter

import torch  # every op this script counts passes through host_wait_kind

from mmstack_lab.common.hostinfo import host
from mmstack_lab.detector import detector_stages as ds, harness

# ops whose output size or value the host must know before it can issue more work
SIZE_FROM_DATA = ("aten.nonzero.", "aten.masked_select.", "aten._unique2.", "aten.unique_dim.",
                  "aten.unique_consecutive.", "aten.is_nonzero.", "aten.equal.")
VALUE_TO_HOST = ("aten._local_scalar_dense.",)


def host_wait_kind(name: str, args, kwargs, cuda: bool) -> str | None:
    """Why an op makes the host wait for the GPU (None: it does not)."""
    if name.startswith(VALUE_TO_HOST):
        return "value read on the host"
    if name.startswith(SIZE_FROM_DATA):
        return "size from the data"
    if name.startswith("aten.repeat_interleave.") and kwargs.get("output_size") is None:
        return "size from the data"
    if name.startswith(("aten.index.Tensor", "aten.index_put")) and len(args) > 1:
        masks = [i for i in (args[1] or ()) if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)]
        if not masks:
            return None
        if name.startswith("aten.index_put") and _masked_fill_path(args, kwargs, masks):
            return None
        return "size from the data"
    if cuda and name.startswith(("aten._to_copy.", "aten.copy_.")):
        src = args[1] if name.startswith("aten.copy_.") else args[0]
        dst = args[0].device if name.startswith("aten.copy_.") else kwargs.get("device")
        if isinstance(src, torch.Tensor) and src.is_cuda and dst is not None and torch.device(dst).type == "cpu":
            return "copy to the host"
    return None


def _masked_fill_path(args, kwargs, masks) -> bool:
    """ATen's index_put_ turns `x[mask] = v` into masked_fill_ (no nonzero, no wait) when v is one
    element on the CPU, the mask is the only index tensor and on x's device, and it does not
    accumulate (TensorAdvancedIndexing.cpp: canDispatchToMaskedFill)."""
    self, indices, value = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("values")
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    defined = [i for i in indices if i is not None]
    return (not accumulate and value is not None and value.numel() == 1 and value.device.type == "cpu"
            and len(defined) == 1 and masks[0].device == self.device)


class Stack(ds.Marks):
    """detector_stages' stage boundaries, kept as the stack of stages open now (nothing timed)."""

    def __init__(self):
        super().__init__(cuda=False)
        self.open: list[str] = []

    def mark(self, name: str, edge: str) -> None:
        if edge == "start":
            self.open.append(name)
        else:
            del self.open[len(self.open) - 1 - self.open[::-1].index(name)]


def counting_mode(stack: Stack, cuda: bool):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.stages: dict[str, Counter[str]] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = str(func)
            keys = ["views" if func.is_view else "ops"]
            kind = host_wait_kind(name, args, kwargs, cuda)
            if kind:
                keys += ["host_waits", f"host_wait:{kind}", f"host_wait_op:{name}"]
            if cuda:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    out = func(*args, **kwargs)
                if any("synchroniz" in str(w.message) for w in caught):
                    keys.append("cuda_syncs")
            else:
                out = func(*args, **kwargs)
            for stage in set(stack.open):
                self.stages.setdefault(stage, Counter()).update(keys)
            return out

    return Count()


def _counted(cuda: bool) -> tuple[str, ...]:
    """What a stage reports as a count (cuda_syncs on CUDA only)."""
    return ("ops", "views", "host_waits", *(("cuda_syncs",) if cuda else ()))


def _tidy(counter: Counter[str], cuda: bool) -> dict[str, object]:
    out: dict[str, object] = {k: counter.get(k, 0) for k in _counted(cuda)}
    for prefix, key in (("host_wait:", "host_waits_by_kind"), ("host_wait_op:", "host_waits_by_op")):
        out[key] = dict(sorted((k[len(prefix):], v) for k, v in counter.items() if k.startswith(prefix)))
    return out


def count(framework: str, make, args, samples) -> dict:
    cuda = args.device.startswith("cuda")
    stack = Stack()
    step = make(args, samples, stack)
    for _ in range(args.warmup):
        step()
    iterations = []
    for _ in range(args.iters):
        mode = counting_mode(stack, cuda)
        if cuda:
            torch.cuda.synchronize(args.device)
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with mode:
                stack.mark("iteration", "start")
                step()
                stack.mark("iteration", "end")
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
        counters = mode.stages
        stages = {name: _tidy(c, cuda) for name, c in counters.items()}
        top = ds.TOP[framework]
        stages["other"] = {k: counters["iteration"][k] - sum(counters[s][k] for s in top if s in counters)
                           for k in _counted(cuda)}
        iterations.append(stages)
    return {"top_level": list(ds.TOP[framework]), "stages": iterations[0],
            "same_every_iteration": all(it == iterations[0] for it in iterations[1:]),
            "ops_per_iteration": [it["iteration"]["ops"] for it in iterations]}


def run(args, argv: list[str]) -> dict:
    report = ds.run_sides(args, count, tool="detector_ops",
                          what="ops dispatched per stage of one training iteration, and those the host waits on")
    return {"command": " ".join(["python -m mmstack_lab.detector.detector_ops", *argv]), "host": host(), **report}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = harness.parser(__doc__.splitlines()[0], warmup=2, iters=2, iters_help="iterations counted, each on its own")
    args = harness.parse_args(ap, argv, "detector_ops")
    report = harness.quiet_stdout(run, args, argv, quiet=args.json)
    ds.print_report(report, as_json=args.json, lines=_lines)
    return 0


def _lines(fw: str, side: dict) -> list[str]:
    return [f"{fw}:" + ("" if side["same_every_iteration"] else " (iterations differ; the first shown)"),
            *(f"  {name:16s} ops {d['ops']:6d}  views {d['views']:6d}  host waits {d['host_waits']:5d}"
              + (f"  cuda syncs {d['cuda_syncs']:5d}" if "cuda_syncs" in d else "") for name, d in side["stages"].items())]


if __name__ == "__main__":
    sys.exit(main())
