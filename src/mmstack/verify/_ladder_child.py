"""The ladder's child process: stdlib + torch + mmcv only.

`launcher.py` runs this file by path with the interpreter under test, so it must not import mmstack
(the environment being verified may not have it):

    python -c <boot> /path/to/_ladder_child.py ladder RESULT_FILE OPTIONS_JSON   (the parts, in order)

The parts are the level table's (levels.py, loaded by path: each part is one function of RUNNERS)
and "doctor" (`mmstack doctor`'s fingerprint).

It appends JSON lines to RESULT_FILE as it goes: {"step": name} before each risky call,
{"evidence": {...}} after, {"error": "..."} on a failure it survives, {"done": true} at the end;
in ladder mode each record also names its part, which starts with {"start": time} (OPTIONS_JSON:
"parts", "needs", "failed", "part_opts"). A segfault or a hang therefore still leaves the part and
step it died in and everything learnt before; the parent goes on with the next parts in a fresh
child. faulthandler prints the Python stack of a crash to stderr, which the parent keeps.
L4 loads _ladder_ops.py (beside this file) by path and runs its checks: every one ("complete") or
the subset the level table names for the mode ("quick").
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib
import importlib.util
import json
import os
import re
import sys
import time
import traceback

faulthandler.enable()
OPS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ladder_ops.py")
ELF_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "facts", "elf.py")
TOY_MODEL_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toy_model.py")  # L5 and dist_worker.py
LEVELS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "levels.py")  # the level table


def _load_by_path(name: str, path: str | os.PathLike[str]):
    """A module from a file (mmstack itself need not be importable in the child)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


LEVEL_TABLE = _load_by_path("_mmstack_levels", LEVELS_FILE)


class _Out:
    def __init__(self, path: str):
        self._f = open(path, "a", buffering=1)
        self.part: str | None = None  # in ladder mode, every record names the part it belongs to
        self.errors_in_part = 0

    def put(self, **record) -> None:
        if self.part is not None:
            record["part"] = self.part
        self._f.write(json.dumps(record, default=str) + "\n")
        self._f.flush()  # a line buffer in the kernel survives the process; no fsync needed for a crash

    def step(self, name: str) -> None:
        self.put(step=name)

    def evidence(self, **items) -> None:
        self.put(evidence=items)

    def error(self, text: str) -> None:
        self.errors_in_part += 1
        self.put(error=text)


