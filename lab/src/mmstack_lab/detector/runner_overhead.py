"""What mmengine's Runner adds to each training iteration around `model.train_step` (issue 24 item 2).

    python -m mmstack_lab.detector.runner_overhead --json > runner_overhead.json            # CPU
    python -m mmstack_lab.detector.runner_overhead --device cuda --json > runner_overhead.json

bench_detector.py and detector_stages.py call the detector's `train_step` in a plain loop on a
fixed batch, so two of the categories issue 24 asks about are outside their ratio: mmengine's
runner, hooks and logging, and the data loader. Those are CPU work per iteration whatever the
model is, so they are measured here with a model whose own step costs almost nothing (one Linear
layer, two samples a batch), the same model and optimizer in three loops:

- bare: `model.train_step(batch, optim_wrapper)` on one collated batch (the benchmarks' loop);
- loader: the same with each batch drawn from a DataLoader (InfiniteSampler, pseudo_collate,
  num_workers=0: the loading itself in the loop, as a worker-less run pays it);
- runner: `Runner.train()` with mmdet's train-time hooks (default_runtime.py: IterTimerHook,
  LoggerHook every 50 iterations, ParamSchedulerHook, CheckpointHook, DistSamplerSeedHook; its
  DetVisualizationHook acts only in validation and test) and the RuntimeInfoHook mmengine adds,
  an iteration being the time between two `before_train_iter` calls.

Each loop runs `--iters` iterations `--rounds` times, the loops in turn (rotated each round), the
first `--skip` iterations of each run dropped. Per loop: the median and the mean per iteration
(the mean holds the LoggerHook's every-50th formatting), and the differences: hooks and logging
(runner - loader) and loading (loader - bare). A detector's data pipeline (decode, resize, flip,
pack) is not in the loader here; the benchmarks' synthetic batch has none either.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import statistics
import sys
import tempfile
import time

from mmstack_lab.common.hostinfo import cpu_name


def _parts(device: str):
    import torch
    from mmengine.model import BaseModel

    class Toy(BaseModel):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, inputs, targets=None, mode="loss"):
            pred = self.lin(torch.stack(inputs)).squeeze(-1)
            return {"loss": ((pred - torch.stack(targets)) ** 2).mean()}

    class Samples(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"inputs": torch.rand(4, generator=g), "targets": torch.rand((), generator=g)}

    def model():
        torch.manual_seed(0)
        return Toy().to(device)

    return model, Samples


def _optim(model):
    import torch
    from mmengine.optim import OptimWrapper

    return OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.01))


def _loader_cfg(samples) -> dict:
    return dict(dataset=samples(), sampler=dict(type="InfiniteSampler", shuffle=True, seed=0),
                collate_fn=dict(type="pseudo_collate"), batch_size=2, num_workers=0)


def _gaps(stamps: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(stamps)]


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _plain(device: str, iters: int, batches) -> list[float]:
    """`train_step` in a plain loop over `batches(samples)`, an iterator of collated batches."""
    make, samples = _parts(device)
    model = make()
    optim = _optim(model)
    batch_iter = batches(samples)
    stamps = []
    for _ in range(iters + 1):
        _sync(device)
        stamps.append(time.perf_counter())
        model.train_step(next(batch_iter), optim)
    return _gaps(stamps)


def run_bare(device: str, iters: int) -> list[float]:
    from mmengine.dataset import pseudo_collate

    def one_batch(samples):
        ds = samples()
        return itertools.repeat(pseudo_collate([ds[0], ds[1]]))

    return _plain(device, iters, one_batch)


def run_loader(device: str, iters: int) -> list[float]:
    from mmengine.runner import Runner

    return _plain(device, iters, lambda samples: iter(Runner.build_dataloader(_loader_cfg(samples), seed=0)))


_RUNNERS: list[str] = []


def run_runner(device: str, iters: int) -> list[float]:
    from mmengine.hooks import Hook
    from mmengine.runner import Runner

    make, samples = _parts(device)
    stamps: list[float] = []

    class Stamp(Hook):
        priority = "VERY_HIGH"  # first of the before_train_iter hooks

        def before_train_iter(self, runner, batch_idx, data_batch=None):
            _sync(device)
            stamps.append(time.perf_counter())

    name = f"runner-overhead-{len(_RUNNERS)}"  # mmengine keeps loggers, message hubs and visualizers by name
    _RUNNERS.append(name)
    with tempfile.TemporaryDirectory() as work_dir:
        runner = Runner(
            experiment_name=name, visualizer=dict(type="Visualizer", name=name, vis_backends=[dict(type="LocalVisBackend")]),
            model=make(), work_dir=work_dir, train_dataloader=_loader_cfg(samples),
            train_cfg=dict(by_epoch=False, max_iters=iters + 1, val_interval=10**9),
            optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.01)),
            default_hooks=dict(timer=dict(type="IterTimerHook"), logger=dict(type="LoggerHook", interval=50),
                               param_scheduler=dict(type="ParamSchedulerHook"),
                               checkpoint=dict(type="CheckpointHook", interval=10**9, by_epoch=False),
                               sampler_seed=dict(type="DistSamplerSeedHook")),
            custom_hooks=[Stamp()], log_processor=dict(by_epoch=False), log_level="ERROR",
            env_cfg=dict(cudnn_benchmark=False), randomness=dict(seed=0))
        runner.train()
    return _gaps(stamps)


LOOPS = {"bare": run_bare, "loader": run_loader, "runner": run_runner}


def measure(device: str, iters: int, rounds: int, skip: int) -> dict:
    import mmengine
    import torch

    times: dict[str, list[float]] = {name: [] for name in LOOPS}
    per_round: dict[str, list[float]] = {name: [] for name in LOOPS}
    names = list(LOOPS)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t = LOOPS[name](device, iters)[skip:]
            times[name] += t
            per_round[name].append(statistics.median(t) * 1e3)
    stat = {"median_ms": {name: statistics.median(t) * 1e3 for name, t in times.items()},
            "mean_ms": {name: statistics.fmean(t) * 1e3 for name, t in times.items()}}
    loops = {name: {"median_ms": stat["median_ms"][name], "mean_ms": stat["mean_ms"][name],
                    "per_round_median_ms": per_round[name], "iterations": len(t)} for name, t in times.items()}
    return {
        "what": "per-iteration time of one tiny model's train_step: bare loop, DataLoader loop, mmengine Runner "
                "with mmdet's train-time hooks (mmstack_lab.detector.runner_overhead)",
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "cpu": cpu_name(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "mmengine": mmengine.__version__},
        "iters": iters, "rounds": rounds, "skip": skip,
        "loops": loops,
        "hooks_and_logging_ms": {k: stat[k]["runner"] - stat[k]["loader"] for k in stat},
        "loading_ms": {k: stat[k]["loader"] - stat[k]["bare"] for k in stat},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", type=int, default=1000, help="iterations per run")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each loop, in turn")
    parser.add_argument("--skip", type=int, default=100, help="first iterations of each run not counted")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.skip >= args.iters:
        parser.error(f"--skip {args.skip} must be below --iters {args.iters}")
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # mmengine's logger writes to stdout; keep it for the result
    try:
        doc = measure(args.device, args.iters, args.rounds, args.skip)
    finally:
        sys.stdout = real_stdout
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        for name, loop in doc["loops"].items():
            print(f"{name:7s} median {loop['median_ms']:.3f} ms  mean {loop['mean_ms']:.3f} ms")
        print(f"hooks and logging: {doc['hooks_and_logging_ms']['median_ms']:+.3f} ms (median), "
              f"loading: {doc['loading_ms']['median_ms']:+.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
