"""`mmstack channel page` (builder/page.py), read as HTML and in a real browser: Debian's headless
chromium driven through chromium-driver by selenium (.ci/run installs the three; without them the
browser tests skip, saying so).

The channel: lab/src/mmstack_lab/standin/page_channel.py (mmcv builds holding real nvcc objects, the CPU build, a
noarch mmstack; a receipt on the sm90 build from the recorded H200 run) and its stand-in dependencies.
MMSTACK_UPDATE_DOCS_IMG=1 also writes the browser's screenshot to docs/img/channel-page.png, which
docs/channel-page.md shows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.cli import mmstack
from test_build_e2e import (  # noqa: F401 - the e2e's fixtures (python_min_built_channel and what it needs), for the slow test below
    noarch_built,
    python_min,
    python_min_bootstrap_channel,
    python_min_built_channel,
)

from mmstack.builder import receipt
from mmstack.facts.compat import ext_coverage
from mmstack.facts.gpus import load
from mmstack.variants import selection
from mmstack_lab.standin import page_channel

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "docs" / "img" / "channel-page.png"
# names as nvidia-smi prints them (and as people type them); the page's lookup must agree with the facts'
NAMES = ["RTX 4090", "NVIDIA GeForce RTX 4090", "H200", "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
         "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 3060 Laptop GPU",
         "Tesla T4", "NVIDIA L4", "NVIDIA B200", "NVIDIA GeForce RTX 5090", "GRID A100-40C", "NVIDIA A10-24Q", "RTX 9999"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> dict:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the channel's mmcv packages hold real CUDA objects")
    built = page_channel.build(tmp_path_factory.mktemp("page"))
    page_channel.write_h200_receipt(built["channel"], built["files"]["sm90"])
    code, out, err = mmstack("channel", "page", str(built["channel"]), "--source-channel", str(built["deps"]), "--json")
    assert code == 0, err
    return {**built, "page": built["channel"] / "index.html", "report": json.loads(out)}


class _Page(HTMLParser):
    """The matrix table's cells by package file and generation, every src/href, the embedded data."""

    def __init__(self):
        super().__init__()
        self.cells: dict[str, dict[str, str]] = {}
        self.links: list[str] = []
        self.scripts: list[dict] = []
        self._row: str | None = None
        self._table: str | None = None
        self._script: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "table":
            self._table = a.get("id")
        elif tag == "tr" and self._table == "matrix":
            self._row = a.get("data-file")
        elif tag == "td" and self._table == "matrix" and self._row:
            self.cells.setdefault(self._row, {})[a["data-env"]] = a["data-state"]
        elif tag == "script":
            self._script = {"attrs": a, "text": ""}
            self.scripts.append(self._script)

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None

    def handle_data(self, data):
        if self._script is not None:
            self._script["text"] += data


def _parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def expected_cells(channel: Path) -> dict[str, dict[str, str]]:
    """Each linux-64 package on each generation, from its receipts and its fatbin, derived here."""
    facts = load()
    listed = json.loads((channel / "linux-64" / "repodata.json").read_text())["packages.conda"]
    receipts = receipt.read_all(channel)
    out = {}
    for file, rec in listed.items():
        doc = receipts.get(f"linux-64/{file}")
        tested_on = set()
        if doc and doc["package"]["sha256"] == rec["sha256"]:
            tested_on = {facts.lookup_gpu(g["name"]).generation for g in doc["machine"]["gpus"]}
        code = receipt.code_in(channel / "linux-64" / file)
        out[file] = {g.env: "tested" if g.env in tested_on else
                     "predicted" if (code["sass"] or code["ptx"]) and ext_coverage(g.compute_capability, code["sass"],
                                                                                   code["ptx"]).coverage.runs else "no"
                     for g in facts.generation if g.is_gpu}
    return out


def test_the_table_is_plain_html_that_matches_the_receipts_and_the_fatbins(site):
    page = _parse(site["page"])
    files = site["files"]
    assert page.cells == expected_cells(site["channel"])
    assert page.cells[files["sm90"]]["h100"] == "tested"
    assert [f for f, row in page.cells.items() for s in row.values() if s == "tested"] == [files["sm90"]]
    assert page.cells[files["sm89"]] == {"rtx3090": "no", "a100": "no", "rtx4090": "predicted", "h100": "predicted",
                                         "b200": "predicted", "rtx5090": "predicted"}  # PTX 8.9 JIT above it
    assert set(page.cells[files["cpu"]].values()) == {"no"} and set(page.cells[files["all"]].values()) == {"predicted"}
    assert site["report"]["receipts"] == 1 and site["report"]["tested_cells"] == 1


