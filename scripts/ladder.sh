#!/usr/bin/env bash
# The ladder on this machine's GPU against the variant's package, installed as a user installs it:
# L2 and L4 must run, not skip.
#   scripts/ladder.sh PYTHON BUILD_GLOB      e.g. scripts/ladder.sh 3.11 'cuda129_sm89_py311_*'
source "$(dirname "$0")/lib.sh"
python="${1:?python version, e.g. 3.11}"
glob="${2:?mmcv build string glob, e.g. cuda129_sm89_py311_*}"
mmstack channel index "$OUTPUT" --quiet > /dev/null
pixi exec --channel "file://$PWD/$OUTPUT" --channel "$SOURCE_CHANNEL" \
  --spec "python ${python}.*" --spec "mmcv * ${glob}" --spec mmstack \
  -- mmstack verify --levels L1,L2,L3,L4 --expect-gpu
