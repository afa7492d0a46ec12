#!/usr/bin/env bash
# Prepare .carry/ for the GPU proof (python -m mmstack_lab.proof.run) on the lent H200 (CPython 3.12, no network, 64 MiB a
# call): the wheels its image lacks, py-rattler(-build) unpacked and xz-compressed (their wheels
# alone are 52 MB; site.tar.xz is ~22 MB, stripped, with zstandard), the mmcv/mmdet sdists and upstream's tag archive.
#
#   bash lab/gpu/carry.sh            # then: device run with carry [".carry", ".gpu-commit"]
#   bash lab/gpu/tree-digest.sh --gpu-commit    # the tree's commit and digest, for machine.txt
#
# Takes ~5 min on 2 cores (xz -9). Versions: py-rattler/py-rattler-build as in this checkout's
# venv (.venv), the rest pinned in lab/src/mmstack_lab/standin/bootstrap.py (the device has the others: KINDS.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="${PY:-$ROOT/.venv/bin/python}"
C="$ROOT/.carry"
rm -rf "$C" && mkdir -p "$C/wheels" "$C/sdist" "$C/big"
ver() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$@"; }
# zstandard travels unpacked in site.tar.xz too: only the driver's own Python imports it (info/link.json
# into .conda files), no channel repacks it, and stripped its 5.5 MB wheel is 0.5 MB of the archive,
# which lets the packages, the sdists and the tree fit one call's 64 MiB with the `test` stage
dl "$C/big" "py-rattler==$(ver py-rattler)" "py-rattler-build==$(ver py-rattler-build)" zstandard==0.25.0
# what the device image lacks (KINDS.md's package list against bootstrap.WHEELS)
dl "$C/wheels" pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  pyelftools==0.33 addict==2.4.0 mmengine-lite==0.10.7 yapf==0.43.0 platformdirs==4.14.9 termcolor==3.3.0 \
  pycocotools==2.0.11 shapely==2.2.0 terminaltables==3.1.10 parameterized==0.9.0 \
  tomli==2.5.0
# parameterized: mmengine's upstream tests; tomli: recipes/mmstack
# requires it (pyproject's `tomli>=2; python_version < '3.11'`, which a noarch package cannot carry)
tmp="$(mktemp -d)"
for w in "$C"/big/*.whl; do unzip -q -o "$w" -d "$tmp/site"; done
# the Rust extensions ship their symbol tables (167 MB unpacked); stripped, the archive is ~22 MB
# instead of ~30 and the carry fits the 64 MiB a device call takes beside the tree
find "$tmp/site" -name '*.so' -exec strip --strip-unneeded {} +
tar cf - -C "$tmp" site | xz -T0 -9 > "$C/site.tar.xz"
rm -rf "$tmp" "$C/big"
# sources, checked against the sha256 the recipes name (lab/src/mmstack_lab/standin/offline.py)
PYTHONPATH="$ROOT/lab/src" "$PY" - "$C/sdist" <<'PY'
import shutil, sys
from pathlib import Path
from mmstack_lab.standin import offline
dest = Path(sys.argv[1])
for p in (offline.cached_sdist("mmcv"), offline.cached_sdist("mmdet"), offline.cached_sdist("mmengine"),
          offline.cached_github_archive()):
    shutil.copy(p, dest / p.name)
PY
du -sh "$C"; ls -la "$C" "$C/sdist"