def test_the_page_is_self_contained(site):
    page = _parse(site["page"])
    # no stylesheet, script, font or image fetched from anywhere; the only links are to the receipts beside it
    assert page.links == [f"linux-64/{site['files']['sm90']}.receipt.json"]
    assert all((site["channel"] / link).is_file() for link in page.links)
    assert all("src" not in s["attrs"] for s in page.scripts)
    assert str(site["channel"].parent) not in site["page"].read_text()  # names local channels, not machine paths


def test_the_embedded_answers_are_py_rattlers_solves(site):
    page = _parse(site["page"])
    (blob,) = [s["text"] for s in page.scripts if s["attrs"].get("type") == "application/json"]
    data = json.loads(blob)
    urls = [site["channel"].as_uri(), site["deps"].as_uri()]
    for cc, tag in (("8.9", "sm89"), ("9.0", "sm90"), ("8.6", "all"), ("7.5", "all")):
        solved = selection.solve(urls, ["mmcv"], selection.Machine(data["answers"][cc]["cuda"], cc))
        assert data["answers"][cc]["build"] == solved.build, cc
        assert data["answers"][cc]["file"] == site["files"][tag], cc
    assert data["answers"]["8.9"]["runs"] == "native" and data["answers"]["7.5"]["runs"] == "native"


def test_a_receipt_of_another_build_counts_for_nothing(site, tmp_path):
    ch = tmp_path / "ch"
    shutil.copytree(site["channel"], ch)
    rfile = receipt.path_for(ch / "linux-64" / site["files"]["sm90"])
    doc = json.loads(rfile.read_text())
    doc["package"]["sha256"] = "0" * 64
    rfile.write_text(json.dumps(doc))
    code, out, err = mmstack("channel", "page", str(ch), "--no-solve", "--json", "--out", str(tmp_path / "p.html"))
    assert code == 0, err
    page = _parse(tmp_path / "p.html")
    assert page.cells[site["files"]["sm90"]]["h100"] == "predicted" and json.loads(out)["receipts"] == 0
    assert "receipt: stale" in (tmp_path / "p.html").read_text()


def test_a_directory_that_is_no_channel_is_bad_input(tmp_path):
    code, _out, err = mmstack("channel", "page", str(tmp_path), "--no-solve")
    assert code == 2 and "mmstack channel index" in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


# -- in a real browser -------------------------------------------------------------------------------


def _browser(tmp: Path, *, javascript: bool = True, size=(1280, 1000)):
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--window-size={size[0]},{size[1]}"):
        options.add_argument(arg)
    # chromium's scratch directories (org.chromium.Chromium.*) go to the test's temporary directory, not /tmp
    b = webdriver.Chrome(service=Service(driver, env={**os.environ, "TMPDIR": str(tmp)}), options=options)
    if not javascript:
        b.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    return b


@pytest.fixture()
def browser(tmp_path_factory):
    made = []

    def start(**kw):
        made.append(_browser(tmp_path_factory.mktemp("chromium"), **kw))
        return made[-1]

    yield start
    for b in made:
        b.quit()


def _dom_cells(b) -> dict[str, dict[str, str]]:
    from selenium.webdriver.common.by import By

    out: dict[str, dict[str, str]] = {}
    for td in b.find_elements(By.CSS_SELECTOR, "#matrix tbody td"):
        row = td.find_element(By.XPATH, "..").get_attribute("data-file")
        text = td.find_element(By.TAG_NAME, "b").text.lower()
        assert text == td.get_attribute("data-state")  # the verdict is written, not only coloured
        out.setdefault(row, {})[td.get_attribute("data-env")] = text
    return out


def test_without_javascript_chromium_shows_the_table_of_the_receipts(site, browser):
    from selenium.webdriver.common.by import By

    b = browser(javascript=False)
    b.get(site["page"].as_uri())
    assert b.find_element(By.TAG_NAME, "html").get_attribute("class") != "js"  # the page's script did not run
    assert _dom_cells(b) == expected_cells(site["channel"])
    assert "needs JavaScript" in b.find_element(By.ID, "answer").text
    assert b.find_element(By.ID, "picks").text.count("mmcv 2.2.0") == 6  # the build per generation, static


