"""mmstack's fatbin reader against NVIDIA's own tool: what `cuobjdump --list-elf --list-ptx` lists in
a CUDA object, and what `mmstack arch check --package` concludes from it, for real packages.

    python -m mmstack_lab.arch.vendor_check PKG.conda... --gpu H200 --gpu "RTX 4090" ... --json OUT

For each package (a .conda, .whl or .tar.bz2 holding CUDA objects, or an ELF .so): every CUDA
object is extracted and listed twice, by mmstack.facts.fatbin (the reader `mmstack fatbin` and
`arch check --package` use, no CUDA tools needed) and by cuobjdump (NVIDIA's PyPI wheel
`nvidia-cuda-cuobjdump`, or one on PATH); the two multisets of (kind, arch) entries must be equal.
cuobjdump names a family-specific cubin without its suffix (`sm_100` for mmstack's `10.0f`) and
keeps the arch-specific one (`sm_90a`), so the comparison drops only the 'f'. Then, for each
`--gpu`, the verdict of `mmstack arch check --package` (its exit code and first line) is set beside
what the same coverage rules (mmstack.facts.arch.coverage) give from cuobjdump's entries.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from pathlib import Path

from mmstack import __version__
from mmstack.facts.arch import Target, coverage, parse_arch
from mmstack.facts.fatbin import list_fatbins
from mmstack.facts.gpus import load

_LINE = re.compile(r"^(ELF|PTX) file\s+\d+:\s+\S+\.(sm_\d+[af]?)\.(cubin|ptx)$")


def find_cuobjdump() -> Path | None:
    """cuobjdump on PATH, else the one NVIDIA's `nvidia-cuda-cuobjdump` wheel installs beside this Python."""
    on_path = shutil.which("cuobjdump")
    if on_path:
        return Path(on_path)
    for wheel_bin in sorted(Path(sysconfig.get_paths()["purelib"]).glob("nvidia/cu*/bin/cuobjdump")):
        return wheel_bin
    return None


def cuobjdump_version(tool: Path) -> str:
    out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"V(\d+\.\d+\.\d+)", out)
    return found.group(1) if found else out.strip().splitlines()[-1]


def _dotted(sm: str) -> str:
    """sm_90a -> 9.0a, sm_100 -> 10.0 (mmstack's spelling)."""
    digits = sm.removeprefix("sm_")
    suffix = digits[-1] if digits[-1] in "af" else ""
    digits = digits.rstrip("af")
    return f"{digits[:-1]}.{digits[-1]}{suffix}"


def vendor_entries(tool: Path, so: Path) -> collections.Counter:
    """(kind, arch) -> count as cuobjdump lists them; an object without CUDA code lists nothing."""
    proc = subprocess.run([str(tool), "--list-elf", "--list-ptx", str(so)], capture_output=True, text=True)
    if proc.returncode != 0 and "does not contain device code" not in proc.stderr + proc.stdout:
        raise RuntimeError(f"cuobjdump failed on {so.name}: {(proc.stderr or proc.stdout).strip()}")
    counts: collections.Counter = collections.Counter()
    for line in proc.stdout.splitlines():
        m = _LINE.match(line.strip())
        if m:
            counts[("sass" if m.group(1) == "ELF" else "ptx", _dotted(m.group(2)))] += 1
    return counts


def mmstack_entries(so: Path) -> collections.Counter:
    """The same, from mmstack.facts.fatbin, with the family suffix dropped as cuobjdump drops it."""
    counts: collections.Counter = collections.Counter()
    for listing in list_fatbins(so):
        for e in listing.entries:
            counts[(e.kind, e.arch.removesuffix("f"))] += 1
    return counts


def _objects(package: Path, into: Path) -> list[Path]:
    """The ELF shared objects inside a package (or the .so itself), extracted under INTO."""
    if package.suffix == ".so" or ".so." in package.name:
        return [package]
    out = []
    if package.suffix in (".conda", ".whl"):
        with zipfile.ZipFile(package) as z:
            if package.suffix == ".whl":
                for name in z.namelist():
                    if name.endswith(".so") or ".so." in name:
                        out.append(Path(z.extract(name, into)))
                return out
            import zstandard

            for name in z.namelist():
                if name.startswith("pkg-") and name.endswith(".tar.zst"):
                    with z.open(name) as raw, zstandard.ZstdDecompressor().stream_reader(raw) as dec, \
                            tarfile.open(fileobj=dec, mode="r|") as tar:
                        for m in tar:
                            if m.isfile() and (m.name.endswith(".so") or ".so." in m.name):
                                target = into / m.name
                                target.parent.mkdir(parents=True, exist_ok=True)
                                src = tar.extractfile(m)
                                assert src is not None
                                target.write_bytes(src.read())
                                out.append(target)
        return out
    with tarfile.open(package) as tar:  # .tar.bz2
        members = [m for m in tar.getmembers() if m.isfile() and (m.name.endswith(".so") or ".so." in m.name)]
        tar.extractall(into, members=members, filter="data")
        return [into / m.name for m in members]


