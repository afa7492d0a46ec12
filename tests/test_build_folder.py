"""builder/build_folder.py: every build in one work folder runs at one path (so its binaries embed the
same host prefix), one build at a time; a build that finds the folder held gets its own and says so.
The lock is a real flock held by another process."""

from __future__ import annotations

import subprocess
import sys
import time

from mmstack.builder.build_folder import FIXED, build_folder


def test_builds_in_one_work_folder_use_one_path_emptied_first_and_removed_after(tmp_path):
    seen = []
    for _ in range(2):
        with build_folder(tmp_path) as (out, fixed):
            assert fixed and out == tmp_path / FIXED
            assert not list(out.iterdir()), "what an earlier build left is gone"
            (out / "bld").mkdir()
            (out / "bld" / "x.o").write_bytes(b"obj")
            seen.append(out)
        assert not out.exists()
    assert seen[0] == seen[1]


def test_a_kept_tree_stays_until_the_next_build_empties_it(tmp_path):
    with build_folder(tmp_path, keep=True) as (out, _):
        (out / "kept.log").write_text("x")
    assert (out / "kept.log").is_file()
    with build_folder(tmp_path) as (again, fixed):
        assert fixed and again == out and not (again / "kept.log").exists()


def test_a_build_that_finds_the_folder_held_builds_in_its_own_and_says_so(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom mmstack.builder.build_folder import build_folder\n"
         "with build_folder(sys.argv[1]) as (out, fixed):\n    print(fixed, flush=True)\n    time.sleep(30)\n",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "True"
        said = []
        with build_folder(tmp_path, say=said.append) as (out, fixed):
            assert not fixed and out.parent == tmp_path and out.name.startswith("mmstack-build-") and out.name != FIXED
            assert (tmp_path / FIXED).is_dir(), "the other build's folder is left alone"
        assert not out.exists()
        assert len(said) == 1 and "another build is using" in said[0] and out.name in said[0]
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    with build_folder(tmp_path) as (out, fixed):  # a killed holder's lock went with its process
        assert fixed and out == tmp_path / FIXED
