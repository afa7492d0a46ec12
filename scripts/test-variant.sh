#!/usr/bin/env bash
# The whole test section of the variant's mmcv package in $OUTPUT (imports, pip check, the ladder,
# upstream's tests, the fatbin check), then mmdet's (a detector trained on that mmcv), on this
# runner: `mmstack test` runs each package's own tests from the package file.
source "$(dirname "$0")/lib.sh"
mkdir -p "$REPORTS"
mmstack channel index "$OUTPUT" --quiet > /dev/null
mmstack test "$OUTPUT/$SUBDIR"/mmcv-*.conda --channel "$OUTPUT" --source-channel "$SOURCE_CHANNEL" \
  --json > "$REPORTS/test-mmcv.json"
mmstack test "$OUTPUT"/noarch/mmdet-*.conda --channel "$OUTPUT" --source-channel "$SOURCE_CHANNEL" \
  --json > "$REPORTS/test-mmdet.json"
