"""mmstack: build, lock and verify MMCV for every NVIDIA GPU generation."""

__version__ = "0.1.0"
