"""The table of known failure causes: each rule, its pattern, and the fix it fills in."""

from __future__ import annotations

import pytest

from mmstack.verify.diagnose import RULES, diagnose, library_package

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "cc": "9.0", "sm": "sm_90", "install": "the h100 environment: `pixi run -e h100 verify`",
        "torch_version": "2.5.1", "torch_cuda": "12.4", "driver": "470.57.02", "driver_needed": "525.60.13",
        "cxx11_abi": True}

# One real-looking failure per rule: (text, context, rule, words the cause+fix must contain)
EXAMPLES = [
    ("level=L3\nstep=get_compiler_version signal=SIGSEGV\nFatal Python error: Segmentation fault", H100,
     "compiler-abi-segfault", ["SIGSEGV", "get_compiler_version", "torch 2.5.1", "_GLIBCXX_USE_CXX11_ABI=True", "h100",
                              "shared libstdc++"]),
    ("level=L3\nstep=get_compiler_version signal=SIGSEGV\nmmcv's _ext links libstdc++ statically", H100,
     "static-libstdcxx", ["static copy of libstdc++", "SIGSEGV in get_compiler_version", "readelf -d", "h100"]),
    ("level=L4\nstep=roi_align\nroi_align: RuntimeError: CUDA error: no kernel image is available for execution on the device",
     H100, "no-kernel-image", ["sm_90", "9.0", "pixi run -e h100", "TORCH_CUDA_ARCH_LIST"]),
    ("level=L2\ndriver version is insufficient: driver 470.57.02 is too old", H100, "driver-too-old",
     ["470.57.02", "12.4", ">= 525.60.13"]),
    ("level=L4\nAssertionError: Torch not compiled with CUDA enabled", H100, "torch-cpu-build", ["CPU build", "h100"]),
    ("level=L2\nmmcv's _ext holds no CUDA code (a CPU build of mmcv) under torch CUDA 12.4", H100, "mmcv-cpu-build",
     ["CPU build", "h100"]),
    ("level=L2\nno NVIDIA GPU or driver found", {}, "no-gpu", ["no usable GPU", "--gpus all"]),
    # what mmengine 0.10.7 under torch 2.13 printed in L6 (tests/test_mmengine_safe_load.py runs it)
    ("level=L6\nstep=checkpoint cycle of toy on cpu\ntoy: load failed: UnpicklingError: Weights only load failed."
     " This file can still be loaded ...\n\tWeightsUnpickler error: Unsupported global: GLOBAL"
     " mmengine.logging.history_buffer.HistoryBuffer was not an allowed global by default.",
     {"torch_version": "2.13.0+cpu"}, "mmengine-weights-only",
     ["torch 2.13.0+cpu", "weights_only=True", "safeload_", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1"]),
    ("ImportError: /env/lib/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by _ext.so)", {},
     "libstdcxx-too-old", ["GLIBCXX_3.4.32", "libstdcxx-ng"]),
    ("ImportError: /lib64/libc.so.6: version `GLIBC_2.34' not found", {}, "glibc-too-old", ["GLIBC_2.34", "sysroot"]),
    ("Intel oneMKL FATAL ERROR: Cannot load /p/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so.", {},
     "onemkl-cannot-load", ["libtorch_cpu.so", "ulimit -v", "rerun"]),
    ("mmcv._ext needs glibc 2.32 (GLIBC_2.32 symbols) but its package declares __glibc >=2.17 (mmcv-2.2.0-cpu_py311_h0_0)",
     {}, "glibc-floor-understated", ["2.32", "__glibc >=2.17", "sysroot_linux-64 2.17"]),
    ("ImportError: _ext.so: undefined symbol: _ZN3c106detail14torchCheckFailEPKcS2_jRKSs", H100, "torch-abi-mismatch",
     ["_ZN3c106detail", "torch 2.5.1", "rebuild mmcv against the torch 2.5.1"]),
    ("ImportError: _ext.so: undefined symbol: _ZNK2at10TensorBase8toStringEv", {}, "torch-abi-mismatch",
     ["in this environment"]),
    ("ImportError: _ext.so: undefined symbol: cudaLaunchKernelExC", H100, "cuda-runtime-mismatch",
     ["cudaLaunchKernelExC", "12.4"]),
    ("ImportError: _ext.so: undefined symbol: _ZN2cv3Mat10deallocateEv", {}, "undefined-symbol", ["_ZN2cv3Mat"]),
    ("ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory", {}, "missing-library",
     ["libcudnn.so.8", "install cudnn"]),
    ("ModuleNotFoundError: No module named 'mmcv'", {"python": "/envs/x/bin/python"}, "mmcv-missing",
     ["/envs/x/bin/python"]),
    ("ModuleNotFoundError: No module named 'mmcv._ext'", {}, "mmcv-without-ops", ["MMCV_WITH_OPS=1"]),
    ("ModuleNotFoundError: No module named 'mmengine'", {}, "missing-dependency", ["mmengine"]),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", {}, "out-of-memory", ["nvidia-smi"]),
    ("level=L4\nnms vs cpu: Mismatch: nms vs cpu: mismatch: 3 boxes differ", {"device": "cuda"}, "wrong-results",
     ["cuda"]),
    ("level=L5\nloss did not fall: 1.2 -> 1.19 in 12 steps", {}, "loss-did-not-fall", ["losses"]),
    ("level=L4\nstep=deform_conv\ntimeout=300", {"step": "deform_conv", "timeout": 300}, "hang",
     ["300 s", "deform_conv", "--timeout"]),
    ("level=L1\nstep=import mmcv signal=SIGBUS", {"step": "import mmcv", "signal": "SIGBUS"}, "crash",
     ["SIGBUS", "import mmcv", "faulthandler"]),
]


@pytest.mark.parametrize("text, context, rule, words", EXAMPLES, ids=[e[2] for e in EXAMPLES])
def test_rule(text, context, rule, words):
    d = diagnose(text, context)
    assert d.rule == rule, d
    for word in words:
        assert word in d.cause + " " + d.fix, (word, d)
    assert "<" not in d.cause + d.fix, "every template field is known or has a default"


def test_every_rule_has_an_example():
    assert {r.name for r in RULES} == {e[2] for e in EXAMPLES}


def test_unknown_failure_falls_back_with_its_first_line():
    d = diagnose("level=L3\nstep=import mmcv.ops\nKeyError: 'weird'", {})
    assert d.rule == "unknown" and "KeyError: 'weird'" in d.cause and "mmstack doctor" in d.fix


def test_generic_phrases_without_context():
    d = diagnose("RuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert "mmstack detect" in d.fix and "this GPU's architecture" in d.cause


@pytest.mark.parametrize("lib, package", [
    ("libcudart.so.12", "cuda-cudart"), ("libcudnn.so.9", "cudnn"), ("libc10.so", "pytorch"),
    ("libtorch_cuda.so", "pytorch"), ("libcublasLt.so.12", "libcublas"), ("libstdc++.so.6", "libstdcxx-ng"),
    ("libcuda.so.1", "NVIDIA driver"), ("libfoo.so", "conda search"),
])
def test_library_package(lib, package):
    assert package in library_package(lib)
