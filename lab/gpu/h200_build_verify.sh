#!/usr/bin/env bash
# Issue 8, run 1 on the lent H200 (device tool): the recipe's own build.sh for the h100 arch set
# outside conda against the machine's torch, then the ladder L1-L5, fatbin vs cuobjdump, the
# get_compiler_version crash evidence, op timings and start-up timings. Results go to $OUT.
#
#   device run (carry .whl .carry):  bash lab/gpu/h200_build_verify.sh
#
# .whl holds py3.12 wheels the image lacks (mmengine, addict, yapf, termcolor, pydantic,
# pyelftools, ...); .carry holds the mmcv 2.2.0 sdist (no network there).
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPO="$PWD"
FINAL="${OUT:-/tmp/out}"; mkdir -p "$FINAL"
# The device returns at most 8 files: results gather in one folder, re-packed after each step.
OUT=/tmp/res; mkdir -p "$OUT"
save() { tar czf "$FINAL/results_${TAG}.tgz" -C "$OUT" . ; }
ARCH="${ARCH:-9.0}"
TAG="${TAG:-sm90}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$REPO/src:$REPO/lab/src"  # mmstack and the lab (python3 -m mmstack_lab...)
mm() { python3 -m mmstack.cli "$@"; }

{ nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader; nvcc --version | tail -2
  gcc --version | head -1; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'; nproc
  echo "g++ shared libstdc++: $(g++ -print-file-name=libstdc++.so)"; ls "$(dirname "$(dirname "$(command -v g++)")")"/lib*/libstdc++* 2>&1 | head
} > "$OUT/machine.txt" 2>&1

# --- build with the recipe's build.sh ---------------------------------------------------------
rm -rf /tmp/b && mkdir -p /tmp/b && tar xzf .carry/mmcv-2.2.0.tar.gz -C /tmp/b
cd /tmp/b/mmcv-2.2.0
for p in "$REPO"/recipes/mmcv/patches/0*.patch; do patch -p1 -s < "$p" || exit 1; done
PYTHON=python3 MMSTACK_ARCH_LIST="$ARCH" CPU_COUNT=16 \
  python3 "$REPO/lab/src/mmstack_lab/common/timed.py" --json "$OUT/build_time_$TAG.json" -- bash "$REPO/recipes/mmcv/build.sh" > "$OUT/build_$TAG.log" 2>&1
tail -5 "$OUT/build_$TAG.log"; cat "$OUT/build_time_$TAG.json"
log=$(find /tmp/b/mmcv-2.2.0/build -name .ninja_log | head -1)
[ -n "$log" ] && python3 "$REPO/lab/src/mmstack_lab/build_cost/ninja_units.py" "$log" --json > "$OUT/units_$TAG.json"
cd "$REPO"
EXT=$(python3 -c 'import glob, os, mmcv; print(glob.glob(os.path.join(os.path.dirname(mmcv.__file__), "_ext*.so"))[0])')
ls -l "$EXT"; readelf -d "$EXT" | grep NEEDED > "$OUT/needed_$TAG.txt"

save
# --- fatbin: ours against cuobjdump -----------------------------------------------------------
mm fatbin "$EXT" --json > "$OUT/fatbin_$TAG.json" 2>&1
{ cuobjdump --list-elf "$EXT" | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/' | sort | uniq -c; cuobjdump --list-ptx "$EXT" | wc -l; } > "$OUT/cuobjdump_$TAG.txt" 2>&1

save
# --- the crash in get_compiler_version: evidence --------------------------------------------
{
  echo "== symbols in _ext"; nm -D "$EXT" | grep -E "get_compil|get_cudart" 
  echo "== other loaded libraries defining them"
  python3 - <<'PY'
import ctypes, os, subprocess, torch, mmcv.ops  # load everything mmcv.ops loads
maps = {l.split()[-1] for l in open("/proc/self/maps") if ".so" in l}
for lib in sorted(maps):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout
    hits = [l for l in out.splitlines() if "get_compiler_version" in l or "get_compiling_cuda_version" in l]
    if hits:
        print(lib, hits)
PY
  echo "== LD_DEBUG bindings"
  LD_DEBUG=bindings python3 -c "import mmcv.ops as o; print(o.get_compiler_version()); print(o.get_compiling_cuda_version())" 2>&1 | grep -E "get_compil|^GCC|^[0-9]+\.[0-9]" | head -20
  echo "rc=$?"
  echo "== cuda-gdb backtrace"
  timeout 120 cuda-gdb -batch -ex run -ex bt --args python3 -c "import mmcv.ops as o; print(o.get_compiler_version())" 2>&1 | tail -30
} > "$OUT/segv_$TAG.txt" 2>&1

save
# --- the ladder -------------------------------------------------------------------------------
mm verify --levels L1,L2,L3,L4,L5 --expect-gpu --json > "$OUT/verify_$TAG.json" 2> "$OUT/verify_$TAG.err"
echo "verify rc=$?"
mm doctor --json > "$OUT/doctor_$TAG.json" 2>&1

save
# --- timings (each later step only if time is left: the device allows 600 s a call) ---
left() { [ "$SECONDS" -lt "$1" ]; }
timeout 120 python3 -m mmstack_lab.ops.bench_ops --device cuda --json > "$OUT/ops_$TAG.json" 2>&1
save
left 420 && timeout 100 python3 -m mmstack_lab.overhead.bench_startup --device cuda --runs 3 --json > "$OUT/startup_$TAG.json" 2>&1
save
left 460 && timeout 90 python3 -c "import json; from mmstack.verify.distributed import run_distributed_step as r; print(json.dumps(r(nproc=1, steps=5), indent=2))" > "$OUT/dist1_$TAG.json" 2>&1
save
left 500 && timeout 90 python3 -m mmstack_lab.detector.bench_detector --device cuda --repeats 3 --iters 5 --json > "$OUT/detector_$TAG.json" 2>&1
du -b "$EXT" > "$OUT/size_$TAG.txt"
save
echo done
save
