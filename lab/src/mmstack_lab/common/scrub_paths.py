"""Replace the device's working paths in a results folder with names, before committing it.

    python -m mmstack_lab.common.scrub_paths lab/results/h200/recipe-run2

Results record no machine paths: the GPU proof (mmstack_lab.proof.run) works under $WORK (/tmp/gp), writes to
$RES (/tmp/res) and runs from the checkout ($ROOT); logs and JSON name them as those variables.
The test cache under a home directory (mmstack_lab.standin.bootstrap) is $MMSTACK_TEST_CACHE, any
other home directory $HOME. lab/tests/test_results_paths.py fails on a path that slipped through.
Then every log over result_logs.LIMIT becomes NAME.log.xz (mmstack_lab.common.result_logs).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mmstack_lab.common.result_logs import compress_logs

# longest first, so /tmp/gp/x is not half-replaced by a shorter prefix
NAMES = (("/tmp/carry/tree", "$ROOT"), ("/tmp/carry", "$CARRY"), ("/work/main", "$ROOT"), ("/tmp/gp", "$WORK"),
         ("/tmp/res", "$RES"), ("/tmp/out", "$OUT"))


# a home directory: root's, or /home/<user>
_HOME = r"(?:/root|/home/[A-Za-z0-9._-]+)"
PATTERNS = ((re.compile(_HOME + r"/\.cache/mmstack-tests"), "$MMSTACK_TEST_CACHE"),
            (re.compile(_HOME + r"(?=/)"), "$HOME"),
            # any other temporary directory (pip's build dirs, rattler-build's work dirs)
            (re.compile(r"/tmp(?=/[A-Za-z0-9._-])"), "$TMPDIR"))


def scrub_text(text: str) -> str:
    for path, name in NAMES:
        text = text.replace(path, name)
    for pattern, name in PATTERNS:
        text = pattern.sub(name, text)
    return text


def main(folder: str) -> int:
    changed = 0
    for f in sorted(Path(folder).rglob("*")):
        if f.is_file() and f.suffix in (".json", ".log", ".txt", ".err", ".out", "") :
            text = f.read_text(errors="surrogateescape")
            new = scrub_text(text)
            if new != text:
                f.write_text(new, errors="surrogateescape")
                changed += 1
    packed = compress_logs(Path(folder))
    print(f"{changed} files scrubbed, {len(packed)} logs compressed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
