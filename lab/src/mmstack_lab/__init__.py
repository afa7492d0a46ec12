"""mmstack's measurement lab: the benchmarks, the GPU-proof summaries, the docs renderer and the
results they read (lab/results/). Installed for development and CI only (`pip install -e lab/`),
never part of the mmstack package; it uses only mmstack's public names (tests/test_layout.py).

Subpackages, one per question:
  build_cost  how long a build takes and how big its package is (nvcc per arch set, ccache,
              compile units and their schedule, .conda sizes)
  arch        which GPUs a package runs on (third-party wheels' fatbins, ptxas targets)
  ops         how fast mmcv's ops are (against torchvision; released against patched kernels)
  detector    how fast a detector trains (mmdet against torchvision, per stage, per op)
  overhead    what mmstack's own steps cost (lock, the verify ladder, mmcv's start-up)
  proof       the GPU proof: its stage registry and driver (python -m mmstack_lab.proof.run) and each run's summary
  standin     STAND-IN channels (conda-forge's parts from this machine) and offline recipe copies, for the
              tests, the e2e builds and the GPU proof
  docs        the numbers and pictures in docs/, rendered from lab/results/
  common      timing, host facts, compressed logs, path scrubbing shared by the above
"""
