#!/usr/bin/env bash
# Build mmcv with its compiled ops (mmcv._ext) for one variant of conda_build_config.yaml.
#
# The one build script: recipe.yaml (rattler-build) and meta.yaml (conda-build) both run
# `bash ${RECIPE_DIR}/build.sh` in the patched sdist. It also runs outside conda, against a
# system torch, from the unpacked and patched sdist:
#   PYTHON=python3 MMSTACK_ARCH_LIST="9.0" bash /path/to/recipes/mmcv/build.sh   # CUDA, sm_90
#   PYTHON=python3 FORCE_CUDA=0 bash /path/to/recipes/mmcv/build.sh              # CPU only
#
# Inputs (environment):
#   cuda_compiler_version  variant key ("None" = CPU variant); conda-forge's tools export it
#   MMSTACK_ARCH_LIST      the variant's mmcv_arch_list, e.g. "8.0;8.6;8.9;9.0;12.0+PTX"
#                          (recipe.yaml passes it; "none" or empty for the CPU variant)
#   MMSTACK_ARCH_TAG       the variant's arch_tag; "all" = a fat build, whose list must equal
#                          CF_TORCH_CUDA_ARCH_LIST, the arch list conda-forge's pytorch was built
#                          with (its libtorch activation script exports it into the host env)
#   FORCE_CUDA, CUDA_HOME  outside conda: say CUDA (1 / set) or CPU (FORCE_CUDA=0)
#   PYTHON, SRC_DIR, CPU_COUNT  set by conda tools; default to python3, $PWD and nproc
set -euxo pipefail

PYTHON="${PYTHON:-python3}"
SRC_DIR="${SRC_DIR:-$PWD}"
CPU_COUNT="${CPU_COUNT:-$(nproc)}"
cd "${SRC_DIR}"

die() {
  set +x
  echo "" >&2
  echo "mmstack build.sh: ERROR: $*" >&2
  exit 1
}

# --- variant: CUDA or CPU -------------------------------------------------------------------
arch_list="${MMSTACK_ARCH_LIST:-${mmcv_arch_list:-}}"
if [[ "${arch_list,,}" == "none" ]]; then
  arch_list=""
fi

if [[ -n "${cuda_compiler_version:-}" ]]; then
  # Inside conda the variant key decides; nothing else is trusted.
  if [[ "${cuda_compiler_version}" == "None" ]]; then with_cuda=0; else with_cuda=1; fi
elif [[ -n "${FORCE_CUDA:-}" ]]; then
  if [[ "${FORCE_CUDA}" == "1" ]]; then with_cuda=1; else with_cuda=0; fi
elif [[ -n "${arch_list}" || -n "${CUDA_HOME:-}" ]]; then
  with_cuda=1
else
  with_cuda=0
fi

