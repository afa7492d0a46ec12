"""`mmstack test PACKAGE.conda`: build with the tests skipped here, run the package's own test
section later (the GPU runner's job), through the real rattler-build engine.

The package is a one-file generic recipe built by `mmstack build --no-test` into a local channel
(no dependencies, so no source channel but an empty local one is needed); its test section has one
test that passes and, where asked, one that fails with a line of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import mmstack
from support.probe_package import build_probe

ROOT = Path(__file__).resolve().parents[1]

RECIPE = """\
package:
  name: mmstack-testcmd-probe
  version: "1.0"
build:
  noarch: generic
  script:
    - mkdir -p $PREFIX/share/probe
    - echo probe > $PREFIX/share/probe/file.txt
tests:
  - script:
      - test -f $PREFIX/share/probe/file.txt
      - echo probe file present
{extra}
"""
FAILING = """\
  - script:
      - 'echo "ERROR: the probe second test fails on purpose"'
      - exit 3
"""


def _build(tmp_path: Path, *, failing: bool) -> tuple[Path, Path, Path]:
    return build_probe(tmp_path, RECIPE.format(extra=FAILING if failing else ""), test=False)


def test_test_runs_the_section_a_no_test_build_skipped(tmp_path):
    pkg, channel, empty = _build(tmp_path, failing=False)
    log = tmp_path / "test.log"
    code, out, err = mmstack("test", str(pkg), "--channel", str(channel), "--source-channel", str(empty), "--json",
                             "--log", str(log))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["passed"] is True
    (tested,) = doc["packages"]
    assert tested["name"] == "mmstack-testcmd-probe" and tested["tests"] == [{"index": 0, "passed": True}]
    assert "probe file present" in log.read_text()  # the test's own output, in the --log file


def test_a_failing_test_exits_1_with_its_own_line_and_a_log(tmp_path):
    pkg, channel, empty = _build(tmp_path, failing=True)
    code, out, err = mmstack("test", str(pkg), "--channel", str(channel), "--source-channel", str(empty))
    assert code == 1
    assert "1/2" in out and "FAIL" in out
    line = next(x for x in err.splitlines() if "FAILED:" in x)
    assert "fails on purpose" in line
    log = Path(line.split("full output: ")[1].rstrip(")"))
    assert log.is_file() and "fails on purpose" in log.read_text()
    log.unlink()


@pytest.mark.parametrize("make, words", [
    (lambda d: d / "missing.conda", "does not exist"),
    (lambda d: (d / "notes.txt").write_text("x") and d / "notes.txt", "is not a conda package"),
    (lambda d: (d / "zeros.conda").write_bytes(bytes(4096)) and d / "zeros.conda", "damaged or not a conda package"),
])
def test_what_is_not_a_package_is_one_line_exit_2(tmp_path, make, words):
    pytest.importorskip("rattler_build")
    code, out, err = mmstack("test", str(make(tmp_path)), "--source-channel", str(tmp_path))
    assert code == 2 and words in err and out == ""
    assert len(err.strip().splitlines()) == 1
