"""The workflow templates (src/mmstack/ci/templates/*.yml) are YAML a linter can read, and
rendering them leaves no template syntax behind."""

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML reads the templates")
pytest.importorskip("rattler_build", reason="py-rattler-build (the 'build' extra) reads conda_build_config.yaml")

from mmstack.ci import workflows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = sorted(workflows.TEMPLATES.glob("*.yml"))


def test_there_is_a_template_per_workflow():
    names = {p.name for p in TEMPLATES}
    assert {workflows.BUILD_FILE.name, workflows.LOCKS_FILE.name} <= names


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_template_is_valid_yaml(path):
    doc = yaml.safe_load(path.read_text())
    if not path.name.startswith("_"):
        assert isinstance(doc, dict) and "jobs" in doc, path.name


def test_rendering_leaves_no_template_syntax():
    for rel, text in workflows.render(ROOT).items():
        assert "<<" not in text and "#%" not in text, rel
        assert isinstance(yaml.safe_load(text), dict), rel
