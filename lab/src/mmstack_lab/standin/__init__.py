"""STAND-INs for what a development machine, CI or the lent GPU host cannot reach: conda-forge's
packages and the recipes' source URLs. Development, CI and device runs only; every package they
build says STAND-IN in its metadata, and nothing here is a product default.

  bootstrap       a CPU channel from this machine's CPython, PyPI wheels and stub compilers (the e2e builds)
  bootstrap_cuda  conda-forge's CUDA parts from this machine's torch and CUDA toolkit (the GPU proof)
  fake_channel    small channels of empty, real .conda packages shaped like conda-forge (lock and solve tests)
  page_channel    mmcv packages holding real nvcc objects, for `mmstack channel page` and receipts
  offline         the recipes made buildable offline: local copies of their sources, sha256 checked

Run as `python -m mmstack_lab.standin.<module>` (lab/src on PYTHONPATH where the lab is not
installed); the data they read (tests/data/solver_selection, tests/data/sources) is found from the
checkout's root (mmstack_lab.paths.ROOT).
"""
