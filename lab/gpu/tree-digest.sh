#!/usr/bin/env bash
# The digest of the code a device run uses (recipes, scripts, src, the lab's code in lab/src, the
# stand-in builders among it, and lab/gpu, the pyproject.toml files, conda_build_config.yaml; not results, tests or docs), the same on this machine and on the
# device, whose git metadata is the session's base commit rather than the tree it was sent
# (.gpu-commit says which commit that tree is; mmstack_lab.proof.run compares the two digests and
# writes into machine.txt whether .gpu-commit was stale).
#
#   bash lab/gpu/tree-digest.sh               # the digest (64 hex)
#   bash lab/gpu/tree-digest.sh --gpu-commit  # write .gpu-commit: "<commit> <subject>" and "digest <hex>"
#                                             # (commit first: the digest names the committed tree)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
digest() {
  { find recipes scripts src lab/src lab/gpu -type f
    ls pyproject.toml lab/pyproject.toml conda_build_config.yaml; } \
    | grep -v -e '/__pycache__/' -e '\.pyc$' -e '\.egg-info/' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum | cut -c1-64
}
if [[ "${1:-}" == --gpu-commit ]]; then
  if [[ -n "$(git status --porcelain -- recipes scripts src lab/src lab/gpu pyproject.toml \
              lab/pyproject.toml conda_build_config.yaml)" ]]; then
    echo "lab/gpu/tree-digest.sh: uncommitted changes to the code a device run uses: commit them first" >&2
    exit 2
  fi
  { git log -1 --format='%h %s' | cut -c1-100; echo "digest $(digest)"; } > .gpu-commit
  cat .gpu-commit
else
  digest
fi
