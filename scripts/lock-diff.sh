#!/usr/bin/env bash
# After `mmstack lock`: write the diff of pixi.lock and envs/ to DIFF_FILE, `changed=true|false`
# to the step outputs, and the stat (and the first 60 kB of the diff) to the summary.
source "$(dirname "$0")/lib.sh"
out="${DIFF_FILE:-${RUNNER_TEMP:-/tmp}/lock-refresh.diff}"
git add --intent-to-add pixi.lock envs 2>/dev/null || true
git diff -- pixi.lock envs > "$out"
if [ -s "$out" ]; then
  gh_output "changed=true"
  {
    echo "### mmstack lock: the re-solve changed the lockfiles"
    echo '```'
    git diff --stat -- pixi.lock envs
    echo '```'
    echo '<details><summary>diff (first 60 kB)</summary>'
    echo
    echo '```diff'
    head -c 60000 "$out"
    echo '```'
    echo '</details>'
  } | summary
else
  gh_output "changed=false"
  echo "### mmstack lock: the lockfiles are current" | summary
fi
