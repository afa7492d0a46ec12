"""L6 payload: a checkpoint's whole life through mmengine's Runner, each step in a fresh process.

    train       Runner + CheckpointHook for ITERS iterations (iter_2.pth, iter_4.pth); the loss and
                learning rate of every iteration, and the predictions of the trained model
    load        a new model (other random weights) + mmengine's load_checkpoint(iter_4.pth): its
                predictions equal the trained model's
    resume      Runner(resume=True) from iter_2.pth: it starts at iteration 2 with the optimizer
                state the file holds, and iterations 3-4 repeat the first run's learning rates and
                losses (the data loader skips what was trained)
    test        Runner(load_from=iter_4.pth).test() and .val(), as MMDetection's tools/test.py
                runs a checkpoint: the metric equals the first run's predictions
    old-format  a checkpoint with the structure OpenMMLab's mmcv 1.x / mmdet 2.x model-zoo files
                have (OLD_META), fine-tuned from with `load_from`
    foreign     a checkpoint naming a global mmengine never writes is refused, and the message
                names it

Models: `plain` (torch only: what the mmengine recipe tests), `toy` (mmcv's DeformConv2d and
RoIAlign, toy_model.py: the ladder's default), and the detectors of train_detector.MODELS.
Every comparison is exact, with one exception: on CUDA the losses after the first resumed
iteration agree to CUDA_RTOL, since mmcv's and torch's backward kernels add with atomics, so the
update of iteration 3 differs in the last bits from run to run (on the H200: 1.1e-3 and 2.1e-4
relative at iteration 4 for the two Faster R-CNNs, 0 for the toy model). The first resumed
iteration depends only on what the checkpoint restored and must match bit for bit everywhere. CPU
phases run on one thread, so no reduction order depends on the machine's core count, and with the
GPUs hidden (CUDA_VISIBLE_DEVICES=-1), since mmengine's Runner would otherwise move the model to one.

Run by path in the environment under test (stdlib only at import; torch, mmengine, mmcv and mmdet
inside the functions), by the ladder's child or from a recipe test:

    python -m mmstack.verify.checkpoint_cycle --model plain --device cpu --json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

PHASES = ("train", "load", "resume", "test", "old-format", "foreign")
MODELS = ("plain", "toy")  # + train_detector.MODELS
ITERS = 4
CKPT_INTERVAL = 2
SAMPLES = 4
BATCH = 2
SEED = 0
CUDA_RTOL = 1e-2
PHASE_TIMEOUT = 600.0
# The structure of a model-zoo checkpoint of the mmcv 1.x / mmdet 2.x era, as mmcv v1.7.2 writes it
# (read at that tag): runner/checkpoint.py save_checkpoint adds mmcv_version, time and the model's
# CLASSES to the runner's meta, runner/epoch_based_runner.py epoch and iter, hooks/checkpoint.py
# hook_msgs.last_ckpt, hooks/evaluation.py hook_msgs.best_score (the key score as the evaluation
# returned it: a numpy float64 where the metric is computed with numpy) and best_ckpt. The rest is
# what mmdet 2.x's tools/train.py and apis/train.py put in the meta (env_info, config text, seed,
# exp_name, mmdet_version), from its documentation; mmdet's repository was not re-read here.
OLD_META: dict[str, Any] = {
    "mmcv_version": "1.7.1",
    "time": "Tue Jan 10 12:00:00 2023",
    "env_info": "sys.platform: linux\nPython: 3.8.16\nPyTorch: 1.13.1\nMMCV: 1.7.1\nMMDetection: 2.28.2",
    "config": "model = dict(type='FasterRCNN')\noptimizer = dict(type='SGD', lr=0.02, momentum=0.9)\n",
    "seed": 0,
    "exp_name": "faster_rcnn_r50_fpn_1x_coco.py",
    "mmdet_version": "2.28.2",
    "CLASSES": ("a", "b", "c"),
    "PALETTE": [(220, 20, 60), (119, 11, 32), (0, 0, 142)],
    "epoch": 12,
    "iter": 87960,
    "hook_msgs": {"last_ckpt": "work_dirs/faster_rcnn_r50_fpn_1x_coco/epoch_12.pth",
                  "best_ckpt": "work_dirs/faster_rcnn_r50_fpn_1x_coco/best_mAP_epoch_12.pth"},
}
OLD_BEST_SCORE = 0.374  # stored as numpy.float64 in hook_msgs.best_score


def _sibling(name: str) -> Any:
    """train_detector.py or toy_model.py beside this file, loaded by path (mmstack need not be
    importable in the environment under test)."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_mmstack_{name}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------------------------
