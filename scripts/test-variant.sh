#!/usr/bin/env bash
# The whole test section of the variant's mmcv package in $OUTPUT (imports, pip check, the ladder,
# upstream's tests, the fatbin check), then mmdet's (a detector trained on that mmcv), on this
# runner: `mmstack test` runs each package's own tests from the package file.
source "$(dirname "$0")/lib.sh"
mkdir -p "$REPORTS"
mmstack channel index "$OUTPUT" --quiet > /dev/null
mmstack test "$OUTPUT/$SUBDIR"/mmcv-*.conda --channel "$OUTPUT" --source-channel "$SOURCE_CHANNEL" \
  --json > "$REPORTS/test-mmcv.json"
# mmdet is noarch: its test section runs on its oldest Python (python_min: its `python >=X`), and
# needs an mmcv for that Python from $OUTPUT, which holds this row's mmcv only. So the row whose mmcv
# is for that Python tests mmdet; every other row tests its mmcv alone and says so.
read -r MMCV_PY MMDET_PY < <(python - "$OUTPUT/$SUBDIR"/mmcv-*.conda "$OUTPUT"/noarch/mmdet-*.conda <<'PY'
import re, sys
from rattler.package import IndexJson

def python_of(path, pattern):
    deps = IndexJson.from_package_archive(path).depends
    found = [m.group(1) for d in deps if (m := re.fullmatch(pattern, d))]
    if len(found) != 1:
        sys.exit(f"{path}: expected one dependency like {pattern!r}, found {deps}")
    return found[0]

print(python_of(sys.argv[1], r"python_abi (\d+\.\d+)\.\* \*_cp\d+"), python_of(sys.argv[2], r"python >=(\d+\.\d+)"))
PY
)
if [ "$MMCV_PY" = "$MMDET_PY" ]; then
  mmstack test "$OUTPUT"/noarch/mmdet-*.conda --channel "$OUTPUT" --source-channel "$SOURCE_CHANNEL" \
    --json > "$REPORTS/test-mmdet.json"
else
  echo "mmdet's tests run on Python $MMDET_PY (its python_min), in the row whose mmcv is for it; this row's mmcv is for Python $MMCV_PY" \
    | summary
fi
