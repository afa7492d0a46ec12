#!/usr/bin/env bash
# Download ./channel (the `channel` artifact) from the last successful build.yml run on BRANCH.
#   env: GH_TOKEN, GITHUB_REPOSITORY (owner/repo), BRANCH (default: main)
source "$(dirname "$0")/lib.sh"
repo="${GITHUB_REPOSITORY:?owner/repo}"
branch="${BRANCH:-main}"
run_id=$(gh run list --repo "$repo" --workflow build.yml --branch "$branch" \
  --status success --limit 1 --json databaseId --jq '.[0].databaseId')
if [ -n "$run_id" ]; then
  gh run download "$run_id" --repo "$repo" --name channel --dir channel
else
  echo "::warning::no successful build on $branch yet: ./channel stays empty"
fi
