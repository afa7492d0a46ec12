"""What the case-by-case digest modules share (patch_ab.py --same runs them on each side): the digest
of a list of records, and their command line (`--device --cases --seed --json`)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable


def digest(records: list) -> str:
    """sha256 of the records as sorted-key JSON (a case's records, or the list of case digests)."""
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def main(prog: str, description: str, check: Callable[[str, int, int], dict], *, cases: int,
         argv: list[str] | None = None) -> int:
    """`check(device, cases, seed)`'s document as JSON (--json) or its digest and summary; --cases
    below 1 is one line and exit 2."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cases", type=int, default=cases)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.cases < 1:
        print(f"{prog}: --cases {args.cases}: give at least 1", file=sys.stderr)
        return 2
    doc = check(args.device, args.cases, args.seed)
    if args.json:
        print(json.dumps(doc))
    else:
        print(doc["digest"], json.dumps(doc["summary"]))
    return 0
