#!/usr/bin/env bash
# Run the recipe tests of every mmcv package already in output/linux-64 (e.g. restored from a cache).
source "$(dirname "$0")/lib.sh"
index output
for pkg in output/linux-64/mmcv-*.conda; do
  pixi exec --spec "$RATTLER_BUILD" -- rattler-build test --package-file "$pkg" \
    --channel "file://$PWD/output" --channel conda-forge
done
