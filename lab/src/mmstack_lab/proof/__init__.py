"""The GPU proof: the stage registry (stages.py), its driver (run.py) and one summary.json per run."""
