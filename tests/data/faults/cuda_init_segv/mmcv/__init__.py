"""Stand-in: a healthy mmcv (L1, L3 pass) beside the crashing torch of this scenario."""
__version__ = "2.2.0"