def _exc(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


# -- L1 ----------------------------------------------------------------------------------------


def level_l1(out: _Out, opts: dict) -> None:
    out.evidence(python=sys.executable, python_version=sys.version.split()[0], prefix=sys.prefix)
    out.step("import mmcv")
    import mmcv

    out.evidence(mmcv_version=getattr(mmcv, "__version__", None), mmcv_file=getattr(mmcv, "__file__", None))
    torch = sys.modules.get("torch")
    if torch is not None:
        out.evidence(torch_version=torch.__version__)


# -- L2 ----------------------------------------------------------------------------------------


def _nvidia_driver() -> str | None:
    """The kernel module's version, e.g. '575.51.03' (no NVML or nvidia-smi needed)."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            for word in f.readline().split():
                if word.count(".") >= 1 and word.replace(".", "").isdigit():
                    return word
    except OSError:
        pass
    return None


def _ext_path() -> str | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("mmcv._ext")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec else None


def level_l2(out: _Out, opts: dict) -> None:
    out.evidence(driver=_nvidia_driver(), ext_path=_ext_path())
    out.step("import torch")
    import torch

    out.evidence(torch_version=torch.__version__, torch_cuda=torch.version.cuda)
    out.step("torch.cuda.is_available")
    available = torch.cuda.is_available()
    out.evidence(cuda_available=available)
    driver_cuda = None
    getter = getattr(torch._C, "_cuda_getDriverVersion", None)
    if getter is not None and torch.version.cuda:
        try:
            v = int(getter())  # cuDriverGetVersion: 12090 -> "12.9"; 0 without a driver
            driver_cuda = f"{v // 1000}.{(v % 1000) // 10}" if v else None
        except Exception as exc:  # noqa: BLE001 - evidence, not a failure
            out.evidence(driver_cuda_error=_exc(exc))
    out.evidence(driver_cuda=driver_cuda)
    if not available:
        return
    devices = []
    for i in range(torch.cuda.device_count()):
        out.step(f"device {i}")
        major, minor = torch.cuda.get_device_capability(i)
        devices.append({"index": i, "name": torch.cuda.get_device_name(i), "compute_capability": f"{major}.{minor}"})
    out.evidence(devices=devices, torch_arch_list=list(torch.cuda.get_arch_list()))


# -- L3: the ext, its libraries, the ops package ---------------------------------------------


def elf_dynamic(path: str) -> dict | None:
    """DT_NEEDED, DT_RUNPATH and DT_RPATH of a 64-bit little-endian ELF; None if it is not one
    (mmstack's one ELF reader, facts/elf.py, loaded by path)."""
    return _load_by_path("_mmstack_elf", ELF_FILE).dynamic(path)


def _glibc_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def declared_glibc(ext_file: str, prefix: str | None = None) -> tuple[str | None, str | None]:
    """(floor, package) from the `__glibc >=X` run requirement of the conda package that installed
    `ext_file` (its prefix's conda-meta/*.json); (None, None) outside a conda prefix."""
    prefix = prefix or sys.prefix
    meta = os.path.join(prefix, "conda-meta")
    if not os.path.isdir(meta):
        return None, None
    rel = os.path.relpath(os.path.realpath(ext_file), os.path.realpath(prefix))
    for name in sorted(os.listdir(meta)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(meta, name), encoding="utf-8") as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            continue
        if rel not in (rec.get("files") or []):
            continue
        for dep in rec.get("depends") or []:
            m = re.match(r"__glibc\s*>=\s*([\d.]+)", dep)
            if m:
                return m.group(1), f"{rec.get('name')}-{rec.get('version')}-{rec.get('build')}"
        return None, f"{rec.get('name')}-{rec.get('version')}-{rec.get('build')}"
    return None, None


def glibc_check(ext_file: str, prefix: str | None = None) -> tuple[dict, str | None]:
    """The glibc the ext needs (its GLIBC_x.y symbol versions) against the system's and against
    the floor its conda package declares; a failure message when the package understates it."""
    needed = _load_by_path("_mmstack_elf", ELF_FILE).glibc_needed(ext_file)
    try:
        system = (os.confstr("CS_GNU_LIBC_VERSION") or "").split()[-1]
    except (ValueError, OSError, AttributeError, IndexError):
        system = None
    declared, package = declared_glibc(ext_file, prefix)
    evidence = {"glibc_needed": needed, "glibc_system": system, "glibc_declared": declared, "package": package}
    if needed and declared and _glibc_key(needed) > _glibc_key(declared):
        return evidence, (f"mmcv._ext needs glibc {needed} (GLIBC_{needed} symbols) but its package declares "
                          f"__glibc >={declared} ({package})")
    return evidence, None


class _LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p)]


def _loaded_path(handle: int) -> str | None:
    """Where the dynamic loader found a library: dlinfo(RTLD_DI_LINKMAP)->l_name (glibc)."""
    for libname in (None, "libdl.so.2"):
        try:
            dlinfo = ctypes.CDLL(libname).dlinfo
        except (OSError, AttributeError):
            continue
        lm = ctypes.POINTER(_LinkMap)()
        if dlinfo(ctypes.c_void_p(handle), 2, ctypes.byref(lm)) == 0 and lm:
            name = lm.contents.l_name
            return os.path.realpath(name.decode()) if name else None
    return None


def resolve_needed(dyn: dict) -> tuple[dict, dict]:
    """Load each DT_NEEDED library the way the loader would for the ext; (found, missing)."""
    found, missing = {}, {}
    dirs = dyn["rpath"] + dyn["runpath"]
    for name in dyn["needed"]:
        candidates = [name] + [os.path.join(d, name) for d in dirs if os.path.exists(os.path.join(d, name))]
        error = None
        for cand in candidates:
            try:
                lib = ctypes.CDLL(cand)
            except OSError as exc:
                error = error or str(exc)
                continue
            found[name] = _loaded_path(lib._handle) or cand
            break
        else:
            missing[name] = error
    return found, missing


