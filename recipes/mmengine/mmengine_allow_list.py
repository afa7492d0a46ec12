"""pytest plugin for upstream mmengine's own tests in recipes/mmengine's test section.

Upstream's tests read the checkpoints mmengine wrote with a plain `torch.load(path)` (e.g.
tests/test_hooks/test_checkpoint_hook.py, tests/test_runner/test_runner.py's test_checkpoint),
written before torch 2.6 made `weights_only=True` the default. mmengine itself loads through
patches/0001's allow-list; this registers the same allow-list for the session with
`torch.serialization.add_safe_globals`, the opt-in that patch's error message names, so those
reads load under weights-only too (nothing here sets weights_only=False).
"""

import torch
from mmengine.utils.dl_utils.safe_load import checkpoint_safe_globals

torch.serialization.add_safe_globals(checkpoint_safe_globals())
