"""What the case-by-case digest modules share (patch_ab.py --same runs them on each side): the digest
of a list of records, of the tensors in one, a count of a method's calls, and their command line
(`--device --cases --seed --json`)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable


def digest(records: list) -> str:
    """sha256 of the records as sorted-key JSON (a case's records, or the list of case digests)."""
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def tensors(x):
    """dtype, shape and sha256 (16 hex digits) of the bytes of each tensor in x, through nested lists,
    tuples and dicts; anything else as it is."""
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach().contiguous().cpu()
        return [str(t.dtype), list(t.shape), hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16]]
    if isinstance(x, (list, tuple)):
        return [tensors(v) for v in x]
    if isinstance(x, dict):
        return {k: tensors(v) for k, v in sorted(x.items())}
    return x


def count_calls(obj, name: str) -> list:
    """Replace obj.name (on the instance) by a wrapper that appends to the returned list at each call:
    what the code under test calls, whichever path it takes."""
    calls: list = []
    method = getattr(obj, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return method(*args, **kwargs)
    setattr(obj, name, counted)
    return calls


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
