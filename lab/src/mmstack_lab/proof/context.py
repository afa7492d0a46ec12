"""What every GPU-proof stage works with: the folders, the interpreter, the variant, the results.

One `Run` per invocation of `python -m mmstack_lab.proof.run`. It knows where the checkout, the
carried files ($CARRY: wheels, sdists, packages built elsewhere), the work tree ($WORK) and the
results ($RES) are, builds the `mmstack` command line that uses the carried py-rattler(-build)
without leaking them into the builds, and runs each command with its output in a results file.
Standard library and PyYAML only: it runs under the device's or the build machine's own python.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# what is ours in a channel (the stand-ins are rebuilt in a minute on each machine)
OURS = ("mmcv-*.conda", "mmdet-*.conda", "mmstack-*.conda", "mmengine-*safeload_*.conda")
# mmstack's CLI under the carried packages: PYTHONPATH for this interpreter only, dropped from the
# environment before anything starts (its children, the recipes' tests among them, use the mmstack
# package built into the channel, not this tree)
_MM = ('import os, sys; os.environ.pop("PYTHONPATH", None); sys.argv[0] = "mmstack"; '
       "from mmstack.cli import main; sys.exit(main())")


@dataclass
class Run:
    root: Path  # the checkout
    carry: Path  # what the call carried: wheels/, sdist/, site.tar.xz, packages/
    res: Path  # results (one archive of it goes back)
    work: Path  # build trees, channels, prefixes
    py: str = sys.executable
    test: bool = True  # run the recipes' test sections in the builds (False: build machine, --no-test)
    proposed: bool = False  # the mmcv and mmdet builds apply recipes/<name>/proposed/*.patch too
    ptx_arch: str = "8.0"  # the ptx stage's arch list is "<ptx_arch>+PTX"
    detprocs_batches: tuple[int, ...] = (8, 16, 2)  # the detprocs stage's batch sizes, in this order
    detprocs_pairs: int = 10  # ABBA pairs of child processes per batch size
    test_only: tuple[str, ...] = ()  # the test stage tests these packages (by name) only; () = all of ours
    patchab_only: tuple[str, ...] = ()  # the patchab stage runs these candidates (e.g. mmdet-0009) only; () = all
    out: Path | None = None  # the device call's $OUT: results handed back at every stage boundary
    facts: dict = field(default_factory=dict)  # python, torch, cuda, gcc of this machine

    # --- folders -----------------------------------------------------------------------------
    @property
    def site(self) -> Path:
        return self.work / "site"

    @property
    def standin(self) -> Path:
        return self.work / "standin"

    @property
    def channel(self) -> Path:
        return self.work / "channel"

    @property
    def recipes(self) -> Path:
        return self.work / "recipes"

    def prefix(self, tag: str) -> Path:
        return self.work / f"p{tag}"

    # --- environment -------------------------------------------------------------------------
    def pythonpath(self, *extra: Path) -> str:
        """The carried py-rattler(-build), this tree's mmstack and its lab (the stand-in builders among it)."""
        parts = [self.site, self.root / "src", self.root / "lab" / "src", *extra]
        return os.pathsep.join(str(p) for p in parts)

    def lab_pythonpath(self) -> str:
        """A stand-in builder's (mmstack_lab.standin): the carried py-rattler(-build) and the lab, not mmstack."""
        return os.pathsep.join(str(p) for p in (self.site, self.root / "lab" / "src"))

    def mm(self, *args: str) -> list[str]:
        """`mmstack ARGS` with the carried packages and this tree's mmstack (PYTHONPATH dropped for children)."""
        return [self.py, "-c", _MM, *args]

    def mm_env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": self.pythonpath()}

    def prefix_env(self, prefix: Path) -> dict[str, str]:
        """An installed prefix as a user has it: its bin first, no PYTHONPATH, no venv."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = f"{prefix / 'bin'}:/usr/local/bin:/usr/bin:/bin"
        return env

    def lab_env(self, prefix: Path, *extra: Path) -> dict[str, str]:
        """A lab tool in an installed prefix: the prefix's environment with lab/src (and `extra`) on PYTHONPATH."""
        return {**self.prefix_env(prefix),
                "PYTHONPATH": os.pathsep.join(str(p) for p in (*extra, self.root / "lab" / "src"))}

    # --- running -----------------------------------------------------------------------------
    def status(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}"
        print(line, flush=True)
        with open(self.res / "STATUS", "a") as fh:
            fh.write(line + "\n")
        self.hand_back()

    def sh(self, name: str, cmd: list[str], *, env: dict[str, str] | None = None, timeout: float | None = None,
           timed: str | None = None) -> int:
        """Run `cmd`, stdout to RES/<name>.json (or .out), stderr to RES/<name>.err; its exit code.

        `timed`: through the lab's timed.py, wall, CPU and peak RSS into RES/<timed>.json (the names
        gpu_proof_summary reads: standin_time, build_time_<tag>, test_time_<tag>, verify_time_<tag>)."""
        if timed:
            cmd = [self.py, str(self.root / "lab/src/mmstack_lab/common/timed.py"), "--json",
                   str(self.res / f"{timed}.json"), "--", *cmd]
        out = self.res / (f"{name}.json" if "--json" in cmd else f"{name}.out")
        try:
            with open(out, "w") as o, open(self.res / f"{name}.err", "w") as e:
                return subprocess.run(cmd, stdout=o, stderr=e, env=env, timeout=timeout, cwd=self.root).returncode
        except subprocess.TimeoutExpired:
            with open(self.res / f"{name}.err", "a") as e:
                e.write(f"\ntimed out after {timeout} s\n")
            return 124

    def tail(self, name: str, lines: int = 20) -> str:
        path = self.res / f"{name}.err"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.is_file() else ""

    # --- handing results back ----------------------------------------------------------------
    def ours(self) -> list[Path]:
        """Our packages in the channel (never the stand-ins)."""
        if not self.channel.is_dir():
            return []
        return sorted({p for pattern in OURS for p in self.channel.glob(f"*/{pattern}")})

    def hand_back(self, out: Path | None = None) -> None:
        """RES as one archive ($OUT/res.tgz, replaced whole: a call returns at most 8 files) and our
        packages under $OUT/packages (a later call carries them as $CARRY/packages)."""
        out = out or self.out
        if out is None:
            return
        out.mkdir(parents=True, exist_ok=True)
        part = out / ".res.tgz.part"
        if subprocess.run(["tar", "czf", str(part), "-C", str(self.res), "."], capture_output=True).returncode == 0:
            part.replace(out / "res.tgz")
        packages = self.ours()
        if packages:
            (out / "packages").mkdir(exist_ok=True)
            for p in packages:
                shutil.copy2(p, out / "packages" / p.name)

    # --- this machine ------------------------------------------------------------------------
    def variant(self) -> list[str]:
        """`--variant` for this machine's python, torch, CUDA, glibc floor and gcc (the build's ABI)."""
        f = self.facts
        out = ["--variant", f"python={f['python']}", "--variant", f"pytorch={f['torch']}",
               "--variant", f"cuda_compiler_version={f['cuda']}"]
        if f.get("c_stdlib_version"):
            out += ["--variant", f"c_stdlib_version={f['c_stdlib_version']}"]
        if f.get("gcc") and re.search(r"(?m)^c_compiler_version", (self.root / "conda_build_config.yaml").read_text()):
            out += ["--variant", f"c_compiler_version={f['gcc']}", "--variant", f"cxx_compiler_version={f['gcc']}"]
        return out


