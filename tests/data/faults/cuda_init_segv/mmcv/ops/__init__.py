from .. import _ext

__all__ = ["get_compiler_version", "get_compiling_cuda_version"]


def get_compiler_version():
    return _ext.get_compiler_version()


def get_compiling_cuda_version():
    return _ext.get_compiling_cuda_version()
