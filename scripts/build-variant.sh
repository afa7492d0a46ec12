#!/usr/bin/env bash
# Build one variant of recipes/mmcv with its recipe tests into output/ (where the mmstack package
# the tests install already lies, indexed).
#   scripts/build-variant.sh --variant python=3.11 --variant pytorch=2.13 \
#     --variant cuda_compiler_version=12.9 --variant mmcv_arch_list=8.9 --variant arch_tag=sm89
source "$(dirname "$0")/lib.sh"
[ -d output/noarch ] && index output
pixi exec --spec "$RATTLER_BUILD" -- rattler-build build \
  --recipe recipes/mmcv --variant-config conda_build_config.yaml "$@" \
  --channel conda-forge --output-dir output