# models and data (inside a phase's process)


def _build(model: str, device: str, seed: int) -> Any:
    import torch
    from mmengine.model import BaseModel

    torch.manual_seed(seed)
    if model not in MODELS:
        return _sibling("train_detector").build_detector(model, device=device)

    class Regressor(BaseModel):
        """plain: Conv2d -> ReLU -> pool -> Linear; toy: toy_model.py (mmcv's ops)."""

        def __init__(self) -> None:
            super().__init__()
            if model == "toy":
                self.net = _sibling("toy_model").build(channels=8, outputs=2)
            else:
                self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                               torch.nn.Linear(8, 2))

        def forward(self, inputs: Any, targets: Any = None, mode: str = "tensor") -> Any:
            if model == "toy":
                idx = torch.arange(inputs.shape[0], device=inputs.device, dtype=inputs.dtype)[:, None]
                box = torch.tensor([[2.0, 2.0, 12.0, 12.0]], device=inputs.device).expand(inputs.shape[0], 4)
                out = self.net(inputs, torch.cat([idx, box], 1))
            else:
                out = self.net(inputs)
            if mode == "loss":
                return {"loss": torch.nn.functional.mse_loss(out, targets)}
            if mode == "predict":
                return list(out)
            return out

    return Regressor().to(device)


def _dataset(model: str) -> Any:
    import torch
    from torch.utils.data import Dataset

    if model in MODELS:
        gen = torch.Generator().manual_seed(SEED)
        images = torch.rand(SAMPLES, 3, 16, 16, generator=gen)
        items = [{"inputs": img, "targets": torch.stack([img.mean(), img[0].std()])} for img in images]
    else:
        det = _sibling("train_detector")
        batch = det.to_mmdet_inputs(det.synthetic_batch(image_size=_image_size(), batch_size=SAMPLES, seed=SEED))
        items = [{"inputs": i, "data_samples": s} for i, s in zip(batch["inputs"], batch["data_samples"], strict=True)]

    class Synthetic(Dataset):
        metainfo: ClassVar[dict] = {"classes": ("a", "b", "c")}

        def __len__(self) -> int:
            return len(items)

        def __getitem__(self, i: int) -> Any:
            return items[i]

    return Synthetic()


def _image_size() -> int:
    return int(os.environ.get("MMSTACK_CKPT_IMAGE_SIZE", "128"))


def _loader(model: str, *, shuffle: bool) -> dict:
    collate = "default_collate" if model in MODELS else "pseudo_collate"
    return {"dataset": _dataset(model), "batch_size": BATCH, "num_workers": 0,
            "sampler": {"type": "DefaultSampler", "shuffle": shuffle, "seed": SEED},
            "collate_fn": {"type": collate}}


def _fingerprint(outputs: list) -> dict:
    """What a model predicted, in numbers to compare: count, sum and sum of magnitudes (float64).
    Regressors give tensors; detectors DetDataSamples with pred_instances (boxes, scores, labels)."""
    import torch

    count, total, magnitude = 0, 0.0, 0.0
    for out in outputs:
        # a DetDataSample from test_step, or the dict mmengine's Evaluator makes of it (to_dict())
        pred = out.get("pred_instances") if isinstance(out, dict) else getattr(out, "pred_instances", None)
        if pred is not None:
            fields = pred if isinstance(pred, dict) else {k: getattr(pred, k) for k in ("bboxes", "scores", "labels")}
            parts = [fields["bboxes"].double(), fields["scores"].double(), fields["labels"].double()]
            count += len(fields["scores"])
        else:
            parts = [out.double()]
            count += 1
        for t in parts:
            total += float(t.sum())
            magnitude += float(t.abs().sum())
    return {"count": count, "sum": total, "abs_sum": magnitude, "torch": torch.__version__}


