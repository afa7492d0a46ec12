# Sourced by the scripts: strict mode, repository root, and GitHub Actions' files or stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RATTLER_BUILD="${RATTLER_BUILD:-rattler-build}"
RATTLER_INDEX="${RATTLER_INDEX:-rattler-index}"
gh_output() { if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "$1" >> "$GITHUB_OUTPUT"; else echo "output: $1"; fi; }
gh_env() { if [ -n "${GITHUB_ENV:-}" ]; then echo "$1" >> "$GITHUB_ENV"; else echo "env: $1"; fi; }
summary() { if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat >> "$GITHUB_STEP_SUMMARY"; else cat; fi; }
index() { pixi exec --spec "$RATTLER_INDEX" -- rattler-index fs "$1" --force; }
