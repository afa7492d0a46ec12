"""The one launcher of the ladder's child: `_ladder_child.py` run by path in the interpreter under test.

`run_parts` runs parts (see levels.py; "doctor" for `mmstack doctor`'s fingerprint) in ONE child, in
order, reading the journal the child appends to as it goes; the timeout runs per part, from the
part's start. A crash (signal) or a hang (the child's session is killed) is charged to the part it
was in; the parts after it run in a fresh child, those whose prerequisite failed are skipped without
one. Never raises for what happens inside the child. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mmstack.errors import BadInput

CHILD = Path(__file__).with_name("_ladder_child.py")
# Run a child script by path so the interpreter under test needs no mmstack; drop argv[0]
# (run_path leaves sys.path alone). The distributed step's torchrun starts its ranks the same way.
BOOT = "import runpy,sys; p=sys.argv[1]; sys.argv=sys.argv[1:]; runpy.run_path(p, run_name='__main__')"
_TAIL_LINES = 25
_POLL_S = 0.02


def boot_command(python: str, script: str | os.PathLike[str]) -> list[str]:
    """The command line that runs `script` by path under `python` (its arguments follow)."""
    return [python, "-c", BOOT, str(script)]



@dataclass
class ChildRun:
    mode: str
    returncode: int | None
    seconds: float
    timed_out: bool = False
    done: bool = False
    step: str | None = None
    evidence: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    output: str = ""
    skipped: str | None = None  # ladder mode: the child did not run it (a prerequisite failed)
    started: float | None = None  # ladder mode: time.time() when the part started

    @property
    def signal(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.done and not self.timed_out and not self.errors and not self.skipped

    def apply(self, rec: dict) -> None:
        """One journal record's step, evidence and error (what every child mode writes)."""
        if "step" in rec:
            self.step = rec["step"]
        self.evidence.update(rec.get("evidence", {}))
        if "error" in rec:
            self.errors.append(rec["error"])
            if "traceback" in rec:
                self.evidence["traceback"] = rec["traceback"]

    def tail(self, n: int = _TAIL_LINES) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-n:])

    def failure(self) -> dict:
        """What went wrong, for the evidence."""
        info: dict[str, object] = {"step": self.step}
        if self.timed_out:
            info["timed_out"] = True
        elif self.signal:
            info["signal"] = self.signal
        elif not self.done:
            info["returncode"] = self.returncode
        if self.errors:
            info["error"] = self.errors[0] if len(self.errors) == 1 else self.errors
        if self.timed_out or self.signal or not self.done:
            info["output_tail"] = self.tail()
        return info

    def failure_text(self, level: str, timeout: float) -> str:
        """The text `diagnose` matches: key=value lines, then the error (and stderr for a crash)."""
        lines = [f"level={level}", f"step={self.step or '?'}"]
        if self.signal:
            lines[-1] += f" signal={self.signal}"
        if self.timed_out:
            lines.append(f"timeout={timeout:g}")
        lines += [str(e) for e in self.errors]
        if (self.signal or not self.done) and not self.timed_out:
            lines.append(self.tail(8))
        return "\n".join(lines)


def _journal(path: Path, pos: int, records: list) -> int:
    """Append the complete JSON lines written since `pos`; return the new position."""
    with open(path, "rb") as f:
        f.seek(pos)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode("utf-8", "replace").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a crash
            continue
    return pos + end


