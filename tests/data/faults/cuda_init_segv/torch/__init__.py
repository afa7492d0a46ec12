"""Stand-in: torch whose CUDA initialisation kills the process (a driver whose cuInit crashes);
with MMSTACK_FAULT=hang it never returns instead (a driver that hangs)."""
import os
import signal
import time
import types

__version__ = "2.5.1+cu124"
version = types.SimpleNamespace(cuda="12.4")
_C = types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True)


class cuda:  # noqa: N801 - torch.cuda's spelling
    @staticmethod
    def is_available():
        if os.environ.get("MMSTACK_FAULT") == "hang":
            while True:
                time.sleep(1)
        os.kill(os.getpid(), signal.SIGSEGV)
