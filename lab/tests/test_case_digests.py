"""What the case-digest modules (nms_cases, rpn_proposal_cases, rpn_target_cases) share: the command line,
the digest of tensors, the count of a method's calls."""

from __future__ import annotations

import json

from mmstack_lab.common import case_digests


def _check(device: str, cases: int, seed: int) -> dict:
    records = [case_digests.digest([device, seed, i]) for i in range(cases)]
    return {"digest": case_digests.digest(records), "case_digests": records, "summary": {"cases": cases}}


def test_json_is_the_checks_document_and_the_digest_depends_on_every_case(capsys):
    assert case_digests.main("x", "d", _check, cases=3, argv=["--json", "--seed", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["case_digests"]) == 3 and doc["digest"] == case_digests.digest(doc["case_digests"])
    assert case_digests.main("x", "d", _check, cases=3, argv=["--seed", "2"]) == 0
    digest, summary = capsys.readouterr().out.split(" ", 1)
    assert digest != doc["digest"] and json.loads(summary) == {"cases": 3}


def test_fewer_than_one_case_is_one_line_and_exit_2(capsys):
    assert case_digests.main("nms_cases", "d", _check, cases=5, argv=["--cases", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "nms_cases: --cases 0: give at least 1"


def test_tensors_digest_dtype_shape_and_bytes_through_nested_containers():
    import torch

    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    got = case_digests.tensors({"b": [a, 3], "a": (a.t(),)})
    assert list(got) == ["a", "b"] and got["b"][1] == 3
    assert got["b"][0][:2] == ["torch.float32", [2, 3]] and len(got["b"][0][2]) == 16
    assert got["a"][0][1] == [3, 2] and got["a"][0][2] != got["b"][0][2]  # the bytes, in the tensor's order
    assert case_digests.tensors(a.clone()) == got["b"][0] and case_digests.tensors(a + 1) != got["b"][0]


def test_count_calls_counts_the_instances_calls_and_passes_them_through():
    class Head:
        def single(self, x):
            return x + 1

        def loop(self, xs):
            return [self.single(x) for x in xs]

    head, other = Head(), Head()
    calls = case_digests.count_calls(head, "single")
    assert head.loop([1, 2, 3]) == [2, 3, 4] and len(calls) == 3
    other.loop([1])
    assert len(calls) == 3  # per instance
