"""The command line the case-digest modules (nms_cases, rpn_proposal_cases) share."""

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