def level_l3(out: _Out, opts: dict) -> None:
    failures = []
    out.step("import mmcv.ops")
    try:
        ops = importlib.import_module("mmcv.ops")
        out.evidence(ops_import="ok", ops_count=len(getattr(ops, "__all__", ())))
    except Exception as exc:  # noqa: BLE001 - any import failure is this level's finding
        failures.append(_exc(exc))
        out.evidence(ops_import=_exc(exc))
    out.step("import mmcv._ext")
    ext_file = _ext_path()
    out.evidence(ext_path=ext_file)
    try:
        ext = importlib.import_module("mmcv._ext")
        out.evidence(ext_import="ok", ext_file=getattr(ext, "__file__", ext_file))
    except Exception as exc:  # noqa: BLE001
        failures.insert(0, _exc(exc))  # the ext's own error is the most specific
        out.evidence(ext_import=_exc(exc))
    if ext_file and os.path.exists(ext_file):
        out.step("read DT_NEEDED")
        dyn = elf_dynamic(ext_file)
        if dyn is None:
            out.evidence(libraries="not an ELF shared object")
        else:
            out.evidence(needed=dyn["needed"], runpath=dyn["runpath"] + dyn["rpath"])
            out.step("load DT_NEEDED libraries")
            found, missing = resolve_needed(dyn)
            out.evidence(libraries=found, missing_libraries=missing)
            failures += [msg or f"{name}: cannot open shared object file" for name, msg in missing.items()]
            out.step("glibc needed vs declared")
            glibc, understated = glibc_check(ext_file)
            out.evidence(glibc=glibc)
            if understated:
                failures.append(understated)
    torch = sys.modules.get("torch")
    if torch is not None:
        out.evidence(torch_version=torch.__version__, torch_cuda=torch.version.cuda,
                     cxx11_abi=getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None))
    if failures:
        out.error(failures[0] if len(failures) == 1 else " | ".join(dict.fromkeys(failures)))


def level_l3_info(out: _Out, opts: dict) -> None:
    """The calls that segfault with a mismatched compiler/ABI, in their own process."""
    ops = importlib.import_module("mmcv.ops")
    out.step("get_compiler_version")
    out.evidence(compiler=str(ops.get_compiler_version()))
    out.step("get_compiling_cuda_version")
    out.evidence(compiling_cuda=str(ops.get_compiling_cuda_version()))
    out.step("collect_env")
    from mmcv.utils import collect_env

    env = {str(k): (str(v) if len(str(v)) <= 300 else str(v)[:300] + "…") for k, v in collect_env().items()}
    out.evidence(collect_env=env)


# -- L4: ops against known values, the CPU kernel and torchvision ---------------------------------


def _torchvision():
    try:
        import torchvision.ops as tvops

        return tvops, None
    except Exception as exc:  # noqa: BLE001 - optional comparison
        return None, f"torchvision not importable ({_exc(exc)})"


def _device(opts: dict) -> str:
    import torch

    want = opts.get("device", "auto")
    if want == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return want


def level_l4(out: _Out, opts: dict) -> None:
    """The checks of _ladder_ops.py (loaded by path) in L4's mode: a named subset of them (the
    level table's L4_SETS, e.g. "quick"), or every op the installed mmcv.ops exports ("complete")."""
    out.step("import torch")
    import torch

    mode = opts.get("l4", "quick")
    only = LEVEL_TABLE.L4_SETS[mode]
    dev = _device(opts)
    tv, why = _torchvision()
    out.evidence(device=dev, torchvision=getattr(sys.modules.get("torchvision"), "__version__", None) if tv else why,
                 mode=mode)
    torch.manual_seed(0)
    out.step("load _ladder_ops.py")
    ops = _load_by_path("_mmstack_ladder_ops", OPS_FILE)
    out.step("import mmcv.ops")
    names = ops.exported_names()
    todo, unknown, owner = ops.plan(names, only=only)
    out.evidence(exported=len(names), exports=owner, unchecked_exports=unknown)
    records = []
    lost_to = None  # the op whose CUDA error poisoned this process's CUDA context
    for op, _names, cuda_only, fn in todo:
        out.step(op)
        if lost_to and dev != "cpu":
            rec = {"op": op, "device": dev, "status": "skip", "reference": None, "references": [],
                   "max_error": None, "reason": f"not run: the CUDA context was lost to {lost_to}'s CUDA error "
                   "(sticky for the process)"}
        else:
            rec = ops.run_check(op, cuda_only, fn, dev, tv)
        rec["exports"] = [n for n in _names if n in owner]
        records.append(rec)
        out.evidence(ops=records)
        if rec["status"] == "fail":
            out.error(f"{op}: {rec['reason']}")
            if ops.is_sticky_cuda_error(rec):
                lost_to = lost_to or op
    for name in unknown:  # exported, but mmstack has no check for it: listed, never counted as passed
        records.append({"op": name, "exports": [name], "device": dev, "status": "skip", "reference": None,
                        "references": [], "max_error": None, "reason": "no check for this export in mmstack"})
    out.evidence(ops=records)


