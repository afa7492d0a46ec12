def collect_env():
    return {"MMCV": "2.2.0", "MMCV Compiler": "GCC 12.2", "MMCV CUDA Compiler": "12.9"}
