"""A test receipt: what a package's test section showed, on which machine, written beside it.

When a package's tests pass (`mmstack build` with its tests, `mmstack test` on the GPU runner), a
JSON file `<package file>.receipt.json` lands beside the package in the channel: the package (name,
version, build string, sha256 of the file), the machine (GPU name, compute capability, driver, the
CUDA runtime the tests' torch used, or "no GPU"), each ladder level's verdict and seconds and
upstream's counts and skip reasons (the tests' result lines), the SASS/PTX the package's fatbin holds
and the glibc its binaries need (read from the package file itself), the tools, and the date.

A receipt is evidence, not a signature: anyone who can write to the channel can write one. Its
sha256 ties it to one package file (a rebuilt file with the same name no longer matches it); a
signed attestation (rattler-build's, Sigstore) would say who made it. Indexers and solvers read
only package files and repodata, so the extra files change no solve (tests/test_build_receipt.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path

SUFFIX = ".receipt.json"
SCHEMA = "mmstack-test-receipt/1"
NO_GPU = "no GPU"
# result-line kinds (report.result_line) a receipt keeps: the ladder's levels, upstream's pytest run
LADDER_KIND = "ladder"
UPSTREAM_KIND = "upstream-tests"


def path_for(package: str | os.PathLike[str]) -> Path:
    """The receipt of `channel/linux-64/mmcv-…conda`: `channel/linux-64/mmcv-…conda.receipt.json`."""
    p = Path(package)
    return p.with_name(p.name + SUFFIX)


def package_of(receipt: str | os.PathLike[str]) -> str:
    """The package file name a receipt file names."""
    return Path(receipt).name.removesuffix(SUFFIX)


def sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def machine(gpus: list[dict], *, source: str, cuda_runtime: str | None = None) -> dict:
    """The machine part: what `mmstack detect` found (NVML, nvidia-smi), or "no GPU"."""
    out: dict = {"gpus": [{k: g.get(k) for k in ("name", "compute_capability", "driver")} for g in gpus],
                 "detected_by": source, "cuda_runtime": cuda_runtime}
    out["summary"] = (", ".join(f"{g.get('name')} (cc {g.get('compute_capability')}, driver {g.get('driver')})"
                                for g in gpus) if gpus else NO_GPU)
    return out


def tools() -> dict:
    """mmstack's and the build engine's versions (py-rattler-build wraps rattler-build)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for dist in ("mmstack", "py-rattler-build", "py-rattler"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    try:
        from rattler_build import rattler_build_version

        out["rattler-build"] = rattler_build_version()  # the engine py-rattler-build wraps
    except ImportError:
        out["rattler-build"] = None
    return out


def code_in(package: str | os.PathLike[str]) -> dict:
    """The SASS/PTX archs the package's shared objects carry and the newest glibc they need."""
    from mmstack.facts.fatbin import glibc_floor, list_fatbins

    listings = list_fatbins(Path(package))
    sass = sorted({a for li in listings for a in li.sass}, key=_arch_order)
    ptx = sorted({a for li in listings for a in li.ptx}, key=_arch_order)
    glibc, needed_by = glibc_floor(listings)
    return {"sass": sass, "ptx": ptx, "glibc": glibc, "glibc_needed_by": _member(needed_by),
            "objects": [{"path": _member(li.path), "sass": list(li.sass), "ptx": list(li.ptx), "glibc": li.glibc}
                        for li in listings if li.sass or li.ptx or li.glibc]}


def _arch_order(arch: str) -> tuple[int, int, str]:
    """"8.9" < "9.0a" < "10.0" < "12.0f": by major, minor, then the suffix."""
    major, _, rest = arch.partition(".")
    minor = "".join(c for c in rest if c.isdigit())
    return int(major), int(minor or 0), rest[len(minor):]


def _level(lv: Mapping) -> dict:
    """A level's verdict and seconds; the reason only where it did not pass (a pass's evidence names
    the test environment's paths, which a receipt does not record)."""
    out = {k: lv.get(k) for k in ("level", "name", "status", "seconds")}
    if lv.get("status") != "PASS" and lv.get("reason"):
        out["reason"] = lv["reason"]
    return out


def _member(where: str | None) -> str | None:
    """`/any/dir/pkg.conda!lib/x.so` -> `lib/x.so`: the file inside the package, no machine path."""
    return where.rpartition("!")[2] if where else where


def make(package: str | os.PathLike[str], *, name: str, version: str, build_string: str, subdir: str,
         test_results: Iterable[Mapping], machine_part: dict, tests_passed: int | None, seconds: float, via: str,
         now: datetime | None = None) -> dict:
    """The receipt of one package whose test section passed (`via`: "mmstack build", "mmstack test")."""
    docs = [dict(d) for d in test_results]
    ladder = [d for d in docs if d.get("kind") == LADDER_KIND]
    upstream = [{k: d.get(k) for k in ("path", "counts", "skip_reasons", "seconds") if k in d}
                for d in docs if d.get("kind") == UPSTREAM_KIND]
    part = dict(machine_part)
    if part.get("cuda_runtime") is None:
        part["cuda_runtime"] = next((d.get("torch_cuda") for d in ladder if d.get("torch_cuda")), None)
    when = (now or datetime.now(timezone.utc)).replace(microsecond=0)
    return {
        "schema": SCHEMA,
        "package": {"file": Path(package).name, "subdir": subdir, "name": name, "version": version,
                    "build_string": build_string, "sha256": sha256(package)},
        "tested_by": via,
        "machine": part,
        "tests": {"passed": "every test of the section" if tests_passed is None else tests_passed, "seconds": round(seconds, 1),
                  "ladder": [_level(lv) for d in ladder for lv in d.get("levels", [])],
                  "upstream": upstream},
        "code": code_in(package),
        "tools": tools(),
        "date": when.isoformat().replace("+00:00", "Z"),
        "proves": ("this package file (sha256) passed its own test section on the machine named, with these tools, "
                   "on this date; it is evidence written by whoever ran the tests, not a signature"),
    }


def write(package: str | os.PathLike[str], doc: dict) -> Path:
    """Write the receipt beside the package, atomically (a reader never sees half a receipt)."""
    dest = path_for(package)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
            fh.write("\n")
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def read_all(channel: str | os.PathLike[str]) -> dict[str, dict]:
    """Every readable receipt of a channel, by `<subdir>/<package file>`; unreadable ones are left out."""
    out = {}
    for path in sorted(Path(channel).glob(f"*/*{SUFFIX}")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("schema") == SCHEMA:
            out[f"{path.parent.name}/{package_of(path)}"] = doc
    return out
