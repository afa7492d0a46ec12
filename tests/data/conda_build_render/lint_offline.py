"""conda-smithy's linter (lint_recipe.main(..., conda_forge=True)) on a recipe directory, offline:
URLs it fetches from conda-forge-pinning-feedstock are read from a local clone of that repository
(same content); anything else answers None (as the linter does when a fetch fails). Not a test:
run it with a Python that has conda-smithy installed, on a copy of recipes/mmcv holding one of
meta.yaml / recipe.yaml plus conda_build_config.yaml:

    PIN=/path/to/conda-forge-pinning-feedstock.git python lint_offline.py /tmp/lint/meta/recipe

docs/conda-forge.md lists what it reported and why each finding stays.
"""

import os
import subprocess
import sys

from conda_smithy import lint_recipe
from conda_smithy.linter import utils

PIN = os.environ.get("PIN", "conda-forge-pinning-feedstock/.git")
PREFIX = "https://raw.githubusercontent.com/conda-forge/conda-forge-pinning-feedstock/main/"
fetched = []


def offline(url, *args, **kwargs):
    fetched.append(url)
    if url.startswith(PREFIX):
        run = subprocess.run(["git", "--git-dir", PIN, "show", "HEAD:" + url[len(PREFIX):]],
                             capture_output=True, text=True)
        return run.stdout if run.returncode == 0 else None
    return None


utils._try_fetch_url_content = offline
lints, hints = lint_recipe.main(sys.argv[1], conda_forge=True, return_hints=True)
print("LINTS:")
for line in lints:
    print(" -", line)
print("HINTS:")
for line in hints:
    print(" -", line)
print("fetched:", fetched)
