"""Stand-in: mmcv whose ext returns a std::string across a C++ ABI mismatch (segfaults)."""
__version__ = "2.2.0"