def _metric() -> Any:
    from mmengine.evaluator import BaseMetric, Evaluator

    class Fingerprint(BaseMetric):
        """The test loop's metric: _fingerprint of every prediction (what tools/test.py evaluates)."""

        default_prefix = "ckpt"

        def process(self, data_batch: Any, data_samples: Any) -> None:
            self.results.extend(data_samples)

        def compute_metrics(self, results: list) -> dict:
            fp = _fingerprint(results)
            return {k: fp[k] for k in ("count", "sum", "abs_sum")}

    return Evaluator([Fingerprint()])


def _recorder(log: list) -> Any:
    import torch
    from mmengine.hooks import Hook

    class Record(Hook):
        """Each iteration's loss and learning rate; the state the run starts from."""

        priority = "LOWEST"

        def before_train(self, runner: Any) -> None:
            # copies: the optimizer updates its state tensors in place as training goes on
            log.append({"start_iter": runner.iter, "optimizer": copy.deepcopy(runner.optim_wrapper.state_dict()),
                        "state_dict": {k: v.detach().cpu().clone() for k, v in runner.model.state_dict().items()}})

        def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
            # mmengine keeps no RNG state in a checkpoint: the detectors' proposal samplers would draw
            # otherwise after a resume. Seeding by iteration makes each iteration's draw the same in
            # every run, so a resumed run must repeat the first run's losses.
            torch.manual_seed(SEED * 1000 + runner.iter)

        def after_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None) -> None:
            lr = runner.optim_wrapper.get_lr()["lr"][0]
            log.append({"iter": runner.iter + 1, "loss": float(outputs["loss"].detach()), "lr": float(lr)})

    return Record()