def _from_vendor(counts: collections.Counter, cc: str) -> str:
    targets = [Target(parse_arch(arch), kind) for (kind, arch) in counts]
    return coverage(parse_arch(cc), targets).coverage.value if targets else "none"


def check_package(package: Path, tool: Path, gpus: list[str]) -> dict:
    facts = load()
    with tempfile.TemporaryDirectory() as tmp:
        objects: list[dict] = []
        counts: list[collections.Counter] = []
        for so in _objects(package, Path(tmp)):
            ours, theirs = mmstack_entries(so), vendor_entries(tool, so)
            if not ours and not theirs:
                continue
            objects.append({
                "object": so.name,
                "entries": sum(theirs.values()),
                "cuobjdump": {f"{k} {a}": n for (k, a), n in sorted(theirs.items())},
                "mmstack": {f"{k} {a}": n for (k, a), n in sorted(ours.items())},
                "agree": ours == theirs,
            })
            counts.append(theirs)
    verdicts = []
    for gpu in gpus:
        known = facts.lookup_gpu(gpu)
        cc = known.compute_capability if known else None
        proc = subprocess.run([sys.executable, "-m", "mmstack", "arch", "check", "--package", str(package), "--gpu", gpu,
                               "--quiet"], capture_output=True, text=True)
        first = (proc.stdout.strip() or proc.stderr.strip()).splitlines()[0] if (proc.stdout or proc.stderr) else ""
        row = {"gpu": gpu, "arch_check_exit": proc.returncode, "arch_check": first}
        if cc:
            worst = [_from_vendor(c, cc) for c in counts]
            row["cc"] = cc
            row["from_cuobjdump"] = min(worst, key=["none", "ptx-jit", "lower-minor", "native"].index) if worst else "none"
            said = first.rsplit(":", 1)[-1].strip()  # arch check's verdict word; "will-not-run" is coverage none
            row["agree"] = {"will-not-run": "none"}.get(said, said) == row["from_cuobjdump"]
        verdicts.append(row)
    return {"package": package.name, "objects": objects,
            "all_agree": bool(objects) and all(o["agree"] for o in objects) and all(g.get("agree", True) for g in verdicts),
            "gpus": verdicts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mmstack_lab.arch.vendor_check", description=__doc__.splitlines()[0])
    ap.add_argument("packages", nargs="+", type=Path)
    ap.add_argument("--gpu", action="append", default=[], help="a GPU name the facts know (repeatable)")
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args(argv)
    tool = find_cuobjdump()
    if tool is None:
        print("vendor_check: no cuobjdump (fix: pip install nvidia-cuda-cuobjdump, or put CUDA's bin on PATH)",
              file=sys.stderr)
        return 2
    for p in args.packages:
        if not p.is_file():
            print(f"vendor_check: {p}: no such file (fix: name a .conda, .whl, .tar.bz2 or .so)", file=sys.stderr)
            return 2
    results = [check_package(p, tool, args.gpu) for p in args.packages]
    doc = {
        "what": "mmstack.facts.fatbin and `mmstack arch check --package` against NVIDIA's cuobjdump, per package",
        "measured": datetime.date.today().isoformat(),
        "command": "python -m mmstack_lab.arch.vendor_check " + " ".join(p.name for p in args.packages)
                   + "".join(f" --gpu '{g}'" for g in args.gpu),
        "cuobjdump": cuobjdump_version(tool),
        "mmstack": __version__,
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "packages": results,
    }
    text = json.dumps(doc, indent=1) + "\n"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    else:
        print(text, end="")
    for r in results:
        print(f"{r['package']}: {'agree' if r['all_agree'] else 'DIFFER'} "
              + "; ".join(f"{g['gpu']}: arch check exit {g['arch_check_exit']}"
                          + (f", cuobjdump's entries -> {g['from_cuobjdump']}" if "from_cuobjdump" in g else "")
                          for g in r["gpus"]), file=sys.stderr)
    return 0 if all(r["all_agree"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
