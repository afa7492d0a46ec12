"""The GPU proof runs (scripts/gpu-proof.sh): one summary.json per results folder."""
