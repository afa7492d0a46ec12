"""The random boxes the op benchmarks run on (bench_ops, nms_anatomy): corners uniform in 800 px,
sides 8-208 px, scores uniform; or, clustered, a few objects each proposed many times (heavy
suppression). Drawn on the CPU from a seeded generator, so a seed gives the same boxes on every
device and machine, then moved to `device`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def random_boxes(n: int, seed: int, device: str = "cpu", *, clustered: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(boxes as n x (x1, y1, x2, y2), scores as n) for `seed`."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if clustered:  # about n / 50 objects, each proposed many times
        centers = torch.rand(max(1, n // 50), 2, generator=g) * 800
        xy = centers[torch.randint(0, len(centers), (n,), generator=g)] + torch.randn(n, 2, generator=g) * 6
        wh = torch.rand(n, 2, generator=g) * 20 + 60
    else:
        xy = torch.rand(n, 2, generator=g) * 800
        wh = torch.rand(n, 2, generator=g) * 200 + 8
    boxes = torch.cat([xy, xy + wh], 1)
    scores = torch.rand(n, generator=g)
    return boxes.to(device), scores.to(device)