# -- L5: a few optimisation steps ------------------------------------------------------------------


def level_l5(out: _Out, opts: dict) -> None:
    out.step("import torch, mmcv.ops, mmengine")
    import mmcv.ops  # noqa: F401 - mmcv._ext loads at this step; toy_model.py uses DeformConv2d, RoIAlign
    import torch
    from mmengine.optim import OptimWrapper

    toy = _load_by_path("_mmstack_toy_model", TOY_MODEL_FILE)
    dev = _device(opts)
    torch.manual_seed(0)
    model = toy.build(channels=8, outputs=2).to(dev)
    img = torch.rand(2, 3, 16, 16, device=dev)
    rois = torch.tensor([[0, 1, 1, 9, 9], [0, 4, 2, 14, 12], [1, 0, 0, 15, 15], [1, 3, 5, 11, 13]],
                        dtype=torch.float32, device=dev)
    target = torch.tensor([[1.0, -1.0], [0.5, 0.5], [-1.0, 1.0], [0.0, 2.0]], device=dev)
    wrapper = OptimWrapper(optimizer=torch.optim.Adam(model.parameters(), lr=0.02))
    steps = int(opts.get("steps", 12))
    losses = []
    for i in range(steps):
        out.step(f"step {i}")
        loss = torch.nn.functional.mse_loss(model(img, rois), target)
        wrapper.update_params(loss)
        losses.append(round(float(loss), 6))
    out.evidence(device=dev, losses=losses)
    if not losses[-1] < 0.5 * losses[0]:
        out.error(f"loss did not fall: {losses[0]:.4g} -> {losses[-1]:.4g} in {steps} steps")


def level_l5_detector(out: _Out, opts: dict) -> None:
    """`verify --model`: mmdet detectors train a few steps through mmcv's ops (train_detector.py).

    train_detector.py is loaded by path (mmstack itself need not be installed here); it imports
    only the stdlib until called.
    """
    out.step("load train_detector.py")
    mod = _load_by_path("_mmstack_train_detector", opts["module"])
    import torch

    dev = _device(opts)
    on_gpu = dev.startswith("cuda")
    runs = []
    for model in opts["models"]:
        out.step(f"train {model} on {dev}")
        res = mod.run_detector_step(model=model, device=dev, amp=True,
                                    iters=int(opts.get("iters") or (mod.GPU_ITERS if on_gpu else mod.CPU_ITERS)))
        runs.append({k: res[k] for k in ("model", "device", "amp", "image_size", "batch_size", "losses",
                                         "iters_per_s", "deformable_ops", "passed", "reason")})
        out.evidence(detectors=runs, torch_version=torch.__version__)
        if not res["passed"]:
            out.error(f"{model}: {res['reason']}")


def level_l6(out: _Out, opts: dict) -> None:
    """L6: each model's checkpoint cycle (checkpoint_cycle.py, loaded by path), whose phases run in
    fresh processes of this interpreter; a failed phase is this part's error, its reason first."""
    out.step("load checkpoint_cycle.py")
    mod = _load_by_path("_mmstack_checkpoint_cycle", opts["module"])
    dev = _device(opts)
    cycles = []
    for model in opts["models"]:
        out.step(f"checkpoint cycle of {model} on {dev}")
        cycles.append(mod.run_cycle(model=model, device=dev, python=sys.executable))
        out.evidence(checkpoints=cycles, device=dev)
        if not cycles[-1]["passed"]:
            bad = [r for r in cycles[-1]["phases"].values() if not r["passed"] and not r.get("skipped")]
            out.error(cycles[-1]["reason"] + "".join(f"\n{r['error']}" for r in bad[:1] if r.get("error")))


