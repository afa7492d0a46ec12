"""Stand-in: mmcv built without SASS or PTX for this GPU."""
__version__ = "2.2.0"
