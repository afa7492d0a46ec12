"""Stand-in: mmcv whose _ext was built against another torch."""
__version__ = "2.2.0"