def fingerprint(out: _Out, opts: dict) -> None:
    """What `mmstack doctor` needs from torch and mmcv; each part survives the other failing."""
    out.evidence(python=sys.executable, python_version=sys.version.split()[0], driver=_nvidia_driver())
    out.step("import torch")
    try:
        import torch

        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        out.evidence(torch_version=torch.__version__, torch_cuda=torch.version.cuda, cudnn=cudnn,
                     cxx11_abi=getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None),
                     torch_arch_list=list(torch.cuda.get_arch_list()) if torch.version.cuda else [])
        out.step("torch.cuda")
        available = torch.cuda.is_available()
        devices = []
        for i in range(torch.cuda.device_count() if available else 0):
            major, minor = torch.cuda.get_device_capability(i)
            devices.append({"name": torch.cuda.get_device_name(i), "compute_capability": f"{major}.{minor}"})
        out.evidence(cuda_available=available, devices=devices)
    except Exception as exc:  # noqa: BLE001
        out.evidence(torch_error=_exc(exc))
    out.step("import mmcv")
    try:
        import mmcv

        out.evidence(mmcv_version=getattr(mmcv, "__version__", None), mmcv_file=getattr(mmcv, "__file__", None),
                     ext_path=_ext_path())
    except Exception as exc:  # noqa: BLE001
        out.evidence(mmcv_error=_exc(exc))


# The function that runs each part: the level table's parts, each by the function named after it
# ("L3-info" -> level_l3_info), and `mmstack doctor`'s fingerprint.
RUNNERS = {"doctor": fingerprint, **{part: globals()[f"level_{part.lower().replace('-', '_')}"]
                                     for part in LEVEL_TABLE.all_parts()}}


def run_parts(out: _Out, opts: dict) -> None:
    """Ladder mode: the parts in order, in this one process. Each part's records carry its name:
    {"start": t} first and {"done": true, "seconds": s} last; a part whose prerequisite failed here
    (or in an earlier child, opts["failed"]) is {"skipped": reason} and does not run."""
    failed = set(opts.get("failed", ()))
    needs = opts.get("needs", {})
    for part in opts["parts"]:
        out.part = part
        blocked = [n for n in needs.get(part, ()) if n in failed]
        if blocked:
            failed.add(part)
            out.put(skipped=f"needs {blocked[0]}")
            continue
        out.put(start=time.time())
        start = time.perf_counter()
        ok = True
        try:
            RUNNERS[part](out, {**opts.get("common", {}), **opts.get("part_opts", {}).get(part, {})})
        except BaseException as exc:
            ok = False
            out.put(error=_exc(exc), traceback=traceback.format_exc(limit=8))
            if isinstance(exc, KeyboardInterrupt):
                raise
        out.put(done=True, ok=ok, seconds=round(time.perf_counter() - start, 3))
        if not ok or out.errors_in_part:
            failed.add(part)
        out.errors_in_part = 0
    out.part = None


def main(argv: list[str]) -> int:
    mode, result = argv[1], argv[2]
    if mode != "ladder":
        raise SystemExit(f"usage: _ladder_child.py ladder RESULT_FILE OPTIONS_JSON (got mode {mode!r})")
    opts = json.loads(argv[3]) if len(argv) > 3 else {}
    if "" in sys.path:  # a checkout's ./mmcv would shadow the installed package
        sys.path.remove("")
    out = _Out(result)
    start = time.perf_counter()
    run_parts(out, opts)
    out.put(done=True, seconds=round(time.perf_counter() - start, 3))
    return 0


def _exit_now(code: int) -> None:
    """Leave without Python's finalisation: the journal is complete and flushed, and tearing down
    torch + mmcv + mmengine takes 1.2-2 s of a 2-core machine (torch 2.13 alone 1.2 s), more than
    any level but L1. A crash that would happen only while the interpreter shuts down is therefore
    not seen; every level's own work is."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream has nothing left to lose
            pass
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main(sys.argv))
