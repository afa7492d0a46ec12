#!/usr/bin/env bash
# Issue 16 on the lent H200: recipes/mmcv built for CUDA by the recipe itself (rattler-build, the
# recipe's compiler('cuda'), host requirements, sandbox and test section) and checked on the GPU.
#
#   bash scripts/gpu-proof.sh                 # all stages, in the foreground
#   bash scripts/gpu-proof.sh --start 540     # detached (setsid), then collect for 540 s
#   bash scripts/gpu-proof.sh --collect 540   # a later call on the same machine: collect again
#
# Prefer one call per stage set, in the foreground: a call that only collects must come within
# the machine's 30 s idle release, and twice a tool delay lost the run (recipe-run3, -run4).
# Sets that each fit one 600 s call (OUT set: results as one archive $OUT/res.tgz, rewritten at
# every stage boundary, our packages under $OUT/packages, which the next call carries as
# $CARRY/packages; a call returns at most 8 files, so loose result files would be lost):
#   STAGES="channel noarch sm90 mmdet install90"          # ~480 s
#   STAGES="channel seed ptx installptx"                  # ~450 s (seed: the call above's packages)
#   STAGES="channel seed install90 ladderbench bench"     # ~480 s
#   STAGES="channel seed install90 patchab"                # ~400 s
#
# The machine has no network, so conda-forge is replaced by a STAND-IN channel assembled from
# the machine's own CPython, torch (+ nvidia-* libraries) and CUDA toolkit and the carried wheels
# (tests/support/bootstrap_cuda.py; every package says STAND-IN in its metadata). Stages:
#   channel   the stand-in channel (stand-in.json: what it holds, sizes, seconds)
#   noarch    mmstack (noarch), built and tested here with python_min set to this machine's
#             Python (`--variant python_min=3.12`: the stand-in channel has no 3.11)
#   sm90      `mmstack build` of recipes/mmcv for CUDA 13.0 / sm_90 (the h100 row's arch set,
#             CUDA/python/pytorch set to this machine's by --variant): tests on the GPU, upstream's
#             tests/test_ops among them; then the patched mmdet (noarch) with its tests (a Faster
#             R-CNN step on the GPU against the mmcv just landed)
#   mmengine  recipes/mmengine (noarch: safe checkpoint loading), with its tests (the checkpoint
#             cycle of a torch-only model); before mmdet, which requires it
#   install90 the .conda into a fresh prefix with py-rattler (+ mmdet, mmengine, mmstack), then
#             `mmstack verify --expect-gpu --levels L1..L5 --model faster-rcnn,faster-rcnn-mdconv`
# SM90_NOTEST=1: the sm90 stage builds without the recipe's test section (notest.txt says so).
#   ckpt      in that prefix: `mmstack verify --expect-gpu --levels L6 --model faster-rcnn,faster-rcnn-mdconv`
#             (checkpoints saved, loaded, resumed, tested, fine-tuned from an old-format file; ~2 min)
#   ptx       the same recipe for `8.0+PTX` (runs on sm_90 only through the driver's JIT)
#   fat       the same recipe for the fat variant (arch_tag all, the stand-in pytorch's arch list),
#             with its tests; over 600 s on 16 cores: `STAGES="channel noarch fat" ... --start 560`, then
#             `--collect 570` calls back to back (issue 24 item 3: recipe-fat1, -fat2, -fat3); a second
#             fat build on the same warm machine: `rm -rf $WORK/channel; STAGES="noarch fat" ... --start`
#   installptx  as install90, for the PTX build, plus `mmstack arch check` for the prediction
#   seed      the .conda files of an earlier call ($CARRY/packages, as `--collect` returned them
#             under $OUT/packages) added to the channel instead of rebuilding them
#   bench     (runs last) ops against torchvision (bench_ops --full), detector it/s against torchvision at
#             batch 2, 8 and 16 with each iteration split into stages (detector_stages.py), a
#             profile of both
#   ladderbench  mmstack_lab.overhead.bench_ladder in the sm_90 prefix (the ladder against a bare import)
#   nmsanatomy   mmstack_lab.ops.nms_anatomy: released vs patched (recipes/mmcv/patches/0008) nms kernels
#   runneroh  mmstack_lab.detector.runner_overhead --device cuda: mmengine's Runner, hooks, logging and
#             the DataLoader per iteration, in the sm_90 prefix (~1 min)
#   detops    mmstack_lab.detector.detector_ops --device cuda at batch 2 and 8: ops per stage, the host
#             waits among them and torch's own count of synchronising calls (~1 min)
#   detprocs  bench_detector.py --processes at DETPROCS_BATCHES (default "8 16 2"), DETPROCS_PAIRS
#             ABBA pairs of fresh processes each (default 10): over 600 s, so `--start`/`--collect`
#   patchab   mmstack_lab.ops.patch_ab for each recipes/{mmcv,mmdet}/proposed/*.patch whose header
#             has a `patch_ab:` line (the Python-level candidates), against the installed sm_90
#             prefix: op times, gradients, upstream tests, detector it/s, released vs patched
# Results go to $RES (default /tmp/res); in the foreground (OUT set) and with `--start`/`--collect`
# they come back as one archive, $OUT/res.tgz.
# PROPOSED=1: the mmcv and mmdet builds apply recipes/<name>/proposed/*.patch too (candidates get
# upstream's tests, L4 and L5 on the GPU in the sandbox before they enter; proposed.txt names them).
# NVCC_EXTRA="...": nvcc flags appended to build.sh's own in the run's copy of the recipe (the fat
# build with `--compress-mode=size` or `--threads 0`; nvcc_extra.txt names them).
# NOTEST_FALLBACK=1: if the sm_90 sandbox tests fail, rebuild without them (tag sm90nt) so the
# installed-prefix ladder still runs (on an untested package; its files say sm90nt).
# Summary: python -m mmstack_lab.proof.gpu_proof_summary RESULTS_DIR > RESULTS_DIR/summary.json
#
# Layout expected on the device (the checkout that travels is main's; this tree is carried):
#   $CARRY/wheels/*.whl (the pure/cp312 wheels the image lacks), $CARRY/site.tar.xz (optional:
#   py-rattler, py-rattler-build and their pure deps unpacked, xz-compressed to fit one call's
#   64 MiB; else their wheels in $CARRY/wheels), $CARRY/sdist/{mmcv-2.2.0,mmdet-3.3.0}.tar.gz and
#   mmcv-2.2.0.github.tar.gz (upstream's tag archive: the mmcv recipe's second source)
#   e.g. from the repository root: CARRY=$PWD/.carry bash scripts/gpu-proof.sh --start 540
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARRY="${CARRY:-$(dirname "$ROOT")}"
# run in the foreground by a device call (OUT set, no --start/--collect): hand_back packs the
# results into $OUT at every stage boundary, so a call that runs out of time still returns what
# its finished stages wrote (a call returns at most 8 files: recipe-run5 lost 25 loose ones)
FOREGROUND=""
if [[ -n "${OUT:-}" && "${1:-}" != --start && "${1:-}" != --collect ]]; then FOREGROUND=1; fi
RES="${RES:-/tmp/res}"
W="${WORK:-/tmp/gp}"
PY="${PY:-python3}"
STAGES="${STAGES:-channel noarch sm90 mmdet install90 ptx installptx}"  # + bench when time allows
DONE="$RES/DONE"

