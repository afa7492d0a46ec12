"""Stand-in for the compiled ext: the loader cannot bind a torch C++ symbol."""
raise ImportError(
    __file__.replace("_ext.py", "_ext.cpython-311-x86_64-linux-gnu.so")
    + ": undefined symbol: _ZN3c106detail14torchCheckFailEPKcS2_jRKSs"
)
