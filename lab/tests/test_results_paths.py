"""Results record no machine paths (issue 22, item 9): no home directory, no test cache under one,
no scratch folder of the device, anywhere under lab/results/. mmstack_lab.common.scrub_paths
names them as variables before a result is committed."""

from __future__ import annotations

import lzma
import re

from support.cli import ROOT

RESULTS = ROOT / "lab" / "results"
# a home directory (root's or a user's), the cache under one, the device's scratch and result folders
MACHINE_PATH = re.compile(r"/root/|/home/[A-Za-z0-9._-]+/|~/\.cache|/tmp/[A-Za-z0-9._-]")


def _scrub():
    from mmstack_lab.common import scrub_paths

    return scrub_paths


def _machine_paths(files) -> list[str]:
    found = []
    for f in files:
        raw = f.read_bytes()
        text = (lzma.decompress(raw) if f.suffix == ".xz" else raw).decode("utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            m = MACHINE_PATH.search(line)
            if m:
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()[:160]}")
    return found


def test_no_result_records_a_machine_path():
    files = [f for f in sorted(RESULTS.rglob("*")) if f.is_file()]
    assert len(files) > 50, "the results are where this test looks"
    found = _machine_paths(files)
    assert not found, ("machine paths in results (python -m mmstack_lab.common.scrub_paths FOLDER names them):\n"
                       + "\n".join(found[:20]) + (f"\n... and {len(found) - 20} more" if len(found) > 20 else ""))


def test_no_doc_rendered_from_the_results_shows_a_machine_path():
    docs = sorted((ROOT / "docs").glob("*.md"))
    assert any("<!-- results:" in d.read_text() for d in docs)
    assert _machine_paths(docs) == []


def test_scrub_names_every_path_the_test_refuses():
    scrub = _scrub().scrub_text
    cases = {
        "/root/.cache/mmstack-tests/mmcv-cpu-1/bin/python": "$MMSTACK_TEST_CACHE/mmcv-cpu-1/bin/python",
        "/home/ada/.cache/mmstack-tests/x": "$MMSTACK_TEST_CACHE/x",
        "/home/ada/src/mmstack/setup.py": "$HOME/src/mmstack/setup.py",
        "/tmp/gp/p90/bin/python3.12": "$WORK/p90/bin/python3.12",
        "/tmp/res/standin.json": "$RES/standin.json",
    }
    for raw, want in cases.items():
        assert MACHINE_PATH.search(raw), raw
        assert scrub(raw) == want
        assert not MACHINE_PATH.search(scrub(raw))
    assert scrub("lib/python3.12/site-packages/mmcv/_ext.so") == "lib/python3.12/site-packages/mmcv/_ext.so"
