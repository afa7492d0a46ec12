#!/usr/bin/env bash
# Build the noarch packages into $OUTPUT (default output/): mmstack and mmengine with their tests
# (CPU-only: imports, the checkpoint cycle of a torch model), mmdet with its tests skipped (they
# train a detector on an mmcv: each variant's test job runs them against that variant's package).
source "$(dirname "$0")/lib.sh"
mkdir -p "$REPORTS"
mmstack build --recipe recipes/mmstack --recipe "$RECIPES/mmengine" --channel "$OUTPUT" \
  --source-channel "$SOURCE_CHANNEL" --json > "$REPORTS/build-noarch.json"
mmstack build --recipe "$RECIPES/mmdet" --no-test --channel "$OUTPUT" \
  --source-channel "$SOURCE_CHANNEL" --json > "$REPORTS/build-mmdet.json"