if [[ "${with_cuda}" == "1" ]]; then
  if [[ -z "${arch_list}" ]]; then
    die "CUDA variant (cuda_compiler_version=${cuda_compiler_version:-unset}) has no arch list.
  Edit conda_build_config.yaml: give key mmcv_arch_list an entry for this row (it is zipped
  with cuda_compiler_version), e.g. \"8.0;8.6;8.9;9.0;12.0+PTX\"; \`mmstack check\` validates it.
  Outside conda, set MMSTACK_ARCH_LIST (same notation)."
  fi
  # One notation everywhere ("8.9", "9.0a", "12.0+PTX"); catch "sm_89" or "89" before torch
  # turns them into a confusing error deep inside cpp_extension.
  IFS=';' read -r -a archs <<< "${arch_list// /;}"
  for arch in "${archs[@]}"; do
    [[ -z "${arch}" ]] && continue
    if [[ ! "${arch}" =~ ^[0-9]+\.[0-9]+[af]?(\+PTX)?$ ]]; then
      die "mmcv_arch_list entry '${arch}' (in '${arch_list}') is not an arch like 8.9, 9.0a or 12.0+PTX.
  Edit key mmcv_arch_list in conda_build_config.yaml (or MMSTACK_ARCH_LIST outside conda)."
    fi
  done
  if [[ "${MMSTACK_ARCH_TAG:-}" == "all" && -n "${CONDA_BUILD:-}" ]]; then
    # A fat build carries what the host pytorch was built for, as torchvision-feedstock does
    # (build.sh: TORCH_CUDA_ARCH_LIST="${CF_TORCH_CUDA_ARCH_LIST}"). The matrix row states the
    # same list so `mmstack matrix/arch check` can reason about it; when a new pytorch build
    # changes its list, stop here instead of shipping a fat build that lags behind it.
    if [[ -z "${CF_TORCH_CUDA_ARCH_LIST:-}" ]]; then
      die "fat build (arch_tag all) but CF_TORCH_CUDA_ARCH_LIST is not set: the host pytorch's
  activation (etc/conda/activate.d/libtorch_activate.sh, conda-forge's CUDA pytorch) did not run
  or this pytorch is not conda-forge's CUDA build."
    fi
    if [[ "${CF_TORCH_CUDA_ARCH_LIST}" != "${arch_list}" ]]; then
      die "fat build: pytorch was built for CF_TORCH_CUDA_ARCH_LIST='${CF_TORCH_CUDA_ARCH_LIST}'
  but conda_build_config.yaml's mmcv_arch_list row (cuda_compiler_version=${cuda_compiler_version:-?},
  arch_tag=all) says '${arch_list}'. Copy pytorch's list into that row (and run \`mmstack check\`)."
    fi
    arch_list="${CF_TORCH_CUDA_ARCH_LIST}"
  fi
  export FORCE_CUDA=1
  export TORCH_CUDA_ARCH_LIST="${arch_list}"
  # nvcc only compresses some fatbin entries by default; -compress-all compresses every SASS
  # and PTX entry (a 3-arch test kernel with nvcc 13.0: 84 KB default, 31 KB with it, 94 KB
  # with --no-compress). It is what PyTorch's own CMake build uses (TORCH_NVCC_FLAGS) and works
  # with every CUDA we build. torch's cpp_extension ignores TORCH_NVCC_FLAGS and mmcv's
  # MMCV_CUDA_ARGS is passed as one quoted token, so hand the flags to nvcc itself.
  fatbin_flags="-Xfatbin -compress-all"
  # With nvcc 13, --compress-mode=size on top (rapids-cmake's default for CUDA 13): on the H200
  # the fat package shrank to 0.84x and the sm_90 one to 0.91x, both passing upstream's tests and
  # the ladder on the GPU (benchmarks/results/h200/recipe-fat2, recipe-run8). Its fatbins need
  # a driver of CUDA 13's own floor (580), but for CUDA 12 550.54.14, above 12's 525.60.13, so
  # not there (fatbin_size_mode_driver in src/mmstack/data/gpus.toml).
  # (the nvcc torch's cpp_extension runs: CUDA_HOME's, else the one on PATH)
  nvcc_bin="nvcc"
  if [[ -n "${CUDA_HOME:-}" && -x "${CUDA_HOME}/bin/nvcc" ]]; then nvcc_bin="${CUDA_HOME}/bin/nvcc"; fi
  nvcc_major="$("${nvcc_bin}" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p' || true)"
  if [[ "${nvcc_major:-0}" -ge 13 ]]; then
    fatbin_flags="${fatbin_flags} --compress-mode=size"
  fi
  export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:-} ${fatbin_flags}"
  if [[ -n "${GCC:-}" && -n "${CONDA_BUILD:-}${PREFIX:-}" ]]; then
    # torch passes `-ccbin $CC` to nvcc; conda's CC is the `...-cc` alias, nvcc wants the gcc
    # driver (pytorch3d-feedstock recipe.yaml does the same).
    export CC="${GCC}"
  fi
  set +x
  echo "mmstack build.sh: CUDA ${cuda_compiler_version:-from $(command -v nvcc || echo '?')} build, TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}"
  set -x
