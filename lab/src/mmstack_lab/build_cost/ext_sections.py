"""Where two builds of mmcv's `_ext` differ: each ELF section's size and digest, side by side.

    python -m mmstack_lab.build_cost.ext_sections A.conda B.conda [...] [--labels a,b,...] [--json OUT]

For each package: the `_ext*.so` it ships (size, sha256), how many strings name the build's own
work folder (`rattler-build_<name>_<digits>`, the folder rattler-build makes per build) and nvcc's
temporary names (`tmpxft_`); then every section whose size or bytes differ between the packages.
Used for issue 43 item 3's "byte-level package equality where the flags allow".
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import sys
import tarfile
import zipfile
from pathlib import Path

from mmstack_lab.build_cost.unit_anatomy import emit

WORK_DIR = re.compile(rb"rattler-build_[A-Za-z0-9_.-]+?_\d{6,}")
TMPXFT = re.compile(rb"tmpxft_[0-9a-f]+_[0-9a-f]+")


def ext_of(package: Path) -> tuple[str, bytes]:
    """The `_ext*.so` inside a .conda (its path in the package, its bytes)."""
    import zstandard

    with zipfile.ZipFile(package) as z:
        inner = next(n for n in z.namelist() if n.startswith("pkg-") and n.endswith(".tar.zst"))
        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(z.read(inner))).read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next(m for m in tar.getmembers() if m.isfile() and "/_ext" in m.name and m.name.endswith(".so"))
        f = tar.extractfile(member)
        assert f is not None
        return member.name, f.read()


def sections(blob: bytes) -> dict[str, dict]:
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(blob))
    return {s.name: {"size": s["sh_size"], "sha256": hashlib.sha256(s.data()).hexdigest()}
            for s in elf.iter_sections() if s["sh_type"] != "SHT_NOBITS" and s.name}


def compare(packages: dict[str, Path]) -> dict:
    per: dict[str, dict] = {}
    secs: dict[str, dict] = {}
    for label, path in packages.items():
        name, blob = ext_of(path)
        work_dirs = WORK_DIR.findall(blob)
        per[label] = {"package": path.name, "ext": name, "bytes": len(blob),
                      "sha256": hashlib.sha256(blob).hexdigest(),
                      "work_dir_strings": len(work_dirs),
                      "work_dirs": sorted({m.decode() for m in work_dirs}),
                      "tmpxft_strings": len(TMPXFT.findall(blob))}
        secs[label] = sections(blob)
    names = sorted(set().union(*(set(s) for s in secs.values())))
    differ = {n: {label: secs[label].get(n, {}).get("size") for label in packages}
              for n in names if len({str(secs[label].get(n)) for label in packages}) > 1}
    return {"packages": per, "sections": len(names), "identical_bytes": len({p["sha256"] for p in per.values()}) == 1,
            "differing_sections": differ,
            "same_size_sections_differing": sorted(n for n, sizes in differ.items() if len(set(sizes.values())) == 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packages", nargs="+", type=Path)
    ap.add_argument("--labels", help="one name per package, comma-separated, in their order (default: the file names)")
    ap.add_argument("--json", type=Path, help="write the result here (whole, or nothing)")
    args = ap.parse_args(argv)
    for p in args.packages:
        if not p.is_file() or not p.name.endswith(".conda"):
            print(f"ext_sections: {p}: not a .conda file (pass mmcv packages built by the recipe)", file=sys.stderr)
            return 2
    labels = args.labels.split(",") if args.labels else [p.name for p in args.packages]
    if len(labels) != len(args.packages) or len(set(labels)) != len(labels):
        print(f"ext_sections: --labels: {len(args.packages)} distinct names needed, one per package", file=sys.stderr)
        return 2
    result = compare(dict(zip(labels, args.packages, strict=True)))
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
