#!/usr/bin/env bash
# Build recipes/mmstack (the noarch package the mmcv recipe tests install) into output/.
source "$(dirname "$0")/lib.sh"
pixi exec --spec "$RATTLER_BUILD" -- rattler-build build --recipe recipes/mmstack --channel conda-forge --output-dir output
