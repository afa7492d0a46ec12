"""SIGINT and SIGTERM for every command: one line, exit 130 / 143, child processes ended, nothing half-written.

`install()` (cli.main, before a command runs): the first SIGINT or SIGTERM raises `Interrupted` in the
main thread, so every `finally` and `except BaseException` on the way out runs: temporary files and
directories are removed (the channel's `.index-<pid>/`, a lock's staged files), the ladder child's
session is killed (verify/launcher.py). Signals that arrive while it unwinds are counted, not raised,
so a second Ctrl-C cannot cut a clean-up short.

`in_worker(fn)`: native work that blocks for long and releases the GIL (py-rattler's solve) runs in a
worker thread, the main thread waiting in Python. The signal is then raised in that wait, never inside
a pyo3 call (where a KeyboardInterrupt gave Rust panics), and at once, not when the native call returns.

`in_process(fn)`: native work that holds the GIL for its whole length (rattler-build's build and test
do: no thread of the process runs Python, so no signal handler either, until it returns) runs in a
spawned child process. On a signal its own children (the build script) are ended first, so the engine
returns and the child's clean-up runs (its build tree removed) within `grace` seconds; then the child.

`exit_interrupted(exc)` (cli.main): does the above, ends every other process this one started that is
still running (SIGTERM, then SIGKILL after CHILD_GRACE_S), prints one line and leaves through
`os._exit`: no interpreter finalization while a native thread may still call into Python
(py-rattler's tokio threads panic on a finalized interpreter).

`deferred()`: a block that must not be cut in two (renaming a set of files into place); a signal
that arrives inside it is raised when the block ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from mmstack.errors import MmstackError

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
CHILD_GRACE_S = 3.0  # how long children get between SIGTERM and SIGKILL
_POLL_S = 0.05


class Interrupted(KeyboardInterrupt):
    """The command was interrupted by `signum`: a KeyboardInterrupt, so `except Exception` lets it pass
    and code that re-raises KeyboardInterrupt (asyncio, lockfile.py) re-raises it. typer turns it into
    SystemExit(130) whatever the signal; cli.main asks `raised()` which signal it was."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@dataclass
class _State:
    installed: bool = False  # install() ran: the CLI; else mmstack is called as a library and runs inline
    raised: Interrupted | None = None  # the first signal, once raised
    deferring: int = 0  # depth of deferred() blocks
    pending: int | None = None  # a signal held back by deferred()
    workers: list[tuple[int, float]] = field(default_factory=list)  # in_process: (pid, seconds it may take to end)


_STATE = _State()


def raised() -> Interrupted | None:
    """The interrupt this process is unwinding from, if any."""
    return _STATE.raised


def install() -> dict:
    """SIGINT and SIGTERM raise Interrupted in the main thread (the first one; later ones are held).
    Returns the handlers it replaced, for `restore` (main() also runs inside tests' processes)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {signum: signal.signal(signum, _handler) for signum in SIGNALS}
    _STATE.installed = True
    return previous


def restore(previous: dict) -> None:
    """Put back what `install` replaced: the command is over."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    if previous:
        _STATE.installed = False


