def collect_env():
    from mmcv.ops import get_compiler_version

    return {"MMCV Compiler": get_compiler_version()}
