#!/usr/bin/env bash
# A `ccache` that carries its own settings, for builds whose environment is cleared.
#
#   scripts/ccache-wrapper.sh CACHE_DIR BASE_DIR WRAPPER_DIR [CCACHE]
#
# writes WRAPPER_DIR/ccache and prints WRAPPER_DIR: put it first on PATH before `mmstack build`.
# rattler-build's default isolation keeps the caller's PATH (after the build and host
# environments) but drops CCACHE_* and sets HOME to the work directory, and torch's cpp_extension
# starts every compile through the first `ccache` on PATH (TORCH_NO_COMPILER_WRAPPER turns that
# off). So the settings travel inside the wrapper, and the recipe does not change:
#   CCACHE_DIR         the cache (CI keeps it between runs)
#   CCACHE_BASEDIR     a directory above every build: rattler-build builds in a new directory
#                      each time, and paths under it are hashed relative to the compile's cwd
#   CCACHE_NOHASHDIR   the cwd is not hashed either (it holds the build id)
#   CCACHE_COMPILERCHECK=content   the conda compilers are installed afresh into each build
#                      environment, so their mtime says nothing; hash what they are instead
#   CCACHE_IGNOREOPTIONS  conda's -fdebug-prefix-map=<build dir>=... names the build directory;
#                      with the recipe's -g0 it changes no object, so it is left out of the hash
# mmstack_lab.build_cost.ccache_recipe measures a build and a rebuild through it; the generated CI
# workflow uses it (src/mmstack/ci/templates/build.yml).
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "ccache-wrapper.sh: usage: ccache-wrapper.sh CACHE_DIR BASE_DIR WRAPPER_DIR [CCACHE]" >&2; exit 2
fi
cache=$1 base=$2 dir=$3 real=${4:-$(command -v ccache || true)}
if [[ -z "$real" || ! -x "$real" ]]; then
  echo "ccache-wrapper.sh: no ccache executable ('${4:-ccache on PATH}'): install ccache or pass its path as CCACHE" >&2; exit 2
fi
case "$cache$base" in *"'"*) echo "ccache-wrapper.sh: CACHE_DIR and BASE_DIR may not contain a quote" >&2; exit 2 ;; esac
mkdir -p "$dir" "$cache"
cat > "$dir/ccache" <<WRAPPER
#!/bin/sh
# written by scripts/ccache-wrapper.sh
export CCACHE_DIR='$cache' CCACHE_BASEDIR='$base' CCACHE_NOHASHDIR=1 CCACHE_COMPILERCHECK=content
export CCACHE_IGNOREOPTIONS='-fdebug-prefix-map=* -ffile-prefix-map=*'
exec '$real' "\$@"
WRAPPER
chmod +x "$dir/ccache"
echo "$dir"
