#!/usr/bin/env bash
# Build one variant of recipes/mmcv into $OUTPUT (default output/), its test section skipped: the
# variant's test job runs it (`mmstack test`) on the GPU runner mapped for it, so the GPU is held
# only for the tests. Every variant key is given, so exactly one build renders.
#   scripts/build-variant.sh --variant python=3.11 --variant pytorch=2.13 \
#     --variant cuda_compiler_version=12.9 --variant mmcv_arch_list=8.9 --variant arch_tag=sm89 ...
source "$(dirname "$0")/lib.sh"
mkdir -p "$REPORTS"
mmstack build --all --recipe "$RECIPES/mmcv" --no-test "$@" --channel "$OUTPUT" \
  --source-channel "$SOURCE_CHANNEL" --json > "$REPORTS/build-mmcv.json"
