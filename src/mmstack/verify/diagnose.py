"""Known causes of a failure: one table, pattern -> cause and fix, for a failed ladder level and
for the distributed L5 step (each rule says which: its scope).

`diagnose(text, context)` returns the first rule whose pattern matches. `text` is what the ladder
knows about the failure as lines (`level=L3`, `step=get_compiler_version`, `signal=SIGSEGV`,
`timeout=300`, then the error and, for a crash, the tail of stderr). Named groups in a pattern
join the context, so a fix can name the library or symbol it found. The context carries what
the earlier levels learnt (GPU, compute capability, torch's CUDA, driver) and what the facts say
(the environment to install, the driver needed); a missing value reads as a generic phrase.
The distributed rules are matched by `distributed.diagnose` (the first failing rank's error, then
every rank's, then torchrun's output), case-sensitively, `{match}` being the matched text.
Stdlib only: the ladder imports it inside build sandboxes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mmstack.verify.dist_worker import TOO_FEW_GPUS

# Which conda package provides a library (conda-forge names). First prefix that matches wins.
LIBRARY_PACKAGES: tuple[tuple[str, str], ...] = (
    ("libcuda.so", "the NVIDIA driver (not a conda package: install the driver; in a container run with --gpus all)"),
    ("libnvidia-ml", "the NVIDIA driver (not a conda package)"),
    ("libcudart", "cuda-cudart"),
    ("libcudnn", "cudnn"),
    ("libcublasLt", "libcublas"),
    ("libcublas", "libcublas"),
    ("libcusparseLt", "cusparselt"),
    ("libcusparse", "libcusparse"),
    ("libcusolver", "libcusolver"),
    ("libcufft", "libcufft"),
    ("libcurand", "libcurand"),
    ("libnvrtc", "cuda-nvrtc"),
    ("libnvToolsExt", "cuda-nvtx"),
    ("libnvJitLink", "libnvjitlink"),
    ("libnccl", "nccl"),
    ("libc10", "pytorch"),
    ("libtorch", "pytorch"),
    ("libshm", "pytorch"),
    ("libstdc++", "libstdcxx-ng (conda-forge libstdcxx)"),
    ("libgcc_s", "libgcc-ng (conda-forge libgcc)"),
    ("libgomp", "libgomp"),
    ("libomp", "llvm-openmp"),
    ("libpython", "python"),
)


def library_package(lib: str) -> str:
    for prefix, package in LIBRARY_PACKAGES:
        if lib.startswith(prefix):
            return package
    return "the package that ships it (conda: `conda search --file`; Debian: `apt-file search`)"


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: str  # a regular expression searched in the failure text (with flags)
    cause: str  # str.format templates over the context
    fix: str
    scope: str = "ladder"  # "ladder": a failed ladder level; "distributed": the L5 torchrun step
    flags: int = re.IGNORECASE | re.MULTILINE

    def search(self, text: str) -> re.Match[str] | None:
        return re.search(self.pattern, text, self.flags)


NCCL_FIX = (
    "rerun with NCCL_DEBUG=INFO to see which transport fails, then try one at a time: "
    "NCCL_P2P_DISABLE=1 (peer-to-peer/NVLink path), NCCL_SHM_DISABLE=1 (shared memory; in containers "
    "use --ipc=host or --shm-size=1g), NCCL_IB_DISABLE=1 (InfiniBand/RoCE), NCCL_SOCKET_IFNAME=lo "
    "(wrong network interface), e.g. `NCCL_P2P_DISABLE=1 NCCL_DEBUG=INFO mmstack verify --levels L5 "
    "--nproc {nproc}`"
)

# Order matters: specific before general (within a scope).
TABLE: tuple[Rule, ...] = (
    Rule(
        "static-libstdcxx",
        r"links libstdc\+\+ statically",
        "mmcv's _ext carries its own static copy of libstdc++ while torch uses the shared libstdc++.so.6:"
        " two C++ runtimes in one process crash ({signal} in {step}) at the first std::ostringstream",
        "rebuild mmcv with a g++ that links libstdc++ dynamically (conda-forge's gxx, or a g++ whose"
        " `-print-file-name=libstdc++.so` exists; `readelf -d _ext*.so` must list libstdc++.so.6),"
        " or install the mmcv build made for this torch ({install})",
    ),
    Rule(
        "compiler-abi-segfault",
        r"step=(get_compiler_version|get_compiling_cuda_version|collect_env)\s+signal=SIG(SEGV|BUS|ABRT|ILL)",
        "mmcv's _ext crashed ({signal}) in {step}, its first std::string/ostringstream: the ext and the torch"
        " {torch_version} disagree on the C++ runtime (compiler, C++ ABI or libstdc++)",
        "install the mmcv build made for this torch ({install}), or rebuild mmcv with torch's compiler,"
        " _GLIBCXX_USE_CXX11_ABI={cxx11_abi} and a shared libstdc++",
    ),
    Rule(
        "no-kernel-image",
        r"no kernel image is available|invalid device function|cudaErrorNoKernelImageForDevice",
        "mmcv's _ext holds no SASS for {sm} and no PTX at or below it: its arch list lacks {cc}",
        "install the mmcv build for this GPU ({install}), or rebuild with {cc} in TORCH_CUDA_ARCH_LIST",
    ),
    Rule(
        "driver-too-old",
        r"driver version is insufficient|NVIDIA driver on your system is too old|cudaErrorInsufficientDriver"
        r"|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|provided PTX was compiled with an unsupported toolchain",
        "the NVIDIA driver {driver} is older than torch's CUDA {torch_cuda} runtime needs",
        "install NVIDIA driver >= {driver_needed} (or a torch/mmcv build for an older CUDA)",
    ),
    Rule(
        "torch-cpu-build",
        r"Torch not compiled with CUDA enabled|torch is a CPU build",
        "the torch {torch_version} is a CPU build, so nothing runs on the GPU",
        "install a CUDA build of torch and mmcv ({install})",
    ),
    Rule(
        "mmcv-cpu-build",
        r"holds no CUDA code",
        "this mmcv is a CPU build (its _ext carries no CUDA kernels) under a CUDA torch",
        "install the CUDA build of mmcv for this GPU ({install})",
    ),
    Rule(
        "mmengine-weights-only",
        r"Weights only load failed|Unsupported global: GLOBAL mmengine\.",
        "this mmengine loads the checkpoints it writes with a plain torch.load, which torch {torch_version}"
        " restricts to weights (weights_only=True since torch 2.6): its own message_hub state and numpy"
        " values are refused, so load_checkpoint, resume, load_from and tools/test.py fail",
        "install mmstack's mmengine, which allows exactly what mmengine writes (recipes/mmengine;"
        " `conda install -c ./channel \"mmengine=*=safeload_*\"`); only for files you trust, the opt-in"
        " TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 loads them unrestricted",
    ),
    Rule(
        "no-gpu",
        r"no NVIDIA GPU or driver found|is_available\(\) is False",
        "torch sees no usable GPU",
        "run on a machine with an NVIDIA GPU and driver (a container needs --gpus all and the NVIDIA container"
        " toolkit); check CUDA_VISIBLE_DEVICES; `mmstack doctor` shows what is found",
    ),
    Rule(
        "libstdcxx-too-old",
        r"(?P<symbol>(GLIBCXX|CXXABI)_[\d.]+)'? not found",
        "the libstdc++ loaded is older than the one mmcv/torch were built with (needs {symbol})",
        "install libstdcxx-ng from conda-forge at least as new as the build's compiler, and keep the environment's"
        " lib/ ahead of the system's (do not put /usr/lib on LD_LIBRARY_PATH)",
    ),
    Rule(
        # issue 20: seen once on the H200 (L1 of a ladder started from a detached shell while a
        # 16-job CUDA build ran); the same command passed minutes later in the foreground, and under
        # setsid/nohup with an identical environment (lab/results/h200/recipe-run2/mkl_probe.json)
        "onemkl-cannot-load",
        r"(?:Intel oneMKL|Intel MKL) FATAL ERROR: Cannot load (?P<lib>\S+?)\.?(?:\s|$)",
        "the oneMKL inside torch could not load {lib}: a library torch ships failed to map at that moment"
        " (not something mmcv or mmstack loads)",
        "rerun the level; if it repeats, check `ulimit -v` / `ulimit -n` and free memory (a parallel build"
        " can exhaust them) and that {lib} exists and is readable; reinstall pytorch if it is missing",
    ),
    Rule(
        "glibc-floor-understated",
        r"needs glibc (?P<needed>[\d.]+) \(GLIBC_[\d.]+ symbols\) but its package declares __glibc >=(?P<declared>[\d.]+)",
        "the mmcv package was linked against glibc {needed} but declares __glibc >={declared}: conda installs it on"
        " glibc {declared} systems, where its ops cannot load",
        "rebuild it against a sysroot matching its c_stdlib_version (conda-forge's sysroot_linux-64 {declared}),"
        " or raise its __glibc run requirement to {needed}; meanwhile run it only on glibc >= {needed}",
    ),
    Rule(
        "glibc-too-old",
        r"(?P<symbol>GLIBC_[\d.]+)'? not found",
        "the system glibc is older than the one the binary was built against (needs {symbol})",
        "use a build made against an older sysroot (conda-forge's sysroot_linux-64 2.17/2.28), or a newer OS",
    ),
    Rule(
        "torch-abi-mismatch",
        r"undefined symbol: (?P<symbol>_Z\w*?(3c10|2at|5torch|6caffe2)\w*)",
        "mmcv's _ext was built against a different torch than the torch {torch_version}"
        " (C++ symbol {symbol} is missing)",
        "install the mmcv build for this torch ({install}), or rebuild mmcv against the torch {torch_version}",
    ),
    Rule(
        "cuda-runtime-mismatch",
        r"undefined symbol: (?P<symbol>(cuda|cu|cublas|cudnn|cusparse|nvrtc)[A-Z_]\w*)",
        "mmcv's _ext was built against a different CUDA runtime than the one loaded (symbol {symbol})",
        "install mmcv built for torch's CUDA {torch_cuda} ({install})",
    ),
    Rule(
        "undefined-symbol",
        r"undefined symbol: (?P<symbol>\S+)",
        "a library mmcv's _ext links against is a different version than it was built with (symbol {symbol})",
        "rebuild mmcv against the installed torch and CUDA, or install the matching build ({install})",
    ),
    Rule(
        "missing-library",
        r"(?P<lib>lib[\w+\-.]+?\.so[\d.]*): cannot open shared object file",
        "the dynamic loader cannot find {lib}",
        "install {package} into this environment (and do not override its lib/ with LD_LIBRARY_PATH)",
    ),
    Rule(
        "mmcv-missing",
        r"No module named '?mmcv'?($|[^.\w])",
        "mmcv is not installed for {python}",
        "install it ({install})",
    ),
    Rule(
        "mmcv-without-ops",
        r"No module named '?mmcv\._ext'?",
        "this mmcv has no compiled ops (mmcv-lite, or built with MMCV_WITH_OPS=0)",
        "install the full mmcv build ({install}), or rebuild with MMCV_WITH_OPS=1",
    ),
    Rule(
        "missing-dependency",
        r"No module named '?(?P<module>[\w.]+)'?",
        "a module mmcv needs is missing: {module}",
        "install {module} into this environment (mmstack's environments pin it)",
    ),
    Rule(
        "out-of-memory",
        r"CUDA out of memory|cudaErrorMemoryAllocation|OutOfMemoryError",
        "the GPU ran out of memory",
        "free the GPU (nvidia-smi lists the processes holding it) and rerun",
    ),
    Rule(
        "wrong-results",
        r"mismatch",
        "an mmcv op returned wrong values on {device} (see evidence)",
        "compare `mmstack verify --json` on CPU and GPU; a miscompiled kernel points at the build's"
        " compiler flags or arch list ({install})",
    ),
    Rule(
        "loss-did-not-fall",
        r"loss did not fall",
        "training with mmcv ops did not reduce the loss (see evidence.losses)",
        "check the backward kernels: run L4 on this device and compare with the CPU",
    ),
    Rule(
        "hang",
        r"timeout=\d",
        "no result within {timeout} s (stuck in {step}): a hang, or the driver JIT-compiling PTX for a GPU the"
        " build has no SASS for",
        "rerun with a larger --timeout; if it is PTX JIT, install the build with native code ({install});"
        " check nvidia-smi for a process holding the GPU",
    ),
    Rule(
        "crash",
        r"signal=SIG\w+",
        "the process crashed with {signal} in {step}",
        "run `mmstack doctor`; rerun that step with `python -X faulthandler` for the native stack",
    ),
    Rule(
        "missing-package",
        r"No module named '?(mmcv|mmengine|torch)\b|cannot import name .* from 'mmcv",
        "torch, mmcv or mmengine is missing or broken in the environment the ranks run in",
        "run the lower levels first (`mmstack verify --levels L1,L2`) and fix what they report",
        scope="distributed", flags=0,
    ),
    Rule(
        "too-few-gpus",
        rf"\d+ {TOO_FEW_GPUS}, \d+ GPUs? visible[^\n]*",
        "{match}: one process per GPU is needed",
        "lower --nproc to the GPU count, or run where more GPUs are visible (check CUDA_VISIBLE_DEVICES)",
        scope="distributed", flags=0,
    ),
    Rule(
        "abi-mismatch",
        r"undefined symbol|ImportError: .*_ext",
        "mmcv's compiled extension does not load against this torch (ABI or version mismatch)",
        "install the mmcv build made for this torch and CUDA (`mmstack verify --levels L2` shows it)",
        scope="distributed", flags=0,
    ),
    Rule(
        "no-kernel-image",
        r"no kernel image is available|invalid device function",
        "mmcv's CUDA kernels do not include this GPU's architecture",
        "check the arch list with `mmstack fatbin <mmcv/_ext*.so>` and install the build for this "
        "GPU generation",
        scope="distributed", flags=0,
    ),
    Rule(
        "mmcv-cpu-only",
        r"implementation for device cuda not found|[Nn]ot compiled with GPU support",
        "mmcv was built without its CUDA ops",
        "install the CUDA build of mmcv for this generation, not the CPU one",
        scope="distributed", flags=0,
    ),
    Rule(
        "cuda-oom",
        r"CUDA out of memory|OutOfMemoryError",
        "a GPU ran out of memory (another process is using it?)",
        "free the GPUs (nvidia-smi shows who holds them) and rerun",
        scope="distributed", flags=0,
    ),
    Rule(
        "bad-device-ordinal",
        r"invalid device ordinal",
        "a rank was given a GPU index that is not visible",
        "check CUDA_VISIBLE_DEVICES and lower --nproc to the number of visible GPUs",
        scope="distributed", flags=0,
    ),
    Rule(
        "nccl-timeout",
        r"Watchdog caught collective operation timeout|collective operation "
                                r"timeout|[Tt]imed out (waiting|after)|wait timeout|Timeout waiting for key",
        "a collective timed out: the ranks stopped exchanging data (with NCCL, usually a transport that "
        "hangs)", NCCL_FIX,
        scope="distributed", flags=0,
    ),
    Rule(
        "nccl-error",
        r"NCCL error|nccl\w*Error|unhandled system error|unhandled cuda error|"
                              r"remote process exited or there was a network error|NCCL WARN",
        "NCCL failed to set up or run a collective between the ranks", NCCL_FIX,
        scope="distributed", flags=0,
    ),
    Rule(
        "connection",
        r"Connection reset|Connection refused|Broken pipe|Address already in use|"
                              r"EADDRINUSE|Rendezvous\w*Error|server socket has failed",
        "the connection between ranks (rendezvous store or gloo/NCCL sockets) broke",
        "on one host set NCCL_SOCKET_IFNAME=lo and GLOO_SOCKET_IFNAME=lo; check that no firewall blocks "
        "localhost ports; rerun with NCCL_DEBUG=INFO",
        scope="distributed", flags=0,
    ),
    Rule(
        "segfault",
        r"SIGSEGV|Segmentation fault|exitcode\s*:\s*-11",
        "a rank crashed with a segmentation fault (often mmcv built against another torch)",
        "run `mmstack verify --levels L1,L2,L3` and install the matching mmcv build",
        scope="distributed", flags=0,
    ),
    Rule(
        "sigkill",
        r"SIGKILL|exitcode\s*:\s*-9",
        "a rank was killed (SIGKILL): usually the host ran out of memory",
        "check `dmesg` for the OOM killer; free host memory and rerun",
        scope="distributed", flags=0,
    ),
)
RULES = tuple(r for r in TABLE if r.scope == "ladder")
DISTRIBUTED_RULES = tuple(r for r in TABLE if r.scope == "distributed")

FALLBACK = Rule(
    "unknown",
    r"",
    "an unrecognised failure: {first_line}",
    "see the level's evidence.error and stderr in `mmstack verify --json`, and run `mmstack doctor`",
)

# What a template field says when the ladder did not learn it.
DEFAULTS = {
    "install": "`mmstack detect` names the environment, e.g. `pixi run -e h100 verify`",
    "torch_version": "in this environment",
    "torch_cuda": "(its version)",
    "driver": "(installed)",
    "driver_needed": "the version torch's CUDA needs (`mmstack doctor`)",
    "cc": "the GPU's compute capability",
    "sm": "this GPU's architecture",
    "cxx11_abi": "torch._C._GLIBCXX_USE_CXX11_ABI",
    "python": "this interpreter",
    "device": "the device",
    "step": "an unknown step",
    "signal": "a signal",
    "timeout": "?",
}


@dataclass(frozen=True)
class Diagnosis:
    rule: str
    cause: str
    fix: str

    def as_dict(self) -> dict:
        return {"rule": self.rule, "cause": self.cause, "fix": self.fix}

    def one_line(self) -> str:
        return f"{self.cause} (fix: {self.fix})"


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return DEFAULTS.get(key, f"<{key}?>")


def diagnose(text: str, context: dict | None = None) -> Diagnosis:
    """The first rule matching `text`, its templates filled from `context` and the match."""
    fields = _Fields({k: v for k, v in (context or {}).items() if v not in (None, "")})
    # The ladder's header lines (`step=... signal=...`, `timeout=...`) fill in the same fields.
    for m in re.finditer(r"^(?:step=(?P<step>.*?)(?: signal=(?P<signal>SIG\w+))?|timeout=(?P<timeout>\S+))$", text, re.M):
        fields.update({k: v for k, v in m.groupdict().items() if v and v != "?"})
    for rule in RULES:
        hit = rule.search(text)
        if hit:
            fields.update({k: v for k, v in hit.groupdict().items() if v})
            if "lib" in fields and "package" not in fields:
                fields["package"] = library_package(fields["lib"])
            return Diagnosis(rule.name, rule.cause.format_map(fields), rule.fix.format_map(fields))
    lines = [ln for ln in text.splitlines() if ln and "=" not in ln.split(" ", 1)[0]]
    fields["first_line"] = (lines[0] if lines else text.strip())[:200]
    return Diagnosis(FALLBACK.name, FALLBACK.cause.format_map(fields), FALLBACK.fix.format_map(fields))
