"""Where a package's bytes are: an mmcv .conda against what its `_ext` holds (issue 24, fat-build size).

    python -m mmstack_lab.build_cost.conda_sizes mmcv-2.2.0-cuda130_sm90_py312_*.conda [more.conda ...] > sizes.json

For each .conda: its size, the uncompressed size of its pkg- archive, the `_ext` shared object's
size and its `.nv_fatbin` section (the device code as stored: compressed by `-Xfatbin
-compress-all`, so the .conda's zstd barely shrinks it), with the stored bytes per arch
(mmstack.facts.fatbin's entries). What is not device code (host code, Python files) is the same
for every arch list of one CUDA and Python, so two packages' sizes tell what one SASS target costs.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import zstandard

from mmstack.facts.elf import Elf
from mmstack.facts.fatbin import list_fatbins


def stored_by_arch(path: Path) -> dict[str, int]:
    """The device code an ELF file (object or shared library) stores per arch, as stored (compressed
    where it is): "9.0" for SASS, "12.0 ptx" for PTX; bench_arch_sets.py reports objects with it."""
    by_arch: dict[str, int] = {}
    for listing in list_fatbins(path):
        for e in listing.entries:
            key = e.arch if e.kind == "sass" else f"{e.arch} {e.kind}"
            by_arch[key] = by_arch.get(key, 0) + e.size
    return by_arch


def sizes(conda: Path) -> dict:
    with zipfile.ZipFile(conda) as z:
        (pkg,) = [n for n in z.namelist() if n.startswith("pkg-")]
        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(z.read(pkg))).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
        (ext,) = [m for m in members if Path(m.name).name.startswith("_ext.") and m.name.endswith(".so")]
        member = tar.extractfile(ext)
        if member is None:
            raise ValueError(f"{conda}: {ext.name} is not a regular file in the package")
        data = member.read()
    with tempfile.TemporaryDirectory() as tmp:
        so = Path(tmp) / "_ext.so"
        so.write_bytes(data)
        with so.open("rb") as f:
            sections = {s.name: s.size for s in Elf(f).sections()}
        by_arch = stored_by_arch(so)
    return {"file": conda.name, "conda_bytes": conda.stat().st_size, "pkg_uncompressed_bytes": len(raw),
            "files": len([m for m in members if m.isfile()]), "ext": ext.name, "ext_bytes": len(data),
            "nv_fatbin_bytes": sections.get(".nv_fatbin", 0), "text_bytes": sections.get(".text", 0),
            "stored_by_arch": by_arch}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("conda", nargs="+", type=Path)
    args = ap.parse_args(argv)
    for p in args.conda:
        if not p.is_file() or p.suffix != ".conda":
            print(f"{p}: not a .conda file; pass the mmcv package files (mmcv-*.conda)", file=sys.stderr)
            return 2
    print(json.dumps({"what": __doc__.splitlines()[0], "packages": [sizes(p) for p in args.conda]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
