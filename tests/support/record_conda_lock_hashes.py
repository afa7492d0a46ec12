"""Record conda-lock's own content_hash for each case of tests/data/conda_lock_content_hash.json.

Run with the test extra's conda-lock (tests/test_envs_conda_lock.py also runs it live on every
lock `mmstack lock` writes; this fixture keeps the unit test of the hash independent of a solve):

    .venv/bin/python tests/support/record_conda_lock_hashes.py tests/data/conda_lock_content_hash.json

Each case holds an environment.yml's channels and dependencies, a subdir and a
--virtual-package-spec document; this writes them to files and computes the hash the way
`conda-lock lock -f <env>.yml -p <subdir> --virtual-package-spec <vp>.yml` does
(conda_lock.src_parser.make_lock_spec, virtual_package_repo_from_specification,
content_hash.compute_content_hashes). No solve, no network.
"""

from __future__ import annotations

import json
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import yaml
from conda_lock.content_hash import compute_content_hashes
from conda_lock.lookup import DEFAULT_MAPPING_URL
from conda_lock.src_parser import make_lock_spec
from conda_lock.virtual_package import virtual_package_repo_from_specification


def record(path: Path) -> None:
    data = json.loads(path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for case in data["cases"]:
            env_yml = Path(tmp) / f"{case['env']}.yml"
            env_yml.write_text(yaml.safe_dump({"name": case["env"], "channels": case["channels"],
                                               "dependencies": case["dependencies"]}, sort_keys=False))
            vp = Path(tmp) / f"{case['env']}.virtual-packages.yml"
            vp.write_text(yaml.safe_dump(case["virtual_package_spec"]))
            spec = make_lock_spec(src_files=[env_yml], platform_overrides=[case["subdir"]], mapping_url=DEFAULT_MAPPING_URL)
            repo = virtual_package_repo_from_specification(vp)
            case["conda_lock_content_hash"] = compute_content_hashes(spec, repo)[case["subdir"]]
    data.pop("recorded_with", None)
    header = {
        "command": "python tests/support/record_conda_lock_hashes.py tests/data/conda_lock_content_hash.json",
        "equivalent_cli": "conda-lock lock -f <env>.yml -p <subdir> --virtual-package-spec <env>.virtual-packages.yml",
        "conda_lock_version": version("conda-lock"),
    }
    data = {"recorded_with": header, **data}
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    record(Path(sys.argv[1]))