copy_ours() {  # copy_ours DEST: our packages in the channel (mmcv, mmdet, mmstack; never the stand-ins)
  [[ -d "$W/channel" ]] || return 0
  mkdir -p "$1"
  find "$W/channel" \( -name 'mmcv-*.conda' -o -name 'mmdet-*.conda' -o -name 'mmstack-*.conda' -o -name 'mmengine-*safeload_*.conda' \) -exec cp {} "$1/" \;
}
hand_back() {  # foreground only: $RES as one $OUT/res.tgz (replaced whole) and our packages
  [[ -n "$FOREGROUND" ]] || return 0
  tar czf "$OUT/.res.tgz.part" -C "$RES" . 2>/dev/null && mv -f "$OUT/.res.tgz.part" "$OUT/res.tgz"
  copy_ours "$OUT/packages"
}
collect() {  # wait up to $1 s for the detached run, then hand $RES back through $OUT
  local until=$((SECONDS + ${1:-540}))
  while [[ ! -e "$DONE" && $SECONDS -lt $until ]]; do sleep 2; done
  mkdir -p "${OUT:-/tmp/out}"
  tar czf "${OUT:-/tmp/out}/res.tgz" -C "$RES" . 2>/dev/null
  # the packages built here come back too (not into the results): a later call carries them as
  # $CARRY/packages and its `seed` stage puts them in the channel instead of rebuilding
  # (once the builds are over: channel_files.txt is written after the PTX build; the stand-in
  # packages are not ours and are rebuilt in a minute)
  if [[ -e "$DONE" || -e "$RES/channel_files.txt" ]]; then copy_ours "${OUT:-/tmp/out}/packages"; fi
  cp /tmp/gpu-proof.out "${OUT:-/tmp/out}/gpu-proof.out" 2>/dev/null
  echo "--- status: $(cat "$RES/STATUS" 2>/dev/null) done=$([[ -e $DONE ]] && echo yes || echo no)"
  tail -40 /tmp/gpu-proof.out 2>/dev/null
}
case "${1:-}" in
  --start)
    rm -rf "$RES"; mkdir -p "$RES"
    setsid nohup bash "${BASH_SOURCE[0]}" > /tmp/gpu-proof.out 2>&1 < /dev/null &
    collect "${2:-540}"; exit 0 ;;
  --collect)
    collect "${2:-540}"; exit 0 ;;
