#!/usr/bin/env bash
# One summary line per package the test job ran ($REPORTS/test-*.json from test-variant.sh):
# passed/failed tests, seconds, upstream's pytest counts where the tests reported them.
source "$(dirname "$0")/lib.sh"
for report in "$REPORTS"/test-*.json; do
  [ -e "$report" ] || { echo "- no test report: the tests did not run" | summary; exit 0; }
  python3 - "$report" <<'PY' | summary
import json, sys
doc = json.load(open(sys.argv[1]))
for p in doc["packages"]:
    ok = sum(t["passed"] for t in p["tests"])
    line = f"- {'PASS' if p['passed'] else 'FAIL'} {p['name']} {p['build_string']}: {ok}/{len(p['tests'])} tests in {p['seconds']:.0f}s"
    for r in p["test_results"]:
        if r.get("kind") == "upstream-tests":
            c = r.get("counts", {})
            line += f"; upstream {r.get('path')}: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, {c.get('skipped', 0)} skipped"
    if p.get("failure"):
        line += f"; {p['failure']}"
    print(line)
PY
done
