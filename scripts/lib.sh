# Sourced by the scripts: strict mode, repository root, and GitHub Actions' files or stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RATTLER_INDEX="${RATTLER_INDEX:-rattler-index}"
# Where dependencies come from, the recipes, the channel the jobs build into and their JSON reports.
# CI uses the defaults; the e2e test (tests/test_build_e2e.py) runs these same steps against its
# stand-in channel, offline copies of the recipes and a temporary output directory.
SOURCE_CHANNEL="${MMSTACK_SOURCE_CHANNEL:-conda-forge}"
RECIPES="${MMSTACK_RECIPES:-recipes}"
OUTPUT="${MMSTACK_OUTPUT:-output}"
# The subdir of $OUTPUT a variant's mmcv lands in (the aarch64 test jobs set linux-aarch64).
SUBDIR="${MMSTACK_SUBDIR:-linux-64}"
REPORTS="${MMSTACK_REPORTS:-reports}"
gh_output() { if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "$1" >> "$GITHUB_OUTPUT"; else echo "output: $1"; fi; }
gh_env() { if [ -n "${GITHUB_ENV:-}" ]; then echo "$1" >> "$GITHUB_ENV"; else echo "env: $1"; fi; }
summary() { if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat >> "$GITHUB_STEP_SUMMARY"; else cat; fi; }
