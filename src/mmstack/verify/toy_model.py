"""The one toy model of the L5 training steps: the ladder's child (`_ladder_child.level_l5`) and
every rank of the distributed step (`dist_worker.py`) train it.

    [Conv2d -> norm -> ReLU ->]  mmcv.ops.DeformConv2d (offsets from a Conv2d) -> ReLU
    -> mmcv.ops.RoIAlign -> Linear

The stem (a bias-free Conv2d and a norm layer) is there when a norm factory is given: the
distributed step puts SyncBatchNorm there. Both callers load this file by path, in the
environment under test, where mmstack itself need not be importable: stdlib only at import;
torch and mmcv are imported inside `build`.
"""

from __future__ import annotations

from typing import Any


def build(*, channels: int, outputs: int, norm: Any = None) -> Any:
    """A fresh model; its weights come from torch's RNG in construction order (seed first)."""
    import torch
    from mmcv.ops import DeformConv2d, RoIAlign

    class ToyDetector(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            width = 3
            if norm is not None:
                self.stem = torch.nn.Conv2d(3, channels, 3, padding=1, bias=False)
                self.norm = norm(channels)
                width = channels
            self.offset = torch.nn.Conv2d(width, 2 * 3 * 3, 3, padding=1)
            self.dcn = DeformConv2d(width, channels, 3, padding=1)
            self.roi = RoIAlign((4, 4), spatial_scale=1.0, sampling_ratio=2, aligned=True)
            self.head = torch.nn.Linear(channels * 16, outputs)

        def forward(self, x: Any, rois: Any) -> Any:
            f = torch.relu(self.norm(self.stem(x))) if norm is not None else x
            f = torch.relu(self.dcn(f, self.offset(f)))
            return self.head(self.roi(f, rois).flatten(1))

    return ToyDetector()
