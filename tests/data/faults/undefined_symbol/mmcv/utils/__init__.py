def collect_env():
    from mmcv.ops import get_compiler_version  # noqa: F401

    return {}
