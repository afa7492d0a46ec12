"""The numbers in docs/*.md are what mmstack_lab.docs.render_docs renders from lab/results/."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def render_docs():
    from mmstack_lab.docs import render_docs

    return render_docs


@pytest.fixture(scope="module")
def docs_results():
    """mmstack_lab.docs.results: where the renderer reads results (tests point RESULTS at a copy)."""
    from mmstack_lab.docs import results

    return results


def test_committed_docs_are_the_render_of_the_results(render_docs):
    stale = render_docs.stale()
    assert stale == [], f"{[str(p.relative_to(ROOT)) for p in stale]}: run `python -m mmstack_lab.docs.render_docs`"


def test_every_table_and_value_is_shown_somewhere(render_docs):
    assert render_docs.unused() == []


def test_a_changed_result_changes_the_doc(tmp_path, monkeypatch, render_docs, docs_results):
    """The check has teeth: edit a number in a copy of the results and the rendered doc differs."""
    import shutil

    results = tmp_path / "results"
    shutil.copytree(docs_results.RESULTS, results)
    ops = results / "h200" / "run2-fixed" / "ops_sm90.json"
    ops.write_text(ops.read_text().replace("328.22399139404297", "428.22399139404297"))
    text = (ROOT / "lab" / "results" / "h200" / "run2-fixed" / "README.md").read_text()
    monkeypatch.setattr(docs_results, "RESULTS", results)
    rendered = render_docs.render_text(text)
    assert rendered != text and "| roi_align | 2x256x200x200, 1000 rois, 7x7 | 428.2 |" in rendered


@pytest.mark.parametrize("page, typed, edited", [
    ("docs/performance.md", "| 9.0 | recipe-run9 | 300 s |", "| 9.0 | recipe-run9 | 280 s |"),
    ("lab/results/h200/run2-fixed/README.md", "| all | FAIL 20.6 s | PASS 58.3 s |", "| all | FAIL 20.6 s | PASS 63 s |"),
])
def test_a_typed_number_inside_a_table_is_caught(tmp_path, render_docs, page, typed, edited):
    docs = tmp_path / "docs"
    docs.mkdir()
    text = (ROOT / page).read_text()
    assert typed in text
    (docs / "page.md").write_text(text.replace(typed, edited))
    assert [p.name for p in render_docs.stale(docs)] == ["page.md"]


def test_the_run_readmes_are_rendered_pages(tmp_path, monkeypatch, render_docs, docs_results):
    """What each run found lives in its README under lab/results, with the same markers as docs/:
    --check covers them, and a changed result changes the README."""
    pages = render_docs.docs()
    assert ROOT / "docs" / "performance.md" in pages
    assert ROOT / "lab" / "results" / "h200" / "recipe-run9" / "README.md" in pages
    assert ROOT / "lab" / "results" / "cpu-dev" / "README.md" in pages
    import shutil

    results = tmp_path / "results"
    for run in ("run1-before-fix", "run2-fixed"):
        shutil.copytree(docs_results.RESULTS / "h200" / run, results / "h200" / run)
    ladder = results / "h200" / "run2-fixed" / "verify_sm90.json"
    ladder.write_text(ladder.read_text().replace('"ok": true', '"ok": false', 1))
    monkeypatch.setattr(docs_results, "RESULTS", results)
    readme = results / "h200" / "run2-fixed" / "README.md"
    assert readme in render_docs.history()
    assert render_docs.rendered(readme) != readme.read_text()


def test_each_performance_section_shows_rendered_numbers():
    """docs/performance.md answers one question per section, each with numbers from lab/results."""
    text = (ROOT / "docs" / "performance.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 5
    for section in sections:
        assert re.search(r"<!-- (?:results|value):[a-z0-9-]+ -->", section), section.splitlines()[0]


# -- docs/ is for users: no issue numbers, no run-by-run log (that is lab/results/**/README.md) ---------

ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+|(?<![\w/-])#\d+\b|\bitems?\s+\d+\b", re.I)


def issue_numbers(text: str) -> list[str]:
    """This project's issue (or issue item) numbers named in a page; an upstream reference
    (open-mmlab/mmcv#3096, a URL) is not one."""
    return [m.group(0) for m in ISSUE_NUMBER.finditer(text)]


def test_no_docs_page_names_an_issue_number():
    found = {p.name: issue_numbers(p.read_text()) for p in sorted((ROOT / "docs").glob("*.md"))}
    assert {name: hits for name, hits in found.items() if hits} == {}


@pytest.mark.parametrize("text, hits", [
    ("## On the lent H200: patch 0012 lands (issue 24)", ["issue 24"]),
    ("the goal of issues 20 and 24", ["issues 20"]),
    ("fixed in #17.", ["#17"]),
    ("Item 2's goal", ["Item 2"]),
    ("([open-mmlab/mmcv#3096](https://github.com/open-mmlab/mmcv/issues/3096))", []),
])
def test_the_issue_number_rule_bites(text, hits):
    assert issue_numbers(text) == hits


# -- links between pages resolve (files and #anchors) ------------------------------------------------

LINK = re.compile(r"\]\((?!https?://|mailto:)([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def link_problems(page: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `page` whose file, or whose #heading in a .md file, does not exist."""
    problems = []
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in LINK.findall(text):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            problems.append(f"{page.relative_to(root)}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{page.relative_to(root)}: {target}: no such heading")
    return problems


def test_links_between_pages_resolve(render_docs):
    pages = [ROOT / "README.md", *render_docs.docs()]
    assert [p for page in pages for p in link_problems(page)] == []


def test_a_broken_link_is_caught(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Some heading\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#some-heading) [gone](c.md) [anchor](a.md#other)\n")
    assert link_problems(page, tmp_path) == ["b.md: c.md: no such file", "b.md: a.md#other: no such heading"]


def test_unknown_marker_is_an_error(render_docs):
    with pytest.raises(render_docs.UnknownMarker, match="nope"):
        render_docs.render_text("<!-- results:nope -->\n<!-- /results:nope -->\n")


def test_check_mode_exit_codes(render_docs):
    assert render_docs.main(["--check"]) == 0


def test_a_new_result_is_a_table_in_a_few_lines(render_docs, docs_results):
    """The declarative form the script's docstring shows for a new run's file."""
    table = docs_results.Table(sources=["h200/run2-fixed/ops_sm90.json"], rows="ops",
                              columns=[("op", "op", "{}"), ("mmcv µs", "mmcv_us", "{:,.1f}"),
                                       ("torchvision µs", "torchvision_us", "{:,.1f}")])
    text = table.render()
    assert text.splitlines()[0] == "| op | mmcv µs | torchvision µs |"
    assert "| nms | 3,197.6 | 7,441.2 |" in text and "| points_in_boxes_part | 39.1 | - |" in text
    assert "`lab/results/h200/run2-fixed/ops_sm90.json`" in text


def test_pictures_are_drawn_byte_stably_without_a_date_or_version(render_docs):
    plot = render_docs.PLOTS["h200-ops-ratio"]
    first, second = plot.render(), plot.render()
    assert first == second and first.startswith(b"\x89PNG")
    assert b"Software" not in first and b"matplotlib" not in first.lower()


def test_every_measured_build_has_its_compile_timeline(render_docs, docs_results):
    builds = sorted(p.parent.name + "-" + p.stem.removeprefix("units_")
                    for p in docs_results.RESULTS.glob("h200/recipe-*/units_*.json"))
    assert sorted(n.removeprefix("h200-units-") for n in render_docs.PLOTS if n.startswith("h200-units-")) == builds


def test_the_timeline_puts_every_unit_of_the_log_on_a_core(render_docs, docs_results):
    plots = docs_results.plots_module()
    run = docs_results.RESULTS / "h200" / "recipe-run2"
    spans = plots.unit_spans(run / "units_sm90.json", run / "rattler-build-sm90.log")
    lanes = plots.slots(spans, cores=16)
    assert len(spans) == 136 and set(lanes) == set(range(16))
    longest = max(spans, key=lambda s: s[2] - s[1])
    assert longest[0].endswith("/filtered_lrelu.o") and round(longest[2] - longest[1], 1) == 154.9
    assert min(s for _, s, _ in spans) == 0


def test_a_changed_result_makes_its_picture_stale(tmp_path, monkeypatch, render_docs, docs_results):
    import shutil

    results = tmp_path / "results"
    shutil.copytree(docs_results.RESULTS / "h200" / "run2-fixed", results / "h200" / "run2-fixed")
    ops = results / "h200" / "run2-fixed" / "ops_sm90.json"
    ops.write_text(ops.read_text().replace("2.3271654609965715", "1.3271654609965715"))
    monkeypatch.setattr(docs_results, "RESULTS", results)
    monkeypatch.setattr(render_docs, "PLOTS", {"h200-ops-ratio": render_docs.PLOTS["h200-ops-ratio"]})
    assert render_docs.stale_pictures() == [render_docs.picture("h200-ops-ratio")]


def test_check_fails_on_a_picture_that_differs(monkeypatch, capsys, render_docs, docs_results):
    plot = render_docs.PLOTS["h200-ops-ratio"]
    other = docs_results.Plot(sources=plot.sources, draw=plot.draw, title=plot.title + " (edited)")
    monkeypatch.setattr(render_docs, "PLOTS", {"h200-ops-ratio": other})
    assert render_docs.main(["--check"]) == 1
    assert "docs/img/h200-ops-ratio.png: differs" in capsys.readouterr().err


# -- README: a GPU result is a link to the committed result, never a number typed in (issue 22, item 3) --

GPU = re.compile(r"\b(?:[ABHL]\d{2,3}S?|GB?\d{3}|RTX \d{4}|Jetson \w+)\b")
RESULT_VERB = re.compile(r"\b(?:pass(?:es|ed)?|fail(?:s|ed)?|measured|took|faster|slower|bit for bit)\b", re.I)
MEASURED = re.compile(r"\d(?:[\d,]*\.?\d*)\s*(?:s|ms|µs|min|minutes|seconds|%|x|×)(?![\w.])"
                      r"|\b\d+\s+(?:passed|failed|skipped|tests|steps)\b", re.I)
RESULTS_LINK = re.compile(r"\((?:docs/(?:performance|verify)\.md|lab/results/[^)]+)\)|`lab/results/[^`]+`")


def readme_result_problems(text: str) -> list[str]:
    """Each README paragraph that states a GPU result: it names where the result is rendered or kept
    (docs/performance.md, docs/verify.md, lab/results/...), that place exists, and no measured
    number (seconds, %, ratios, test counts) stands in the prose outside the links."""
    problems = []
    for para in re.split(r"\n\s*\n", text):
        if para.lstrip().startswith(("|", "```")) or not (GPU.search(para) and RESULT_VERB.search(para)):
            continue
        prose = re.sub(r"\[([^\]]*)\]\([^)]*\)", "", para)  # links, their text included, are not prose
        prose = re.sub(r"`[^`]*`", "", prose)
        first = " ".join(para.split())[:80]
        if not RESULTS_LINK.search(para):
            problems.append(f"{first!r}: states a GPU result without linking the committed result")
        for ref in re.findall(r"lab/results/[\w./-]+", para):
            if not (ROOT / ref.rstrip("./")).exists():
                problems.append(f"{first!r}: {ref} does not exist")
        for m in MEASURED.finditer(prose):
            problems.append(f"{first!r}: typed number {m.group(0)!r} (render it into docs/ and link it)")
    return problems


def test_readme_states_gpu_results_only_through_links():
    text = (ROOT / "README.md").read_text()
    stated = [p for p in re.split(r"\n\s*\n", text) if GPU.search(p) and RESULT_VERB.search(p) and "H200" in p]
    assert stated, "the README's H200 paragraph is one this test reads"
    assert readme_result_problems(text) == []


@pytest.mark.parametrize("para, words", [
    ("On the H200 the recipe's build passed L1-L5 in 26.4 s.", "without linking"),
    ("On the H200 the build passed, 200 passed and 113 skipped ([docs](docs/performance.md)).", "typed number '200 passed'"),
    ("The H200 build passed (`lab/results/h200/no-such-run/`).", "does not exist"),
])
def test_a_typed_or_unbacked_gpu_result_in_the_readme_is_caught(para, words):
    problems = readme_result_problems("# x\n\n" + para + "\n")
    assert any(words in p for p in problems), problems


# -- a generated doc's header names the command that regenerates it ------------------------------

def header_problems(text: str) -> list[str]:
    """The `<!-- generated by `python -m MODULE` ... -->` header: MODULE imports and has a main()."""
    m = re.search(r"<!-- generated by `python -m ([\w.]+)`", text)
    if not m:
        return ["no `<!-- generated by `python -m MODULE`` header"]
    try:
        module = importlib.import_module(m.group(1))
    except ImportError as exc:
        return [f"{m.group(1)}: {exc}"]
    return [] if callable(getattr(module, "main", None)) else [f"{m.group(1)} has no main()"]


def test_generated_docs_name_the_command_that_regenerates_them(render_docs):
    """docs/gpus.md's header once named `benchmarks/package_coverage.py docs`, a subcommand that did not exist."""
    assert render_docs.WHOLE, "the docs generated whole are where this test looks"
    for name in render_docs.WHOLE:
        assert header_problems((ROOT / "docs" / name).read_text()) == [], name


def test_a_header_naming_no_real_command_is_caught():
    assert header_problems("<!-- generated by benchmarks/package_coverage.py docs from x.json -->") != []
    assert header_problems("<!-- generated by `python -m mmstack_lab.arch.nope` from x.json -->") != []
    assert header_problems("<!-- generated by `python -m mmstack_lab.paths` -->") == ["mmstack_lab.paths has no main()"]
