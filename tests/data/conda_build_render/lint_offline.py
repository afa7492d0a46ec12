"""conda-smithy's linter (lint_recipe.main(..., conda_forge=True)) on a recipe directory, offline: URLs it fetches from conda-forge-pinning-feedstock are read
from the local mirror of that repository (same content); anything else answers None (as the
linter does when a fetch fails). Not a test: run it with a Python that has conda-smithy installed,
on a copy of recipes/mmcv holding one of meta.yaml / recipe.yaml plus conda_build_config.yaml:

    PIN=/path/to/conda-forge-pinning-feedstock.git python lint_offline.py /tmp/lint/meta/recipe

docs/conda-forge.md lists what it reported and why each finding stays.
"""
import subprocess, sys
from conda_smithy.linter import utils
from conda_smithy import lint_recipe
import os
PIN = os.environ.get("PIN", "conda-forge-pinning-feedstock/.git")
PREFIX = "https://raw.githubusercontent.com/conda-forge/conda-forge-pinning-feedstock/main/"
fetched = []
def offline(url, *a, **k):
    fetched.append(url)
    if url.startswith(PREFIX):
        r = subprocess.run(["git", "--git-dir", PIN, "show", "HEAD:" + url[len(PREFIX):]], capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else None
    return None
utils._try_fetch_url_content = offline
utils._try_fetch_url_content_cached.cache_clear() if hasattr(utils._try_fetch_url_content_cached, "cache_clear") else None
lints, hints = lint_recipe.main(sys.argv[1], conda_forge=True, return_hints=True)
print("LINTS:"); [print(" -", l) for l in lints]
print("HINTS:"); [print(" -", h) for h in hints]
print("fetched:", fetched)
