"""Stand-in for the compiled ext: loads and answers."""


def get_compiler_version():
    return "GCC 13.3"


def get_compiling_cuda_version():
    return "12.4"
