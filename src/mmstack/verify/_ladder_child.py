"""The ladder's child process: stdlib + torch + mmcv only.

`ladder.py` runs this file by path with the interpreter under test, so it must not import mmstack
(the environment being verified may not have it):

    python -c <boot> /path/to/_ladder_child.py ladder RESULT_FILE OPTIONS_JSON   (the levels, in order)
    python -c <boot> /path/to/_ladder_child.py MODE RESULT_FILE [OPTIONS_JSON]   (one mode: doctor, ...)

It appends JSON lines to RESULT_FILE as it goes: {"step": name} before each risky call,
{"evidence": {...}} after, {"error": "..."} on a failure it survives, {"done": true} at the end;
in ladder mode each record also names its part, which starts with {"start": time} (OPTIONS_JSON:
"parts", "needs", "failed", "part_opts"). A segfault or a hang therefore still leaves the part and
step it died in and everything learnt before; the parent goes on with the next parts in a fresh
child. faulthandler prints the Python stack of a crash to stderr, which the parent keeps.
L4's complete mode loads _ladder_ops.py (beside this file) by path.
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib
import importlib.util
import json
import math
import os
import re
import sys
import time
import traceback

faulthandler.enable()
OPS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ladder_ops.py")
ELF_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "facts", "elf.py")
TOY_MODEL_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toy_model.py")  # L5 and dist_worker.py

# Tolerances. Each op is checked against hand-computed values, against mmcv's CPU kernel when
# it ran on the GPU, and against torchvision's op where it has one. On an H200 mmcv's roi_align
# and deform_conv equal torchvision's bit for bit; float32 accumulation order may differ
# elsewhere, so allow a few ulps of the values involved.
ATOL = 1e-5
RTOL = 1e-5


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


class Mismatch(AssertionError):
    pass


def _close(name: str, got, want, atol: float = ATOL, rtol: float = RTOL) -> float:
    import torch

    got = got.detach().float().cpu()
    want = torch.as_tensor(want, dtype=torch.float32).cpu()
    if got.shape != want.shape:
        raise Mismatch(f"{name}: mismatch: shape {tuple(got.shape)} != {tuple(want.shape)}")
    err = float((got - want).abs().max()) if got.numel() else 0.0
    if not torch.allclose(got, want, atol=atol, rtol=rtol):
        raise Mismatch(f"{name}: mismatch: max |diff| {err:.3g} > atol {atol:g} + rtol {rtol:g}")
    return err


def _torchvision():
    try:
        import torchvision.ops as tvops

        return tvops, None
    except Exception as exc:  # noqa: BLE001 - optional comparison
        return None, f"torchvision not importable ({_exc(exc)})"


def op_roi_align(dev, tv):
    import torch
    from mmcv.ops import roi_align

    ev = {}
    # Input value 4*y + x is linear, so bilinear sampling is exact and each bin's average is the
    # value at the bin's centre: aligned=True shifts the roi by -0.5 px -> centres 0.5 and 2.5.
    x = torch.arange(16, dtype=torch.float32).reshape(1, 1, 4, 4).to(dev)
    rois = torch.tensor([[0.0, 0.0, 0.0, 4.0, 4.0]], device=dev)
    got = roi_align(x, rois, (2, 2), 1.0, 2, "avg", True)
    ev["known"] = _close("roi_align known", got, [[[[2.5, 4.5], [10.5, 12.5]]]])
    g = torch.Generator().manual_seed(0)
    feat = torch.rand(2, 3, 12, 12, generator=g)
    xy = torch.rand(6, 2, generator=g) * 6
    wh = torch.rand(6, 2, generator=g) * 5 + 1
    boxes = torch.cat([torch.tensor([[0.0], [0.0], [0.0], [1.0], [1.0], [1.0]]), xy, xy + wh], 1)
    out = roi_align(feat.to(dev), boxes.to(dev), (3, 3), 1.0, 2, "avg", True)
    if dev != "cpu":
        ev["vs_cpu"] = _close("roi_align vs cpu", out, roi_align(feat, boxes, (3, 3), 1.0, 2, "avg", True))
    if tv:
        ref = tv.roi_align(feat.to(dev), boxes.to(dev), (3, 3), 1.0, 2, True)
        ev["vs_torchvision"] = _close("roi_align vs torchvision", out, ref.cpu())
    return ev


def op_nms(dev, tv):
    import torch
    from mmcv.ops import nms

    ev: dict[str, object] = {}
    # IoU(box0, box3) = 100/105, IoU(box1, box3) = 85.5/119.5: both go; box2 is apart.
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10.5]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
    _, keep = nms(boxes.to(dev), scores.to(dev), 0.5)
    if keep.cpu().tolist() != [3, 2]:
        raise Mismatch(f"nms known: mismatch: kept {keep.cpu().tolist()}, expected [3, 2]")
    ev["known"] = [3, 2]
    g = torch.Generator().manual_seed(1)
    xy = torch.rand(200, 2, generator=g) * 100
    many = torch.cat([xy, xy + torch.rand(200, 2, generator=g) * 30 + 1], 1)
    sc = torch.rand(200, generator=g)
    _, k = nms(many.to(dev), sc.to(dev), 0.5)
    kept = set(k.cpu().tolist())
    ev["kept"] = len(kept)
    if dev != "cpu":
        _, kc = nms(many, sc, 0.5)
        if set(kc.tolist()) != kept:
            raise Mismatch(f"nms vs cpu: mismatch: {len(kept ^ set(kc.tolist()))} boxes differ")
        ev["vs_cpu"] = "same set"
    if tv:
        kt = set(tv.nms(many.to(dev), sc.to(dev), 0.5).cpu().tolist())
        if kt != kept:
            raise Mismatch(f"nms vs torchvision: mismatch: {len(kept ^ kt)} boxes differ")
        ev["vs_torchvision"] = "same set"
    return ev


def op_box_iou_rotated(dev, tv):
    import torch
    from mmcv.ops import box_iou_rotated

    ev = {}
    # A 2x2 square against: itself shifted by 1 (IoU 2/6), itself turned 90 degrees (1), and
    # turned 45 degrees (the octagon: IoU exactly 1/sqrt(2)).
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0, 0.0]])
    b = torch.tensor([[1.0, 0.0, 2.0, 2.0, 0.0], [0.0, 0.0, 2.0, 2.0, math.pi / 2], [0.0, 0.0, 2.0, 2.0, math.pi / 4]])
    got = box_iou_rotated(a.to(dev), b.to(dev))
    ev["known"] = _close("box_iou_rotated known", got, [[1 / 3, 1.0, 1 / math.sqrt(2)]], atol=1e-5)
    if dev != "cpu":
        g = torch.Generator().manual_seed(2)
        r = torch.cat([torch.rand(30, 2, generator=g) * 20, torch.rand(30, 2, generator=g) * 8 + 1,
                       torch.rand(30, 1, generator=g) * math.pi], 1)
        ev["vs_cpu"] = _close("box_iou_rotated vs cpu", box_iou_rotated(r.to(dev), r.to(dev)),
                              box_iou_rotated(r, r), atol=1e-4)
    return ev


def op_deform_conv(dev, tv):
    import torch
    from mmcv.ops import deform_conv2d

    ev = {}
    # 3x3 input 0..8, 2x2 ones kernel. Zero offsets are a plain convolution; an offset of +1 px
    # in x shifts every sample right (samples at x == 3 fall outside and read 0).
    x = torch.arange(9, dtype=torch.float32).reshape(1, 1, 3, 3).to(dev)
    w = torch.ones(1, 1, 2, 2, device=dev)
    zero = torch.zeros(1, 8, 2, 2, device=dev)
    ev["known_zero_offset"] = _close("deform_conv known", deform_conv2d(x, zero, w), [[[[8, 12], [20, 24]]]])
    shift = zero.clone()
    shift[:, 1::2] = 1.0  # channels are (dy, dx) per kernel tap
    ev["known_shift"] = _close("deform_conv known shift", deform_conv2d(x, shift, w), [[[[12, 7], [24, 13]]]])
    g = torch.Generator().manual_seed(3)
    inp = torch.rand(2, 4, 9, 9, generator=g)
    weight = torch.rand(6, 4, 3, 3, generator=g) - 0.5
    offset = (torch.rand(2, 18, 7, 7, generator=g) - 0.5) * 4
    out = deform_conv2d(inp.to(dev), offset.to(dev), weight.to(dev))
    if dev != "cpu":
        ev["vs_cpu"] = _close("deform_conv vs cpu", out, deform_conv2d(inp, offset, weight), atol=1e-4)
    if tv:
        ref = tv.deform_conv2d(inp.to(dev), offset.to(dev), weight.to(dev))
        ev["vs_torchvision"] = _close("deform_conv vs torchvision", out, ref.cpu(), atol=1e-4)
    return ev


def op_points_in_boxes(dev, tv):
    import torch
    from mmcv.ops import points_in_boxes_all, points_in_boxes_cpu

    ev = {}
    # One box centred at (0,0) with its bottom at z=0, 2x4x2, turned 90 degrees about z (so it
    # spans 4 in x and 2 in y); a second box far away.
    boxes = torch.tensor([[[0.0, 0.0, 0.0, 2.0, 4.0, 2.0, math.pi / 2], [10.0, 10.0, 0.0, 1.0, 1.0, 1.0, 0.0]]])
    pts = torch.tensor([[[1.5, 0.0, 1.0], [0.0, 1.5, 1.0], [0.0, 0.0, 3.0], [10.2, 9.8, 0.5], [0.0, 0.0, 0.5]]])
    want = [[[1, 0], [0, 0], [0, 0], [0, 1], [1, 0]]]
    fn = points_in_boxes_cpu if dev == "cpu" else points_in_boxes_all
    got = fn(pts.to(dev), boxes.to(dev))
    if got.cpu().tolist() != want:
        raise Mismatch(f"points_in_boxes known: mismatch: {got.cpu().tolist()} != {want}")
    ev["known"] = "exact"
    if dev != "cpu":
        g = torch.Generator().manual_seed(4)
        p = torch.rand(1, 500, 3, generator=g) * 10
        b = torch.cat([torch.rand(1, 8, 3, generator=g) * 10, torch.rand(1, 8, 3, generator=g) * 3 + 0.5,
                       torch.rand(1, 8, 1, generator=g) * math.pi], 2)
        if fn(p.to(dev), b.to(dev)).cpu().tolist() != points_in_boxes_cpu(p, b).tolist():
            raise Mismatch("points_in_boxes vs cpu: mismatch")
        ev["vs_cpu"] = "exact"
    return ev


OPS = (op_roi_align, op_nms, op_box_iou_rotated, op_deform_conv, op_points_in_boxes)


def _device(opts: dict) -> str:
    import torch

    want = opts.get("device", "auto")
    if want == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return want


def level_l4(out: _Out, opts: dict) -> None:
    out.step("import torch")
    import torch

    dev = _device(opts)
    tv, why = _torchvision()
    out.evidence(device=dev, torchvision=getattr(sys.modules.get("torchvision"), "__version__", None) if tv else why,
                 mode=opts.get("l4", "quick"))
    torch.manual_seed(0)
    if opts.get("l4") == "complete":
        return _l4_complete(out, dev, tv)
    for fn in OPS:
        name = fn.__name__[3:]
        out.step(name)
        try:
            ev = fn(dev, tv)
            if dev != "cpu":
                torch.cuda.synchronize()
            out.evidence(**{name: ev})
        except Exception as exc:  # noqa: BLE001 - report every op, then fail the level
            out.evidence(**{name: {"error": _exc(exc)}})
            out.error(f"{name}: {_exc(exc)}")


def _load_by_path(name: str, path: str | os.PathLike[str]):
    """A module from a file (mmstack itself need not be importable in the child)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _l4_complete(out: _Out, dev: str, tv) -> None:
    """Every op mmcv.ops exports (its __all__ read now), once: _ladder_ops.py, loaded by path."""
    out.step("load _ladder_ops.py")
    ops = _load_by_path("_mmstack_ladder_ops", OPS_FILE)
    out.step("import mmcv.ops")
    names = ops.exported_names()
    todo, unknown, owner = ops.plan(names)
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


LEVELS = {"doctor": fingerprint, "L1": level_l1, "L2": level_l2, "L3": level_l3, "L3-info": level_l3_info, "L4": level_l4, "L5": level_l5,
          "L5-detector": level_l5_detector, "L6": level_l6}


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
            LEVELS[part](out, {**opts.get("common", {}), **opts.get("part_opts", {}).get(part, {})})
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
    level, result = argv[1], argv[2]
    opts = json.loads(argv[3]) if len(argv) > 3 else {}
    if "" in sys.path:  # a checkout's ./mmcv would shadow the installed package
        sys.path.remove("")
    out = _Out(result)
    start = time.perf_counter()
    if level == "ladder":
        run_parts(out, opts)
        out.put(done=True, seconds=round(time.perf_counter() - start, 3))
        return 0
    try:
        LEVELS[level](out, opts)
    except BaseException as exc:  # noqa: BLE001 - report, do not crash the reporter
        out.put(error=_exc(exc), traceback=traceback.format_exc(limit=8))
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
