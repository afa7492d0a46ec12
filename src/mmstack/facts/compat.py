"""Pure rules the ladder and the doctor share: driver vs CUDA runtime, ext archs vs GPU, GPU -> env.

Driver rule (https://docs.nvidia.com/deploy/cuda-compatibility/index.html): a CUDA X.Y runtime
runs on a driver >= that toolkit's own driver (`min_driver` in the facts); with CUDA minor-version
compatibility it also runs on any driver >= the major's `minor_compat_driver` (PTX produced by a
newer toolkit than the driver cannot be JIT-compiled then). Where the facts do not know a toolkit's own
driver (`min_driver = "unknown"`: 13.4, 13.5), only the minor-version floor can be judged, and every
message that depends on the toolkit's own driver says it is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmstack.errors import BadInput
from mmstack.facts.arch import Coverage, CoverageResult, Target, coverage, parse_arch
from mmstack.facts.gpus import Facts, version_key


@dataclass(frozen=True)
class DriverCompat:
    ok: bool
    mode: str  # "native", "minor-compat", "too-old", "unknown"
    needed: str | None  # the lowest driver that runs this runtime
    message: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _driver_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def driver_compat(facts: Facts, *, driver: str | None, runtime_cuda: str,
                  driver_cuda: str | None = None) -> DriverCompat:
    """Can an NVIDIA driver `driver` (e.g. '535.104.05') run a CUDA `runtime_cuda` ('12.9') app?"""
    major = int(runtime_cuda.split(".")[0])
    floor = facts.minor_compat_driver(major)
    try:
        tk = facts.toolkit(runtime_cuda)
    except BadInput:
        tk = None
    full = tk.driver if tk else None
    unknown = f" (CUDA {runtime_cuda}'s own driver floor is unknown to the facts)" if tk and full is None else ""
    if driver is None:
        if driver_cuda is None:
            return DriverCompat(False, "unknown", floor or full, "no NVIDIA driver found")
        # only the driver's CUDA version (cuDriverGetVersion) is known
        if version_key(driver_cuda) >= version_key(runtime_cuda):
            return DriverCompat(True, "native", full, f"the driver supports CUDA {driver_cuda} >= {runtime_cuda}")
        if int(driver_cuda.split(".")[0]) == major:
            return DriverCompat(True, "minor-compat", floor, f"CUDA {runtime_cuda} on a CUDA {driver_cuda} driver"
                                " through minor-version compatibility (no PTX JIT from the newer toolkit)" + unknown)
        return DriverCompat(False, "too-old", floor or full,
                            f"the driver supports CUDA {driver_cuda}, older than the runtime's major {major}")
    if full and _driver_key(driver) >= _driver_key(full):
        return DriverCompat(True, "native", full, f"driver {driver} >= {full}, CUDA {runtime_cuda}'s own driver")
    if floor and _driver_key(driver) >= _driver_key(floor):
        return DriverCompat(True, "minor-compat", floor,
                            f"driver {driver} runs CUDA {runtime_cuda} through minor-version compatibility"
                            f" (>= {floor} for CUDA {major}.x); PTX from the newer toolkit cannot be JIT-compiled"
                            + (unknown and f"; whether it is new enough for full support is not known{unknown}"))
    needed = floor or full
    if needed is None:
        return DriverCompat(False, "unknown", None, f"no facts for CUDA {runtime_cuda}" + unknown)
    return DriverCompat(False, "too-old", needed,
                        f"driver {driver} is too old for CUDA {runtime_cuda}: needs >= {needed}"
                        + (f" ({full} for full support)" if full and full != needed else unknown))


def driver_needed(facts: Facts, runtime_cuda: str) -> str | None:
    """The lowest driver that runs a CUDA `runtime_cuda` app (minor-version compatibility)."""
    floor = facts.minor_compat_driver(int(runtime_cuda.split(".")[0]))
    if floor:
        return floor
    try:
        return facts.toolkit(runtime_cuda).driver
    except BadInput:
        return None


def ext_targets(sass, ptx) -> tuple[Target, ...]:
    """Targets from a fatbin listing's SASS and PTX arch tuples."""
    return tuple([Target(parse_arch(s), "sass") for s in sass] + [Target(parse_arch(p), "ptx") for p in ptx])


def ext_coverage(cc: str, sass, ptx) -> CoverageResult:
    """How a GPU of compute capability `cc` runs an ext carrying `sass` and `ptx` archs."""
    return coverage(parse_arch(cc), ext_targets(sass, ptx))


def coverage_message(name: str, cc: str, result: CoverageResult, sass, ptx) -> str:
    listed = f"SASS [{', '.join(sass) or '-'}], PTX [{', '.join(ptx) or '-'}]"
    target = result.target
    if target is None:  # Coverage.NONE
        return f"no kernel image is available for {name} ({cc}): mmcv's _ext holds {listed}"
    how = {Coverage.NATIVE: "native SASS", Coverage.LOWER_MINOR: "lower-minor SASS",
           Coverage.PTX_JIT: "PTX JIT only"}[result.coverage]
    return f"{name} ({cc}) runs {how} from {target.arch} ({listed})"


def environment_for(facts: Facts, *, name: str | None = None, cc: str | None = None) -> str | None:
    """The mmstack environment for a GPU, by name (aliases, 'NVIDIA ' prefix) or compute capability."""
    if name:
        try:
            gpu = facts.find_gpu(name)
            if gpu.generation:
                return gpu.generation
            cc = cc or gpu.compute_capability
        except BadInput:
            # NVML names carry memory and form factor ("NVIDIA H100 80GB HBM3"): try the leading words.
            words = name.replace("NVIDIA ", "").split()
            for n in range(len(words) - 1, 0, -1):
                try:
                    gpu = facts.find_gpu(" ".join(words[:n]))
                except BadInput:
                    continue
                if not cc or gpu.compute_capability == cc:
                    return gpu.generation or None
    if cc:
        for gen in facts.generation:
            if gen.compute_capability == cc:
                return gen.env
    return None


def install_hint(env: str | None) -> str | None:
    return f"the {env} environment: `pixi run -e {env} verify`" if env else None
