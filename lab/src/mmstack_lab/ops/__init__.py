"""How fast mmcv's ops are: against torchvision, and released against patched kernels."""