def _child_once(parts: list[str], *, python: str, timeout: float, opts: dict, env: dict | None,
                failed: list[str], on_record=None) -> tuple[dict, dict]:
    """One child for `parts` (in order): ({part: ChildRun} for each part it started or skipped,
    {"parts", "seconds", "returncode", ...} about the process). The part it was in when it died or
    hung gets the crash; parts it never reached are absent."""
    runs: dict[str, ChildRun] = {}
    with tempfile.TemporaryDirectory(prefix="mmstack-ladder-") as tmp:
        journal, log = Path(tmp) / "journal.jsonl", Path(tmp) / "output.txt"
        journal.touch()
        child_opts = {**opts, "parts": parts, "failed": failed}
        cmd = [*boot_command(python, CHILD), "ladder", str(journal), json.dumps(child_opts)]
        start, wall0 = time.perf_counter(), time.time()
        with open(log, "wb") as out:
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, env=env)
            except OSError as exc:
                raise BadInput(f"cannot run {python}: {exc.strerror}", fix="pass a Python interpreter to --python") from None
            records: list[dict] = []
            pos, current, since, timed_out = 0, None, wall0, False
            try:
                while True:
                    try:
                        proc.wait(timeout=_POLL_S)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    seen = len(records)
                    pos = _journal(journal, pos, records)
                    for rec in records[seen:]:  # the timeout runs per part, from the part's start
                        if on_record is not None:
                            on_record(rec)
                        if "start" in rec:
                            current, since = rec["part"], rec["start"]
                        elif rec.get("done") and rec.get("part") == current:
                            current, since = None, time.time()
                    if time.time() - since > timeout:
                        timed_out = True
                        _end_session(proc)
                        break
            except BaseException:  # SIGINT/SIGTERM (commands/interrupts.py) or anything else: the child ends with us
                _end_session(proc)
                raise
        seen = len(records)
        _journal(journal, pos, records)
        if on_record is not None:  # what the child wrote after the last poll (a fast level, the last one)
            for rec in records[seen:]:
                on_record(rec)
        died_at = time.time()
        output = log.read_text(encoding="utf-8", errors="replace")
    info = {"parts": parts, "seconds": round(time.perf_counter() - start, 3), "returncode": proc.returncode,
            "timed_out": timed_out}
    for rec in records:
        part = rec.get("part")
        if part is None:
            continue
        run = runs.get(part)
        if run is None:
            run = runs[part] = ChildRun(mode=part, returncode=None, seconds=0.0)
        if "skipped" in rec:
            run.skipped = rec["skipped"]
        if "start" in rec:
            run.started = rec["start"]
        run.apply(rec)
        if rec.get("done"):
            run.done, run.returncode, run.seconds = True, 0, rec.get("seconds", 0.0)
    unfinished = [r for r in runs.values() if not r.done and not r.skipped]
    if not unfinished and len(runs) < len(parts):
        # died before (or between) parts: charge the first part it did not reach
        first = next(p for p in parts if p not in runs)
        unfinished = [runs.setdefault(first, ChildRun(mode=first, returncode=None, seconds=0.0, started=wall0))]
    for run in unfinished:
        run.returncode = proc.returncode if not timed_out else -signal.SIGKILL
        run.timed_out, run.output = timed_out, output
        run.seconds = round(died_at - (run.started or wall0), 3)
        if not timed_out and proc.returncode == 0:
            run.returncode = 1  # exited cleanly without finishing the part: not a pass
        info["died_in"] = run.mode
    return runs, info


def _end_session(proc: subprocess.Popen) -> None:
    """Kill the child's session (it and anything it started: torchrun, its ranks) and reap the child.
    The child runs in its own session, so a Ctrl-C at the terminal never reaches it: this is the one
    way it ends early."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_parts(parts: list[str], *, python: str, timeout: float, opts: dict | None = None,
              env: dict | None = None, on_record=None) -> tuple[dict, list]:
    """Run `parts` in one child; when it dies or hangs, go on with the rest in a fresh one.

    opts: {"needs": {part: [parts]}, "part_opts": {part: {...}}, "common": {...}}. Returns
    ({part: ChildRun}, [one dict per child process]).
    """
    opts = opts or {}
    runs: dict[str, ChildRun] = {}
    children: list[dict] = []
    remaining = list(parts)
    needs = opts.get("needs", {})
    while remaining:
        failed = [p for p, r in runs.items() if not r.ok]
        for p in remaining:  # what a failure blocks needs no interpreter
            blocker = next((n for n in needs.get(p, ()) if n in failed), None)
            if blocker:
                runs[p] = ChildRun(mode=p, returncode=None, seconds=0.0, skipped=f"needs {blocker}")
                failed.append(p)
        remaining = [p for p in remaining if p not in runs]
        if not remaining:
            break
        got, info = _child_once(remaining, python=python, timeout=timeout, opts=opts, env=env, failed=failed,
                                on_record=on_record)
        children.append(info)
        runs.update(got)
        if not got:  # nothing at all came back: charge the first part so the loop ends
            first = remaining[0]
            runs[first] = ChildRun(mode=first, returncode=info["returncode"], seconds=info["seconds"],
                                   timed_out=info["timed_out"])
        remaining = [p for p in remaining if p not in runs]
    return runs, children