def _runner(model: str, device: str, work: Path, *, name: str, seed: int, **kwargs: Any) -> Any:
    from mmengine.runner import Runner

    amp = device.startswith("cuda") and model not in MODELS
    optim = {"type": "AmpOptimWrapper" if amp else "OptimWrapper",
             "optimizer": {"type": "SGD", "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4}}
    runner = Runner(model=_build(model, device, seed), work_dir=str(work / name), experiment_name=name,
                  train_dataloader=_loader(model, shuffle=True),
                  train_cfg={"type": "IterBasedTrainLoop", "max_iters": ITERS, "val_interval": 10 * ITERS},
                  optim_wrapper=optim,
                  # the learning rate changes every iteration: a resume must continue the schedule
                  param_scheduler=[{"type": "LinearLR", "start_factor": 0.25, "by_epoch": False,
                                    "begin": 0, "end": ITERS}],
                  test_dataloader=_loader(model, shuffle=False), test_cfg={"type": "TestLoop"},
                  test_evaluator=_metric(),
                  val_dataloader=_loader(model, shuffle=False), val_cfg={"type": "ValLoop"}, val_evaluator=_metric(),
                  default_hooks={"checkpoint": {"type": "CheckpointHook", "interval": CKPT_INTERVAL,
                                                "by_epoch": False, "max_keep_ckpts": -1},
                                 "logger": {"type": "LoggerHook", "interval": 1}},
                  randomness={"seed": SEED}, **kwargs)
    if wrong := _misplaced(runner.model, device):
        raise RuntimeError(wrong)  # run_phase reports it as the phase's failure
    return runner


def _predict(net: Any, model: str) -> dict:
    import torch
    from mmengine.dataset import default_collate, pseudo_collate

    net.eval()
    ds = _dataset(model)
    collate = default_collate if model in MODELS else pseudo_collate
    outputs: list = []
    with torch.no_grad():
        for start in range(0, len(ds), BATCH):
            outputs += net.test_step(collate([ds[i] for i in range(start, min(start + BATCH, len(ds)))]))
    return _fingerprint(outputs)


# --------------------------------------------------------------------------------------------
# the phases (each in its own process)


def _same(a: Any, b: Any) -> bool:
    """Deep equality of state dicts: tensors bit for bit (on the CPU), the rest with ==."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and torch.equal(a.detach().cpu(), b.detach().cpu()))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _close(a: dict | list | float, b: dict | list | float, exact: bool) -> tuple[bool, float]:
    """Numbers (or dicts/lists of them) equal on the CPU, within CUDA_RTOL on CUDA; the worst
    relative difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        pairs = [(a[k], b[k]) for k in a if k in b and isinstance(a[k], int | float)]
    elif isinstance(a, list) and isinstance(b, list):
        pairs = list(zip(a, b, strict=True))
    else:
        pairs = [(a, b)]
    worst = max((abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in pairs), default=0.0)
    return (worst == 0.0 if exact else worst <= CUDA_RTOL), worst


def _misplaced(net: Any, device: str) -> str:
    """Why the Runner's model is not on the device asked for ('' when it is)."""
    import torch

    where = next(net.parameters()).device.type
    want = torch.device(device).type
    return "" if where == want else f"mmengine's Runner put the model on {where}, not {want}"


def phase_train(model: str, device: str, work: Path) -> dict:
    log: list = []
    runner = _runner(model, device, work, name="train", seed=SEED, custom_hooks=[_recorder(log)])
    runner.train()
    iters = [r for r in log if "iter" in r]
    files = sorted(p.name for p in (work / "train").glob("iter_*.pth"))
    predicted = _predict(runner.model, model)
    tested = runner.test()
    record = {"iters": iters, "checkpoints": files, "predicted": predicted, "tested": tested}
    (work / "train.json").write_text(json.dumps(record))
    losses = [r["loss"] for r in iters]
    ok = len(iters) == ITERS and all(math.isfinite(v) for v in losses) and files == ["iter_2.pth", "iter_4.pth"]
    return {"passed": ok, "losses": losses, "lrs": [r["lr"] for r in iters], "checkpoints": files,
            "reason": f"{ITERS} iterations, checkpoints {', '.join(files) or 'none'}"}


def _first_run(work: Path) -> dict:
    return json.loads((work / "train.json").read_text())


def phase_load(model: str, device: str, work: Path) -> dict:
    from mmengine.runner.checkpoint import load_checkpoint

    net = _build(model, device, seed=SEED + 1)  # other random weights: the file must replace them
    load_checkpoint(net, str(work / "train" / "iter_4.pth"), map_location=device)
    got, want = _predict(net, model), _first_run(work)["predicted"]
    ok = got["count"] == want["count"] and got["sum"] == want["sum"] and got["abs_sum"] == want["abs_sum"]
    return {"passed": ok, "predicted": got,
            "reason": f"predictions of the loaded model {'equal' if ok else 'differ from'} the trained model's "
                      f"({got['count']} outputs, sum {got['sum']:.6g} vs {want['sum']:.6g})"}


def phase_resume(model: str, device: str, work: Path) -> dict:
    from mmengine.runner.checkpoint import _load_checkpoint

    log: list = []
    ckpt = work / "train" / f"iter_{CKPT_INTERVAL}.pth"
    runner = _runner(model, device, work, name="resume", seed=SEED + 1, custom_hooks=[_recorder(log)],
                     resume=True, load_from=str(ckpt))
    runner.train()
    start = log[0]
    saved = _load_checkpoint(str(ckpt), map_location="cpu")
    first = _first_run(work)["iters"][CKPT_INTERVAL:]
    after = [r for r in log if "iter" in r]
    exact = not device.startswith("cuda")
    lr_ok = [r["lr"] for r in after] == [r["lr"] for r in first]
    # the first resumed iteration is computed from the restored state alone: equal everywhere
    first_ok = bool(after) and bool(first) and after[0]["loss"] == first[0]["loss"]
    rest_ok, worst = _close([r["loss"] for r in after], [r["loss"] for r in first], exact)
    loss_ok = first_ok and rest_ok
    checks = {
        "starts at iteration": start["start_iter"] == CKPT_INTERVAL,
        "optimizer state as saved": _same(start["optimizer"], saved["optimizer"]),
        "weights as saved": _same(start["state_dict"], saved["state_dict"]),
        "learning rates continue": lr_ok and [r["iter"] for r in after] == [r["iter"] for r in first],
        "first resumed loss equal": first_ok,
        "losses continue": loss_ok,
    }
    bad = [k for k, v in checks.items() if not v]
    return {"passed": not bad, "checks": checks, "start_iter": start["start_iter"],
            "losses": [r["loss"] for r in after], "first_run_losses": [r["loss"] for r in first],
            "loss_rel_diff": worst,
            "reason": (f"resumed at iteration {start['start_iter']}; iterations "
                       f"{', '.join(str(r['iter']) for r in after)} repeat the first run's lr and loss"
                       f" (worst relative loss difference {worst:.2g})" if not bad else "failed: " + ", ".join(bad))}


def phase_test(model: str, device: str, work: Path) -> dict:
    runner = _runner(model, device, work, name="test", seed=SEED + 1, load_from=str(work / "train" / "iter_4.pth"))
    tested = runner.test()
    validated = runner.val()
    want = _first_run(work)["tested"]
    exact = not device.startswith("cuda")
    ok_t, worst_t = _close(tested, want, exact)
    ok_v, worst_v = _close(validated, want, exact)
    ok = ok_t and ok_v and tested.get("ckpt/count") == want.get("ckpt/count")
    return {"passed": ok, "test": tested, "val": validated, "first_run": want,
            "reason": f"test() and val() from iter_4.pth: {tested.get('ckpt/count')} predictions, metric "
                      f"{'equals' if ok else 'differs from'} the first run's (worst {max(worst_t, worst_v):.2g})"}


def phase_old_format(model: str, device: str, work: Path) -> dict:
    from collections import OrderedDict

    import numpy as np
    import torch

    # weights of a model built here (not read from this run's files: only the old format is on trial)
    donor = _build(model, device, seed=SEED + 2)
    meta = {**OLD_META, "hook_msgs": {**OLD_META["hook_msgs"], "best_score": np.float64(OLD_BEST_SCORE)}}
    state = OrderedDict((k, v.detach().cpu().clone()) for k, v in donor.state_dict().items())
    old = {"meta": meta, "state_dict": state,
           "optimizer": {"state": {}, "param_groups": [{"lr": 0.02, "momentum": 0.9, "params": [0]}]}}
    path = work / "old_format.pth"
    torch.save(old, path)
    log: list = []
    runner = _runner(model, device, work, name="finetune", seed=SEED + 1, custom_hooks=[_recorder(log)],
                     load_from=str(path))
    runner.train()
    loaded = _same(log[0]["state_dict"], state)
    losses = [r["loss"] for r in log if "iter" in r]
    ok = loaded and log[0]["start_iter"] == 0 and len(losses) == ITERS and all(map(math.isfinite, losses))
    return {"passed": ok, "weights_loaded": loaded, "losses": losses,
            "reason": f"fine-tuned from an mmcv 1.x-era checkpoint (meta {', '.join(sorted(meta))}): "
                      f"weights {'loaded' if loaded else 'NOT loaded'}, {len(losses)} iterations"}


def phase_foreign(model: str, device: str, work: Path) -> dict:
    import fractions
    import pickle

    import torch
    from mmengine.runner.checkpoint import load_checkpoint

    path = work / "foreign.pth"
    torch.save({"state_dict": {}, "meta": {"note": fractions.Fraction(1, 3)}}, path)
    try:
        load_checkpoint(_build(model, device, seed=SEED), str(path), map_location=device)
    except pickle.UnpicklingError as exc:
        message = str(exc)
        named = "fractions.Fraction" in message
        return {"passed": named, "message": message.splitlines()[0][:400],
                "reason": "a checkpoint naming fractions.Fraction is refused" + ("" if named else ", unnamed")}
    return {"passed": False, "reason": "a checkpoint naming fractions.Fraction loaded: nothing restricts what "
                                       "a checkpoint may run (weights_only=False)"}


PHASE_FUNCS = {"train": phase_train, "load": phase_load, "resume": phase_resume, "test": phase_test,
               "old-format": phase_old_format, "foreign": phase_foreign}


def run_phase(phase: str, model: str, device: str, work: Path) -> dict:
    """One phase in this process: its result, or the error it raised (first line, type)."""
    import torch

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if not device.startswith("cuda"):
        torch.set_num_threads(1)  # the same reduction order in every process, on any core count
    started = time.perf_counter()
    try:
        res = PHASE_FUNCS[phase](model, device, work)
    except Exception as exc:  # noqa: BLE001 - the phase's failure is the result
        text = str(exc).strip()
        res = {"passed": False, "error": f"{type(exc).__name__}: {text[:4000]}",
               "reason": f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"}
    res["seconds"] = round(time.perf_counter() - started, 3)
    return res


# --------------------------------------------------------------------------------------------
# the cycle (the parent: one fresh process per phase)


def run_cycle(*, model: str, device: str, python: str | None = None, work_dir: str | None = None,
              timeout: float = PHASE_TIMEOUT) -> dict:
    """Every phase in order, each in a fresh `python` process; a phase after a failed `train` does
    not run. Returns {"model", "device", "passed", "phases": {name: result}, "reason"}."""
    python = python or sys.executable
    phases: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        work = Path(work_dir) if work_dir else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mmstack-ckpt-")))
        for phase in PHASES:
            if phase != "train" and not phases["train"]["passed"]:
                phases[phase] = {"passed": False, "skipped": True, "reason": "needs train, which failed"}
                continue
            phases[phase] = _spawn(python, phase, model, device, work, timeout)
    failed = [p for p, r in phases.items() if not r["passed"] and not r.get("skipped")]
    reason = (f"{model}: {', '.join(PHASES)} passed" if not failed
              else f"{model}: {failed[0]} failed: {phases[failed[0]]['reason']}")
    return {"model": model, "device": device, "passed": not failed, "phases": phases, "reason": reason}


def phase_env(device: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """A phase process's environment. A CPU cycle hides the GPUs: mmengine's Runner moves the model
    to `get_device()` (cuda wherever one is visible; "Set `export CUDA_VISIBLE_DEVICES=-1` to
    enable CPU training", runner.py), so on a GPU machine the Runner's phases (train, resume, test)
    would run on the GPU and the bare load on the CPU, and their predictions differ in the last bits
    (the mmengine recipe's test on the H100, recipe-run10)."""
    env = dict(os.environ if base is None else base)
    if not device.startswith("cuda"):
        env["CUDA_VISIBLE_DEVICES"] = "-1"
    return env


def _spawn(python: str, phase: str, model: str, device: str, work: Path, timeout: float) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--phase", phase, "--model", model, "--device", device,
           "--work", str(work), "--json"]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                              env=phase_env(device))
    except subprocess.TimeoutExpired:
        return {"passed": False, "reason": f"timed out after {timeout:.0f}s", "seconds": round(timeout, 3)}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        return {"passed": False, "reason": f"the {phase} process exited {proc.returncode} without a result",
                "error": tail, "seconds": round(time.perf_counter() - started, 3)}
    res = json.loads(lines[-1])
    res["process_seconds"] = round(time.perf_counter() - started, 3)
    return res


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mmstack.verify.checkpoint_cycle",
                                     description="L6: save, load, resume, test and fine-tune checkpoints "
                                                 "through mmengine's Runner, each step in a fresh process.")
    parser.add_argument("--model", default="toy", help="comma-separated: plain, toy, or a detector of "
                                                       "train_detector.MODELS (default: toy)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda if seen)")
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)  # one phase, in this process
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # mmengine's loggers print to stdout
        if args.phase:
            res = run_phase(args.phase, args.model, args.device or "cpu", Path(args.work))
            real_stdout.write(json.dumps(res) + "\n")
            return 0
        import torch

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        results = [run_cycle(model=m.strip(), device=device) for m in args.model.split(",") if m.strip()]
    passed = all(r["passed"] for r in results)
    if args.json:
        real_stdout.write(json.dumps({"passed": passed, "results": results}, indent=2) + "\n")
    else:
        for r in results:
            print(("PASS " if r["passed"] else "FAIL ") + r["reason"])
            for name, p in r["phases"].items():
                print(f"  {name:<10} {'pass' if p['passed'] else 'skip' if p.get('skipped') else 'FAIL'}  {p['reason']}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