def test_typing_a_gpu_name_answers_with_the_build_and_the_commands(site, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    b = browser(size=(1280, 1700))
    b.get(site["page"].as_uri())
    assert _dom_cells(b) == expected_cells(site["channel"])
    body = b.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)  # the keyboard reaches the box
    for _ in range(10):
        if b.switch_to.active_element.get_attribute("id") == "gpu":
            break
        b.switch_to.active_element.send_keys(Keys.TAB)
    box = b.switch_to.active_element
    assert box.get_attribute("id") == "gpu"
    answer = b.find_element(By.ID, "answer")
    builds = {tag: f.removesuffix(".conda").split("-", 2)[2] for tag, f in site["files"].items()}

    box.send_keys("RTX 4090", Keys.ENTER)
    assert answer.get_attribute("data-build") == builds["sm89"]
    assert "compute capability 8.9" in answer.text and "Not tested on this generation" in answer.text
    assert f'conda install -c {site["channel"].as_uri()} -c conda-forge "mmcv=2.2.0={builds["sm89"]}"' in answer.text
    assert "mmstack verify --expect-gpu" in answer.text

    box.clear()
    box.send_keys("H200", Keys.ENTER)
    assert answer.get_attribute("data-build") == builds["sm90"] and answer.get_attribute("data-gpu") == "NVIDIA H200"
    assert "Tested on this generation: passed its tests on NVIDIA H200 (driver 580.159.04" in answer.text
    assert "L1 PASS" in answer.text and "upstream 264 passed" in answer.text

    box.clear()
    box.send_keys("GB10", Keys.ENTER)  # an Arm-hosted GPU: this channel has linux-64 builds only
    assert "only comes in" in answer.text and "no linux-aarch64 mmcv yet" in answer.text
    assert not answer.get_attribute("data-build")

    box.clear()
    box.send_keys("RTX 9999", Keys.ENTER)
    assert "Unknown GPU" in answer.text and not answer.get_attribute("data-build")


def test_the_docs_screenshot_published_at_a_url(site, browser, tmp_path):
    """The page as CI publishes it (--url: the Pages address), answering for an H200; the screenshot
    docs/channel-page.md shows (written there with MMSTACK_UPDATE_DOCS_IMG=1)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url = "https://lab.example.org/mmstack-channel"
    out = tmp_path / "index.html"
    proc = subprocess.run([sys.executable, "-m", "mmstack.cli", "channel", "page", str(site["channel"]), "--source-channel",
                           str(site["deps"]), "--url", url, "--out", str(out), "--quiet"], capture_output=True, text=True,
                          env={**os.environ, "SOURCE_DATE_EPOCH": "1764892800"})
    assert proc.returncode == 0, proc.stderr
    assert "2025-12-05T00:00:00Z" in out.read_text()
    b = browser(size=(1200, 1500))
    b.get(out.as_uri())
    b.find_element(By.ID, "gpu").send_keys("NVIDIA H200", Keys.ENTER)
    assert f"conda install -c {url} -c conda-forge" in b.find_element(By.ID, "answer").text
    shot = b.get_screenshot_as_png()
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
    if os.environ.get("MMSTACK_UPDATE_DOCS_IMG") == "1":
        SCREENSHOT.write_bytes(shot)
    assert SCREENSHOT.is_file(), "docs/img/channel-page.png: run this test with MMSTACK_UPDATE_DOCS_IMG=1"


def test_the_pages_gpu_lookup_agrees_with_the_facts(site, browser):
    b = browser()
    b.get(site["page"].as_uri())
    facts = load()
    page = {n: b.execute_script("return window.mmstackLookup(arguments[0]);", n) for n in NAMES}
    want = {n: (g.name if (g := facts.lookup_gpu(n)) else None) for n in NAMES}
    assert page == want
    assert want["RTX 9999"] is None and want["NVIDIA GeForce RTX 4090 Laptop GPU"] != want["RTX 4090"]


def test_on_a_phone_the_table_scrolls_inside_its_region_not_the_page(site, browser):
    from selenium.webdriver.common.by import By

    b = browser()
    # a phone's viewport (390 x 844 CSS pixels, the page's viewport meta applies): headless windows are never that narrow
    b.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True})
    b.get(site["page"].as_uri())
    assert b.execute_script("return window.innerWidth;") == 390
    assert b.execute_script("return document.documentElement.scrollWidth <= window.innerWidth;")
    region = b.find_element(By.CSS_SELECTOR, ".scroll")
    assert b.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth;", region)
    assert region.get_attribute("tabindex") == "0"  # reachable and scrollable by keyboard


# -- the e2e's channel (slow: the real packages, built and tested by the generated CI's steps) --------

@pytest.mark.slow
def test_the_e2e_channel_holds_a_receipt_for_every_package_and_the_page_shows_them(request, tmp_path):
    # the python_min row's channel: its test job tests mmdet too (the other rows' channels hold the
    # noarch job's mmdet, built --no-test and untested there, so without a receipt)
    channel = request.getfixturevalue("python_min_built_channel")["channel"]
    listed = {f"{r.parent.name}/{f}": rec for r in channel.glob("*/repodata.json")
              for f, rec in json.loads(r.read_text()).get("packages.conda", {}).items()}
    receipts = receipt.read_all(channel)
    assert set(receipts) == set(listed)
    assert all(receipts[k]["package"]["sha256"] == listed[k]["sha256"] for k in listed)
    ch = tmp_path / "ch"
    shutil.copytree(channel, ch)
    code, _out, err = mmstack("channel", "page", str(ch), "--no-solve")
    assert code == 0, err
    assert _parse(ch / "index.html").cells == expected_cells(ch)