else
  if [[ -n "${arch_list}" ]]; then
    die "CPU variant (cuda_compiler_version=${cuda_compiler_version:-unset}, FORCE_CUDA=${FORCE_CUDA:-unset}) has arch list '${arch_list}'.
  Edit conda_build_config.yaml: key mmcv_arch_list must be none on the cuda_compiler_version: None row."
  fi
  export FORCE_CUDA=0
  unset TORCH_CUDA_ARCH_LIST
  # mmcv's setup.py builds the CUDA extension when `torch.cuda.is_available() or
  # FORCE_CUDA == '1'`: nvcc on PATH does not matter, but a CUDA torch on a GPU machine would.
  # Hide the GPUs so a CPU variant stays CPU-only wherever it is built.
  export CUDA_VISIBLE_DEVICES=""
  set +x
  echo "mmstack build.sh: CPU-only build (FORCE_CUDA=0, TORCH_CUDA_ARCH_LIST unset)"
  set -x
fi

# --- compiler settings ----------------------------------------------------------------------
export MMCV_WITH_OPS=1
# mmcv's setup.py only setdefault()s MAX_JOBS (to nproc-1, at least 4).
export MAX_JOBS="${CPU_COUNT}"
# conda's compilers are named x86_64-conda-linux-gnu-c++, which torch's ABI check does not
# recognise (conda-forge's torch extension feedstocks set this too).
export TORCH_DONT_CHECK_COMPILER_ABI=1
# No debug info in the shipped _ext. The -g comes from Python's sysconfig CFLAGS
# ("-DNDEBUG -g -fwrapv -O3 -Wall"), which setuptools puts into compiler_so, the command torch
# compiles every .cpp with (sm_90 _ext: 107 MB with -g, 28 MB without). -g0 must come after
# it. setuptools >= 72 *replaces* the sysconfig CFLAGS with $CFLAGS (older ones append), so
# start from $CFLAGS where conda's activation set it, else from sysconfig's, to keep -O3.
py_cflags="$("${PYTHON}" -c 'import sysconfig; print(sysconfig.get_config_var("CFLAGS") or "")')"
export CFLAGS="${CFLAGS:-${py_cflags}} -g0"
export CXXFLAGS="${CXXFLAGS:-${py_cflags}} -g0"
# OpenMP for the CPU ops: patches/0004-enable-openmp-cpu-ops.patch adds -fopenmp in setup.py
# (compile and link), where the flags for the ops are chosen.

