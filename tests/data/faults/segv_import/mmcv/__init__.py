"""Stand-in: importing mmcv crashes the interpreter (as a broken native import would)."""
import os
import signal

os.kill(os.getpid(), signal.SIGSEGV)