def _handler(signum: int, frame: object) -> None:
    if _STATE.raised is not None:
        return  # already unwinding: let the clean-up finish
    if _STATE.deferring:
        _STATE.pending = _STATE.pending or signum
        return
    _STATE.raised = Interrupted(signum)
    raise _STATE.raised


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Run the block whole: a signal that arrives inside it is raised when it ends."""
    _STATE.deferring += 1
    try:
        yield
    finally:
        _STATE.deferring -= 1
    if not _STATE.deferring and _STATE.pending is not None and _STATE.raised is None:
        signum, _STATE.pending = _STATE.pending, None
        _STATE.raised = Interrupted(signum)
        raise _STATE.raised


def in_worker(fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
    """fn(*args, **kwargs) in a worker thread, its result or its exception here (fn must release the GIL).
    Called as a library (no install()): inline."""
    if not _STATE.installed:
        return fn(*args, **kwargs)
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, whatever it is
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"mmstack-{getattr(fn, '__name__', 'worker')}", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(_POLL_S)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def in_process(fn: Callable[..., T], /, *args: object, grace: float = 0.0, **kwargs: object) -> T:
    """fn(*args, **kwargs) in a child interpreter (fn, its arguments and its result pickle); its
    result, or its exception raised here. The child's stdout and stderr are this process's. `grace`:
    after a signal, how long the child may take to clean up once its own children are ended.
    Called as a library (no install()): inline."""
    if not _STATE.installed:
        return fn(*args, **kwargs)
    read_fd, write_fd = os.pipe()
    try:
        # the child imports what this process imports (its sys.path, as PYTHONPATH: a launcher may
        # have dropped the variable after start-up); the child puts the variable back as it was here,
        # so the build scripts the engine runs see this process's environment
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
               _PARENT_PYTHONPATH: json.dumps(os.environ.get("PYTHONPATH"))}
        proc = subprocess.Popen([sys.executable, "-c", _CHILD_BOOT, str(write_fd)], stdin=subprocess.PIPE,
                                pass_fds=(write_fd,), env=env)
    finally:
        os.close(write_fd)
    entry = (proc.pid, grace)
    _STATE.workers.append(entry)
    chunks = []
    try:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it died at once: said below
            proc.stdin.write(pickle.dumps((fn, args, kwargs)))
            proc.stdin.close()
        while True:  # in Python, so a signal is raised here at once
            if select.select([read_fd], [], [], _POLL_S)[0]:
                data = os.read(read_fd, 1 << 16)
                if not data:
                    break
                chunks.append(data)
        proc.wait()
    finally:
        os.close(read_fd)
        if _STATE.raised is None:
            _STATE.workers.remove(entry)
    if not chunks:
        raise MmstackError(f"the worker process of {getattr(fn, '__name__', fn)} ended without an answer "
                           f"(exit code {proc.returncode})", fix="see the lines above; rerun it")
    ok, value = pickle.loads(b"".join(chunks))
    if not ok:
        raise value
    return value


_CHILD_BOOT = "import sys; from mmstack.commands.interrupts import child_main; child_main(int(sys.argv[1]))"
_PARENT_PYTHONPATH = "MMSTACK_PARENT_PYTHONPATH"


def child_main(result_fd: int) -> None:
    """in_process's child: reads (fn, args, kwargs) from stdin, writes (ok, result or exception) to
    `result_fd`. The parent ends it: a SIGINT (the parent's, or the terminal's Ctrl-C) only silences
    its output, so what the engine says about its killed script does not follow the parent's one line.
    (A Python handler, not SIG_IGN: exec resets it, so the build script still gets the default.)"""
    signal.signal(signal.SIGINT, _silence)
    parent = json.loads(os.environ.pop(_PARENT_PYTHONPATH, "null"))
    if parent is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = parent
    fn, args, kwargs = pickle.loads(sys.stdin.buffer.read())
    try:
        result: tuple[bool, object] = (True, fn(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, whatever it is
        result = (False, exc)
    try:
        payload = pickle.dumps(result)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:  # an answer that does not pickle
        payload = pickle.dumps((False, MmstackError(f"{type(result[1]).__name__}: {result[1]} ({exc})")))
    with contextlib.suppress(OSError), os.fdopen(result_fd, "wb") as out:  # OSError: the parent is gone
        out.write(payload)


def _silence(signum: int, frame: object) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def exit_interrupted(exc: Interrupted, line: Callable[[str], None]) -> None:
    """End the workers (their children first), then every other child process, print one line,
    leave with 128 + the signal's number."""
    ended = 0
    for pid, grace in _STATE.workers:
        _signal_all([pid], signal.SIGINT)  # silenced first (child_main)
        grandchildren = _descendants(pid)
        ended += len(grandchildren)
        _signal_all(grandchildren, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _alive(pid):
            _reap()
            time.sleep(_POLL_S)
    ended += end_children()
    what = f", ended {ended} child process{'es' if ended != 1 else ''}" if ended else ""
    line(f"mmstack: interrupted by {signal.Signals(exc.signum).name}{what}; exit {exc.exit_code}")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(exc.exit_code)


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def end_children(grace: float = CHILD_GRACE_S) -> int:
    """SIGTERM every process descended from this one (read from /proc), SIGKILL what is left after
    `grace` seconds; reap our own. Returns how many there were."""
    tree = _descendants(os.getpid())
    _signal_all(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in tree):
        _reap()
        time.sleep(_POLL_S)
    _signal_all([p for p in tree if _alive(p)], signal.SIGKILL)
    _reap()
    return len(tree)


def _descendants(root: int) -> list[int]:
    """Every process whose parent chain leads to `root` (Linux /proc; none elsewhere), parents first."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        ppid = _ppid(int(entry))
        if ppid is not None:
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    return int(fields[1]) if len(fields) > 1 and fields[0] != b"Z" else None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] != b"Z"


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
