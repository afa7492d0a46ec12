from .. import _ext  # noqa: F401  - the real mmcv.ops loads the ext the same way