esac

mkdir -p "$RES" "$W"
status() { echo "$(date +%T) $*" | tee -a "$RES/STATUS"; hand_back; }
want() { [[ " $STAGES " == *" $1 "* ]]; }
# in the foreground, results and our packages come back however the run ends: a later call
# carries the packages as $CARRY/packages (the `seed` stage)
trap 'touch "$DONE"; hand_back' EXIT

# --- tools: py-rattler(-build) and what mmstack needs, without leaking into the builds ----------
# (SKIP_PIP=1 where the running python has them already)
SITE="$W/site"
if [[ -z "${SKIP_PIP:-}" ]]; then
  mkdir -p "$SITE"
  if [[ -f "$CARRY/site.tar.xz" ]]; then tar xJf "$CARRY/site.tar.xz" -C "$SITE" --strip-components=1 || { status "FAIL site.tar.xz"; exit 1; }; fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    $(compgen -G "$CARRY/wheels/py_rattler*.whl") "$CARRY"/wheels/pydantic*.whl "$CARRY"/wheels/annotated_types*.whl \
    "$CARRY"/wheels/typing_inspection*.whl "$CARRY"/wheels/pyelftools*.whl "$CARRY"/wheels/zstandard*.whl || { status "FAIL pip install"; exit 1; }
fi
SP="$SITE:$ROOT/src:$ROOT/tests"
# the lab (lab/src: `python -m mmstack_lab.<question>.<tool>`): on PYTHONPATH where a lab tool runs;
# timed.py and ninja_units.py import only the standard library and run by path
LAB="$ROOT/lab/src"
# mmstack's CLI with the carried packages: PYTHONPATH for this interpreter only, which drops it from
# the environment before anything starts (its children, the recipe's tests among them, must use the
# mmstack package built into the channel, not this tree).
MM=(env "PYTHONPATH=$SP" "$PY" -c 'import os, sys; del os.environ["PYTHONPATH"]; sys.argv[0] = "mmstack"; from mmstack.cli import main; sys.exit(main())')
PYV=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
TV=$("$PY" -c 'import torch; print(".".join(torch.__version__.split(".")[:2]))' 2>/dev/null)
CV=$("$PY" -c 'import torch; print(".".join(torch.version.cuda.split(".")[:2]))' 2>/dev/null)
GCCMAJOR=$(gcc -dumpversion | cut -d. -f1)
VARIANT=(--variant "python=$PYV" --variant "pytorch=$TV" --variant "cuda_compiler_version=$CV")
# the matrix's c_stdlib_version for this CUDA (zipped with cuda_compiler_version: 2.28 for 13.0)
CSTD=$("$PY" -c 'import sys, yaml
c = yaml.safe_load(open(sys.argv[1])); cv = [str(x) for x in c["cuda_compiler_version"]]
s = c.get("c_stdlib_version", [])
print(s[cv.index(sys.argv[2])] if len(s) == len(cv) and sys.argv[2] in cv else "")' "$ROOT/conda_build_config.yaml" "$CV")
[[ -n "$CSTD" ]] && VARIANT+=(--variant "c_stdlib_version=$CSTD")
# the recipe's tests take torchvision (L4's references) unless the channel cannot have it
"$PY" -c 'import torchvision' 2>/dev/null || export MMSTACK_NO_TORCHVISION=1
if grep -q '^c_compiler_version' "$ROOT/conda_build_config.yaml"; then
  VARIANT+=(--variant "c_compiler_version=$GCCMAJOR" --variant "cxx_compiler_version=$GCCMAJOR")
fi
{ nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -2; echo "nvcc: $(readlink -f "$(command -v nvcc)")"; gcc --version | head -1
  "$PY" -c 'import sys, torch; print(sys.version.split()[0], sys.executable, sys._base_executable, torch.__version__, torch.version.cuda)'
  echo "cores: $(nproc)"; echo "variant: ${VARIANT[*]}"; echo "MMSTACK_NO_TORCHVISION=${MMSTACK_NO_TORCHVISION:-}"
  # the commit the tree was sent from (.gpu-commit, written before the run by `bash scripts/tree-digest.sh
  # --gpu-commit`: the device's git metadata is the session's base commit, not the working tree's),
  # checked against this tree's digest
  echo "tree: $(head -1 "$ROOT/.gpu-commit" 2>/dev/null || git -C "$ROOT" log -1 --oneline 2>/dev/null)"
  here=$(bash "$ROOT/scripts/tree-digest.sh"); sent=$(sed -n 's/^digest //p' "$ROOT/.gpu-commit" 2>/dev/null)
  if [[ -z "$sent" ]]; then echo "tree_digest: $here (.gpu-commit has no digest: unchecked)"
  elif [[ "$sent" == "$here" ]]; then echo "tree_digest: $here (matches .gpu-commit)"
  else echo "tree_digest: $here (STALE: .gpu-commit names $sent; the tree changed after it was written)"; fi
} > "$RES/machine.txt" 2>&1
status "start: python $PYV torch $TV cuda $CV gcc $GCCMAJOR"

BOOT="$W/standin"; CH="$W/channel"
if want channel; then
  status "channel"
  PYTHONPATH="$SITE:$ROOT/tests" "$PY" "$LAB/mmstack_lab/common/timed.py" --json "$RES/standin_time.json" -- \
    "$PY" -m support.bootstrap_cuda "$BOOT" --wheels "$CARRY/wheels" --json "$RES/standin.json" \
    > "$RES/standin.log" 2>&1 || { status "FAIL channel"; tail -30 "$RES/standin.log"; exit 1; }
fi

# offline copies of the recipes that download a source (same sha256, a file:// URL)
mkdir -p "$W/cache/sdist" && cp "$CARRY"/sdist/*.tar.gz "$W/cache/sdist/"
rm -rf "$W/recipes"
MMSTACK_TEST_CACHE="$W/cache" PYTHONPATH="$SP" "$PY" -c 'import sys
from pathlib import Path
from support import offline
root, w = Path(sys.argv[1]), Path(sys.argv[2])
for n in ("mmengine", "mmcv", "mmdet"):
    offline.offline_recipe_for(n, root / "recipes" / n, w / "recipes" / n)' "$ROOT" "$W" \
  || { status "FAIL offline recipes"; exit 1; }
if [[ -n "${NVCC_EXTRA:-}" ]]; then
  # NVCC_EXTRA="--compress-mode=size" (or "--threads 0"): an experiment's nvcc flags, appended in the
  # run's copy of the recipe to the flags build.sh hands nvcc (issue 24 item 3: the fat build with
  # and without them). The packages keep their names: nvcc_extra.txt and STATUS say what was added.
  sed -i "s|-Xfatbin -compress-all\"|-Xfatbin -compress-all ${NVCC_EXTRA}\"|" "$W/recipes/mmcv/build.sh"
  grep -qF -- "-compress-all ${NVCC_EXTRA}\"" "$W/recipes/mmcv/build.sh" || { status "FAIL NVCC_EXTRA: build.sh's flag line not found"; exit 1; }
  echo "$NVCC_EXTRA" > "$RES/nvcc_extra.txt"
  status "NVCC_EXTRA: build.sh hands nvcc '-Xfatbin -compress-all ${NVCC_EXTRA}'"
fi
if [[ -n "${PROPOSED:-}" ]]; then
  # PROPOSED=1: the mmcv and mmdet builds also apply recipes/<name>/proposed/*.patch (after the
  # recipe's own), so a candidate runs upstream's tests, L4 and L5 in the sandbox on the GPU before
  # it enters its recipe; proposed.txt names them (package names do not change: results say so)
  : > "$RES/proposed.txt"
  for n in mmcv mmdet; do
    last=$(grep -n '^ *- patches/0' "$W/recipes/$n/recipe.yaml" | tail -1)
    indent=$(sed 's/^[0-9]*:\( *\)-.*/\1/' <<< "$last"); last=${last%%:*}
    for p in "$ROOT/recipes/$n/proposed/"*.patch; do
      [[ -e "$p" ]] || continue
      cp "$p" "$W/recipes/$n/patches/"
      sed -i "${last}a\\${indent}- patches/$(basename "$p")" "$W/recipes/$n/recipe.yaml"; last=$((last + 1))
      echo "$(sha256sum "$p" | cut -c1-64) $n/$(basename "$p")" >> "$RES/proposed.txt"
    done
  done
  status "PROPOSED: $(wc -l < "$RES/proposed.txt") candidate patch(es) in the mmcv and mmdet builds"
fi

build() {  # build TAG [mmstack build args...]: one timed `mmstack build` with its full log
  local tag=$1; shift
  "$PY" "$LAB/mmstack_lab/common/timed.py" --json "$RES/build_time_$tag.json" -- "${MM[@]}" build --root "$ROOT" \
    --source-channel "$BOOT" --channel "$CH" --log "$RES/rattler-build-$tag.log" --json "$@" \
    > "$RES/build_$tag.json" 2> "$RES/build_$tag.err"
}

if want noarch; then
  # mmstack first: the mmcv recipe's tests run `mmstack verify` and the upstream-tests runner from it
  status "noarch: mmstack (python_min $PYV, with its tests)"
  build noarch --env h100 --recipe "$ROOT/recipes/mmstack" "${VARIANT[@]}" --variant "python_min=$PYV" \
    || { status "FAIL noarch"; tail -20 "$RES/build_noarch.err"; exit 1; }
fi

if want seed; then
  status "seed: $(ls "$CARRY"/packages/*.conda 2>/dev/null | wc -l) carried packages into the channel"
  rm -rf "$W/seedpkgs"; mkdir -p "$W/seedpkgs"; cp "$CARRY"/packages/*.conda "$W/seedpkgs/"
  PYTHONPATH="$SP" "$PY" - "$CH" "$W"/seedpkgs/*.conda > "$RES/seed.txt" 2>&1 <<'EOF' || { status "FAIL seed"; exit 1; }
import sys
from mmstack.builder import channel
channel.ensure_channel(sys.argv[1], create=True)
for p in channel.add_packages(sys.argv[1], sys.argv[2:]):
    print(p.name)
EOF
fi

units() {  # units TAG WORKDIR: per-unit compile times from the kept build tree's ninja log
  local log; log=$(find "$2" -name .ninja_log 2>/dev/null | head -1)
  [[ -n "$log" ]] && "$PY" "$LAB/mmstack_lab/build_cost/ninja_units.py" "$log" --json --top 1000 > "$RES/units_$1.json"
}

verify_prefix() {  # verify_prefix TAG PREFIX SPEC...: install into a fresh prefix and run the ladder there
  local tag=$1 prefix=$2; shift 2
  rm -rf "$prefix"
  PYTHONPATH="$SP" "$PY" - "$CH" "$BOOT" "$prefix" "$@" > "$RES/install_$tag.json" 2> "$RES/install_$tag.err" <<'EOF'
import json, sys, time
from mmstack.builder import channel
ch, boot, prefix, specs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
t = time.monotonic()
recs = channel.install(specs, [ch, boot], prefix)
print(json.dumps({"specs": specs, "prefix": prefix, "seconds": round(time.monotonic() - t, 1), "installed": recs}, indent=1))
EOF
  [[ -x "$prefix/bin/mmstack" ]] || { status "FAIL install $tag"; tail -5 "$RES/install_$tag.err"; return 1; }
  local envp=(env -u PYTHONPATH -u VIRTUAL_ENV -u PYTHONHOME "PATH=$prefix/bin:/usr/local/bin:/usr/bin:/bin")
  "${envp[@]}" "$prefix/bin/python" "$LAB/mmstack_lab/common/timed.py" --json "$RES/verify_time_$tag.json" -- \
    "$prefix/bin/mmstack" verify --expect-gpu --levels L1,L2,L3,L4,L5 --model faster-rcnn,faster-rcnn-mdconv --json \
    > "$RES/verify_installed_$tag.json" 2> "$RES/verify_installed_$tag.err"
  local rc=$?
  "${envp[@]}" "$prefix/bin/mmstack" verify --expect-gpu --levels L1,L2,L3,L4 --l4 complete --json \
    > "$RES/l4complete_$tag.json" 2> "$RES/l4complete_$tag.err" || rc=1
  "${envp[@]}" "$prefix/bin/mmstack" doctor --json > "$RES/doctor_$tag.json" 2>&1
  local ext; ext=$("${envp[@]}" "$prefix/bin/python" -c 'import importlib.util as u; print(u.find_spec("mmcv._ext").origin)' 2>/dev/null)
  "${envp[@]}" "$prefix/bin/mmstack" fatbin "$ext" --json > "$RES/fatbin_$tag.json" 2>&1
  { cuobjdump --list-elf "$ext" | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/' | sort | uniq -c; echo "ptx entries: $(cuobjdump --list-ptx "$ext" 2>/dev/null | wc -l)"
    du -b "$ext"; } > "$RES/cuobjdump_$tag.txt" 2>&1
  status "verify $tag rc=$rc"
  return $rc
}

if want sm90; then
  status "sm90: mmcv cuda$CV sm_90 (tests in the sandbox on the GPU)"
  rm -rf "$W/work90"
  # SM90_NOTEST=1: without the recipe's test section (a short lease for the stages after it; the
  # recipe's sm_90 tests ran on this GPU before, recipe-run9): STATUS and notest.txt say so
  NT=(); [[ -n "${SM90_NOTEST:-}" ]] && { NT=(--no-test); echo "sm90 built with --no-test" > "$RES/notest.txt"; }
  build sm90 --env h100 --recipe "$W/recipes/mmcv" "${NT[@]}" --keep-build --work-dir "$W/work90" "${VARIANT[@]}"
  rc=$?; units sm90 "$W/work90"; status "sm90 build rc=$rc${SM90_NOTEST:+ (--no-test)}"
  rm -rf "$W/work90"
  if [[ $rc != 0 && -n "${NOTEST_FALLBACK:-}" ]]; then
    # the same recipe and variant without its test section (tag sm90nt): the installed-prefix
    # ladder then runs on a package that is NOT the tested one; results say so by their tag
    status "sm90nt: the same build with --no-test (the sandbox tests failed)"
    rm -rf "$W/work90"
    build sm90nt --env h100 --recipe "$W/recipes/mmcv" --no-test --keep-build --work-dir "$W/work90" "${VARIANT[@]}"
    rc=$?; units sm90nt "$W/work90"; status "sm90nt build rc=$rc"
    rm -rf "$W/work90"
  fi
  [[ $rc == 0 ]] || { tail -30 "$RES/build_sm90.err"; exit 1; }
fi
if want mmengine; then
  # noarch mmengine (safe checkpoint loading), tested with the checkpoint cycle; mmdet requires it
  status "mmengine: patched mmengine 0.10.7 (python_min $PYV, with its tests)"
  build mmengine --env h100 --recipe "$W/recipes/mmengine" "${VARIANT[@]}" --variant "python_min=$PYV" \
    || { status "FAIL mmengine"; tail -20 "$RES/build_mmengine.err"; }
fi
if want mmdet; then
  # noarch mmdet, tested on the mmcv that just landed (its test trains Faster R-CNN on the GPU)
  status "mmdet: patched mmdet 3.3.0 (python_min $PYV, with its tests)"
  if ! build mmdet --env h100 --recipe "$W/recipes/mmdet" "${VARIANT[@]}" --variant "python_min=$PYV"; then
    status "FAIL mmdet (tests); mmdetnt: the same build with --no-test, so the prefixes below can install"
    tail -20 "$RES/build_mmdet.err"
    build mmdetnt --env h100 --recipe "$W/recipes/mmdet" --no-test "${VARIANT[@]}" --variant "python_min=$PYV"
  fi
fi
if want fat; then
  # issue 24 item 3: the fat variant (arch_tag all). build.sh takes a fat build's arch list from
  # the host pytorch (CF_TORCH_CUDA_ARCH_LIST): here the stand-in's, torch.cuda.get_arch_list() of
  # this machine's torch (tests/support/bootstrap_cuda.py), so the variant names that list. Too
  # long for one call: run detached (`--start`, then `--collect` calls back to back).
  FAT="${FAT_ARCH_LIST:-$(PYTHONPATH="$ROOT/tests" "$PY" -c 'from support.bootstrap_cuda import cf_arch_list; print(cf_arch_list())')}"
  status "fat: mmcv cuda$CV $FAT (tests in the sandbox on the GPU)"
  rm -rf "$W/workfat"
  build fat --env h100 --recipe "$W/recipes/mmcv" --keep-build --work-dir "$W/workfat" "${VARIANT[@]}" \
    --variant "mmcv_arch_list=$FAT" --variant "arch_tag=all"
  rc=$?; units fat "$W/workfat"; status "fat build rc=$rc"
  rm -rf "$W/workfat"
  # where the bytes are: the fat .conda against the sm_90 one where the channel has it (seed)
  PYTHONPATH="$SP:$LAB" "$PY" -m mmstack_lab.build_cost.conda_sizes $(find "$CH" -name 'mmcv-*_all_*.conda' -o -name 'mmcv-*_sm90_*.conda') \
    > "$RES/conda_sizes.json" 2> "$RES/conda_sizes.err"
fi
ptx_stage() {
  status "ptx: mmcv cuda$CV 8.0+PTX"
  rm -rf "$W/workptx"
  build ptx --env h100 --recipe "$W/recipes/mmcv" --keep-build --work-dir "$W/workptx" "${VARIANT[@]}" \
    --variant "mmcv_arch_list=8.0+PTX" --variant "arch_tag=sm80ptx"
  local rc=$?; units ptx "$W/workptx"; status "ptx build rc=$rc"
  rm -rf "$W/workptx"
  return $rc
}
# The PTX build compiles while the sm_90 package is installed and its ladder runs (device time is
# short): its wall time is therefore not a clean number; the sm_90 build ran alone.
PTX_PID=""
if want ptx; then ptx_stage & PTX_PID=$!; fi
if want install90; then
  status "install90"
  # pytest too: mmstack_lab.ops.patch_ab runs upstream's tests in this prefix
  verify_prefix sm90 "$W/p90" "mmcv ==2.2.0 cuda*_sm90_*" mmdet mmstack pytest "python $PYV.*"
fi
if want ckpt && [[ -x "$W/p90/bin/mmstack" ]]; then
  # the ladder's L6 in the installed prefix: the toy model and both detectors through mmengine's Runner
  status "ckpt"
  env -u PYTHONPATH -u VIRTUAL_ENV -u PYTHONHOME "PATH=$W/p90/bin:/usr/local/bin:/usr/bin:/bin" \
    "$W/p90/bin/mmstack" verify --expect-gpu --levels L6 --model faster-rcnn,faster-rcnn-mdconv --timeout 500 --json \
    > "$RES/ckpt_sm90.json" 2> "$RES/ckpt_sm90.err"
  status "ckpt rc=$?"
fi
if [[ -n "$PTX_PID" ]]; then wait "$PTX_PID"; fi
find "$CH" -name '*.conda' -printf '%s %p\n' > "$RES/channel_files.txt"
if want installptx; then
  status "installptx"
  "${MM[@]}" arch check --gpu H200 --arch-list "8.0+PTX" --cuda "$CV" --json > "$RES/arch_check_ptx.json" 2>&1
  "${MM[@]}" arch check --gpu H200 --arch-list "9.0" --cuda "$CV" --json > "$RES/arch_check_sm90.json" 2>&1
  verify_prefix ptx "$W/pptx" "mmcv ==2.2.0 cuda*_sm80ptx_*" mmdet mmstack "python $PYV.*"
fi
if want ladderbench && [[ -x "$W/p90/bin/python" ]]; then
  # issue 20 item 3: the ladder's cost against a bare import, in the installed prefix
  status "ladderbench"
  # (this tree's mmstack first, as the tool always ran it: src/ on PYTHONPATH)
  env -u VIRTUAL_ENV "PYTHONPATH=$ROOT/src:$LAB" "PATH=$W/p90/bin:/usr/local/bin:/usr/bin:/bin" timeout 240 "$W/p90/bin/python" \
    -m mmstack_lab.overhead.bench_ladder --runs 3 --machine H200 --out "$RES/bench_ladder_sm90.json" > "$RES/bench_ladder_sm90.out" 2>&1
  status "ladderbench rc=$?"
fi
if want nmsanatomy; then
  # issue 24: released vs patched nms kernels, step by step (mmstack_lab.ops.nms_anatomy)
  status "nmsanatomy"
  PYTHONPATH="$LAB" timeout 400 "$PY" -m mmstack_lab.ops.nms_anatomy --sdist "$CARRY/sdist/mmcv-2.2.0.tar.gz" --json \
    > "$RES/nms_anatomy.json" 2> "$RES/nms_anatomy.err"
  status "nmsanatomy rc=$?"
fi
# torchvision is not in the prefix: the machine's own, built for the same torch, on a side path
tvonly() {
  local tv; tv=$("$PY" -c 'import torchvision, os; print(os.path.dirname(torchvision.__file__))')
  mkdir -p "$W/tvonly" && ln -sfn "$tv" "$W/tvonly/torchvision"
}
benv=(env -u VIRTUAL_ENV "PYTHONPATH=$W/tvonly:$LAB" "PATH=$W/p90/bin:/usr/local/bin:/usr/bin:/bin")
if want patchab && [[ -x "$W/p90/bin/python" ]]; then
  # issue 24: each Python-level candidate (recipes/mmcv/proposed/) against the installed sm_90 mmcv,
  # with the arguments its header names (mmstack_lab.ops.patch_ab)
  status "patchab"
  tvonly
  for p in "$ROOT"/recipes/mmcv/proposed/*.patch "$ROOT"/recipes/mmdet/proposed/*.patch; do
    [[ -e "$p" ]] && grep -q '^patch_ab:' "$p" || continue  # Python-level candidates name their A/B; CUDA ones need PROPOSED=1
    n="$(basename "$(dirname "$(dirname "$p")")")-$(basename "$p" .patch)"  # mmcv-0010-..., mmdet-0003-...
    "${benv[@]}" timeout 420 "$W/p90/bin/python" -m mmstack_lab.ops.patch_ab --patch "$p" --device cuda \
      --upstream "$CARRY/sdist/mmcv-2.2.0.github.tar.gz" --json > "$RES/patchab_$n.json" 2> "$RES/patchab_$n.err"
    status "patchab $n rc=$?"
  done
fi
if want detops && [[ -x "$W/p90/bin/python" ]]; then
  # issue 24 item 2: what each stage dispatches and where the host waits (cuda_syncs: torch's count)
  status "detops"
  tvonly
  for bs in 2 8; do
    "${benv[@]}" timeout 240 "$W/p90/bin/python" -m mmstack_lab.detector.detector_ops --device cuda --batch-size "$bs" \
      --json > "$RES/detector_ops_bs${bs}_sm90.json" 2> "$RES/detector_ops_bs${bs}_sm90.err"
    status "detops bs$bs rc=$?"
  done
fi
if want runneroh && [[ -x "$W/p90/bin/python" ]]; then
  # issue 24 item 2: what mmengine's Runner, hooks and logging and the DataLoader add per iteration
  status "runneroh"
  "${benv[@]}" timeout 300 "$W/p90/bin/python" -m mmstack_lab.detector.runner_overhead --device cuda --json \
    > "$RES/runner_overhead_sm90.json" 2> "$RES/runner_overhead_sm90.err"
  status "runneroh rc=$?"
fi
if want detprocs && [[ -x "$W/p90/bin/python" ]]; then
  # issue 24 item 2: mmdet against torchvision with each side in fresh child processes, ABBA
  # (bench_detector.py --processes; ~20-40 s a child): DETPROCS_BATCHES, DETPROCS_PAIRS; after the
  # short stages (detops, runneroh), so a machine taken back mid-run leaves those
  status "detprocs"
  tvonly
  pairs="${DETPROCS_PAIRS:-10}"
  for bs in ${DETPROCS_BATCHES:-8 16 2}; do  # a child: imports, model, warm-up, 2 x 10 iterations (~20-30 s)
    "${benv[@]}" timeout $((60 * pairs + 60)) "$W/p90/bin/python" -m mmstack_lab.detector.bench_detector --device cuda --batch-size "$bs" \
      --iters 10 --repeats 2 --processes "$pairs" --json > "$RES/detprocs_bs${bs}_sm90.json" 2> "$RES/detprocs_bs${bs}_sm90.err"
    status "detprocs bs$bs rc=$?"
  done
fi
if want bench && [[ -x "$W/p90/bin/python" ]]; then
  status "bench"
  tvonly
  "${benv[@]}" timeout 240 "$W/p90/bin/python" -m mmstack_lab.ops.bench_ops --device cuda --full --json > "$RES/ops_full_sm90.json" 2> "$RES/ops_full_sm90.err"
  for bs in 2 8 16; do  # issue 24: batch sizes where the GPU is busy as well as where it is not
    "${benv[@]}" timeout 240 "$W/p90/bin/python" -m mmstack_lab.detector.bench_detector --device cuda --batch-size "$bs" \
      --repeats 3 --iters 10 --json > "$RES/detector_bs${bs}_sm90.json" 2> "$RES/detector_bs${bs}_sm90.err"
    "${benv[@]}" timeout 180 "$W/p90/bin/python" -m mmstack_lab.detector.detector_stages --device cuda --batch-size "$bs" \
      --json > "$RES/stages_bs${bs}_sm90.json" 2> "$RES/stages_bs${bs}_sm90.err"
  done
  "${benv[@]}" timeout 180 "$W/p90/bin/python" -m mmstack_lab.detector.profile_detector --device cuda --iters 10 > "$RES/profile_sm90.json" 2> "$RES/profile_sm90.err"
  # kernel shares where the GPU is busy too (issue 24 item 2)
  "${benv[@]}" timeout 180 "$W/p90/bin/python" -m mmstack_lab.detector.profile_detector --device cuda --iters 5 --batch-size 8 \
    > "$RES/profile_bs8_sm90.json" 2> "$RES/profile_bs8_sm90.err"
  status "bench done"
fi
status "end"