# libstdc++ must be a NEEDED shared library of _ext, never a copy linked into it. What the two
# H200 runs in benchmarks/results/h200/ show:
# - run 1 (crash): _ext's NEEDED entries (verify_sm90.json, L3 evidence) have no libstdc++.so.6,
#   and cuda-gdb puts the SIGSEGV in libstdc++ code inside _ext.so itself
#   (basic_ostream::_M_insert<long> called from get_compiler_version; segv_sm90.txt): _ext
#   carries its own copy of libstdc++'s iostream code. Every `ostream << int` in _ext
#   (get_compiler_version, get_compiling_cuda_version, hence collect_env() and every mmdet
#   training start) dies there.
# - run 2 (fixed): NEEDED lists libstdc++.so.6 (needed_sm90.txt), resolved to
#   /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33, the one python and torch load (L3 evidence);
#   get_compiler_version returns "GCC 13.3" (segv_sm90.txt).
# - Not shown: why run 1's link took the static copy. The compiler torch linked with was $CXX:
#   doctor_sm90.json records /opt/gcc/bin/g++ 13.3.0 (mmstack doctor reads $CXX, else g++ on
#   PATH), while the shell's g++ was Ubuntu's /usr/bin/g++ (machine.txt), whose
#   `-print-file-name=libstdc++.so` finds a shared one. That probe tested the other compiler,
#   and run 1 kept no build log, so whether /opt/gcc's g++ lacks a shared libstdc++ is not
#   recorded (record `$CXX -print-file-name=libstdc++.so` and the link line next time).
# Two guards follow from what is shown. Below: when $CXX finds no shared libstdc++, link
# against the libstdc++.so.6 torch itself loads (a no-op with conda's compilers, which always
# have it). After the install: readelf must list libstdc++.so among _ext's NEEDED entries, else
# the build fails instead of shipping the crash.
cxx="${CXX:-g++}"
stdcxx_so="$("${cxx}" -print-file-name=libstdc++.so 2>/dev/null || true)"
if [[ "${stdcxx_so}" != /* || ! -e "${stdcxx_so}" ]]; then
  torch_stdcxx="$(cd / && "${PYTHON}" -c 'import torch; print(next(l.split()[-1] for l in open("/proc/self/maps") if "/libstdc++.so" in l))')"
  [[ -e "${torch_stdcxx}" ]] || die "${cxx} has no shared libstdc++ and torch's could not be found."
  mkdir -p "${SRC_DIR}/build/mmstack-stdcxx"
  ln -sf "${torch_stdcxx}" "${SRC_DIR}/build/mmstack-stdcxx/libstdc++.so"
  export LDFLAGS="-L${SRC_DIR}/build/mmstack-stdcxx ${LDFLAGS:-}"
  set +x
  echo "mmstack build.sh: ${cxx} has no shared libstdc++; linking against torch's ${torch_stdcxx}"
  set -x
fi

# torch builds with ninja when `ninja` is on PATH (much faster than the serial fallback); a
# venv's ninja sits next to its python.
if ! command -v ninja >/dev/null; then
  py_bin="$(dirname "$(command -v "${PYTHON}")")"
  if [[ -x "${py_bin}/ninja" ]]; then export PATH="${py_bin}:${PATH}"; fi
fi

# --- build and install ----------------------------------------------------------------------
# --no-build-isolation: in an isolated build env torch is missing, setup.py prints "Skip
# building ext ops" and installs mmcv without _ext (open-mmlab/mmcv#3310).
"${PYTHON}" -m pip install . --no-deps --no-build-isolation -vv
# pip records the source directory it installed from (file:///.../work) in direct_url.json:
# `pip freeze` would print `NAME @ file://...` and the package would carry the builder's paths
# (issue 26); drop it and its RECORD line. SP_DIR is set by conda tools; outside them, nothing to do.
if [[ -n "${SP_DIR:-}" ]]; then
  for f in "$SP_DIR"/*.dist-info/direct_url.json; do [ -e "$f" ] || continue; d="$(dirname "$f")"; rm "$f"; sed -i "\#^$(basename "$d")/direct_url.json,#d" "$d/RECORD"; done
fi

# --- check what was installed ---------------------------------------------------------------
set +x
# From / so that the sdist's own mmcv.egg-info in the source dir does not shadow the install.
ext_files="$(cd / && "${PYTHON}" - <<'EOF'
from importlib.metadata import distribution

dist = distribution("mmcv")
for f in dist.files or []:
    if f.parts[:1] == ("mmcv",) and f.name.startswith("_ext") and f.suffix == ".so":
        print(dist.locate_file(f))
EOF
)"
if [[ -z "${ext_files}" ]]; then
  die "mmcv was installed without mmcv/_ext*.so, so mmcv.ops cannot work.
  Look in the log above for 'Skip building ext ops' (torch not importable by ${PYTHON}) or
  a compiler error; MMCV_WITH_OPS=${MMCV_WITH_OPS}."
fi
for ext in ${ext_files}; do
  [[ -f "${ext}" ]] || die "pip recorded ${ext} but it is not there."
  if command -v readelf >/dev/null; then
    sections="$(readelf -S -W "${ext}")"
    if grep -q '\.debug_info' <<< "${sections}"; then
      # Should not happen with -g0 above; strip rather than ship 4x the size.
      echo "mmstack build.sh: WARNING: ${ext} has debug info despite -g0; stripping it." >&2
      "${STRIP:-strip}" --strip-debug "${ext}"
      sections="$(readelf -S -W "${ext}")"
    fi
    if ! readelf -d -W "${ext}" | grep -q 'NEEDED.*libstdc++\.so'; then
      die "${ext} does not load libstdc++.so: a static copy of libstdc++ got linked in, which
  crashes in get_compiler_version(). Use a g++ with a shared libstdc++ (conda's gxx)."
    fi
    if [[ "${with_cuda}" == "1" ]] && ! grep -q '\.nv_fatbin' <<< "${sections}"; then
      die "${ext} has no .nv_fatbin section: the CUDA ops were not compiled (FORCE_CUDA=1)."
    fi
    if [[ "${with_cuda}" == "0" ]] && grep -q '\.nv_fatbin' <<< "${sections}"; then
      die "${ext} has a .nv_fatbin section: CUDA code got into the CPU variant."
    fi
  fi
  echo "mmstack build.sh: installed ${ext} ($(du -h "${ext}" | cut -f1))"
done
