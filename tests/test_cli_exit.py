"""cli.main as the program: once py-rattler has run, it leaves through os._exit (no interpreter
finalization for py-rattler's tokio threads to call into: "PyGILState_Release ... finalizing", exit
-6, seen on a loaded CI machine), with its exit code and its output flushed; without py-rattler, and
for an in-process caller, it returns as before."""

from __future__ import annotations

import subprocess
import sys

from support.cli import ROOT

PROGRAM = ("import atexit, sys\n"
           "atexit.register(lambda: print('FINALIZED', file=sys.stderr))\n"
           "sys.argv = ['mmstack', *sys.argv[1:]]\n"
           "from mmstack.cli import main\n"
           "sys.exit(main())\n")


def _program(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROGRAM, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_command_that_ran_py_rattler_leaves_without_finalization_and_keeps_its_code_and_output():
    proc = _program("arch", "check", "--gpu", "RTX 4090", "--arch-list", "8.9", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("}") and '"verdict"' in proc.stdout, proc.stdout  # the JSON came out whole
    assert "FINALIZED" not in proc.stderr, "py-rattler-build was loaded (the matrix): no finalization"
    loaded = subprocess.run([sys.executable, "-c", PROGRAM.replace("sys.exit(main())", "import rattler\nsys.exit(main())"),
                             "gpus", "RTX 4090", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0 and "FINALIZED" not in loaded.stderr, loaded.stderr
    assert loaded.stdout.strip().endswith("}"), "stdout flushed before os._exit"
    failing = subprocess.run([sys.executable, "-c", PROGRAM.replace("sys.exit(main())", "import rattler\nsys.exit(main())"),
                              "gpus", "no such gpu"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert failing.returncode == 2 and "FINALIZED" not in failing.stderr and failing.stderr.strip(), failing.stderr


def test_without_py_rattler_or_in_process_main_returns_as_before():
    proc = _program("--help")  # loads neither py-rattler nor py-rattler-build
    assert proc.returncode == 0 and "FINALIZED" in proc.stderr, "no native threads: a normal exit"
    import rattler  # noqa: F401  loaded in this process too: an in-process caller still gets the code back

    from mmstack.cli import main
    assert main(["gpus", "RTX 4090", "--json"]) == 0