def machine_facts(root: Path, py: str) -> dict:
    """Python, torch and its CUDA, gcc's major and the matrix's c_stdlib_version for that CUDA."""
    code = ("import sys, json\ntry:\n import torch; t = torch.__version__; c = torch.version.cuda\n"
            "except ImportError:\n t = c = None\n"
            "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'python_full': sys.version.split()[0],"
            " 'torch_full': t, 'cuda_full': c}))")
    got = json.loads(subprocess.run([py, "-c", code], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    facts = {**got, "torch": ".".join((got["torch_full"] or "").split("+")[0].split(".")[:2]),
             "cuda": ".".join((got["cuda_full"] or "").split(".")[:2])}
    gcc = subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True)
    facts["gcc"] = gcc.stdout.strip().split(".")[0] if gcc.returncode == 0 else ""
    facts["c_stdlib_version"] = _stdlib_for(root / "conda_build_config.yaml", facts["cuda"])
    return facts


def _stdlib_for(config: Path, cuda: str) -> str:
    """c_stdlib_version zipped with cuda_compiler_version in the matrix ('' if not zipped)."""
    import yaml

    c = yaml.safe_load(config.read_text())
    cv = [str(x) for x in c.get("cuda_compiler_version", [])]
    s = c.get("c_stdlib_version", [])
    return str(s[cv.index(cuda)]) if len(s) == len(cv) and cuda in cv else ""
